/**
 * What tells whether a query item may match in a segment without reading its records: the
 * segment's types, exactly, and its tags, by the index file's tag filter. A sealed segment's
 * head is kept in memory for the life of the feed (`HeadTerms`), so a query or a condition passes
 * a segment that cannot hold a match without loading its index; a loaded index and the tail
 * answer the same question themselves.
 */
import type { QueryItem } from '@streamstack/protocol';
import type { IndexHead } from '../../storage/index-segment.js';
import { filterMayHoldHashes, termHashes } from '../../storage/term-filter.js';
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

  mayHoldTag(_tag: string, h1: number, h2: number): boolean {
    return filterMayHoldHashes(this.tagFilter, h1, h2, this.tagProbes);
  }

  /**
   * Whether any of `query`'s items may match here (`QueryTerms.itemsMayMatchIn` asked only
   * whether its answer is empty), in one loop of its own: a condition of a hundred items asks
   * every sealed segment's head.
   */
  anyMayMatch(query: QueryTerms): boolean {
    const { items, hashes } = query;
    for (let index = 0; index < items.length; index++) {
      const { types, tags } = items[index];
      if (types && !types.some((type) => this.types.has(type))) continue;
      if (!tags) return true;
      const itemHashes = hashes[index];
      let all = true;
      for (let tag = 0; all && tag < tags.length; tag++)
        all = filterMayHoldHashes(this.tagFilter, itemHashes[2 * tag], itemHashes[2 * tag + 1], this.tagProbes);
      if (all) return true;
    }
    return false;
  }
}

const encoder = new TextEncoder();
/** Where a query's tags are encoded to be hashed, one after the other: grown when one is longer. */
let tagScratch = new Uint8Array(256);

/**
 * A query's items with their tags' filter hashes, each made once: a query asks every segment's
 * filter about the same tags, and a condition of a hundred items would otherwise encode and hash
 * each tag once per segment.
 */
export class QueryTerms {
  /** Each item's tags' hashes, two a tag, in the item's tag order. */
  readonly hashes: readonly Uint32Array[];

  constructor(readonly items: readonly QueryItem[]) {
    this.hashes = items.map((item) => {
      const tags = item.tags ?? [];
      const out = new Uint32Array(2 * tags.length);
      for (let index = 0; index < tags.length; index++) {
        // A UTF-16 unit takes at most three UTF-8 bytes.
        if (tagScratch.length < 3 * tags[index].length) tagScratch = new Uint8Array(3 * tags[index].length);
        const { written } = encoder.encodeInto(tags[index], tagScratch);
        const [h1, h2] = termHashes(tagScratch, 0, written);
        out[2 * index] = h1;
        out[2 * index + 1] = h2;
      }
      return out;
    });
  }

  /**
   * False when no record of the segment `terms` describes can match item `index`: a type it
   * names is there for none of its types, or a tag it needs is surely not there.
   */
  private itemMayMatch(terms: ItemTerms, index: number): boolean {
    const { types, tags } = this.items[index];
    if (types) {
      let any = false;
      for (const type of types) if (terms.typeId(type) !== undefined) any = true;
      if (!any) return false;
    }
    if (tags) {
      const hashes = this.hashes[index];
      for (let tag = 0; tag < tags.length; tag++)
        if (!terms.mayHoldTag(tags[tag], hashes[2 * tag], hashes[2 * tag + 1])) return false;
    }
    return true;
  }

  /** The items that may match in the segment `terms` describes (`items` itself when all may). */
  itemsMayMatchIn(terms: ItemTerms): readonly QueryItem[] {
    const out: QueryItem[] = [];
    for (let index = 0; index < this.items.length; index++)
      if (this.itemMayMatch(terms, index)) out.push(this.items[index]);
    return out.length === this.items.length ? this.items : out;
  }
}
