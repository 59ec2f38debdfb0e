/**
 * What tells whether a query item may match in a segment without reading its records: the
 * segment's types, exactly, and its tags, by the index file's tag filter. A sealed segment's
 * head is kept in memory for the life of the feed (`HeadTerms`), so a query or a condition passes
 * a segment that cannot hold a match without loading its index; a loaded index and the tail
 * answer the same question themselves.
 */
import type { QueryItem } from '@streamstack/protocol';
import type { IndexHead } from '../../storage/index-segment.js';
import { filterMayHold, type TermHashes } from '../../storage/term-filter.js';
import type { SegmentIndex } from './segment-index.js';

/** The part of a segment index that tells whether a query item may match there. */
type ItemTerms = Pick<SegmentIndex, 'typeId' | 'mayHoldTag'>;

/** A sealed index's head, kept in memory: its types, exactly, and its tags, by their filter. */
export class HeadTerms implements ItemTerms {
  private readonly types: ReadonlySet<string>;
  private readonly tagFilter: Uint8Array;
  private readonly tagProbes: number;

  constructor(head: IndexHead) {
    this.types = new Set(head.typeNames);
    this.tagFilter = head.tagFilter;
    this.tagProbes = head.tagProbes;
  }

  typeId(name: string): number | undefined {
    // Only whether the type is here matters before the index is loaded.
    return this.types.has(name) ? 1 : undefined;
  }

  mayHoldTag(tag: string, hashes: TermHashes): boolean {
    return filterMayHold(this.tagFilter, hashes.of(tag), this.tagProbes);
  }
}

/**
 * False when no record of the segment `terms` describes can match `item`: a type it names is
 * there for none of its types, or a tag it needs is surely not there. True when one may.
 */
export function itemMayMatchIn(terms: ItemTerms, item: QueryItem, hashes: TermHashes): boolean {
  if (item.types && !item.types.some((type) => terms.typeId(type) !== undefined)) return false;
  if (item.tags && !item.tags.every((tag) => terms.mayHoldTag(tag, hashes))) return false;
  return true;
}
