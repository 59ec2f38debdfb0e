/**
 * Power loss: a child ingests into a feed on a powerloss-fs mount (tools/powerloss-fs), which
 * keeps everything not yet fsync'd — written data, created files, renames — in memory; the test
 * cuts the power at a random moment (dropping all of it, or in torn mode letting a random subset
 * of unsynced pages through), opens what survived, and checks that every acknowledged batch and
 * commit is there exactly once, that nothing unacknowledged is half there, that the lease epoch
 * and the subscription cursor did not go back, and that verify finds nothing. The next child
 * carries on over the same files. A SIGKILL keeps the page cache; this does not, so it catches a
 * missing or late fdatasync, or a new file whose directory entry was never synced.
 *
 * Children alternate the native and TypeScript kernels; cuts alternate plain and torn.
 * `STREAMSTACK_POWERLOSS_CYCLES` sets the number of cuts (100 by default; `pnpm soak` more),
 * `STREAMSTACK_POWERLOSS_SEED` replays a run (the seed is printed).
 */

import { describe, expect, it } from 'vitest';
import { Store } from '../../packages/engine/src/index.js';
import { runChild } from '../support/child-runs.js';
import { overlappingAtEnd } from '../support/ingest.mjs';
import { startPowerlossFs } from '../support/powerloss.js';
import { text } from '../support/store.js';

