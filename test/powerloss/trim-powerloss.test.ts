/**
 * Power loss during trims: the child of the trim crash test (test/support/trim-child.mjs)
 * appends and trims a feed on a powerloss-fs mount (tools/powerloss-fs), and the test cuts the
 * power — a random while after the child is ready, or a few milliseconds after it starts a trim —
 * dropping everything not yet fsync'd (or, on torn cuts, letting a random subset of the unsynced
 * pages through). A trim records its floor durably before it deletes a file, so what survives is
 * either the old floor with every file, or the new floor, with whatever deletions the cut undid
 * done again when the feed opens. The checks are those of test/support/trim-check.ts, over the
 * store opened straight from what survived; the next child carries on over the same files.
 *
 * Children alternate the native and TypeScript kernels; cuts alternate plain and torn.
 * `STREAMSTACK_TRIM_POWERLOSS_CYCLES` sets the number of cuts (else
 * `STREAMSTACK_POWERLOSS_CYCLES`, else 12, so that a plain test run stays quick);
 * `STREAMSTACK_POWERLOSS_SEED` replays a run (the seed is printed).
 */
import { describe, expect, it } from 'vitest';
import { Store } from '../../packages/engine/src/index.js';
import { runChild } from '../support/child-runs.js';
import { startPowerlossFs } from '../support/powerloss.js';
import { type TrimChildLine, TrimLedger } from '../support/trim-check.js';
import { trimChildSegmentBytes } from '../support/trim-records.mjs';

const cycles = Number(process.env.STREAMSTACK_TRIM_POWERLOSS_CYCLES ?? process.env.STREAMSTACK_POWERLOSS_CYCLES ?? 12);
const seed = Number(process.env.STREAMSTACK_POWERLOSS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const childScript = new URL('../support/trim-child.mjs', import.meta.url).pathname;
/** How long a child may run before the power is cut, at most, when the cut is not aimed at a trim. */
const cutAfterMsMax = 400;
/** How long after a trim starts the cut comes, at most, when it is aimed at one. */
const cutInTrimMsMax = 10;
/** A cut aimed at a trim waits for this many trims to start, at most. */
const trimsBeforeAimedCutMax = 6;
/**
 * Short, so that a lease grant the cut made the child forget (it was durable, its reply never
 * printed) expires soon and the next child can take the lease over.
 */
const leaseTtlMs = 2000;

let randomState = seed >>> 0 || 1;
function random(): number {
  randomState ^= randomState << 13;
  randomState ^= randomState >>> 17;
  randomState ^= randomState << 5;
  return (randomState >>> 0) / 2 ** 32;
}

/** Starts the child on `mount`; resolves the lines it printed before the power was cut. */
function runUntilCut(
  mount: string,
  cycle: number,
  token: string | undefined,
  cut: () => Promise<unknown>,
): Promise<TrimChildLine[]> {
  const aimAtTrim = random() < 0.5;
  const delayMs = aimAtTrim ? random() * cutInTrimMsMax : random() * cutAfterMsMax;
  const trimsToWait = 1 + Math.floor(random() * trimsBeforeAimedCutMax);
  return runChild<TrimChildLine>(
    childScript,
    [mount, String(cycle), String(seed)],
    {
      STREAMSTACK_KERNELS: cycle % 2 === 0 ? 'native' : 'ts',
      TRIM_BREAK_LOCK: '1',
      TRIM_LEASE_TTL_MS: String(leaseTtlMs),
      ...(token ? { TRIM_TOKEN: token } : {}),
    },
    {
      delayMs,
      fallbackMs: cutAfterMsMax * 5,
      cut,
      ...(aimAtTrim ? { aimAt: { kind: 'trim', count: trimsToWait } } : {}),
    },
  );
}

describe('power loss during trims', () => {
  it(
    `keeps the old floor with every file or the new floor with nothing below it, across ${cycles} cuts, plain and torn`,
    async () => {
      console.log(`trim power-loss test: ${cycles} cuts, seed ${seed} (STREAMSTACK_POWERLOSS_SEED=${seed} replays it)`);
      const ledger = new TrimLedger();
      let backing: string | undefined;
      let droppedPages = 0;
      for (let cycle = 0; cycle < cycles; cycle++) {
        const pfs = await startPowerlossFs({ seed: seed + cycle, ...(backing ? { backing } : {}) });
        backing = pfs.backing;
        if (cycle === 0) {
          const store = await Store.open(pfs.mount, { segmentBytes: trimChildSegmentBytes });
          const feed = await store.createFeed('trim');
          await feed.createSubscription('pin');
          await store.close();
          await pfs.sync();
        }
        const torn = cycle % 2 === 1;
        let loss = { dropped_pages: 0 };
        const lines = await runUntilCut(pfs.mount, cycle, ledger.token, async () => (loss = await pfs.losePower(torn)));
        await pfs.stop();
        droppedPages += loss.dropped_pages;
        ledger.take(lines);
        await ledger.notePending(backing);
        // What survived, opened straight from the backing directory: recovery runs here.
        const store = await Store.open(backing, { segmentBytes: trimChildSegmentBytes, breakLock: true });
        await ledger.check(store, backing, `after cut ${cycle} (${torn ? 'torn' : 'plain'}, seed ${seed})`);
        await store.close();
      }
      console.log(
        `trim power-loss test: ${ledger.acknowledged.size} acknowledged commits, ${ledger.trimsAcknowledged} trims acknowledged ` +
          `(${ledger.segmentsRemoved} segments removed), ${ledger.stoppedInTrim} of ${cycles} cuts inside a trim, ` +
          `${ledger.pendingFound} cuts left a trim pending for the reopen to finish, ${droppedPages} unsynced pages dropped; ` +
          `final low mark ${ledger.lowMark}`,
      );
      expect(ledger.lowMark, 'the history was trimmed').toBeGreaterThan(1);
      expect(ledger.stoppedInTrim, 'cuts that came inside a trim').toBeGreaterThan(0);
      expect(droppedPages, 'cuts that dropped unsynced data').toBeGreaterThan(0);
    },
    Math.max(600_000, cycles * 15_000),
  );
});
