/**
 * The index of one history segment as a query sees it (docs/formats.md, Index segments): a
 * sealed segment's, loaded from its file (FST and posting lists), or the active segment's tail,
 * growable columns and a tag map appended to at each publish — and the same tail filled from a
 * segment's runs, which is how a sealed segment's index file is built or rebuilt.
 */
import { StreamStackError } from '../../errors.js';
import { sliceDue, yieldToEventLoop, yieldWhenDue } from '../../event-loop.js';
import type { Kernels } from '../../kernels/kernels.js';
import { rebuildBatchRowsMax } from '../../limits.js';
import { type ByteReader, type ByteWriter, utf8DecodeRange } from '../../storage/codec.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import type { IndexData, IndexSource } from '../../storage/index-segment.js';
import type { SegmentRunSource } from '../../storage/run-reads.js';
import { filterMayHoldHashes } from '../../storage/term-filter.js';
import { columnBytes, columnOf } from '../../typed-arrays.js';

/** The index of one segment, sealed or tail: what the planner asks of either. */
export interface SegmentIndex {
  readonly base: number;
  /** Records covered: relative positions 0 … count − 1. */
  readonly count: number;
  readonly typeColumn: Uint16Array;
  readonly locators: Uint32Array;
  /** The segment-local id of a type name, or undefined when no record here has it. */
  typeId(name: string): number | undefined;
  /** Exact number of records carrying `tag` (from the FST and the posting list's header). */
  tagCount(tag: string): number;
  /** The relative positions carrying `tag`, ascending. */
  tagPositions(tag: string): Uint32Array;
  /**
   * False when no record here carries `tag` (`h1`, `h2`: its filter hashes, `termHashes`); true
   * when one may (a sealed segment answers from its tag filter, which errs only towards true).
   */
  mayHoldTag(tag: string, h1: number, h2: number): boolean;
}

const encoder = new TextEncoder();
/** The locator of a position corruption took: no manifest entry is there to point at. */
export const unreadableLocator = 0xffff_ffff;
const emptyPositions = new Uint32Array(0);

export class SealedIndex implements SegmentIndex {
  private readonly typeIds: Map<string, number>;

  constructor(
    private readonly kernels: Kernels,
    private readonly data: IndexData,
  ) {
    this.typeIds = new Map(data.typeNames.map((name, index) => [name, index + 1]));
  }

  get base(): number {
    return this.data.base;
  }
  get count(): number {
    return this.data.count;
  }
  get typeColumn(): Uint16Array {
    return this.data.typeColumn;
  }
  get locators(): Uint32Array {
    return this.data.locators;
  }

  typeId(name: string): number | undefined {
    return this.typeIds.get(name);
  }

  private lookup(tag: string): number | undefined {
    return this.kernels.fstGet(this.data.fst, encoder.encode(tag));
  }

  /** The posting list stored at `offset` in the postings section (its varint length first). */
  private list(offset: number): Uint8Array {
    let length = 0;
    let scale = 1;
    let at = offset;
    for (;;) {
      const byte = this.data.postings[at++];
      length += (byte & 0x7f) * scale;
      if ((byte & 0x80) === 0) break;
      scale *= 0x80;
    }
    return this.data.postings.subarray(at, at + length);
  }

  tagCount(tag: string): number {
    const value = this.lookup(tag);
    if (value === undefined) return 0;
    if (value % 2 === 1) return 1;
    // A posting list starts with its form byte and a varint count.
    const list = this.list(value / 2);
    let count = 0;
    let scale = 1;
    for (let at = 1; ; at++) {
      count += (list[at] & 0x7f) * scale;
      if ((list[at] & 0x80) === 0) return count;
      scale *= 0x80;
    }
  }

  tagPositions(tag: string): Uint32Array {
    const value = this.lookup(tag);
    if (value === undefined) return emptyPositions;
    if (value % 2 === 1) return Uint32Array.of((value - 1) / 2);
    return this.kernels.postingsDecode(this.list(value / 2));
  }

