/**
 * The tag and type index of one feed (docs/formats.md, Index segments): one index per sealed history segment, loaded
 * from its file (or rebuilt from the history segment when the file is missing or corrupt), and
 * an append-only tail index for the active segment, extended as commits are published. Readers
 * only ever look at positions up to their snapshot's watermark, so the tail needs no lock: the
 * writer appends and publishes, and nothing a reader holds is ever moved.
 */
import fs from 'node:fs';
import { segmentFile } from '../storage/segment-set.js';
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { eventLoopSliceRecords, indexCacheBytesMax, rebuildBatchRowsMax, typesPerFeedMax } from '../limits.js';
import { utf8DecodeRange } from '../storage/codec.js';
import { buildIndexDataOffThread } from './index-builder.js';
import { sliceDue, yieldToEventLoop, yieldWhenDue } from '../event-loop.js';
import { entryPosition, type CommitRecord } from '../storage/commit-run.js';
import type { CommitRun, History } from '../storage/history-log.js';
import type { ManifestEntry } from '../storage/records.js';
import {
  buildIndexData,
  encodeIndexFile,
  readIndexFile,
  readIndexHead,
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

/** Tags of the positions no entry holds: none, one array for them all. */
const noTags: readonly string[] = [];

/**
 * Adds the positions up to `last` as unreadable: a key-compacted segment may have dropped
 * millions in a row, so the event loop turns now and then.
 */
async function fillUnreadable(tail: TailIndex, last: number): Promise<void> {
  let added = 0;
  while (tail.base + tail.count <= last) {
    tail.add(undefined, noTags, unreadableLocator);
    const pause = yieldWhenDue(++added);
    if (pause) await pause;
  }
}

/** The active segment's index: growable columns and a tag map, appended to at each publish. */
class TailIndex implements SegmentIndex {
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

  tagPositions(tag: string): Uint32Array {
    const held = this.tags.get(tag);
    return held === undefined ? emptyPositions : typeof held === 'number' ? Uint32Array.of(held) : Uint32Array.from(held);
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

  source(): IndexSource {
    return { base: this.base, count: this.count, typeNames: this.typeNames, typeColumn: this.types, locators: this.offsets, tags: this.tags };
  }
}

/**
 * True when corruption took records of the segment at `base` (up to `nextBase`): inside it (a
 * gap between its readable commits) or at its end (lost commits before the next segment). Its
 * derived files are then built in memory only: written, they would be wrong once repaired.
 */
export function damagedSegment(lost: readonly CommitRecord[], inSegment: readonly CommitRecord[], base: number, nextBase: number): boolean {
  if (inSegment.some((commit, at) => commit.firstPosition !== (at === 0 ? base : inSegment[at - 1].lastPosition + 1))) return true;
  return lost.some((commit) => commit.records > 0 && commit.firstPosition < nextBase && commit.lastPosition >= base);
}

/** A sealed history segment as its derived files see it: its readable commits and its range. */
export interface SealedSegment {
  readonly base: number;
  /** Records it covers: its last readable position − base + 1. */
  readonly count: number;
  /** Its readable commits (read from its summary when it has one: only a rebuild needs them). */
  readonly commits: () => readonly CommitRecord[];
  /** Corruption took records of it (see `damagedSegment`). */
  readonly gaps: boolean;
}

/**
 * A function that reads segment `base`'s commits when called. It is made here, apart from the
 * caller's scope, because a closure keeps its whole enclosing scope alive: one made where a
 * segment's tail index is in scope would hold that index for the life of the feed.
 */
export function segmentCommits(history: History, base: number): () => CommitRecord[] {
  return () => history.commits.commitsInSegment(base);
}

/** The history's segments, sealed ones described, and the active segment's (its commits read when asked for). */
export function segmentsOf(history: History): { sealed: SealedSegment[]; active?: { base: number; commits: () => CommitRecord[] } } {
  const list = history.commits;
  const bases = history.segments.segments.map((segment) => segment.header.base);
  const extents = new Map(list.segments().map((extent) => [extent.segment, extent]));
  const sealed = bases.slice(0, -1).map((base, at): SealedSegment => {
    const extent = extents.get(base);
    const count = extent ? extent.lastPosition - base + 1 : 0;
    // A summary's commits follow each other, so only lost commits can leave gaps in it.
    if (!extent || extent.summarized) {
      return { base, count, commits: () => list.commitsInSegment(base), gaps: damagedSegment(list.lost, [], base, bases[at + 1]) };
    }
    // Held commits are checked for gaps now and read again when needed: a slot must not keep
    // a segment's commits as objects for the life of the feed.
    const gaps = damagedSegment(list.lost, list.commitsInSegment(base), base, bases[at + 1]);
    return { base, count, commits: () => list.commitsInSegment(base), gaps };
  });
  const activeBase = bases[bases.length - 1];
  return { sealed, ...(activeBase === undefined ? {} : { active: { base: activeBase, commits: () => list.commitsInSegment(activeBase) } }) };
}

/** An index file that had to be rebuilt, and why. */
export interface IndexRebuild {
  readonly segment: number;
  readonly file: string;
  readonly reason: string;
}

/**
 * A sealed segment's index as the feed knows it before a query needs it: where it lies and
 * what it covers. Its data is loaded, verified, and kept in the bounded cache on first use.
 */
interface SealedSlot extends SealedSegment {
  /** Set while the index is only in memory: a tail being compacted, or one with gaps. */
  resident?: SegmentIndex;
}

export class FeedIndex {
  private readonly sealed: SealedSlot[] = [];
  private tail: TailIndex | undefined;
  /** Every type name seen in the feed: at most `typesPerFeedMax`. */
  readonly typeNames = new Set<string>();
  readonly rebuilt: IndexRebuild[] = [];
  private pending: Promise<void> = Promise.resolve();
  /** Loaded sealed indexes by base, least recently used first, and the bytes they hold. */
  private readonly cache = new Map<number, { index: SealedIndex; bytes: number }>();
  private cachedBytes = 0;

  private constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly history: History,
    private readonly readOnly: boolean,
  ) {}

  fileFor(base: number): string {
    // Named like the history segment it derives from.
    return segmentFile(this.directory, base, '.idx');
  }

  /**
   * Opens the index: for every sealed history segment, only its index file's header and type
   * names are read (the rest is read when a query first needs it); a file that is missing or
   * whose head fails verification is rebuilt now. The tail is built from the active segment.
   */
  static async open(
    kernels: Kernels,
    directory: string,
    history: History,
    readOnly = false,
    /** Told of every record of the active segment as it is replayed (the key index's tail). */
    onActiveEntry?: (commit: CommitRecord, entry: ManifestEntry, locator: number, position: number) => void,
    /**
     * Segments whose index files describe what lay there before a rewrite whose switch-over
     * was not finished (a read-only open cannot finish it): rebuilt, whatever their files say.
     */
    staleBases: ReadonlySet<number> = new Set(),
  ): Promise<FeedIndex> {
    const index = new FeedIndex(kernels, directory, history, readOnly);
    index.onActiveEntry = onActiveEntry;
    const { sealed, active } = segmentsOf(history);
    for (const segment of sealed) {
      const slot: SealedSlot = { ...segment };
      index.sealed.push(slot);
      const file = index.fileFor(segment.base);
      let reason: string | undefined = staleBases.has(segment.base) ? 'its segment was rewritten, and the switch-over not finished' : undefined;
      try {
        const head = segment.gaps || reason !== undefined ? undefined : readIndexHead(kernels, file);
        if (!head) reason ??= 'missing';
        else if (head.base !== segment.base || head.count !== segment.count) reason = `it covers ${head.count} records from ${head.base}, the segment ${segment.count} from ${segment.base}`;
        else for (const name of head.typeNames) index.typeNames.add(name);
      } catch (error) {
        reason = (error as Error).message;
      }
      if (reason !== undefined) {
        const data = await index.rebuild(slot, reason);
        for (const name of data.typeNames) index.typeNames.add(name);
      }
    }
    if (active) {
      index.tail = new TailIndex(active.base);
      for await (const run of history.readRuns(active.commits())) index.addRun(run);
    }
    return index;
  }

  /** Builds a sealed segment's index from its history segment, writes it (when whole), reports it. */
  private async rebuild(slot: SealedSlot, reason: string): Promise<IndexData> {
    const tail = new TailIndex(slot.base);
    // Decoded as columns, a batch at a time, with a turn of the event loop between batches: a
    // merged segment holds millions of records, and decoding a 100,000-record run into objects
    // at once stalled reads and appends for a tenth of a second each.
    for await (const { commit, bytes } of this.history.runsInStretches(slot.commits())) {
        for await (const columns of this.history.runColumns(commit, bytes, rebuildBatchRowsMax, false)) {
          for (let row = 0; row < columns.count; row++) {
            // Positions no entry holds (corruption took them, or key compaction dropped them).
            if (tail.base + tail.count < columns.positions[row]) await fillUnreadable(tail, columns.positions[row] - 1);
            const typeId = columns.typeIds[row];
            const tags: string[] = [];
            for (let tag = columns.tagRows[row]; tag < columns.tagRows[row + 1]; tag++) {
              const name = utf8DecodeRange(columns.bytes, columns.tagStarts[tag], columns.tagEnds[tag]);
              if (name === undefined) {
                throw new StreamStackError('CORRUPT', `a tag in commit ${commit.commit} is not UTF-8`, {
                  details: { file: this.history.segments.fileFor(commit.segment), offset: commit.runStart + columns.entryStarts[row] },
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
    // Built on the index worker (as a finished tail's is): a segment's FST and posting lists
    // take long enough to stall every read and append were they built here.
    const data = await buildIndexDataOffThread(this.kernels, tail.source());
    const file = this.fileFor(slot.base);
    if (!this.readOnly && !slot.gaps) await writeIndexFile(this.kernels, file, encodeIndexFile(this.kernels, data));
    // Kept in memory for good when it cannot be written (read-only): its file, if any, is wrong.
    if (slot.gaps || this.readOnly) slot.resident = new SealedIndex(this.kernels, data);
    else this.remember(slot.base, new SealedIndex(this.kernels, data), data);
    this.rebuilt.push({ segment: slot.base, file, reason });
    return data;
  }

  private onActiveEntry: ((commit: CommitRecord, entry: ManifestEntry, locator: number, position: number) => void) | undefined;

  private addRun(run: CommitRun): void {
    const { commit } = run;
    run.entries.forEach((entry, at) => {
      const position = entryPosition(commit, at, entry.seq);
      this.add(commit, entry.type, entry.tags, run.entryOffsets[at], position);
      this.onActiveEntry?.(commit, entry, run.entryOffsets[at], position);
    });
  }

  /** Holds a loaded index in the cache, dropping the least recently used past the bound. */
  private remember(base: number, index: SealedIndex, data: IndexData): void {
    const bytes = data.typeColumn.byteLength + data.locators.byteLength + data.fst.byteLength + data.postings.byteLength;
    const previous = this.cache.get(base);
    if (previous) {
      this.cache.delete(base);
      this.cachedBytes -= previous.bytes;
    }
    this.cache.set(base, { index, bytes });
    this.cachedBytes += bytes;
    for (const [oldest, entry] of this.cache) {
      if (this.cachedBytes <= indexCacheBytesMax || oldest === base) break;
      this.cache.delete(oldest);
      this.cachedBytes -= entry.bytes;
    }
  }

  /** A sealed segment's index, from memory or its file, rebuilt when the file fails verification. */
  private async load(slot: SealedSlot): Promise<SegmentIndex> {
    if (slot.resident) return slot.resident;
    const cached = this.cache.get(slot.base);
    if (cached) {
      // Most recently used goes last.
      this.cache.delete(slot.base);
      this.cache.set(slot.base, cached);
      return cached.index;
    }
    let data: IndexData | undefined;
    let reason = 'missing';
    try {
      data = readIndexFile(this.kernels, this.fileFor(slot.base));
      if (data && (data.base !== slot.base || data.count !== slot.count)) {
        reason = `it covers ${data.count} records from ${data.base}, the segment ${slot.count} from ${slot.base}`;
        data = undefined;
      }
    } catch (error) {
      reason = (error as Error).message;
    }
    if (!data) {
      await this.rebuild(slot, reason);
      return this.load(slot);
    }
    const index = new SealedIndex(this.kernels, data);
    this.remember(slot.base, index, data);
    return index;
  }

  /**
   * The indexes of the segments that hold positions `from`..`to`, sealed then tail, loaded: a
   * query holds on to what it was given, whatever the cache drops meanwhile.
   */
  async segmentsFor(from: number, to: number): Promise<SegmentIndex[]> {
    const out: SegmentIndex[] = [];
    for (const slot of this.sealed) {
      if (slot.base + slot.count - 1 < from || slot.base > to || slot.count === 0) continue;
      out.push(await this.load(slot));
    }
    if (this.tail && this.tail.count > 0 && this.tail.base + this.tail.count - 1 >= from && this.tail.base <= to) out.push(this.tail);
    return out;
  }

  /** Sealed indexes loaded in memory now, and their bytes (for tests and memory accounting). */
  /**
   * Drops the indexes of the segments before `base` (a trim removed them; the caller deletes
   * their files). The index files are per segment, so those after it stay as they are. Builds
   * in the background finish first, so none writes a trimmed segment's file after the trim.
   */
  async trimBefore(base: number): Promise<void> {
    await this.pending;
    const kept = this.sealed.filter((slot) => slot.base >= base);
    this.sealed.splice(0, this.sealed.length, ...kept);
    for (const [cachedBase, entry] of [...this.cache]) {
      if (cachedBase >= base) continue;
      this.cache.delete(cachedBase);
      this.cachedBytes -= entry.bytes;
    }
  }

  /**
   * Replaces the slots of consecutive segments `bases` by one for the merged segment at
   * `bases[0]` holding `count` records, and builds its index file in the background (a query
   * before then builds it itself). Builds under way finish first.
   */
  async replaceSegments(bases: readonly number[], count: number): Promise<void> {
    await this.pending;
    const at = this.sealed.findIndex((slot) => slot.base === bases[0]);
    assert(at >= 0 && bases.every((base, index) => this.sealed[at + index]?.base === base), 'a merge replaces consecutive index segments');
    const slot: SealedSlot = { base: bases[0], count, commits: segmentCommits(this.history, bases[0]), gaps: false };
    this.sealed.splice(at, bases.length, slot);
    // The first segment's file describes the segment that was there: gone before any read can
    // load it (a key-compacted segment covers the same positions, so its count would not tell).
    if (!this.readOnly) fs.rmSync(this.fileFor(bases[0]), { force: true });
    for (const base of bases) {
      const cached = this.cache.get(base);
      if (!cached) continue;
      this.cache.delete(base);
      this.cachedBytes -= cached.bytes;
    }
    this.pending = this.pending.then(() => this.load(slot)).then(
      () => undefined,
      () => undefined,
    );
  }

  get cacheUse(): { segments: number; bytes: number } {
    return { segments: this.cache.size, bytes: this.cachedBytes };
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
      // lists) is built and written in the background, then it joins the others: read from its
      // file when needed, so the append that rolled the segment does not wait for it.
      const slot: SealedSlot = { base: previous.base, count: previous.count, commits: segmentCommits(this.history, previous.base), gaps: false, resident: previous };
      this.sealed.push(slot);
      const file = this.fileFor(previous.base);
      this.pending = this.pending
        .then(() => new Promise<void>((resolve) => setImmediate(resolve)))
        .then(async () => {
          const data = await buildIndexDataOffThread(this.kernels, previous.source());
          if (!this.readOnly) await writeIndexFile(this.kernels, file, encodeIndexFile(this.kernels, data));
          this.remember(slot.base, new SealedIndex(this.kernels, data), data);
          if (!this.readOnly) slot.resident = undefined;
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
