/**
 * Merging and key compaction, black box, against the embedded store and against the client over
 * HTTP: reads from the horizon on answer as before, cursors below it fail with `COMPACTED`, and
 * the latest value of every key is kept.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { collect, temporaryDirectory, text } from '../support/store.js';
import { type Opened, targets } from '../support/targets.js';

const opened: Opened[] = [];
afterEach(async () => {
  for (const target of opened.splice(0)) await target.close();
});

describe.each(targets)('compaction ($name)', (target) => {
  it('key-compacts up to a horizon, keeping each key’s latest value and every read after it', async () => {
    const it = await target.open(temporaryDirectory());
    opened.push(it);
    const feed = await it.store.createFeed('f');
    // 8 KB payloads: the test store's 64 KiB segments roll every few commits. Five keys, each
    // updated eight times.
    for (let commit = 1; commit <= 40; commit++)
      await feed.append([{ payload: `${commit}:`.padEnd(8000, 'x'), key: `k${commit % 5}`, version: commit }]);
    const afterHorizon = await collect(feed.read({ after: 30 }));
    const latest = await collect(feed.read({ mode: 'latest' }));
    const result = await feed.compactKeys({ horizon: 30 });
    expect(result).toMatchObject({ horizon: 30, putOff: false });
    expect(result.recordsAfter).toBeLessThan(result.recordsBefore);
    expect((await feed.info()).horizon).toBe(30);
    expect(await collect(feed.read({ after: 30 }))).toEqual(afterHorizon);
    expect(await collect(feed.read({ mode: 'latest' }))).toEqual(latest);
    expect(text((await feed.get('k1', { asOf: 30 }))!.payload).split(':')[0]).toBe('26');
    await expect(collect(feed.read({ after: 10 }))).rejects.toMatchObject({
      code: 'COMPACTED',
      details: { horizon: 30 },
    });
    await expect(feed.get('k1', { asOf: 29 })).rejects.toMatchObject({ code: 'COMPACTED' });
    await expect(feed.compactKeys({ horizon: 99 })).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    // A merge afterwards changes no read either.
    await feed.compact();
    expect(await collect(feed.read({ after: 30 }))).toEqual(afterHorizon);
  });
});
