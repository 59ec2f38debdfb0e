/**
 * The merge step of a dictionary build, as a plain function over dictionary files, so that it
 * runs on the build worker: each term of a newly sealed segment is looked up in the dictionaries
 * before it, newest first (their Bloom filters pass the segments that lack it), and the first
 * one that holds it gives its winner over all the history before; the term's winner is the one
 * its order prefers between that and the segment's own. A dictionary that fails a check throws
 * `CORRUPT`, and the caller merges on its own thread instead (where damaged files are rebuilt).
 */
import type { Kernels } from '../kernels/kernels.js';
import { utf8Encode } from '../storage/codec.js';
import {
  filterMayHold,
  keyHashes,
  prefers,
  readKeySection,
  readWinner,
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

/** The filters and FSTs of dictionary files, read once and kept up to `bytesMax`, least recently used out. */
export class DictionarySections {
  private readonly held = new Map<string, { filter: Uint8Array; fst: Uint8Array }>();
  private bytes = 0;

  constructor(
    private readonly kernels: Kernels,
    private readonly bytesMax: number,
  ) {}

  sections(dictionary: DictionaryFile): { filter: Uint8Array; fst: Uint8Array } {
    // The head's CRCs are part of the name: a file rebuilt with other bytes is read again.
    const name = `${dictionary.file}:${dictionary.head.sections.map((section) => section.crc).join(':')}`;
    let found = this.held.get(name);
    if (found) {
      this.held.delete(name);
    } else {
      found = { filter: readKeySection(this.kernels, dictionary.file, dictionary.head, 0), fst: readKeySection(this.kernels, dictionary.file, dictionary.head, 1) };
      this.bytes += found.filter.length + found.fst.length;
      for (const [oldest, sections] of this.held) {
        if (this.bytes <= this.bytesMax) break;
        this.held.delete(oldest);
        this.bytes -= sections.filter.length + sections.fst.length;
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
  // Each dictionary's sections are found once for the whole merge, not once per term.
  const held = earlier.map((dictionary) => ({ dictionary, ...sections.sections(dictionary) }));
  return terms.map((term, index) => {
    const bytes = utf8Encode(term);
    const hashes = keyHashes(bytes);
    for (const { dictionary, filter, fst } of held) {
      if (!filterMayHold(filter, hashes)) continue;
      const ordinal = kernels.fstGet(fst, bytes);
      if (ordinal === undefined) continue;
      // This dictionary's winner covers every segment up to it: the walk ends here.
      const found = readWinner(dictionary.file, dictionary.head, ordinal);
      return prefers(order, found, own[index]) ? found : own[index];
    }
    return own[index];
  });
}
