/**
 * Crash safety of key compaction: a child process (test/support/compaction-child.mjs) appends
 * commits while it key-compacts the history up to moving horizons and merges segments. The
 * parent kills it with SIGKILL — a random while after it is ready, or a few milliseconds after it
 * starts a compaction (so kills land between the horizon being recorded, the rewritten segment
 * being switched in and the replaced files being deleted) — reopens the store, and checks the
 * contract against the history worked out from the head alone (every commit's records are a
 * function of its number): RAW and dedup reads after the horizon, the latest value of every key
 * from the start and through `get`, `COMPACTED` below the horizon, every acknowledged commit
 * present, and a clean `verify`. The next child carries on over the same files, with the other
 * kernel set.
 *
 * `STREAMSTACK_COMPACTION_CRASH_CYCLES` sets the number of kills (else `STREAMSTACK_CRASH_CYCLES`,
 * else 12); `STREAMSTACK_CRASH_SEED` replays a run (the seed is printed).
 */
import { describe, expect, it } from 'vitest';
import { runChild } from '../support/child-runs.js';
import { checkCompactedFeed } from '../support/compaction-check.js';
import { compactionChildSegmentBytes } from '../support/compaction-records.mjs';
import { xorshift32 } from '../support/ingest.mjs';
import { openStore, temporaryDirectory } from '../support/store.js';

const cycles = Number(process.env.STREAMSTACK_COMPACTION_CRASH_CYCLES ?? process.env.STREAMSTACK_CRASH_CYCLES ?? 12);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const killRandom = xorshift32(seed);
const childScript = new URL('../support/compaction-child.mjs', import.meta.url).pathname;
/** How long a child may run before it is killed, at most, when the kill is not aimed at a compaction. */
const killAfterMsMax = 400;
/** How long after a compaction starts the kill comes, at most, when it is aimed at one. */
const killInCompactionMsMax = 6;

interface ChildLine {
  readonly kind: string;
  readonly commit?: number;
  readonly horizon?: number;
}

function runAndKill(directory: string, cycle: number): Promise<ChildLine[]> {
  const aimed = killRandom() < 0.6;
  const delayMs = aimed ? killRandom() * killInCompactionMsMax : killRandom() * killAfterMsMax;
  const compactionsToWait = 1 + Math.floor(killRandom() * 4);
  return runChild<ChildLine>(
    childScript,
    [directory, String(cycle), String(seed)],
    { STREAMSTACK_KERNELS: cycle % 2 === 1 ? 'native' : 'ts' },
    {
      delayMs,
      fallbackMs: killAfterMsMax * 5,
      ...(aimed ? { aimAt: { kind: 'compact', count: compactionsToWait } } : {}),
    },
  );
}

describe('key compaction under SIGKILL', () => {
  it(
    `keeps every read after the horizon and every key's latest value, across ${cycles} kills`,
    async () => {
      const directory = temporaryDirectory('streamstack-compaction-crash-');
      const setup = await openStore(directory, { segmentBytes: compactionChildSegmentBytes });
      await setup.createFeed('keys');
      await setup.close();
      console.log(`compaction crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
      let acknowledged = 0;
      let compactionsStarted = 0;
      let compactionsDone = 0;
      let killedInCompaction = 0;
      let horizon = 0;
      let horizonAcknowledged = 0;
      for (let cycle = 1; cycle <= cycles; cycle++) {
        const lines = await runAndKill(directory, cycle);
        for (const line of lines) {
          if (line.kind === 'appended') acknowledged = Math.max(acknowledged, line.commit!);
          if (line.kind === 'compacted' && line.horizon !== undefined)
            horizonAcknowledged = Math.max(horizonAcknowledged, line.horizon);
        }
        const started = lines.filter((line) => line.kind === 'compact').length;
        const done = lines.filter((line) => line.kind === 'compacted').length;
        compactionsStarted += started;
        compactionsDone += done;
        if (started > done) killedInCompaction++;
        const store = await openStore(directory, { segmentBytes: compactionChildSegmentBytes });
        const feed = await store.feed('keys');
        ({ horizon } = await checkCompactedFeed(feed, acknowledged, `after kill ${cycle} (seed ${seed})`));
        expect(horizon, `after kill ${cycle}: an acknowledged horizon stays`).toBeGreaterThanOrEqual(
          horizonAcknowledged,
        );
        expect((await store.verify('keys'))[0].problems, `after kill ${cycle}: verify`).toEqual([]);
        await store.close();
      }
      console.log(
        `compaction crash test: ${acknowledged} acknowledged commits, ${compactionsDone} of ${compactionsStarted} compactions finished, ` +
          `${killedInCompaction} of ${cycles} kills inside one; final horizon ${horizon}`,
      );
      expect(killedInCompaction, 'kills that landed inside a compaction').toBeGreaterThan(0);
      expect(horizon, 'the history was key-compacted').toBeGreaterThan(1);
    },
    Math.max(600_000, cycles * 8_000),
  );
});
