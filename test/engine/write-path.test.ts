import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Kernels, loadKernels, StreamStackError } from '../../packages/engine/src/index.js';
import {
  collect,
  digestTree,
  ManualClock,
  openStore,
  sequentialIds,
  temporaryDirectory,
  text,
} from '../support/store.js';

/** Kernels that count durable writes, and can hold the next one until released. */
function countingKernels(base: Kernels = loadKernels()) {
  let gate: Promise<void> | undefined;
  let open: (() => void) | undefined;
  const counter = {
    writes: 0,
    hold() {
      gate = new Promise((resolve) => (open = resolve));
    },
    release() {
      open?.();
    },
    kernels: {
      ...base,
      writeDurable: async (fd: number, position: number, buffers: readonly Uint8Array[]) => {
        counter.writes++;
        const held = gate;
        gate = undefined;
        if (held) await held;
        return base.writeDurable(fd, position, buffers);
      },
    } as Kernels,
  };
  return counter;
}

describe('store and feeds', () => {
  it('refuses a second opener of a data directory, in this process and in another', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    await expect(openStore(directory)).rejects.toMatchObject({ code: 'LOCKED' });
    const child = `import('${path.resolve('packages/engine/dist/index.js')}').then(async ({ Store }) => {
      try { await Store.open(${JSON.stringify(directory)}); console.log('opened'); }
      catch (error) { console.log(error.code); }
    })`;
    expect(execFileSync(process.execPath, ['-e', child], { encoding: 'utf8' }).trim()).toBe('LOCKED');
    await store.close();
    const again = await openStore(directory);
    await again.close();
  });

  it('creates, lists and describes feeds, and refuses bad names and duplicates', async () => {
    const directory = temporaryDirectory();
    const clock = new ManualClock();
    const store = await openStore(directory, { clock: clock.read });
    await store.createFeed('orders');
    await store.createFeed('audit.log_2');
    expect(await store.feedNames()).toEqual(['audit.log_2', 'orders']);
    const before = digestTree(directory);
    for (const name of ['', 'has space', '../escape', '.hidden', 'a/b', 'x'.repeat(129)]) {
      await expect(store.createFeed(name)).rejects.toMatchObject({ code: 'INVALID_NAME' });
    }
    await expect(store.createFeed('orders')).rejects.toMatchObject({ code: 'FEED_EXISTS' });
    await expect(store.feed('missing')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
    expect(digestTree(directory)).toBe(before);
    expect((await store.feedInfo('orders')).createdAt).toBe(clock.now);
    await store.close();
  });
});

describe('string payloads', () => {
  it('read back exactly, whatever their characters and sizes, in a stream and in a one-shot', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 4 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    // Small and large (past the 64 KiB chunk the batch encodes into), ASCII, two-, three- and
    // four-byte characters, so chunk boundaries and the worst-case room estimate are crossed.
    const payloads = Array.from({ length: 600 }, (_, index) => {
      const piece = ['ascii', 'é', '€', '😀'][index % 4];
      return `${index}:${piece.repeat(index % 97 === 0 ? 30_000 : 1 + (index % 40))}`;
    });
    await feed.append(
      payloads.map((payload) => ({ payload })),
      { token },
    );
    const stream = await feed.openStream({ token });
    await stream.append(
      payloads.map((payload) => ({ payload })),
      { token },
    );
    await stream.seal({ token });
    for (const commit of [1, 2])
      expect((await feed.readCommit(commit)).map((record) => text(record.payload))).toEqual(payloads);
    await store.close();
  });
});

