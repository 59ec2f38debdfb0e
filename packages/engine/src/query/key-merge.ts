/**
 * The merge step of a dictionary build, as a plain function over dictionary files, so that it
 * runs on the build worker: each term of a newly sealed segment is looked up in the dictionaries
 * before it, newest first (their Bloom filters pass the segments that lack it), and the first
 * one that holds it gives its winner over all the history before; the term's winner is the one
 * its order prefers between that and the segment's own. A dictionary that fails a check throws
 * `CORRUPT`, and the caller merges on its own thread instead (where damaged files are rebuilt).
 */
import type { Kernels } from '../kernels/kernels.js';
import { utf8Concat } from '../storage/codec.js';
import { mergeWinnerReadsMax } from '../limits.js';
import {
  filterMayHold,
  keyHashes,
  prefers,
  readKeySection,
  WinnerReader,
  type KeyFileHead,
  type KeyWinner,
  type TermOrder,
} from '../storage/key-file.js';

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
  // Terms are encoded once, laid end to end; each is hashed and looked up as a view.
  const { bytes, ends } = utf8Concat(terms);
  const held = earlier.map((dictionary) => ({
    dictionary,
    filter: sections.filter(dictionary),
    fst: undefined as Uint8Array | undefined,
    winners: new WinnerReader(kernels, dictionary.file, dictionary.head, mergeWinnerReadsMax),
  }));
  try {
    return own.map((mine, index) => {
      const start = index === 0 ? 0 : ends[index - 1];
      const hashes = keyHashes(bytes, start, ends[index]);
      for (const dictionary of held) {
        if (!filterMayHold(dictionary.filter, hashes)) continue;
        dictionary.fst ??= sections.fst(dictionary.dictionary);
        const ordinal = kernels.fstGet(dictionary.fst, bytes.subarray(start, ends[index]));
        if (ordinal === undefined) continue;
        // This dictionary's winner covers every segment up to it: the walk ends here.
        const found = dictionary.winners.at(ordinal);
        return prefers(order, found, mine) ? found : mine;
      }
      return mine;
    });
  } finally {
    for (const dictionary of held) dictionary.winners.close();
  }
}
