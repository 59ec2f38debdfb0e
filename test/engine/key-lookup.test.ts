/**
 * `get(key, { asOf })` through the key index — sealed segments' dictionaries, each holding its
 * keys' winners over the history before it, and the active segment's keys in memory — against a
 * naive oracle over every record written, across many small segments and reopens, with either
 * kernel set. Winner order is the highest version, then the highest position: versions here go
 * up, down and repeat, so the newest occurrence of a key is often not its winner. Warm lookups
 * answer in the turn they are asked (`getByKeyNow`), the others through the read gate: both are
 * checked.
 */
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { ReadGate } from '../../packages/engine/src/coordinator/reading/read-gate.js';
import { keyWinnersHotReads } from '../../packages/engine/src/limits.js';
import { WinnerReader } from '../../packages/engine/src/storage/key-file.js';
import { branchTally } from '../support/branches.js';
import { historySegmentBases, openStore, temporaryDirectory, text } from '../support/store.js';

interface Written {
  readonly position: number;
  readonly key: string;
  readonly version: number;
  readonly tombstone: boolean;
  readonly payload: string;
}

/** The naive answer: the winner among records at or before `asOfPosition`, unless a tombstone. */
function oracle(written: readonly Written[], key: string, asOfPosition: number): Written | undefined {
  let best: Written | undefined;
  for (const record of written) {
    if (record.position > asOfPosition || record.key !== key) continue;
    if (!best || record.version > best.version || (record.version === best.version && record.position > best.position))
      best = record;
  }
  return best && !best.tombstone ? best : undefined;
}

const record = fc.record({
  key: fc.nat(24),
  version: fc.nat(6),
  tombstone: fc.boolean(),
  size: fc.integer({ min: 200, max: 1500 }),
});

describe('get through the key index', () => {
  it('equals a naive oracle over many sealed segments, at every asOf, across reopens, with either kernel set', async () => {
    const tally = branchTally('key lookup', [
      'asOf inside a sealed segment',
      'asOf in the active segment',
      "winner in an older segment than the key's newest",
      'tombstone wins',
      'key never written',
      'reopened',
      'answered in the turn it was asked',
      'answered through the read gate',
    ]);
    // A lookup that enters the read gate is the asynchronous one; a warm one answers without it.
    const gateEntries = vi.spyOn(ReadGate.prototype, 'enter');
    // Sizes: 15 to 40 commits of 1 to 12 records of 200 to 1500 bytes over 64 KiB segments, so a
    // run seals 3 to 12 segments; 25 keys with versions 0 to 6 (ties and regressions).
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('native' as const, 'ts' as const),
        fc.array(fc.record({ records: fc.array(record, { minLength: 1, maxLength: 12 }), reopen: fc.boolean() }), {
          minLength: 15,
          maxLength: 40,
        }),
        fc.array(fc.nat(1000), { minLength: 3, maxLength: 6 }),
        async (kernels, commits, asOfPicks) => {
          const directory = temporaryDirectory();
          let store = await openStore(directory, { kernels });
          let feed = await store.createFeed('f');
          const written: Written[] = [];
          const commitEnds: number[] = [];
          for (const [at, commit] of commits.entries()) {
            const batch = commit.records.map((input, index) => ({
              payload: `c${at}-r${index}-${'p'.repeat(input.size)}`,
              key: `key-${input.key}`,
              version: input.version,
              tombstone: input.tombstone && input.version > 3,
            }));
            const result = await feed.append(batch);
            batch.forEach((input, index) => {
              written.push({ ...input, position: result.firstPosition + index });
            });
            commitEnds.push(result.lastPosition);
            if (commit.reopen && at % 5 === 4) {
              tally.hit('reopened');
              await store.close();
              store = await openStore(directory, { kernels });
              feed = await store.feed('f');
            }
          }
          const bases = historySegmentBases(directory);
          const activeBase = bases[bases.length - 1];
          const asOfs = new Set([commits.length, ...asOfPicks.map((pick) => 1 + (pick % commits.length))]);
          for (const asOf of asOfs) {
            const asOfPosition = commitEnds[asOf - 1];
            const inSealed = asOfPosition < activeBase;
            tally.hit('asOf in the active segment', !inSealed);
            tally.hit('asOf inside a sealed segment', inSealed && !bases.includes(asOfPosition + 1));
            for (let key = 0; key <= 25; key++) {
              const name = `key-${key}`;
              const expected = oracle(written, name, asOfPosition);
              const entriesBefore = gateEntries.mock.calls.length;
              const got = await feed.get(name, { asOf });
              const throughGate = gateEntries.mock.calls.length > entriesBefore;
              tally.hit('answered through the read gate', throughGate);
              tally.hit('answered in the turn it was asked', !throughGate);
              expect(got ? [got.position, text(got.payload), got.version] : undefined, `${name} as of ${asOf}`).toEqual(
                expected ? [expected.position, expected.payload, expected.version] : undefined,
              );
              const occurrences = written.filter((entry) => entry.key === name && entry.position <= asOfPosition);
              tally.hit('key never written', occurrences.length === 0);
              if (occurrences.length === 0) continue;
              const newest = occurrences[occurrences.length - 1];
              let best = occurrences[0];
              for (const entry of occurrences)
                if (entry.version > best.version || (entry.version === best.version && entry.position > best.position))
                  best = entry;
              tally.hit('tombstone wins', best.tombstone);
              const segmentOf = (position: number) => bases.filter((base) => base <= position).pop();
              tally.hit(
                "winner in an older segment than the key's newest",
                segmentOf(best.position) !== segmentOf(newest.position),
              );
            }
          }
          await store.close();
        },
      ),
      { numRuns: 40 },
    );
    gateEntries.mockRestore();
    tally.expectAllReached();
  }, 180_000);

  it("holds a dictionary's winners once lookups in it pass the bound, and reads no winner from its file after that", async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    // Keys enough for several small sealed segments, each with a dictionary of its own.
    const keys = 3_000;
    for (let first = 0; first < keys; first += 500) {
      await feed.append(
        Array.from({ length: 500 }, (_, index) => ({
          payload: `v${first + index}-${'p'.repeat(200)}`,
          key: `k${first + index}`,
        })),
      );
    }
    expect(historySegmentBases(directory).length).toBeGreaterThan(2);
    // Reopened, sealed segments are looked up through their dictionary files.
    await store.close();
    store = await openStore(directory);
    feed = await store.feed('f');
    const winnerReads = vi.spyOn(WinnerReader.prototype, 'at');
    try {
      // Keys of the first segment only, over and over: the first thousand or so are read one
      // winner at a time, then the section is held.
      const lookups = keyWinnersHotReads + 200;
      for (let lookup = 0; lookup < lookups; lookup++) {
        const key = `k${lookup % 100}`;
        const got = await feed.get(key);
        expect(got && text(got.payload).startsWith(`v${lookup % 100}-`), key).toBe(true);
      }
      expect(winnerReads.mock.calls.length).toBeGreaterThan(0);
      expect(winnerReads.mock.calls.length).toBeLessThanOrEqual(keyWinnersHotReads);
      const readsBefore = winnerReads.mock.calls.length;
      for (let key = 0; key < 100; key++) expect(text((await feed.get(`k${key}`))!.payload)).toMatch(`v${key}-`);
      expect(winnerReads.mock.calls.length).toBe(readsBefore);
    } finally {
      winnerReads.mockRestore();
      await store.close();
    }
  });
});
