/**
 * Whole-history dedup through fingerprint dictionaries — each sealed segment's dictionary keeps
 * every fingerprint's first occurrence over the history up to it, so the first occurrences in a
 * segment are decided once, when it is built — and latest reads, against a naive oracle over
 * every record written, across many small segments and reopens, with either kernel set.
 * Payloads repeat within a commit, within a segment and across segments; some records carry
 * their own fingerprints, which collide on purpose with other payloads'.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { branchTally } from '../support/branches.js';
import { historySegmentBases, openStore, temporaryDirectory, text } from '../support/store.js';

interface Written {
  readonly position: number;
  readonly commit: number;
  /** What makes two records the same for dedup: their fingerprint, or else their payload. */
  readonly identity: string;
  readonly payload: string;
  readonly key: string;
  readonly version: number;
  readonly tombstone: boolean;
}

/** Positions a whole-history dedup read after commit `after` returns. */
function dedupOracle(written: readonly Written[], after: number): number[] {
  const seen = new Set<string>();
  const out: number[] = [];
  for (const record of written) {
    if (seen.has(record.identity)) continue;
    seen.add(record.identity);
    if (record.commit > after) out.push(record.position);
  }
  return out;
}

/** Positions a latest read after commit `after` returns: each key's window winner, unless a tombstone. */
function latestOracle(written: readonly Written[], after: number): number[] {
  const best = new Map<string, Written>();
  for (const record of written) {
    if (record.commit <= after) continue;
    const held = best.get(record.key);
    if (!held || record.version > held.version || (record.version === held.version && record.position > held.position))
      best.set(record.key, record);
  }
  return [...best.values()]
    .filter((record) => !record.tombstone)
    .map((record) => record.position)
    .sort((a, b) => a - b);
}

const record = fc.record({
  payload: fc.nat(40),
  size: fc.integer({ min: 200, max: 1500 }),
  ownFingerprint: fc.option(fc.nat(5), { freq: 5 }),
  key: fc.nat(15),
  version: fc.nat(4),
  tombstone: fc.boolean(),
});

describe('whole-history dedup through fingerprint dictionaries', () => {
  it('equals a naive oracle over many sealed segments, from every cursor, across reopens, with either kernel set', async () => {
    const tally = branchTally('dedup over history', [
      'first occurrence in an older segment',
      'first occurrence earlier in the same segment',
      'first occurrence before the cursor',
      'first occurrence in the active segment',
      'own fingerprint shared with another payload',
      'reopened',
    ]);
    // Sizes: 12 to 30 commits of 1 to 10 records of 200 to 1500 bytes over 64 KiB segments, so a
    // run seals 2 to 9 segments; 41 distinct payloads (so most repeat), 6 own fingerprints.
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('native' as const, 'ts' as const),
        fc.array(fc.record({ records: fc.array(record, { minLength: 1, maxLength: 10 }), reopen: fc.boolean() }), {
          minLength: 12,
          maxLength: 30,
        }),
        fc.array(fc.nat(1000), { minLength: 2, maxLength: 4 }),
        async (kernels, commits, cursorPicks) => {
          const directory = temporaryDirectory();
          let store = await openStore(directory, { kernels });
          let feed = await store.createFeed('f');
          const written: Written[] = [];
          for (const [at, commit] of commits.entries()) {
            const batch = commit.records.map((input) => ({
              payload: `payload-${input.payload}-${'p'.repeat(input.size)}`,
              key: `key-${input.key}`,
              version: input.version,
              tombstone: input.tombstone && input.version > 2,
              ...(input.ownFingerprint === null ? {} : { fingerprint: `fp-${input.ownFingerprint}` }),
            }));
            const result = await feed.append(batch);
            for (const [index, input] of batch.entries()) {
              written.push({
                position: result.firstPosition + index,
                commit: result.commit,
                identity: 'fingerprint' in input ? `own:${input.fingerprint}` : `payload:${input.payload}`,
                payload: input.payload,
                key: input.key,
                version: input.version,
                tombstone: input.tombstone,
              });
            }
            if (commit.reopen && at % 4 === 3) {
              tally.hit('reopened');
              await store.close();
              store = await openStore(directory, { kernels });
              feed = await store.feed('f');
            }
          }
          const bases = historySegmentBases(directory);
          const segmentOf = (position: number) => bases.filter((base) => base <= position).pop()!;
          const firstOf = new Map<string, Written>();
          for (const entry of written) {
            const first = firstOf.get(entry.identity);
            if (!first) {
              firstOf.set(entry.identity, entry);
              tally.hit(
                'first occurrence in the active segment',
                segmentOf(entry.position) === bases[bases.length - 1],
              );
              continue;
            }
            tally.hit('first occurrence in an older segment', segmentOf(first.position) < segmentOf(entry.position));
            tally.hit(
              'first occurrence earlier in the same segment',
              segmentOf(first.position) === segmentOf(entry.position),
            );
          }
          const ownPayloads = new Map<string, Set<string>>();
          for (const entry of written) {
            if (!entry.identity.startsWith('own:')) continue;
            const payloads = ownPayloads.get(entry.identity) ?? new Set();
            payloads.add(entry.payload);
            ownPayloads.set(entry.identity, payloads);
          }
          tally.hit(
            'own fingerprint shared with another payload',
            [...ownPayloads.values()].some((payloads) => payloads.size > 1),
          );

          const cursors = new Set([0, commits.length, ...cursorPicks.map((pick) => pick % commits.length)]);
          for (const after of cursors) {
            const dedup: number[] = [];
            const payloads: string[] = [];
            for await (const read of feed.read({ after, mode: 'dedup' })) {
              dedup.push(read.position);
              payloads.push(text(read.payload));
            }
            expect(dedup, `dedup after ${after}`).toEqual(dedupOracle(written, after));
            expect(payloads, `dedup payloads after ${after}`).toEqual(
              dedup.map((position) => written[position - 1].payload),
            );
            tally.hit(
              'first occurrence before the cursor',
              written.some((entry) => entry.commit > after && firstOf.get(entry.identity)!.commit <= after),
            );
            const latest: number[] = [];
            for await (const read of feed.read({ after, mode: 'latest' })) latest.push(read.position);
            expect(latest, `latest after ${after}`).toEqual(latestOracle(written, after));
            // The columnar form decides dedup and latest on its columns: the same positions.
            for (const [mode, expected] of [
              ['dedup', dedup],
              ['latest', latest],
            ] as const) {
              const positions: number[] = [];
              for await (const batch of feed.readColumns({ after, mode })) positions.push(...batch.positions);
              expect(positions, `${mode} in columns after ${after}`).toEqual(expected);
            }
          }
          await store.close();
        },
      ),
      { numRuns: 30 },
    );
    tally.expectAllReached();
  }, 240_000);
});