  mayHoldTag(_tag: string, h1: number, h2: number): boolean {
    return filterMayHoldHashes(this.data.tagFilter, h1, h2, this.data.tagProbes);
  }
}

/** Tags of the positions no entry holds: none, one array for them all. */
const noTags: readonly string[] = [];

/**
 * Adds the positions up to `last` as unreadable: a key-compacted segment may have dropped
 * millions in a row, so the event loop turns now and then.
 */
export async function fillUnreadable(tail: TailIndex, last: number): Promise<void> {
  let added = 0;
  while (tail.base + tail.count <= last) {
    tail.add(undefined, noTags, unreadableLocator);
    const pause = yieldWhenDue(++added);
    if (pause) await pause;
  }
}

/** The active segment's index: growable columns and a tag map, appended to at each publish. */
export class TailIndex implements SegmentIndex {
  count = 0;
  private types = new Uint16Array(1024);
  private offsets = new Uint32Array(1024);
  readonly typeNames: string[] = [];
  private readonly typeIds = new Map<string, number>();
  /** Each tag's relative positions: one number, or several ascending (most tags are rare). */
  readonly tags = new Map<string, number | number[]>();

  constructor(readonly base: number) {}

  get typeColumn(): Uint16Array {
    return this.types.subarray(0, this.count);
  }
  get locators(): Uint32Array {
    return this.offsets.subarray(0, this.count);
  }

  typeId(name: string): number | undefined {
    return this.typeIds.get(name);
  }

  tagCount(tag: string): number {
    const held = this.tags.get(tag);
    return held === undefined ? 0 : typeof held === 'number' ? 1 : held.length;
  }

  mayHoldTag(tag: string): boolean {
    return this.tags.has(tag);
  }

  tagPositions(tag: string): Uint32Array {
    const held = this.tags.get(tag);
    return held === undefined
      ? emptyPositions
      : typeof held === 'number'
        ? Uint32Array.of(held)
        : Uint32Array.from(held);
  }

  /** Adds the record at the next relative position. */
  add(type: string | undefined, tags: readonly string[], locator: number): void {
    if (this.count === this.types.length) {
      const types = new Uint16Array(this.types.length * 2);
      types.set(this.types);
      this.types = types;
      const offsets = new Uint32Array(this.offsets.length * 2);
      offsets.set(this.offsets);
      this.offsets = offsets;
    }
    let id = 0;
    if (type !== undefined) {
      id = this.typeIds.get(type) ?? 0;
      if (id === 0) {
        this.typeNames.push(type);
        id = this.typeNames.length;
        this.typeIds.set(type, id);
      }
    }
    const relative = this.count;
    this.types[relative] = id;
    this.offsets[relative] = locator;
    for (const tag of tags) {
      const held = this.tags.get(tag);
      if (held === undefined) this.tags.set(tag, relative);
      else if (typeof held === 'number') this.tags.set(tag, [held, relative]);
      else held.push(relative);
    }
    this.count++;
  }

  /** Writes the tail as a checkpoint holds it (`tail-checkpoint.ts`): columns, types, tags. */
  writeTo(writer: ByteWriter): void {
    const count = this.count;
    writer.varint(count).bytes(columnBytes(this.types, count)).bytes(columnBytes(this.offsets, count));
    writer.varint(this.typeNames.length);
    for (const name of this.typeNames) writer.string(name);
    // The tags' names as one string (decoded in one call on reading: one decode per name, and
    // there is a name per record or so, took most of a checkpoint's load), with their lengths.
    writer.varint(this.tags.size);
    for (const tag of this.tags.keys()) writer.varint(tag.length);
    writer.string([...this.tags.keys()].join(''));
    for (const held of this.tags.values()) {
      if (typeof held === 'number') writer.varint(1).varint(held);
      else {
        // Ascending relative positions, as gaps.
        writer.varint(held.length);
        let previous = 0;
        for (const position of held) {
          writer.varint(position - previous);
          previous = position;
        }
      }
    }
  }