describe('leases, epochs and fencing', () => {
  it('grants strictly increasing epochs, durable across restarts, and fences old tokens', async () => {
    const directory = temporaryDirectory();
    const clock = new ManualClock();
    let store = await openStore(directory, { clock: clock.read });
    let feed = await store.createFeed('f');
    const first = await feed.acquireLease({ holder: 'a', ttlMs: 1000 });
    expect(first.epoch).toBe(1);
    await expect(feed.acquireLease({ holder: 'b' })).rejects.toMatchObject({ code: 'LEASE_HELD' });
    clock.advance(999);
    const renewed = await feed.renewLease({ token: first.token, ttlMs: 1000 });
    expect(renewed.expiresAt).toBe(clock.now + 1000);
    clock.advance(1000);
    await expect(feed.openStream({ token: first.token })).rejects.toMatchObject({ code: 'LEASE_EXPIRED' });
    const second = await feed.acquireLease({ holder: 'b', ttlMs: 1000 });
    expect(second.epoch).toBe(2);
    await expect(feed.openStream({ token: first.token })).rejects.toMatchObject({ code: 'FENCED' });
    await expect(feed.append([{ payload: 'x' }], { token: first.token })).rejects.toMatchObject({ code: 'FENCED' });
    await expect(feed.append([{ payload: 'x' }])).rejects.toMatchObject({ code: 'LEASE_HELD' });
    await feed.releaseLease({ token: second.token });
    await expect(feed.openStream({ token: second.token })).rejects.toMatchObject({ code: 'LEASE_EXPIRED' });
    // With no live lease, one-shot appends need no token.
    await feed.append([{ payload: 'anyone' }]);
    await store.close();

    store = await openStore(directory, { clock: clock.read });
    feed = await store.feed('f');
    expect((await feed.info()).epoch).toBe(2);
    expect((await feed.acquireLease({ holder: 'c' })).epoch).toBe(3);
    await store.close();
  });

  it('rejects an append queued under the old token before a takeover was granted', async () => {
    const directory = temporaryDirectory();
    const clock = new ManualClock();
    const counter = countingKernels();
    const store = await openStore(directory, { clock: clock.read, kernels: counter.kernels });
    const feed = await store.createFeed('f');
    const old = await feed.acquireLease({ holder: 'old', ttlMs: 100 });
    const stream = await feed.openStream({ token: old.token });
    await stream.append([{ payload: 'durable' }], { token: old.token });

    // The WAL write of the first append is held in flight; the second is prepared and written
    // behind it (group commits are pipelined), and its acknowledgement waits for the first; the
    // third, made once both are written, queues, because two groups are in flight.
    const settled: string[] = [];
    const note = <T>(name: string, promise: Promise<T>) =>
      promise.then(
        (value) => (settled.push(name), value),
        (error: unknown) => (settled.push(name), error),
      );
    counter.hold();
    const writesBefore = counter.writes;
    const inFlight = note('in flight', stream.append([{ payload: 'in flight' }], { token: old.token }));
    const pipelined = note('pipelined', stream.append([{ payload: 'pipelined' }], { token: old.token }));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(counter.writes - writesBefore, 'the pipelined group was written while the first was held').toBe(2);
    const queued = note('queued', stream.append([{ payload: 'queued' }], { token: old.token }));
    clock.advance(100);
    // The takeover does not wait behind the queued write, but its grant waits for the groups in
    // flight: once the new holder has its token, no write of the old lease is left to land.
    const granting = note('grant', feed.acquireLease({ holder: 'new' }));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(settled, 'nothing settles while the first write is held').toEqual([]);
    counter.release();
    const grant = await granting;
    expect(grant).toMatchObject({ epoch: 2 });
    await expect(inFlight).resolves.toMatchObject({ firstSeq: 2 });
    await expect(pipelined).resolves.toMatchObject({ firstSeq: 3 });
    expect(await queued).toMatchObject({ code: 'FENCED' });
    expect(settled.slice(0, 2), 'acknowledged in order, before the grant').toEqual(['in flight', 'pipelined']);
    expect(settled.indexOf('grant')).toBeGreaterThan(1);

    // The new owner finds the old stream and decides: here, seal what is durable.
    expect((await feed.activeStream())?.id).toBe(stream.id);
    await expect(
      stream.append([{ payload: 'more' }], { token: (grant as { token: string }).token }),
    ).rejects.toMatchObject({ code: 'FENCED' });
    const commit = await stream.seal({ token: (grant as { token: string }).token });
    expect(commit.records).toBe(3);
    expect((await feed.readCommit(commit.commit)).map((record) => text(record.payload))).toEqual([
      'durable',
      'in flight',
      'pipelined',
    ]);
    await store.close();
  });
});