const cycles = Number(process.env.STREAMSTACK_POWERLOSS_CYCLES ?? 100);
const seed = Number(process.env.STREAMSTACK_POWERLOSS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const childScript = new URL('./ingest-child.mjs', import.meta.url).pathname;
const segmentBytes = 64 * 1024;
/** How long a child may ingest before the power is cut, at most. */
const cutAfterMsMax = 80;

let randomState = seed >>> 0 || 1;
function random(): number {
  randomState ^= randomState << 13;
  randomState ^= randomState >>> 17;
  randomState ^= randomState << 5;
  return (randomState >>> 0) / 2 ** 32;
}

interface Line {
  kind: string;
  batch?: string;
  size?: number;
  token?: string;
  epoch?: number;
  cursor?: number;
}

/** Starts the child on `mount`; resolves its lines once it has run a while and the power is cut. */
function ingestUntilCut(
  mount: string,
  cycle: number,
  token: string | undefined,
  cut: () => Promise<unknown>,
): Promise<Line[]> {
  return runChild<Line>(
    childScript,
    [mount, String(cycle), String(seed)],
    { STREAMSTACK_KERNELS: cycle % 2 === 0 ? 'native' : 'ts', ...(token ? { POWER_TOKEN: token } : {}) },
    { delayMs: random() * cutAfterMsMax, fallbackMs: cutAfterMsMax, cut },
  );
}

describe('power loss', () => {
  it(
    `keeps every acknowledged batch, commit, epoch and cursor across ${cycles} power cuts, plain and torn`,
    async () => {
      console.log(`power-loss test: ${cycles} cuts, seed ${seed} (STREAMSTACK_POWERLOSS_SEED=${seed} replays it)`);
      let backing: string | undefined;
      const acknowledged = new Map<string, number>();
      let epoch = 0;
      let cursor = 0;
      let token: string | undefined;
      let tornCuts = 0;
      let droppedPages = 0;
      /** Cuts that came while two group writes to one file were in flight (pipelined). */
      let cutsTwoInFlight = 0;
      for (let cycle = 0; cycle < cycles; cycle++) {
        const pfs = await startPowerlossFs({ seed: seed + cycle, ...(backing ? { backing } : {}) });
        backing = pfs.backing;
        if (cycle === 0) {
          const store = await Store.open(pfs.mount, { segmentBytes });
          await store.createFeed('power');
          await store.close();
          await pfs.sync();
        }
        const torn = cycle % 2 === 1;
        let loss = { dropped_pages: 0 };
        const lines = await ingestUntilCut(pfs.mount, cycle, token, async () => (loss = await pfs.losePower(torn)));
        await pfs.stop();
        if (torn) tornCuts++;
        if (overlappingAtEnd(lines)) cutsTwoInFlight++;
        droppedPages += loss.dropped_pages;
        for (const line of lines) {
          if (line.kind === 'lease') {
            token = line.token;
            epoch = Math.max(epoch, line.epoch!);
          }
          if (line.kind === 'oneshot' || line.kind === 'batch') acknowledged.set(line.batch!, line.size!);
          if (line.kind === 'advanced') cursor = Math.max(cursor, line.cursor!);
        }

        // What survived, opened straight from the backing directory: recovery runs here.
        const store = await Store.open(backing, { segmentBytes, breakLock: true });
        const feed = await store.feed('power');
        const found = new Map<string, { indexes: number[]; size: number }>();
        const take = (payload: Uint8Array) => {
          const [batch, index, size] = text(payload).split('|')[0].split(':');
          const entry = found.get(batch) ?? { indexes: [], size: Number(size) };
          entry.indexes.push(Number(index));
          found.set(batch, entry);
        };
        for await (const commit of feed.commits())
          for (const record of await feed.readCommit(commit.commit)) take(record.payload);
        const open = await feed.activeStream();
        if (open) for (const record of await open.read()) take(record.payload);
        const where = `after cut ${cycle} (${torn ? 'torn' : 'plain'}, seed ${seed})`;
        for (const [batch, size] of acknowledged)
          expect(found.get(batch)?.indexes.length, `acknowledged batch ${batch} ${where}`).toBe(size);
        for (const [batch, entry] of found) {
          expect(entry.indexes, `batch ${batch} whole or absent ${where}`).toEqual(
            Array.from({ length: entry.size }, (_, index) => index),
          );
        }
        expect((await feed.info()).epoch, `epoch ${where}`).toBeGreaterThanOrEqual(epoch);
        expect((await (await feed.subscription('reader')).info()).cursor, `cursor ${where}`).toBeGreaterThanOrEqual(
          cursor,
        );
        const [verification] = await store.verify('power');
        expect(verification.problems, `verify ${where}`).toEqual([]);
        await store.close();
      }
      console.log(
        `power-loss test: ${acknowledged.size} acknowledged batches checked; ${tornCuts} torn cuts; ` +
          `${cutsTwoInFlight} cuts with two group writes in flight; ${droppedPages} unsynced pages dropped in all`,
      );
      expect(acknowledged.size).toBeGreaterThan(cycles);
      expect(cutsTwoInFlight, 'cuts that came while two group writes were in flight').toBeGreaterThan(0);
      expect(droppedPages, 'power cuts that dropped unsynced data').toBeGreaterThan(0);
    },
    Math.max(600_000, cycles * 6_000),
  );
});

describe('a failed fsync on a real file system', () => {
  it('is never acknowledged, stops the feed with IO until it is reopened, and leaves the batch whole or absent', async () => {
    const pfs = await startPowerlossFs({ seed });
    let store = await Store.open(pfs.mount, { segmentBytes });
    let feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 600_000 });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'a' }, { payload: 'b' }], { token });
    await feed.append([{ payload: 'one-shot' }], { token });
    await pfs.failFsync(1);
    await expect(stream.append([{ payload: 'c' }, { payload: 'd' }], { token })).rejects.toMatchObject({ code: 'IO' });
    expect((await pfs.stats()).failed_fsyncs).toBe(1);
    // The PostgreSQL lesson: after a failed fsync nothing more is acknowledged, not even a write
    // that a later fsync could cover.
    await expect(stream.append([{ payload: 'e' }], { token })).rejects.toMatchObject({ code: 'IO' });
    await expect(feed.append([{ payload: 'x' }], { token })).rejects.toMatchObject({ code: 'IO' });
    await store.close();

    store = await Store.open(pfs.mount, { segmentBytes });
    feed = await store.feed('f');
    const records = (await (await feed.stream(stream.id)).read()).map((record) => text(record.payload));
    expect([
      ['a', 'b'],
      ['a', 'b', 'c', 'd'],
    ]).toContainEqual(records);
    expect((await feed.readCommit(1)).map((record) => text(record.payload))).toEqual(['one-shot']);
    const sealed = await (await feed.stream(stream.id)).seal({ token });
    expect(sealed.records).toBe(records.length);
    expect((await store.verify('f'))[0].problems).toEqual([]);
    await store.close();
    await pfs.stop();
  });
});
