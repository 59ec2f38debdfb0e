/**
 * Reads, black box, against the embedded store and against the client over HTTP: RAW, dedup
 * and latest, filters (one item and a query of several), limits and ranges, one commit, `get`
 * with `asOf`, and cursor errors.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { collect, temporaryDirectory, text } from '../support/store.js';
import { type Opened, targets } from '../support/targets.js';

const opened: Opened[] = [];
afterEach(async () => {
  for (const target of opened.splice(0)) await target.close();
});

describe.each(targets)('reads ($name)', (target) => {
  /** Three commits: keys k (versions 1, 2, then 1 again), j, a tombstone of j, a duplicate payload. */
  async function seeded() {
    const it = await target.open(temporaryDirectory());
    opened.push(it);
    const feed = await it.store.createFeed('f');
    await feed.append([
      { payload: 'k1', key: 'k', version: 1, type: 'order', tags: ['eu', 'big'] },
      { payload: 'j1', key: 'j', type: 'order', tags: ['us'] },
    ]);
    await feed.append([
      { payload: 'k2', key: 'k', version: 2, type: 'refund', tags: ['eu'] },
      { payload: 'same', type: 'note' },
    ]);
    await feed.append([
      { payload: 'k1', key: 'k', version: 1, type: 'order', tags: ['eu', 'big'] },
      { payload: 'gone', key: 'j', tombstone: true, type: 'order' },
      { payload: 'same', type: 'note' },
    ]);
    return feed;
  }
  const payloads = (records: readonly { payload: Uint8Array }[]) => records.map((record) => text(record.payload));

  it('reads RAW after a cursor, up to a commit, with a limit, in batches of one commit each', async () => {
    const feed = await seeded();
    expect((await collect(feed.read())).map((record) => record.position)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(payloads(await collect(feed.read({ after: 1 })))).toEqual(['k2', 'same', 'k1', 'gone', 'same']);
    expect(payloads(await collect(feed.read({ after: 0, upTo: 2 })))).toEqual(['k1', 'j1', 'k2', 'same']);
    expect(payloads(await collect(feed.read({ limit: 3 })))).toEqual(['k1', 'j1', 'k2']);
    expect(
      (await collect(feed.readBatches({ after: 0 }))).map((batch) => batch.map((record) => record.commit)),
    ).toEqual([
      [1, 1],
      [2, 2],
      [3, 3, 3],
    ]);
    expect(await collect(feed.read({ after: 3 }))).toEqual([]);
    const [first] = await collect(feed.read({ limit: 1 }));
    expect(first).toMatchObject({
      feed: 'f',
      commit: 1,
      seq: 1,
      position: 1,
      key: 'k',
      version: 1,
      type: 'order',
      tags: ['eu', 'big'],
      tombstone: false,
    });
    expect(first.fingerprint).toBeInstanceOf(Uint8Array);
  });

  it('reads as NDJSON bytes (readLines): the record lines of read, in chunks of whole lines', async () => {
    const feed = await seeded();
    const decoder = new TextDecoder();
    for (const options of [{}, { mode: 'latest' as const }, { after: 1, limit: 2 }, { filter: { tags: ['eu'] } }]) {
      const chunks = await collect(feed.readLines(options));
      for (const chunk of chunks) expect(chunk.at(-1)).toBe(0x0a);
      const lines = chunks
        .map((chunk) => decoder.decode(chunk))
        .join('')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line));
      const records = await collect(feed.read(options));
      expect(
        lines.map((line) => [line.position, line.payload]),
        JSON.stringify(options),
      ).toEqual(records.map((record) => [record.position, text(record.payload)]));
    }
    await expect(collect(feed.readLines({ after: 9 }))).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
  });

  it('reads in dedup and latest modes', async () => {
    const feed = await seeded();
    // Dedup drops the repeated payloads (same fingerprint), wherever they lie in the history.
    expect(payloads(await collect(feed.read({ mode: 'dedup' })))).toEqual(['k1', 'j1', 'k2', 'same', 'gone']);
    // Latest keeps each key's winner (highest version, then latest).
    const latest = await collect(feed.read({ mode: 'latest' }));
    expect(latest.filter((record) => record.key === 'k').map((record) => text(record.payload))).toEqual(['k2']);
    // A key whose winner is a tombstone is gone from the latest view.
    expect(latest.filter((record) => record.key === 'j')).toEqual([]);
    // Records without a key have no place in a view by key.
    expect(payloads(latest)).toEqual(['k2']);
  });

  it('filters by type (any of) and tag (all of), and by a query of several items', async () => {
    const feed = await seeded();
    expect(payloads(await collect(feed.read({ filter: { types: ['refund', 'note'] } })))).toEqual([
      'k2',
      'same',
      'same',
    ]);
    expect(payloads(await collect(feed.read({ filter: { tags: ['eu', 'big'] } })))).toEqual(['k1', 'k1']);
    expect(payloads(await collect(feed.read({ filter: { types: ['order'], tags: ['us'] } })))).toEqual(['j1']);
    expect(
      payloads(await collect(feed.read({ filter: { items: [{ tags: ['us'] }, { types: ['refund'] }] } }))),
    ).toEqual(['j1', 'k2']);
    for (const plan of ['index', 'scan'] as const) {
      expect(payloads(await collect(feed.read({ filter: { types: ['order'] }, plan })))).toEqual([
        'k1',
        'j1',
        'k1',
        'gone',
      ]);
    }
    expect(payloads(await collect(feed.read({ filter: { types: ['order'] }, limit: 2 })))).toEqual(['k1', 'j1']);
  });

  it('gives one commit, the commits after a cursor, and a key as of a commit', async () => {
    const feed = await seeded();
    expect(payloads(await feed.readCommit(2))).toEqual(['k2', 'same']);
    expect(
      (await collect(feed.commits({ after: 1 }))).map((commit) => [
        commit.commit,
        commit.records,
        commit.firstPosition,
      ]),
    ).toEqual([
      [2, 2, 3],
      [3, 3, 5],
    ]);
    expect(await feed.get('k')).toMatchObject({ key: 'k', version: 2, commit: 2 });
    expect(text((await feed.get('k', { asOf: 1 }))!.payload)).toBe('k1');
    expect(await feed.get('j')).toBeUndefined();
    expect(text((await feed.get('j', { asOf: 2 }))!.payload)).toBe('j1');
    expect(await feed.get('never')).toBeUndefined();
    expect((await feed.head())?.commit).toBe(3);
    expect(await feed.info()).toMatchObject({ commits: 3, records: 7, lowMark: 1 });
  });

  it('refuses cursors beyond the head and bad options with the same codes', async () => {
    const feed = await seeded();
    await expect(collect(feed.read({ after: 4 }))).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    await expect(collect(feed.read({ after: 0, upTo: 9 }))).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    await expect(feed.readCommit(9)).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    await expect(feed.get('k', { asOf: 9 })).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    await expect(collect(feed.read({ after: 2, upTo: 1 }))).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // Numbers that are no cursor get the engine's own code over HTTP too.
    for (const after of [-1, 1.5]) {
      await expect(collect(feed.read({ after })), String(after)).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
      // The embedded commits() checks its cursor at the call, the remote one at its first step.
      await expect((async () => collect(feed.commits({ after })))(), String(after)).rejects.toMatchObject({
        code: 'CURSOR_OUT_OF_RANGE',
      });
    }
    const limitCodes = [];
    for (const limit of [-1, 2.5])
      limitCodes.push(
        await collect(feed.read({ limit })).then(
          () => 'ok',
          (error: { code: string }) => error.code,
        ),
      );
    expect(limitCodes).toEqual(['INVALID_ARGUMENT', 'INVALID_ARGUMENT']);
    const subscription = await feed.createSubscription('s');
    await expect(subscription.poll({ max: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('stops a read and a commit listing when their signal aborts', async () => {
    const feed = await seeded();
    const aborted = AbortSignal.abort();
    await expect(collect(feed.read({ signal: aborted }))).rejects.toMatchObject({ name: 'AbortError' });
    await expect(collect(feed.commits({ signal: aborted }))).rejects.toMatchObject({ name: 'AbortError' });
    const controller = new AbortController();
    const seen: number[] = [];
    const reading = (async () => {
      for await (const record of feed.read({ signal: controller.signal })) {
        seen.push(record.position);
        controller.abort();
      }
    })();
    await expect(reading).rejects.toMatchObject({ name: 'AbortError' });
    expect(seen.length).toBeGreaterThanOrEqual(1);
    expect(seen.length).toBeLessThan(7);
  });
});
