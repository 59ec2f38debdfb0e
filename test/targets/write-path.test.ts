/**
 * The write path, black box, against the embedded store and against the client over HTTP: the
 * same calls must give the same results and the same typed errors.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/index.js';
import { collect, temporaryDirectory, text } from '../support/store.js';
import { type Opened, targets } from '../support/targets.js';

const opened: Opened[] = [];
afterEach(async () => {
  for (const target of opened.splice(0)) await target.close();
});

describe.each(targets)('the write path ($name)', (target) => {
  async function open() {
    const it = await target.open(temporaryDirectory());
    opened.push(it);
    return it.store;
  }

  it('creates, lists and describes feeds, and refuses bad names, duplicates and unknown feeds', async () => {
    const store = await open();
    await store.createFeed('orders');
    await store.createFeed('audit.log_2');
    expect(await store.feedNames()).toEqual(['audit.log_2', 'orders']);
    for (const name of ['has space', '.hidden', 'x'.repeat(129)]) {
      await expect(store.createFeed(name)).rejects.toMatchObject({ code: 'INVALID_NAME' });
    }
    await expect(store.createFeed('orders')).rejects.toMatchObject({ code: 'FEED_EXISTS' });
    await expect(store.feed('missing')).rejects.toBeInstanceOf(StreamStackError);
    await expect(store.feed('missing')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
    expect(await store.feedInfo('orders')).toMatchObject({
      name: 'orders',
      commits: 0,
      records: 0,
      head: null,
      activeStream: null,
      lease: null,
      epoch: 0,
    });
  });

  it('reads back string and byte payloads and fingerprints exactly, in a stream and in a one-shot', async () => {
    const store = await open();
    const feed = await store.createFeed('f');
    const payloads = ['plain', 'é€😀', '', 'line\nbreak', '\ufeffbom', '{"json":true}'];
    const bytes = new Uint8Array([0, 255, 128, 10, 13]);
    await feed.append([
      ...payloads.map((payload) => ({ payload })),
      { payload: bytes, fingerprint: new Uint8Array([1, 2, 255]) },
      { payload: 'fp', fingerprint: 'text-fp' },
    ]);
    const read = await collect(feed.read());
    // A byte-order mark belongs to the payload, so it is decoded as a character here.
    const exact = new TextDecoder('utf-8', { ignoreBOM: true });
    expect(read.map((record) => exact.decode(record.payload)).slice(0, payloads.length)).toEqual(payloads);
    expect(read[payloads.length].payload).toEqual(bytes);
    expect(read[payloads.length].fingerprint).toEqual(new Uint8Array([1, 2, 255]));
    expect(text(read[payloads.length + 1].fingerprint)).toBe('text-fp');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const stream = await feed.openStream({ token });
    await stream.append(
      [{ payload: bytes, key: 'k', version: 3, tombstone: false, type: 't', tags: ['a', 'b'], timestamp: 1234 }],
      { token },
    );
    const [unsealed] = await stream.read();
    expect(unsealed).toMatchObject({
      feed: 'f',
      stream: stream.id,
      seq: 1,
      key: 'k',
      version: 3,
      type: 't',
      tags: ['a', 'b'],
      timestamp: 1234,
      tombstone: false,
    });
    expect(unsealed.commit).toBeUndefined();
    expect(unsealed.payload).toEqual(bytes);
  });

  it('grants increasing epochs, holds the lease against others, fences old tokens, renews and releases', async () => {
    const store = await open();
    const feed = await store.createFeed('f');
    const first = await feed.acquireLease({ holder: 'a', ttlMs: 60_000 });
    expect(first).toMatchObject({ epoch: 1, holder: 'a' });
    await expect(feed.acquireLease({ holder: 'b' })).rejects.toMatchObject({ code: 'LEASE_HELD' });
    await expect(feed.append([{ payload: 'x' }])).rejects.toMatchObject({ code: 'LEASE_HELD' });
    const renewed = await feed.renewLease({ token: first.token, ttlMs: 120_000 });
    expect(renewed.epoch).toBe(1);
    expect(renewed.expiresAt).toBeGreaterThan(first.expiresAt);
    await feed.releaseLease({ token: first.token });
    const second = await feed.acquireLease({ holder: 'b' });
    expect(second.epoch).toBe(2);
    const fenced = await feed.append([{ payload: 'x' }], { token: first.token }).catch((error: unknown) => error);
    expect(fenced).toBeInstanceOf(StreamStackError);
    expect(['FENCED', 'LEASE_EXPIRED']).toContain((fenced as StreamStackError).code);
    expect((await feed.info()).lease).toMatchObject({ epoch: 2, holder: 'b' });
  });

  it('appends batches with stream-local seqs, matches expectedSeq, seals one commit, and aborts', async () => {
    const store = await open();
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const stream = await feed.openStream({ token, message: 'hour 1' });
    await expect(feed.openStream({ token })).rejects.toMatchObject({ code: 'STREAM_OPEN' });
    expect((await feed.info()).activeStream).toBe(stream.id);
    expect((await feed.activeStream())?.id).toBe(stream.id);
    expect(await stream.append([{ payload: 'a' }, { payload: 'b' }], { token, expectedSeq: 1 })).toEqual({
      stream: stream.id,
      firstSeq: 1,
      lastSeq: 2,
    });
    const mismatch = await stream
      .append([{ payload: 'c' }], { token, expectedSeq: 1 })
      .catch((error: StreamStackError) => error);
    expect(mismatch).toBeInstanceOf(StreamStackError);
    expect(mismatch).toMatchObject({ code: 'SEQ_MISMATCH', details: { expected: 1, actual: 3 } });
    await stream.append([{ payload: 'c', key: 'k', version: 2, type: 't', tags: ['x', 'y'] }], {
      token,
      expectedSeq: 3,
    });
    expect(await stream.info()).toEqual({ id: stream.id, state: 'open', records: 3 });
    const commit = await stream.seal({ token });
    expect(commit).toMatchObject({
      feed: 'f',
      commit: 1,
      parent: null,
      records: 3,
      firstPosition: 1,
      lastPosition: 3,
      message: 'hour 1',
      epoch: 1,
      oneShot: false,
    });
    expect(await stream.info()).toMatchObject({ state: 'sealed', commit: { commit: 1 } });
    await expect(stream.append([{ payload: 'd' }], { token })).rejects.toMatchObject({ code: 'STREAM_SEALED' });
    const records = await feed.readCommit(1);
    expect(records.map((record) => [record.seq, record.position, text(record.payload)])).toEqual([
      [1, 1, 'a'],
      [2, 2, 'b'],
      [3, 3, 'c'],
    ]);
    expect(records[2]).toMatchObject({ key: 'k', version: 2, type: 't', tags: ['x', 'y'], tombstone: false });
    expect((await stream.read({ fromSeq: 2 })).map((record) => record.position)).toEqual([2, 3]);

    const aborted = await feed.openStream({ token });
    await aborted.append([{ payload: 'never published' }], { token });
    await aborted.abort({ token });
    await expect(aborted.append([{ payload: 'z' }], { token })).rejects.toMatchObject({ code: 'STREAM_NOT_FOUND' });
    expect(await collect(feed.commits())).toHaveLength(1);
    expect(await feed.head()).toMatchObject({ commit: 1 });

    // A stream is looked up by id, open, sealed or aborted; an id the feed never had is refused.
    expect(await (await feed.stream(stream.id)).info()).toMatchObject({ state: 'sealed', commit: { commit: 1 } });
    expect(await (await feed.stream(aborted.id)).info()).toEqual({ id: aborted.id, state: 'aborted' });
    await expect(feed.stream('no-such-stream')).rejects.toMatchObject({ code: 'STREAM_NOT_FOUND' });
    expect(await feed.activeStream()).toBeUndefined();
    const disk = await feed.diskUse();
    expect(disk.historySegments).toBe(1);
    expect(disk.files).toBeGreaterThan(disk.historySegments);
    expect(disk.bytes).toBeGreaterThan(0);
  });

  it('refuses bad input with the same typed errors and writes nothing', async () => {
    const store = await open();
    const feed = await store.createFeed('f');
    await expect(feed.append([])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(feed.append([{ payload: 'x', key: '' }])).rejects.toMatchObject({
      code: 'INVALID_RECORD',
      details: { index: 0, field: 'key' },
    });
    await expect(feed.append([{ payload: 'ok' }, { payload: 'x', tags: [''] }])).rejects.toMatchObject({
      code: 'INVALID_RECORD',
      details: { index: 1 },
    });
    await expect(feed.append([{ payload: 'x', key: '\ud800' }])).rejects.toMatchObject({ code: 'INVALID_RECORD' });
    await expect(feed.append('nope' as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(feed.append([{ payload: 'ok' }, 42] as never)).rejects.toMatchObject({
      code: 'INVALID_RECORD',
      details: { index: 1, field: 'record' },
    });
    await expect(feed.append([{ payload: { json: true } }] as never)).rejects.toMatchObject({
      code: 'INVALID_RECORD',
      details: { index: 0, field: 'payload' },
    });
    await expect(feed.append([{ payload: 'x', fingerprint: 7 }] as never)).rejects.toMatchObject({
      code: 'INVALID_RECORD',
      details: { index: 0, field: 'fingerprint' },
    });
    expect((await feed.info()).commits).toBe(0);
  });

  it('gives concurrent one-shot appends a commit each, in a chain', async () => {
    const store = await open();
    const feed = await store.createFeed('f');
    const commits = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        feed.append([{ payload: `r${index}` }, { payload: `s${index}` }], { message: `m${index}` }),
      ),
    );
    expect(commits.map((commit) => commit.commit).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 20 }, (_, index) => index + 1),
    );
    for (const commit of commits)
      expect(commit).toMatchObject({ records: 2, oneShot: true, lastPosition: commit.firstPosition + 1 });
    const listed = await collect(feed.commits({ after: 5, limit: 3 }));
    expect(listed.map((commit) => [commit.commit, commit.parent])).toEqual([
      [6, 5],
      [7, 6],
      [8, 7],
    ]);
    // The embedded commits() throws at the call, the client's at the first step: both reject here.
    await expect((async () => collect(feed.commits({ after: 21 })))()).rejects.toMatchObject({
      code: 'CURSOR_OUT_OF_RANGE',
    });
  });
});