describe('streams', () => {
  it('appends batches with stream-local seqs, matches expectedSeq, and seals one commit', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { newId: sequentialIds() });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const stream = await feed.openStream({ token, message: 'hour 1' });
    await expect(feed.openStream({ token })).rejects.toMatchObject({ code: 'STREAM_OPEN' });
    expect(await stream.append([{ payload: 'a' }, { payload: 'b' }], { token, expectedSeq: 1 })).toEqual({
      stream: stream.id,
      firstSeq: 1,
      lastSeq: 2,
    });
    const mismatch = await stream
      .append([{ payload: 'c' }], { token, expectedSeq: 1 })
      .catch((error: StreamStackError) => error);
    expect(mismatch).toMatchObject({ code: 'SEQ_MISMATCH', details: { expected: 1, actual: 3 } });
    await stream.append([{ payload: 'c', key: 'k', version: 2, type: 't', tags: ['x', 'y'] }], {
      token,
      expectedSeq: 3,
    });
    expect((await stream.read()).map((record) => text(record.payload))).toEqual(['a', 'b', 'c']);
    const commit = await stream.seal({ token });
    expect(commit).toMatchObject({
      commit: 1,
      parent: null,
      records: 3,
      firstPosition: 1,
      lastPosition: 3,
      message: 'hour 1',
    });
    await expect(stream.append([{ payload: 'd' }], { token })).rejects.toMatchObject({ code: 'STREAM_SEALED' });
    await expect(stream.seal({ token })).rejects.toMatchObject({ code: 'STREAM_SEALED' });
    const records = await feed.readCommit(1);
    expect(records.map((record) => [record.seq, record.position, text(record.payload)])).toEqual([
      [1, 1, 'a'],
      [2, 2, 'b'],
      [3, 3, 'c'],
    ]);
    expect(records[2]).toMatchObject({ key: 'k', version: 2, type: 't', tags: ['x', 'y'], tombstone: false });

    const aborted = await feed.openStream({ token });
    await aborted.append([{ payload: 'never published' }], { token });
    await aborted.abort({ token });
    await expect(aborted.append([{ payload: 'z' }], { token })).rejects.toMatchObject({ code: 'STREAM_NOT_FOUND' });
    expect(await collect(feed.commits())).toHaveLength(1);
    const next = await feed.openStream({ token });
    await next.append([{ payload: 'e' }], { token });
    expect(await next.seal({ token })).toMatchObject({ commit: 2, parent: 1, firstPosition: 4, lastPosition: 4 });
    await store.close();
  });

  it('keeps an open stream and its acknowledged batches across a restart', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 60_000 });
    const stream = await feed.openStream({ token });
    for (let batch = 0; batch < 50; batch++) {
      await stream.append(
        Array.from({ length: 20 }, (_, index) => ({ payload: `b${batch}-r${index}-${'x'.repeat(100)}` })),
        { token },
      );
    }
    await store.close();
    store = await openStore(directory);
    feed = await store.feed('f');
    expect((await feed.activeStream())?.id).toBe(stream.id);
    expect(await (await feed.stream(stream.id)).info()).toMatchObject({ state: 'open', records: 1000 });
    await (await feed.stream(stream.id)).append([{ payload: 'after restart' }], { token, expectedSeq: 1001 });
    const commit = await (await feed.stream(stream.id)).seal({ token });
    expect(commit.records).toBe(1001);
    const records = await feed.readCommit(commit.commit);
    expect(text(records[1000].payload)).toBe('after restart');
    expect(records.every((record, index) => record.seq === index + 1)).toBe(true);
    // Every WAL segment but the active one held only that stream, so they are gone once the
    // background cleanup is done (verify waits for it).
    expect((await store.verify('f'))[0]).toMatchObject({ ok: true, commits: 1, records: 1001 });
    expect(
      fs.readdirSync(path.join(directory, 'feeds', 'f', 'wal')).filter((name) => name.endsWith('.wal')),
    ).toHaveLength(1);
    await store.close();
  });

  it('refuses bad input with a typed error and changes nothing on disk', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'ok' }], { token });
    const before = digestTree(directory);
    const bad: [unknown, string][] = [
      [[], 'INVALID_ARGUMENT'],
      [[{ payload: 'ok' }, { payload: 42 }], 'INVALID_RECORD'],
      [[{ payload: 'x', key: '' }], 'INVALID_RECORD'],
      [[{ payload: 'x', version: -1 }], 'INVALID_RECORD'],
      [[{ payload: 'x', tombstone: true }], 'INVALID_RECORD'],
      [[{ payload: 'x', tags: 'not-an-array' }], 'INVALID_RECORD'],
      [[{ payload: 'x', timestamp: 1.5 }], 'INVALID_RECORD'],
      [[{ payload: new Uint8Array(20_000) }], 'RECORD_TOO_LARGE'],
    ];
    for (const [records, code] of bad) {
      await expect(stream.append(records as never, { token })).rejects.toMatchObject({ code });
      await expect(feed.append(records as never)).rejects.toBeInstanceOf(StreamStackError);
    }
    await expect(stream.append([{ payload: 'x' }], { token: 'forged' })).rejects.toMatchObject({ code: 'FENCED' });
    await expect(feed.stream('nope')).rejects.toMatchObject({ code: 'STREAM_NOT_FOUND' });
    expect(digestTree(directory)).toBe(before);
    await store.close();
  });
});