  /**
   * The tail `writeTo` wrote, for the segment at `base`; `CORRUPT` (through `reader`) when it
   * does not hold together (a type id with no name, a tag at a position past the count).
   */
  static readFrom(reader: ByteReader, base: number): TailIndex {
    const tail = new TailIndex(base);
    const count = reader.varint();
    const capacity = Math.max(1024, count * 2);
    const types = columnOf(Uint16Array, reader.bytes(), count, capacity);
    const offsets = columnOf(Uint32Array, reader.bytes(), count, capacity);
    if (!types || !offsets) throw reader.corrupt('a tail column does not fit its count');
    const typeCount = reader.varint();
    for (let id = 1; id <= typeCount; id++) {
      const name = reader.string();
      tail.typeNames.push(name);
      tail.typeIds.set(name, id);
    }
    for (let at = 0; at < count; at++) if (types[at] > typeCount) throw reader.corrupt(`record ${at} has no type name`);
    const tagCount = reader.varint();
    const lengths = new Uint32Array(tagCount);
    for (let index = 0; index < tagCount; index++) lengths[index] = reader.varint();
    const names = reader.string();
    let start = 0;
    for (let index = 0; index < tagCount; index++) {
      const tag = names.slice(start, start + lengths[index]);
      start += lengths[index];
      const length = reader.varint();
      if (length === 0) throw reader.corrupt(`tag ${tag} is at no record`);
      let position = reader.varint();
      if (position >= count) throw reader.corrupt(`tag ${tag} is at no record of the tail`);
      if (length === 1) {
        tail.tags.set(tag, position);
        continue;
      }
      const held = [position];
      for (let at = 1; at < length; at++) {
        const gap = reader.varint();
        position += gap;
        if (gap === 0 || position >= count) throw reader.corrupt(`tag ${tag} is at no record of the tail`);
        held.push(position);
      }
      tail.tags.set(tag, held);
    }
    if (start !== names.length || tail.tags.size !== tagCount)
      throw reader.corrupt('the tag names do not fit their lengths');
    tail.types = types;
    tail.offsets = offsets;
    tail.count = count;
    return tail;
  }

  source(): IndexSource {
    return {
      base: this.base,
      count: this.count,
      typeNames: this.typeNames,
      typeColumn: this.types,
      locators: this.offsets,
      tags: this.tags,
    };
  }
}

/**
 * The index of the segment at `base` made from its runs (`commits`, all of it): what a sealed
 * segment's index file is rebuilt from, and what a rewrite builds for the segment it wrote.
 * Decoded as columns, a batch at a time, with a turn of the event loop between batches: a merged
 * segment holds millions of records, and decoding a 100,000-record run into objects at once
 * stalled reads and appends for a tenth of a second each.
 */
export async function indexTailOf(
  runs: SegmentRunSource,
  base: number,
  commits: readonly CommitRecord[],
): Promise<TailIndex> {
  const tail = new TailIndex(base);
  for await (const { commit, bytes } of runs.runsInStretches(commits)) {
    for await (const columns of runs.runColumns(commit, bytes, rebuildBatchRowsMax, false)) {
      for (let row = 0; row < columns.count; row++) {
        // Positions no entry holds (corruption took them, or key compaction dropped them).
        if (tail.base + tail.count < columns.positions[row]) await fillUnreadable(tail, columns.positions[row] - 1);
        const typeId = columns.typeIds[row];
        const tags: string[] = [];
        for (let tag = columns.tagRows[row]; tag < columns.tagRows[row + 1]; tag++) {
          const name = utf8DecodeRange(columns.bytes, columns.tagStarts[tag], columns.tagEnds[tag]);
          if (name === undefined) {
            throw new StreamStackError('CORRUPT', `a tag in commit ${commit.commit} is not UTF-8`, {
              details: { file: runs.fileFor(commit.segment), offset: commit.runStart + columns.entryStarts[row] },
            });
          }
          tags.push(name);
        }
        tail.add(typeId < 0 ? undefined : columns.types[typeId], tags, commit.runStart + columns.entryStarts[row]);
      }
      if (sliceDue()) await yieldToEventLoop();
    }
    await fillUnreadable(tail, commit.lastPosition);
  }
  return tail;
}
