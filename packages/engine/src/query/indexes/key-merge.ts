/**
 * The merge step of a dictionary build, as a plain function over dictionary files, so that it
 * runs on the build worker: each term of a newly sealed segment is looked up in the dictionaries
 * before it, newest first (their Bloom filters pass the segments that lack it), and the first
 * one that holds it gives its winner over all the history before; the term's winner is the one
 * its order prefers between that and the segment's own. A dictionary that fails a check throws
 * `CORRUPT`, and the caller merges on its own thread instead (where damaged files are rebuilt).
 */
import type { Kernels } from '../../kernels/kernels.js';
import { mergeWinnerReadsMax } from '../../limits.js';
import { concatBytes, utf8Concat } from '../../storage/codec.js';
import {
  encodeKeyFile,
  filterMayHoldHashes,
  type KeyFileHead,
  type KeyWinner,
  keyHashesOf,
  prefers,
  readKeySection,
  type TermOrder,
  WinnerReader,
} from '../../storage/key-file.js';

/** Winners as columns: how a build's winners cross to the worker (moved, not copied). */
export interface WinnerColumns {
  readonly positions: Float64Array;
  readonly versions: Float64Array;
  readonly locators: Uint32Array;
  readonly tombstones: Uint8Array;
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
  if (earlier.length === 0) return [...own];
  // Terms are encoded and hashed once. The walk goes dictionary by dictionary, newest first,
  // over the terms still unresolved: each filter is probed in one pass while it is in the CPU's
  // caches, rather than every filter once per term.
  const { bytes, ends } = utf8Concat(terms);
  const hashes = keyHashesOf(kernels, bytes, ends);
  const merged = [...own];
  const unresolved = Uint32Array.from(terms, (_, index) => index);
  let unresolvedCount = terms.length;
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
        if (filterMayHoldHashes(filter, hashes[2 * index], hashes[2 * index + 1])) candidates.push(walk);
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
            if (prefers(order, found, own[index])) merged[index] = found;
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

/**
 * A dictionary file's bytes built on this thread: `terms` with their winners in the segment
 * (`own`) merged with the dictionaries before it (`earlier`, newest first), then encoded. What the
 * build worker runs, and a rewrite's worker for the segment it wrote.
 */
export function buildKeyFileBytes(
  kernels: Kernels,
  order: TermOrder,
  base: number,
  count: number,
  source: number,
  terms: readonly string[],
  own: WinnerColumns,
  earlier: readonly DictionaryFile[],
  sections: DictionarySections,
): Uint8Array {
  const winners = mergeWithEarlier(kernels, order, terms, winnersOf(own), earlier, sections);
  return encodeKeyFile(
    kernels,
    base,
    count,
    source,
    terms.map((key, at) => ({ key, winner: winners[at] })),
  );
}