describe('one-shot appends and group commit', () => {
  it('gives each concurrent one-shot append its own commit while sharing fsyncs', async () => {
    const directory = temporaryDirectory();
    const counter = countingKernels();
    const store = await openStore(directory, { kernels: counter.kernels });
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'warm-up' }]);
    counter.writes = 0;
    const commits = await Promise.all(
      Array.from({ length: 64 }, (_, index) => feed.append([{ payload: `event ${index}`, tags: [`t${index}`] }])),
    );
    expect(new Set(commits.map((commit) => commit.commit)).size).toBe(64);
    expect(commits.map((commit) => commit.firstPosition).sort((a, b) => a - b)).toEqual(
      Array.from({ length: 64 }, (_, index) => index + 2),
    );
    // The first request writes alone; everything queued behind it shares the next write.
    expect(counter.writes).toBeLessThanOrEqual(4);
    const chain = await collect(feed.commits());
    expect(chain.every((commit, index) => commit.parent === (index === 0 ? null : index))).toBe(true);
    await store.close();
  });

  it('shares one fsync among stream appends queued behind a write in flight', async () => {
    const directory = temporaryDirectory();
    const counter = countingKernels();
    const store = await openStore(directory, { kernels: counter.kernels });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const stream = await feed.openStream({ token });
    counter.writes = 0;
    const results = await Promise.all(
      Array.from({ length: 32 }, (_, index) => stream.append([{ payload: `r${index}` }], { token })),
    );
    expect(results.map((result) => result.firstSeq)).toEqual(Array.from({ length: 32 }, (_, index) => index + 1));
    expect(counter.writes).toBeLessThanOrEqual(3);
    await store.close();
  });

  it('stores a payload once per feed however often it is appended', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { segmentBytes: 1024 * 1024 });
    const feed = await store.createFeed('f');
    const big = 'p'.repeat(10_000);
    const first = await feed.append([{ payload: big }, { payload: big }, { payload: 'small' }]);
    const second = await feed.append([{ payload: big }]);
    const [a, b] = await feed.readCommit(first.commit);
    const [c] = await feed.readCommit(second.commit);
    expect([a, b, c].map((record) => text(record.payload))).toEqual([big, big, big]);
    // Three references, one copy: the history holds far less than three copies of the payload.
    const historyBytes = fs
      .readdirSync(path.join(directory, 'feeds', 'f', 'history'))
      .map((name) => fs.readFileSync(path.join(directory, 'feeds', 'f', 'history', name)))
      .reduce((sum, bytes) => sum + bytes.filter((byte) => byte === 'p'.charCodeAt(0)).length, 0);
    expect(historyBytes).toBeLessThan(2 * big.length);
    expect((await store.verify('f'))[0].ok).toBe(true);
    await store.close();
  });
});

