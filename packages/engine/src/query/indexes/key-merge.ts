/**
 * The merge step of a dictionary build, as a plain function over dictionary files, so that it
 * runs on the build worker: each term of a newly sealed segment is looked up in the dictionaries
 * before it, newest first (their Bloom filters pass the segments that lack it), and the first
 * one that holds it gives its winner over all the history before; the term's winner is the one
 * its order prefers between that and the segment's own. A dictionary that fails a check throws
 * `CORRUPT`, and the caller merges on its own thread instead (where damaged files are rebuilt).
 */
import type { Kernels, PackedBytes } from '../../kernels/kernels.js';
import { keyFilterProbes, mergeWinnerReadsMax } from '../../limits.js';
import { concatBytes, utf8Concat } from '../../storage/codec.js';
import {
  encodeKeyFileColumns,
  type KeyFileHead,
  type KeyWinner,
  prefers,
  readKeySection,
  type TermOrder,
  type WinnerColumns,
  WinnerReader,
} from '../../storage/key-file.js';
import { filterMayHoldHashes, termHashesOf } from '../../storage/term-filter.js';

/** Winners as columns: how a build keeps them, and how they cross to the worker (moved, not copied). */
export type { WinnerColumns };

/** `winners` as columns. */
export function columnsOf(winners: readonly KeyWinner[]): WinnerColumns {
  return {
    positions: Float64Array.from(winners, (winner) => winner.position),
    versions: Float64Array.from(winners, (winner) => winner.version),
    locators: Uint32Array.from(winners, (winner) => winner.locator),
    tombstones: Uint8Array.from(winners, (winner) => (winner.tombstone ? 1 : 0)),
  };
}

/** The winners `columns` hold, as objects. */
export function winnersOf(columns: WinnerColumns): KeyWinner[] {
  return Array.from(columns.positions, (position, at) => ({
    position,
    version: columns.versions[at],
    locator: columns.locators[at],
    tombstone: columns.tombstones[at] === 1,
  }));
}

/** A dictionary file of an earlier segment, and its head (read by the feed when it opened it). */
export interface DictionaryFile {
  readonly file: string;
  readonly head: KeyFileHead;
}

/**
 * The filters and FSTs of dictionary files, each read when first needed and kept up to
 * `bytesMax`, least recently used out. A merge reads every earlier filter but only the FSTs its
 * filters pass, so the filters are kept apart from the (much larger) FSTs.
 */
export class DictionarySections {
  private readonly held = new Map<string, Uint8Array>();
  private bytes = 0;

  constructor(
    private readonly kernels: Kernels,
    private readonly bytesMax: number,
  ) {}

  filter(dictionary: DictionaryFile): Uint8Array {
    return this.section(dictionary, 0);
  }

  fst(dictionary: DictionaryFile): Uint8Array {
    return this.section(dictionary, 1);
  }

  private section(dictionary: DictionaryFile, section: 0 | 1): Uint8Array {
    // The section's CRC is part of the name: a file rebuilt with other bytes is read again.
    const name = `${dictionary.file}:${section}:${dictionary.head.sections[section].crc}`;
    let found = this.held.get(name);
    if (found) {
      this.held.delete(name);
    } else {
      found = readKeySection(this.kernels, dictionary.file, dictionary.head, section);
      this.bytes += found.length;
      for (const [oldest, bytes] of this.held) {
        if (this.bytes <= this.bytesMax) break;
        this.held.delete(oldest);
        this.bytes -= bytes.length;
      }
    }
    this.held.set(name, found);
    return found;
  }
}

/**
 * The winner of each term over the history up to the end of its segment: `own[i]` (its winner
 * in the segment) against what `earlier` (newest first) says of the history before.
 */
export function mergeWithEarlier(
  kernels: Kernels,
  order: TermOrder,
  terms: readonly string[],
  own: readonly KeyWinner[],
  earlier: readonly DictionaryFile[],
  sections: DictionarySections,
): KeyWinner[] {
  return winnersOf(mergeColumnsWithEarlier(kernels, order, utf8Concat(terms), columnsOf(own), earlier, sections));
}

/**
 * `mergeWithEarlier` over terms as UTF-8 bytes and winners as columns, with nothing allocated
 * per term but where an earlier dictionary holds it: what a build of a segment's hundreds of
 * thousands of terms runs. The merged winners are written to `into` (new columns unless given:
 * `own` itself when the caller has no more use for it) and returned.
 */
