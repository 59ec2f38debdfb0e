/**
 * The merge step of dictionary builds (`mergeWithEarlier`), on its own: each term of a new
 * segment against the dictionaries before it, with winners read one at a time and then, past
 * `mergeWinnerReadsMax` of them from one dictionary, as a whole section. Checked against a naive
 * merge over every occurrence, for both term orders, and for damage found either way.
 */
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits, loadKernels } from '../../packages/engine/src/index.js';
import {
  type DictionaryFile,
  DictionarySections,
  mergeWithEarlier,
} from '../../packages/engine/src/query/indexes/key-merge.js';
import {
  encodeKeyFile,
  type KeyWinner,
  prefers,
  readKeyFileHead,
  type TermOrder,
  WinnerReader,
} from '../../packages/engine/src/storage/key-file.js';
import { branchTally } from '../support/branches.js';
import { temporaryDirectory } from '../support/store.js';

const kernels = loadKernels('ts');

interface Occurrence {
  readonly term: string;
  readonly winner: KeyWinner;
}

/** Each term's kept occurrence among `occurrences`, in `order`. */
function keep(order: TermOrder, occurrences: readonly Occurrence[]): Map<string, KeyWinner> {
  const kept = new Map<string, KeyWinner>();
  for (const { term, winner } of occurrences) if (prefers(order, winner, kept.get(term))) kept.set(term, winner);
  return kept;
}

/** Writes one dictionary per segment, each holding its terms' winners over the history up to it. */
function writeDictionaries(directory: string, order: TermOrder, segments: readonly Occurrence[][]): DictionaryFile[] {
  const files: DictionaryFile[] = [];
  const history: Occurrence[] = [];
  segments.forEach((segment, at) => {
    history.push(...segment);
    const upTo = keep(order, history);
    const entries = [...new Set(segment.map((occurrence) => occurrence.term))].map((key) => ({
      key,
      winner: upTo.get(key)!,
    }));
    const file = path.join(directory, `${at}.keys`);
    fs.writeFileSync(file, encodeKeyFile(kernels, at * 10_000, 10_000, 0, entries));
    files.push({ file, head: readKeyFileHead(file)! });
  });
  return files.reverse();
}

/** A segment's occurrences of terms below `terms`: few (up to 40) or many (1,500 to 2,000). */
const occurrences = (terms: number) =>
  fc.oneof(
    fc.array(fc.record({ term: fc.nat(terms), version: fc.nat(5) }), { minLength: 1, maxLength: 40 }),
    fc.array(fc.record({ term: fc.nat(terms), version: fc.nat(5) }), { minLength: 1500, maxLength: 2000 }),
  );

describe('merging a new segment with the dictionaries before it', () => {
  it('equals a naive merge, whether winners are read one by one or as a whole section', () => {
    const tally = branchTally('key merge', [
      'whole section read',
      'single winners only',
      'term new to the history',
      'order latest',
      'order first',
    ]);
    // Sizes: 1 to 4 earlier segments of 1 to 40 or 1,500 to 2,000 occurrences over 300 terms (330
    // for the new segment), so one dictionary may be asked for more winners than
    // `mergeWinnerReadsMax` (256) or for a few.
    fc.assert(
      fc.property(
        fc.constantFrom<TermOrder>('latest', 'first'),
        fc.array(occurrences(300), { minLength: 1, maxLength: 4 }),
        occurrences(330),
        (order, earlierInput, newInput) => {
          let position = 0;
          const placed = (input: { term: number; version: number }[]) =>
            input.map(({ term, version }) => ({
              term: `t${term}`,
              winner: { position: ++position, version, locator: position * 3, tombstone: version === 0 },
            }));
          const earlierSegments = earlierInput.map(placed);
          const newest = placed(newInput);
          const directory = temporaryDirectory();
          const earlier = writeDictionaries(directory, order, earlierSegments);
          const own = keep(order, newest);
          const terms = [...own.keys()];
          const merged = mergeWithEarlier(
            kernels,
            order,
            terms,
            terms.map((term) => own.get(term)!),
            earlier,
            new DictionarySections(kernels, 1 << 20),
          );
          const expected = keep(order, [...earlierSegments.flat(), ...newest]);
          expect(merged).toEqual(terms.map((term) => expected.get(term)));

          const inPrevious = new Set(earlierSegments[earlierSegments.length - 1].map((occurrence) => occurrence.term));
          const hitsInPrevious = terms.filter((term) => inPrevious.has(term)).length;
          tally.hit('whole section read', hitsInPrevious > limits.mergeWinnerReadsMax);
          tally.hit('single winners only', hitsInPrevious > 0 && hitsInPrevious <= limits.mergeWinnerReadsMax);
          tally.hit(
            'term new to the history',
            terms.some(
              (term) => !earlierSegments.some((segment) => segment.some((occurrence) => occurrence.term === term)),
            ),
          );
          tally.hit(`order ${order}`);
        },
      ),
      { numRuns: 60 },
    );
    tally.expectAllReached();
  });

  it('reports a damaged winner as CORRUPT, read on its own or in its section', () => {
    const directory = temporaryDirectory();
    const entries = Array.from({ length: 10 }, (_, at) => ({
      key: `k${at}`,
      winner: { position: at + 1, version: 1, locator: at, tombstone: false },
    }));
    const file = path.join(directory, 'damaged.keys');
    const bytes = encodeKeyFile(kernels, 0, 10, 0, entries);
    const head = readKeyFileHead((fs.writeFileSync(file, bytes), file))!;
    // Flip a byte of winner 4's position (entries are sorted by key: k4 has ordinal 4).
    bytes[head.sections[2].offset + 4 * 28] ^= 0x40;
    fs.writeFileSync(file, bytes);
    for (const readsMax of [100, 0]) {
      const reader = new WinnerReader(kernels, file, head, readsMax);
      try {
        if (readsMax > 0) expect(reader.at(3).position).toBe(4);
        expect(() => reader.at(4)).toThrow(expect.objectContaining({ code: 'CORRUPT' }));
        expect(reader.wholeSection).toBe(false);
      } finally {
        reader.close();
      }
    }
  });
});
