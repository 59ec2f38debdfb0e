/**
 * The tag and type index of one feed (docs/formats.md, Index segments): one index per sealed history segment, loaded
 * from its file (or rebuilt from the history segment when the file is missing or corrupt), and
 * an append-only tail index for the active segment, extended as commits are published. Readers
 * only ever look at positions up to their snapshot's watermark, so the tail needs no lock: the
 * writer appends and publishes, and nothing a reader holds is ever moved.
 */
import path from 'node:path';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { typesPerFeedMax } from '../limits.js';
import type { CommitRecord } from '../storage/history.js';
import type { History } from '../storage/history-log.js';
import {
  buildIndexData,
  encodeIndexFile,
  readIndexFile,
  writeIndexFile,
  type IndexData,
  type IndexSource,
} from './../storage/index-segment.js';

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
}

const encoder = new TextEncoder();
/** The locator of a position corruption took: no manifest entry is there to point at. */
const unreadableLocator = 0xffff_ffff;
const emptyPositions = new Uint32Array(0);

class SealedIndex implements SegmentIndex {
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
}

/** The active segment's index: growable columns and a tag map, appended to at each publish. */
class TailIndex implements SegmentIndex {
  count = 0;
  private types = new Uint16Array(1024);
  private offsets = new Uint32Array(1024);
  readonly typeNames: string[] = [];
  private readonly typeIds = new Map<string, number>();
  readonly tags = new Map<string, number[]>();

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
    return this.tags.get(tag)?.length ?? 0;
  }

  tagPositions(tag: string): Uint32Array {
    const positions = this.tags.get(tag);
    return positions ? Uint32Array.from(positions) : emptyPositions;
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
      const list = this.tags.get(tag);
      if (list) list.push(relative);
      else this.tags.set(tag, [relative]);
    }
    this.count++;
  }

  source(): IndexSource {
    return { base: this.base, count: this.count, typeNames: this.typeNames, typeColumn: this.types, locators: this.offsets, tags: this.tags };
  }
}

/** An index file that had to be rebuilt, and why. */
export interface IndexRebuild {
  readonly segment: number;
  readonly file: string;
  readonly reason: string;
}

export class FeedIndex {
  readonly segments: SegmentIndex[] = [];
  private tail: TailIndex | undefined;
  /** Every type name seen in the feed: at most `typesPerFeedMax`. */
  readonly typeNames = new Set<string>();
  readonly rebuilt: IndexRebuild[] = [];
  private pending: Promise<void> = Promise.resolve();