export function mergeColumnsWithEarlier(
  kernels: Kernels,
  order: TermOrder,
  terms: PackedBytes,
  own: WinnerColumns,
  earlier: readonly DictionaryFile[],
  sections: DictionarySections,
  into: WinnerColumns = {
    positions: own.positions.slice(),
    versions: own.versions.slice(),
    locators: own.locators.slice(),
    tombstones: own.tombstones.slice(),
  },
): WinnerColumns {
  const merged = into;
  if (earlier.length === 0) return merged;
  // Terms are hashed once. The walk goes dictionary by dictionary, newest first, over the terms
  // still unresolved: each filter is probed in one pass while it is in the CPU's caches, rather
  // than every filter once per term.
  const { bytes, ends } = terms;
  const count = ends.length;
  const hashes = termHashesOf(kernels, bytes, ends);
  const unresolved = new Uint32Array(count);
  for (let index = 0; index < count; index++) unresolved[index] = index;
  let unresolvedCount = count;
  const held = earlier.map(
    (dictionary) => new WinnerReader(kernels, dictionary.file, dictionary.head, mergeWinnerReadsMax),
  );
  try {
    for (const [at, dictionary] of earlier.entries()) {
      if (unresolvedCount === 0) break;
      const filter = sections.filter(dictionary);
      // The terms the filter may hold are looked up in the FST in one kernel call; the FST is
      // read only when there is one.
      const candidates: number[] = [];
      for (let walk = 0; walk < unresolvedCount; walk++) {
        const index = unresolved[walk];
        if (filterMayHoldHashes(filter, hashes[2 * index], hashes[2 * index + 1], keyFilterProbes))
          candidates.push(walk);
      }
      const ordinals =
        candidates.length === 0
          ? new Float64Array(0)
          : kernels.fstGetMany(
              sections.fst(dictionary),
              concatBytes(
                candidates.map((walk) => {
                  const index = unresolved[walk];
                  return bytes.subarray(index === 0 ? 0 : ends[index - 1], ends[index]);
                }),
              ),
            );
      let kept = 0;
      let candidate = 0;
      for (let walk = 0; walk < unresolvedCount; walk++) {
        const index = unresolved[walk];
        if (candidates[candidate] === walk) {
          const ordinal = ordinals[candidate++];
          // `fstGetMany` gives -1 for a term the FST lacks.
          if (ordinal !== -1) {
            // This dictionary's winner covers every segment up to it: the term is resolved.
            const found = held[at].at(ordinal);
            // Each term is resolved once, so `own[index]` is read before `into` (which may be
            // `own`) is written there.
            if (prefers(order, found, winnerIn(own, index))) {
              merged.positions[index] = found.position;
              merged.versions[index] = found.version;
              merged.locators[index] = found.locator;
              merged.tombstones[index] = found.tombstone ? 1 : 0;
            }
            continue;
          }
        }
        unresolved[kept++] = index;
      }
      unresolvedCount = kept;
    }
    return merged;
  } finally {
    for (const winners of held) winners.close();
  }
}

/** The winner at `index` of `columns`. */
function winnerIn(columns: WinnerColumns, index: number): KeyWinner {
  return {
    position: columns.positions[index],
    version: columns.versions[index],
    locator: columns.locators[index],
    tombstone: columns.tombstones[index] === 1,
  };
}

/**
 * A dictionary file's bytes built on this thread: `terms` (UTF-8, distinct, in any order) with
 * their winners in the segment (`own`, overwritten with the merged winners: a segment's are
 * tens of megabytes, and no caller uses them after) merged with the dictionaries before it
 * (`earlier`, newest first), then encoded. What the build worker runs, and a rewrite's worker
 * for the segment it wrote.
 */
export function buildKeyFileBytes(
  kernels: Kernels,
  order: TermOrder,
  base: number,
  count: number,
  source: number,
  terms: PackedBytes,
  own: WinnerColumns,
  earlier: readonly DictionaryFile[],
  sections: DictionarySections,
): Uint8Array {
  const winners = mergeColumnsWithEarlier(kernels, order, terms, own, earlier, sections, own);
  return encodeKeyFileColumns(kernels, base, count, source, terms, winners);
}