describe('verify', () => {
  it('reports a damaged payload and a broken frame, and repairs nothing', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'first-payload' }]);
    await feed.append([{ payload: 'second-payload' }]);
    await store.close();
    const historyDirectory = path.join(directory, 'feeds', 'f', 'history');
    const [segment] = fs.readdirSync(historyDirectory).filter((name) => name.endsWith('.hist'));
    const file = path.join(historyDirectory, segment);
    const bytes = fs.readFileSync(file);
    const at = bytes.indexOf('first-payload');
    expect(at).toBeGreaterThan(0);
    bytes[at] ^= 0x20;
    fs.writeFileSync(file, bytes);
    const before = digestTree(directory);
    const reopened = await openStore(directory);
    const [result] = await reopened.verify('f');
    expect(result.ok).toBe(false);
    expect(result.problems.length).toBeGreaterThan(0);
    expect(result.problems[0].file).toBe(file);
    await reopened.close();
    expect(digestTree(directory)).toBe(before);
  });
});

describe('segment rolls', () => {
  it('replaces an empty segment left by a crash when the next run needs a bigger one', async () => {
    const directory = temporaryDirectory();
    // A disk that fails the first run written after a roll: the new segment exists, empty.
    let failNextRun = false;
    const base = loadKernels();
    const kernels: Kernels = {
      ...base,
      writeDurable: async (fd, position, buffers) => {
        const bytes = buffers.reduce((sum, buffer) => sum + buffer.length, 0);
        if (failNextRun && position === 48 && bytes > 48) throw new StreamStackError('IO', 'simulated failure');
        return base.writeDurable(fd, position, buffers);
      },
    };
    let store = await openStore(directory, { kernels });
    let feed = await store.createFeed('f');
    await feed.append([{ payload: 'x'.repeat(10_000) }]);
    failNextRun = true;
    const big = Array.from({ length: 4 }, (_, index) => ({ payload: `${index}`.repeat(15_000) }));
    await expect(feed.append(big)).rejects.toMatchObject({ code: 'IO' });
    await store.close();
    const history = path.join(directory, 'feeds', 'f', 'history');
    expect(fs.readdirSync(history).filter((name) => name.endsWith('.hist'))).toHaveLength(2);

    // After the restart the empty segment is the active one; a run larger than it replaces it.
    store = await openStore(directory);
    feed = await store.feed('f');
    const huge = Array.from({ length: 8 }, (_, index) => ({ payload: `${index}`.repeat(15_000) }));
    expect(await feed.append(huge)).toMatchObject({ commit: 2, firstPosition: 2, records: 8 });
    expect((await feed.readCommit(2)).map((record) => record.payload.length)).toEqual(Array(8).fill(15_000));
    expect((await store.verify('f'))[0]).toMatchObject({ ok: true, commits: 2 });
    await store.close();
  });
});

describe('segments sized for one large group', () => {
  it('keep room for their SegmentEnd after the live list a new WAL segment starts with', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 600_000 });
    const stream = await feed.openStream({ token });
    // Batches larger than a 64 KiB segment, one after another: each gets a segment sized for
    // it, which the next roll must be able to finish.
    const big = (batch: number) =>
      Array.from({ length: 40 }, (_, index) => ({ payload: `${batch}-${index}-${'x'.repeat(3000)}` }));
    for (let batch = 0; batch < 4; batch++) await stream.append(big(batch), { token });
    const commit = await stream.seal({ token });
    expect(commit.records).toBe(160);
    await store.close();
    store = await openStore(directory);
    expect((await store.verify('f'))[0].problems).toEqual([]);
    expect((await (await store.feed('f')).readCommit(1)).length).toBe(160);
    await store.close();
  });
});