  private constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly readOnly: boolean,
  ) {}

  fileFor(base: number): string {
    return path.join(this.directory, `${String(base).padStart(16, '0')}.idx`);
  }

  /**
   * Loads the index of every sealed history segment, rebuilding those whose file is missing or
   * fails verification, and builds the tail from the active segment's commits.
   */
  static async open(
    kernels: Kernels,
    directory: string,
    history: History,
    commits: readonly CommitRecord[],
    readOnly = false,
  ): Promise<FeedIndex> {
    const index = new FeedIndex(kernels, directory, readOnly);
    const bases = history.segments.segments.map((segment) => segment.header.base);
    const bySegment = new Map<number, CommitRecord[]>(bases.map((base) => [base, []]));
    for (const commit of commits) bySegment.get(commit.segment)?.push(commit);
    for (const [position, base] of bases.entries()) {
      const inSegment = bySegment.get(base)!;
      if (position === bases.length - 1) {
        index.tail = new TailIndex(base);
        for (const commit of inSegment) await index.addRun(history, commit);
        continue;
      }
      const file = index.fileFor(base);
      let data: IndexData | undefined;
      let reason = 'missing';
      try {
        data = readIndexFile(kernels, file);
      } catch (error) {
        reason = (error as Error).message;
      }
      const last = inSegment[inSegment.length - 1];
      const expectedCount = last ? last.lastPosition - base + 1 : 0;
      // Records corruption took leave gaps: an index built around them is kept in memory only,
      // so it can never be mistaken for a whole one once the damage is repaired.
      const gaps = inSegment.some((commit, at) => commit.firstPosition !== (at === 0 ? base : inSegment[at - 1].lastPosition + 1));
      if (data && (data.base !== base || data.count !== expectedCount)) {
        reason = `it covers ${data.count} records from ${data.base}, the segment ${expectedCount} from ${base}`;
        data = undefined;
      }
      if (!data) {
        const tail = new TailIndex(base);
        index.tail = tail;
        for (const commit of inSegment) await index.addRun(history, commit);
        index.tail = undefined;
        data = buildIndexData(kernels, tail.source());
        if (!readOnly && !gaps) await writeIndexFile(kernels, file, encodeIndexFile(kernels, data));
        index.rebuilt.push({ segment: base, file, reason });
      }
      for (const name of data.typeNames) index.typeNames.add(name);
      index.segments.push(new SealedIndex(kernels, data));
    }
    return index;
  }

  private async addRun(history: History, commit: CommitRecord): Promise<void> {
    const run = await history.readRun(commit);
    run.entries.forEach((entry, at) => this.add(commit, entry.type, entry.tags, run.entryOffsets[at], commit.firstPosition + at));
  }

  /** Every segment index, sealed then tail. */
  all(): SegmentIndex[] {
    return this.tail ? [...this.segments, this.tail] : this.segments;
  }

  /**
   * Adds a published commit's records. When the commit lies in a new history segment, the tail
   * of the previous one is sealed into an index file first (written in the background: the file
   * is derived, and a crash before it lands only means it is rebuilt on the next open).
   */
  add(commit: CommitRecord, type: string | undefined, tags: readonly string[], locator: number, position: number): void {
    if (!this.tail || this.tail.base !== commit.segment) this.startSegment(commit.segment);
    if (type !== undefined) this.typeNames.add(type);
    // Positions that corruption took (reads over them fail before asking the index) are
    // skipped with empty entries, so every later record keeps its relative position.
    while (this.tail!.base + this.tail!.count < position) this.tail!.add(undefined, [], unreadableLocator);
    this.tail!.add(type, tags, locator);
  }

  private startSegment(base: number): void {
    const previous = this.tail;
    if (previous) {
      // The finished tail keeps serving reads as it is; its compact form (FST and posting
      // lists) is built and written in the background and then takes its place, so the
      // append that rolled the segment does not wait for it.
      const slot = this.segments.length;
      this.segments.push(previous);
      const file = this.fileFor(previous.base);
      this.pending = this.pending
        .then(() => new Promise<void>((resolve) => setImmediate(resolve)))
        .then(async () => {
          const data = buildIndexData(this.kernels, previous.source());
          this.segments[slot] = new SealedIndex(this.kernels, data);
          if (this.readOnly) return;
          await writeIndexFile(this.kernels, file, encodeIndexFile(this.kernels, data));
        })
        .catch(() => undefined);
    }
    this.tail = new TailIndex(base);
  }

  /**
   * The types among `types` the feed has not published yet, or `TYPE_LIMIT` when they would
   * take it past `typesPerFeedMax` distinct types counting those already `pending` (types of
   * the open stream and of earlier requests in the same group). Stages nothing: the caller adds
   * the result to its pending set once the request is accepted.
   */
  newTypes(types: Iterable<string | undefined>, pending: ReadonlySet<string>): Set<string> {
    const fresh = new Set<string>();
    for (const type of types) {
      if (type === undefined || this.typeNames.has(type) || pending.has(type) || fresh.has(type)) continue;
      if (this.typeNames.size + pending.size + fresh.size >= typesPerFeedMax) {
        throw new StreamStackError('TYPE_LIMIT', `a feed holds at most ${typesPerFeedMax} distinct types; ${JSON.stringify(type)} would be one more`, {
          details: { type, limit: typesPerFeedMax },
        });
      }
      fresh.add(type);
    }
    return fresh;
  }

  /** Resolves once index files being written in the background are on disk. */
  flushed(): Promise<void> {
    return this.pending;
  }
}
