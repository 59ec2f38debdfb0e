/**
 * Crash safety of trims: a child process (test/support/trim-child.mjs) appends to a feed of
 * small history segments while it trims it — with an explicit `before`, forced or not, and by a
 * retention policy it sets, which also trims on its own after each finished segment — and moves
 * the subscription that holds retention back. The parent kills it with SIGKILL, either a random
 * while after it is ready or a few milliseconds after it starts a trim (so kills land inside
 * trims: between the floor being recorded and the files being deleted, or the indexes being
 * told), reopens the store (recovery finishes an interrupted trim) and checks what
 * test/support/trim-check.ts lists. The next child carries on over the same files, with the
 * other kernel set.
 *
 * `STREAMSTACK_TRIM_CRASH_CYCLES` sets the number of kills (else `STREAMSTACK_CRASH_CYCLES`,
 * else 20, so that a plain test run stays quick); `STREAMSTACK_CRASH_SEED` replays a run (the
 * seed is printed).
 */
import { describe, expect, it } from 'vitest';
import { runChild } from '../support/child-runs.js';
import { xorshift32 } from '../support/ingest.mjs';
import { openStore, temporaryDirectory } from '../support/store.js';
import { type TrimChildLine, TrimLedger } from '../support/trim-check.js';
import { trimChildSegmentBytes } from '../support/trim-records.mjs';

const cycles = Number(process.env.STREAMSTACK_TRIM_CRASH_CYCLES ?? process.env.STREAMSTACK_CRASH_CYCLES ?? 20);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** Kill delays and kinds come from this seeded generator (xorshift32), so a run can be replayed. */
const killRandom = xorshift32(seed);
const childScript = new URL('../support/trim-child.mjs', import.meta.url).pathname;
/** How long a child may run before it is killed, at most, when the kill is not aimed at a trim. */
const killAfterMsMax = 400;
/** How long after a trim starts the kill comes, at most, when it is aimed at one. */
const killInTrimMsMax = 4;
/** A kill aimed at a trim waits for this many trims to start, so the feed has grown first. */
const trimsBeforeAimedKillMax = 6;

/** Runs one child until it is ready, kills it (a random while later, or inside a trim), returns its lines. */
function runAndKill(directory: string, cycle: number, token: string | undefined): Promise<TrimChildLine[]> {
  const aimAtTrim = killRandom() < 0.5;
  const delayMs = aimAtTrim ? killRandom() * killInTrimMsMax : killRandom() * killAfterMsMax;
  const trimsToWait = 1 + Math.floor(killRandom() * trimsBeforeAimedKillMax);
  return runChild<TrimChildLine>(
    childScript,
    [directory, String(cycle), String(seed)],
    { STREAMSTACK_KERNELS: cycle % 2 === 1 ? 'native' : 'ts', ...(token ? { TRIM_TOKEN: token } : {}) },
    { delayMs, fallbackMs: killAfterMsMax * 5, ...(aimAtTrim ? { aimAt: { kind: 'trim', count: trimsToWait } } : {}) },
  );
}

describe('trims under SIGKILL', () => {
  it(
    `keep the feed whole from its low mark, and nothing below it, across ${cycles} kills`,
    async () => {
      const directory = temporaryDirectory('streamstack-trim-crash-');
      const setup = await openStore(directory, { segmentBytes: trimChildSegmentBytes });
      const feed = await setup.createFeed('trim');
      await feed.createSubscription('pin');
      await setup.close();

      console.log(`trim crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
      const ledger = new TrimLedger();
      for (let cycle = 1; cycle <= cycles; cycle++) {
        const lines = await runAndKill(directory, cycle, ledger.token);
        ledger.take(lines);
        await ledger.notePending(directory);
        const store = await openStore(directory, { segmentBytes: trimChildSegmentBytes });
        await ledger.check(store, directory, `after kill ${cycle} (seed ${seed})`);
        await store.close();
      }
      console.log(
        `trim crash test: ${ledger.acknowledged.size} acknowledged commits, ${ledger.trimsAcknowledged} trims acknowledged ` +
          `(${ledger.segmentsRemoved} segments removed), ${ledger.stoppedInTrim} of ${cycles} kills inside a trim, ` +
          `${ledger.pendingFound} kills left a trim pending (floor recorded, not done) for the reopen to finish, ` +
          `${ledger.floorsPastAcknowledged} reopens found the low mark past every acknowledged trim; final low mark ${ledger.lowMark}`,
      );
      expect(ledger.stoppedInTrim, 'kills that landed inside a trim').toBeGreaterThan(0);
      expect(ledger.lowMark, 'the history was trimmed').toBeGreaterThan(1);
    },
    Math.max(600_000, cycles * 6_000),
  );
});
