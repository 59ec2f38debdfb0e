/**
 * A segment's key occurrences as the key index keeps them for its active segment: each key's
 * winner up to any position must be what a scan of every occurrence finds, in both term
 * orders; the key list must hold each key once, and the packed terms and winner columns a
 * dictionary is built from (`winnerColumns`) each key once, as its UTF-8 bytes, with that winner.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { SegmentKeys } from '../../packages/engine/src/query/indexes/segment-keys.js';
import type { KeyWinner, TermOrder } from '../../packages/engine/src/storage/key-file.js';
import { branchTally } from '../support/branches.js';

interface Occurrence {
  key: string;
  position: number;
  version: number;
  tombstone: boolean;
  locator: number;
}

/** The winner a scan of every occurrence finds: the first position, or the highest version then position. */
function scanWinner(occurrences: readonly Occurrence[], order: TermOrder, upTo: number): KeyWinner | undefined {
  let best: Occurrence | undefined;
  for (const occurrence of occurrences) {
    if (occurrence.position > upTo) continue;
    if (!best) best = occurrence;
    else if (
      order === 'first'
        ? occurrence.position < best.position
        : occurrence.version > best.version ||
          (occurrence.version === best.version && occurrence.position > best.position)
    )
      best = occurrence;
  }
  return best && { position: best.position, version: best.version, tombstone: best.tombstone, locator: best.locator };
}

/**
 * Bytes a sealed segment keeps per occurrence: its position (8), locator (4) and link to the
 * key's occurrence before (4), plus a version (8) once any is nonzero and a tombstone flag (1)
 * once any is set.
 */
function columnBytesEach(draws: readonly { versionUp: number; tombstone: boolean }[]): number {
  return 16 + (draws.some((draw) => draw.versionUp > 0) ? 8 : 0) + (draws.some((draw) => draw.tombstone) ? 1 : 0);
}

describe('SegmentKeys', () => {
  it('finds the winner a scan of every occurrence finds, up to any position, in both orders', async () => {
    const tally = branchTally('segment keys', [
      'a key met once',
      'a key met many times',
      'a winner older than the key’s newest occurrence',
      'a position before the key’s first occurrence',
      'a key never added',
      'more keys than a shard’s first slots',
    ]);
    await fc.assert(
      fc.asyncProperty(
        // 300 to 3,000 occurrences (fast-check's default would stay near 10) of keys from a pool
        // of up to 50, where most keys recur, or of 1,100 to 2,500, more than the 64 shards'
        // tables hold in their first 16 slots each, so some grow.
        fc.constantFrom<TermOrder>('latest', 'first'),
        fc.oneof(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1_100, max: 2_500 })),
        fc.array(
          fc.record({
            key: fc.nat(),
            versionUp: fc.integer({ min: -2, max: 3 }),
            tombstone: fc.boolean(),
            gap: fc.integer({ min: 1, max: 3 }),
          }),
          { minLength: 300, maxLength: 3_000, size: 'max' },
        ),
        async (order, pool, draws) => {
          const base = 1_000;
          const keys = new SegmentKeys(base, order);
          const byKey = new Map<string, Occurrence[]>();
          const versions = new Map<string, number>();
          let position = base;
          for (const [index, draw] of draws.entries()) {
            // Some keys are not ASCII: the packed terms are their UTF-8 bytes, pairs included.
            const key = `${draw.key % 5 === 0 ? 'ключ😀' : 'k'}${draw.key % pool}`;
            // Versions mostly rise, and sometimes fall back: the winner is then not the newest.
            const version = Math.max(0, (versions.get(key) ?? 0) + draw.versionUp);
            versions.set(key, version);
            position += draw.gap;
            const occurrence = { key, position, version, tombstone: draw.tombstone, locator: index * 7 };
            byKey.set(key, [...(byKey.get(key) ?? []), occurrence]);
            keys.add(key, position, version, draw.tombstone, occurrence.locator);
          }
          const distinct = [...versions.keys()];
          tally.hit(
            'more keys than a shard’s first slots',
            distinct.length > limits.segmentKeyShards * limits.segmentKeyShardSlotsInitial,
          );
          expect((await keys.keyList()).sort()).toEqual([...distinct].sort());
          // Sealing lets the columns' room to grow go, and changes no answer: the checks below
          // run on a sealed segment's keys half the time.
          if (draws.length % 2 === 0) {
            keys.seal();
            expect(keys.columnBytes).toBe(keys.occurrences * columnBytesEach(draws));
          }
          const { terms, own } = await keys.winnerColumns();
          const packed = Array.from(terms.ends, (end, at) =>
            new TextDecoder('utf-8', { fatal: true }).decode(
              terms.bytes.subarray(at === 0 ? 0 : terms.ends[at - 1], end),
            ),
          );
          expect([...packed].sort()).toEqual([...distinct].sort());
          packed.forEach((key, at) => {
            expect({
              position: own.positions[at],
              version: own.versions[at],
              tombstone: own.tombstones[at] === 1,
              locator: own.locators[at],
            }).toEqual(keys.winnerUpTo(key, Number.POSITIVE_INFINITY));
          });
          const last = position;
          for (const key of [...distinct, 'never-added']) {
            const met = byKey.get(key) ?? [];
            tally.hit('a key never added', met.length === 0);
            tally.hit('a key met once', met.length === 1);
            tally.hit('a key met many times', met.length > 2);
            for (const upTo of [
              Number.POSITIVE_INFINITY,
              last,
              base,
              ...met.map((occurrence) => occurrence.position - 1),
              ...met.map((occurrence) => occurrence.position),
            ]) {
              const expected = scanWinner(met, order, upTo);
              tally.hit('a position before the key’s first occurrence', met.length > 0 && expected === undefined);
              tally.hit(
                'a winner older than the key’s newest occurrence',
                expected !== undefined &&
                  expected.position < (met.at(-1)?.position ?? 0) &&
                  upTo === Number.POSITIVE_INFINITY,
              );
              expect(keys.winnerUpTo(key, upTo)).toEqual(expected);
            }
          }
        },
      ),
      { numRuns: 40 },
    );
    tally.expectAllReached();
  });
});
