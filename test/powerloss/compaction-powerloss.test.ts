/**
 * Power loss during key compaction: the child of the compaction crash test
 * (test/support/compaction-child.mjs) appends and key-compacts a feed on a powerloss-fs mount
 * (tools/powerloss-fs), and the test cuts the power — a random while after the child is ready,
 * or a few milliseconds after it starts a compaction or a merge — dropping everything not yet
 * fsync'd (or, on torn cuts, letting a random subset of the unsynced pages through). The horizon
 * is durable before any segment is rewritten, and each rewritten segment is synced before it is
 * switched in, so what survives is the feed of some horizon at least as high as the last one
 * acknowledged, its reads after the horizon and every key's latest value as the history says.
 * The checks are those of test/support/compaction-check.ts, over the store opened straight from
 * what survived; the next child carries on over the same files.
 *
 * Children alternate the native and TypeScript kernels; cuts alternate plain and torn.
 * `STREAMSTACK_COMPACTION_POWERLOSS_CYCLES` sets the number of cuts (else
 * `STREAMSTACK_POWERLOSS_CYCLES`, else 8); `STREAMSTACK_POWERLOSS_SEED` replays a run.
 */
import { describe, expect, it } from 'vitest';
import { Store } from '../../packages/engine/src/index.js';
import { runChild } from '../support/child-runs.js';
import { checkCompactedFeed } from '../support/compaction-check.js';
import { compactionChildSegmentBytes } from '../support/compaction-records.mjs';
import { xorshift32 } from '../support/ingest.mjs';
import { startPowerlossFs } from '../support/powerloss.js';

const cycles = Number(
  process.env.STREAMSTACK_COMPACTION_POWERLOSS_CYCLES ?? process.env.STREAMSTACK_POWERLOSS_CYCLES ?? 8,
);
const seed = Number(process.env.STREAMSTACK_POWERLOSS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const random = xorshift32(seed);
const childScript = new URL('../support/compaction-child.mjs', import.meta.url).pathname;
/** How long a child may run before the power is cut, at most, when the cut is not aimed at a compaction. */
const cutAfterMsMax = 400;
/** How long after a compaction starts the cut comes, at most, when it is aimed at one. */
const cutInCompactionMsMax = 10;

interface ChildLine {
  readonly kind: string;
  readonly commit?: number;
  readonly horizon?: number;
}

/** Starts the child on `mount`; resolves the lines it printed before the power was cut. */
function runUntilCut(mount: string, cycle: number, cut: () => Promise<unknown>): Promise<ChildLine[]> {
  const aimed = random() < 0.6;
  const delayMs = aimed ? random() * cutInCompactionMsMax : random() * cutAfterMsMax;
  const toWait = 1 + Math.floor(random() * 4);
  return runChild<ChildLine>(
    childScript,
    [mount, String(cycle), String(seed)],
    { STREAMSTACK_KERNELS: cycle % 2 === 0 ? 'native' : 'ts', COMPACTION_BREAK_LOCK: '1' },
    { delayMs, fallbackMs: cutAfterMsMax * 5, cut, ...(aimed ? { aimAt: { kind: 'compact', count: toWait } } : {}) },
  );
}

describe('power loss during key compaction', () => {
  it(
    `keeps every read after the horizon and every key's latest value, across ${cycles} cuts, plain and torn`,
    async () => {
      console.log(
        `compaction power-loss test: ${cycles} cuts, seed ${seed} (STREAMSTACK_POWERLOSS_SEED=${seed} replays it)`,
      );
      let backing: string | undefined;
      let acknowledged = 0;
      let horizonAcknowledged = 0;
      let droppedPages = 0;
      let cutInCompaction = 0;
      let horizon = 0;
      for (let cycle = 0; cycle < cycles; cycle++) {
        const pfs = await startPowerlossFs({ seed: seed + cycle, ...(backing ? { backing } : {}) });
        backing = pfs.backing;
        if (cycle === 0) {
          const store = await Store.open(pfs.mount, { segmentBytes: compactionChildSegmentBytes });
          await store.createFeed('keys');
          await store.close();
          await pfs.sync();
        }
        const torn = cycle % 2 === 1;
        let loss = { dropped_pages: 0 };
        const lines = await runUntilCut(pfs.mount, cycle, async () => (loss = await pfs.losePower(torn)));
        await pfs.stop();
        droppedPages += loss.dropped_pages;
        for (const line of lines) {
          if (line.kind === 'appended') acknowledged = Math.max(acknowledged, line.commit!);
          if (line.kind === 'compacted' && line.horizon !== undefined)
            horizonAcknowledged = Math.max(horizonAcknowledged, line.horizon);
        }
        if (
          lines.filter((line) => line.kind === 'compact').length >
          lines.filter((line) => line.kind === 'compacted').length
        )
          cutInCompaction++;
        // What survived, opened straight from the backing directory: recovery runs here.
        const store = await Store.open(backing, { segmentBytes: compactionChildSegmentBytes, breakLock: true });
        const feed = await store.feed('keys');
        const where = `after cut ${cycle} (${torn ? 'torn' : 'plain'}, seed ${seed})`;
        ({ horizon } = await checkCompactedFeed(feed, acknowledged, where));
        expect(horizon, `${where}: an acknowledged horizon stays`).toBeGreaterThanOrEqual(horizonAcknowledged);
        expect((await store.verify('keys'))[0].problems, `${where}: verify`).toEqual([]);
        await store.close();
      }
      console.log(
        `compaction power-loss test: ${acknowledged} acknowledged commits, ${cutInCompaction} of ${cycles} cuts inside a compaction, ` +
          `${droppedPages} unsynced pages dropped; final horizon ${horizon}`,
      );
      expect(horizon, 'the history was key-compacted').toBeGreaterThan(1);
      expect(cutInCompaction, 'cuts that came inside a compaction').toBeGreaterThan(0);
      expect(droppedPages, 'cuts that dropped unsynced data').toBeGreaterThan(0);
    },
    Math.max(600_000, cycles * 20_000),
  );
});
