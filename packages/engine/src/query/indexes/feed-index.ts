/**
 * The tag and type index of one feed (docs/formats.md, Index segments): one index per sealed history segment, loaded
 * from its file (or rebuilt from the history segment when the file is missing or corrupt), and
 * an append-only tail index for the active segment, extended as commits are published. Readers
 * only ever look at positions up to their snapshot's watermark, so the tail needs no lock: the
 * writer appends and publishes, and nothing a reader holds is ever moved.
 */
import path from 'node:path';
import { assert, StreamStackError } from '../../errors.js';
import { mapInFlight } from '../../in-flight.js';
import type { Kernels } from '../../kernels/kernels.js';
import { headReadsInFlightMax, indexCacheBytesMax, typesPerFeedMax } from '../../limits.js';
import { type CommitRecord, entryPosition } from '../../storage/commit-record.js';
import { segmentFile, segmentSuffix } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import type { CommitRun } from '../../storage/history-runs.js';
import { encodeIndexFile, type IndexData, readIndexFile, readIndexHead } from '../../storage/index-segment.js';
import type { ManifestEntry } from '../../storage/records.js';
import { LocalSegmentStore, type SegmentStore } from '../../storage/segment-store.js';
import { buildIndexDataOffThread, indexDataOfSegmentOffThread } from './index-builder.js';
import {
  deferredReason,
  derivedMismatch,
  type SealedSegment,
  segmentCommits,
  segmentSourceOf,
  segmentsOf,
} from './sealed-segments.js';
import { indexTailOf, SealedIndex, type SegmentIndex, TailIndex, unreadableLocator } from './segment-index.js';
import { HeadTerms, type QueryTerms } from './segment-terms.js';

export type { SegmentIndex };

/** The index file of the segment at `base` in the index `directory`: named like the history segment it derives from. */
export function indexFileOf(directory: string, base: number): string {
  return segmentFile(directory, base, segmentSuffix.tagIndex);
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
  /**
   * What the feed keeps of the index for good once it has read its file's head (at open) or
   * built or loaded it: its types and its tag filter, so a query passes the segment without
   * loading it when none of its items can match there.
   */
  terms?: HeadTerms;
  /** Set while its index is being built (see `FeedIndex.rebuild`). */
  rebuilding?: Promise<IndexData>;
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
  ) {
    this.store = new LocalSegmentStore(kernels, directory);
  }

  /**
   * Where the index files are: written whole, durably, as sealed segments' derived files are
   * (see `SegmentStore.put`), and read back through it too (`readIndexHead`, `readIndexFile`).
   */
  private readonly store: SegmentStore;

  fileFor(base: number): string {
    return indexFileOf(this.directory, base);
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
    /**
     * Segments whose missing index files are built in the background after the open (a fork's
     * cut segment, whose source's files describe records the fork does not hold): a query
     * builds one itself meanwhile, and writers wait for them (`buildsPending`), for their types.
     */
    deferredBases: ReadonlySet<number> = new Set(),
    /** The active segment's tail as a checkpoint holds it after commit `after`: only later commits are replayed. */
    checkpoint?: { readonly tail: TailIndex; readonly after: number },
  ): Promise<FeedIndex> {
    const index = new FeedIndex(kernels, directory, history, readOnly);
    index.onActiveEntry = onActiveEntry;
    const { sealed, active } = segmentsOf(history);
    const deferred: SealedSlot[] = [];
    // The heads are read side by side; what they say is then taken in segment order.
    const heads = await mapInFlight(sealed, headReadsInFlightMax, (segment) =>
      segment.gaps || staleBases.has(segment.base)
        ? Promise.resolve(undefined)
        : readIndexHead(kernels, index.store, path.basename(index.fileFor(segment.base))).catch((error: unknown) =>
            error instanceof Error ? error : new Error(String(error)),
          ),
    );
    for (const [at, segment] of sealed.entries()) {
      const slot: SealedSlot = { ...segment };
      index.sealed.push(slot);
      let reason: string | undefined = staleBases.has(segment.base)
        ? 'its segment was rewritten, and the switch-over not finished'
        : undefined;
      try {
        const head = heads[at];
        if (head instanceof Error) throw head;
        if (!head) reason ??= 'missing';
        else reason = derivedMismatch(head, segment);
        if (head && reason === undefined) {
          for (const name of head.typeNames) index.typeNames.add(name);
          slot.terms = new HeadTerms(head);
        }
      } catch (error) {
        reason = (error as Error).message;
      }
      if (reason === 'missing' && deferredBases.has(segment.base)) deferred.push(slot);
      else if (reason !== undefined) await index.rebuild(slot, reason);
    }
    if (deferred.length > 0) index.buildLater(deferred);
    if (active) {
      index.tail = checkpoint?.tail ?? new TailIndex(active.base);
      for (const name of index.tail.typeNames) index.typeNames.add(name);
      // Only the commits after the checkpoint are made records: the active segment may hold a
      // quarter of a million, read from their pages for nothing.
      const list = history.commits;
      const replayed = checkpoint ? [...list.range(checkpoint.after + 1, list.length)] : active.commits();
      for await (const run of history.runs.readRuns(replayed)) index.addRun(run);
    }
    return index;
  }

  /**
   * Builds `slots`' indexes in the background, in order, after the builds already queued. Until
   * they are done `buildsPending` says so: their types are not known yet.
   */
  private buildLater(slots: readonly SealedSlot[]): void {
    const built = this.pending.then(async () => {
      // A query may have built one meanwhile (its terms are then known).
      for (const slot of slots) if (!slot.terms) await this.rebuild(slot, deferredReason).catch(() => undefined);
    });
    this.pending = built;
    this.building = built;
    void built.then(() => {
      if (this.building === built) this.building = undefined;
    });
  }

  /** Set while `buildLater` builds: the feed's types are known once it settles. */
  private building: Promise<void> | undefined;

  /** Undefined, or a promise that settles once the index files built after the open are built. */
  buildsPending(): Promise<void> | undefined {
    return this.building;
  }

  /**
   * Builds a sealed segment's index from its history segment, writes it (when whole), reports
   * it. A build asked for while one of the same segment is under way waits for that one.
   */
  private rebuild(slot: SealedSlot, reason: string): Promise<IndexData> {
    if (slot.rebuilding) return slot.rebuilding;
    const done = this.rebuildNow(slot, reason).finally(() => {
      if (slot.rebuilding === done) slot.rebuilding = undefined;
    });
    slot.rebuilding = done;
    return done;
  }

  private async rebuildNow(slot: SealedSlot, reason: string): Promise<IndexData> {
    // Read and built on the index worker when it can (the segment has a summary, no gaps): a
    // segment's FST and posting lists take long enough to stall every read and append were they
    // built here, and reading its records here stalls them too. Otherwise read here and built there.
    // A segment the store keeps no local file of is read here too (see `History.localPathOf`).
    const source = slot.source();
    const local = this.history.localPathOf(slot.base);
    const segment = local === undefined ? undefined : { ...local, base: slot.base, count: slot.count, source };
    const data =
      (slot.gaps || segment === undefined ? undefined : await indexDataOfSegmentOffThread(this.kernels, segment)) ??
      (await buildIndexDataOffThread(
        this.kernels,
        (await indexTailOf(this.history.runs, slot.base, slot.commits())).source(),
      ));
    const file = this.fileFor(slot.base);
    const written = !this.readOnly && !slot.gaps;
    // Checked before writing as `load` checks it after reading: the index covers its segment.
    assert(
      !written || (data.base === slot.base && data.count === slot.count),
      'an index written is built over its own segment',
    );
    if (written) await this.store.put(path.basename(file), encodeIndexFile(this.kernels, data, source));
    // Kept in memory for good when it cannot be written (read-only): its file, if any, is wrong.
    if (slot.gaps || this.readOnly) slot.resident = new SealedIndex(this.kernels, data);
    else this.remember(slot.base, new SealedIndex(this.kernels, data), data);
    slot.terms = new HeadTerms(data);
    for (const name of data.typeNames) this.typeNames.add(name);
    this.rebuilt.push({ segment: slot.base, file, reason });
    return data;
  }

  private onActiveEntry:
    | ((commit: CommitRecord, entry: ManifestEntry, locator: number, position: number) => void)
    | undefined;

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
    const bytes =
      data.typeColumn.byteLength + data.locators.byteLength + data.fst.byteLength + data.postings.byteLength;
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
      const read = await readIndexFile(this.kernels, this.store, path.basename(this.fileFor(slot.base)));
      const mismatch = read && derivedMismatch(read, slot);
      if (mismatch !== undefined) reason = mismatch;
      else data = read;
    } catch (error) {
      reason = (error as Error).message;
    }
    if (!data) {
      await this.rebuild(slot, reason);
      return this.load(slot);
    }
    const index = new SealedIndex(this.kernels, data);
    this.remember(slot.base, index, data);
    slot.terms ??= new HeadTerms(data);
    return index;
  }

  /**
   * The indexes of the segments that hold positions `from`..`to`, sealed then tail, loaded: a
   * query holds on to what it was given, whatever the cache drops meanwhile. With `query`, a
   * sealed segment whose head says none of its items can match there is passed without being
   * loaded: a condition on a tag no record carries yet reads no index at all.
   */
  async segmentsFor(from: number, to: number, query?: QueryTerms): Promise<SegmentIndex[]> {
    const out: SegmentIndex[] = [];
    for (const slot of this.sealed) {
      if (slot.base + slot.count - 1 < from || slot.base > to || slot.count === 0) continue;
      const terms = slot.terms;
      if (query && terms && !terms.anyMayMatch(query)) continue;
      out.push(await this.load(slot));
    }
    if (this.tail && this.tail.count > 0 && this.tail.base + this.tail.count - 1 >= from && this.tail.base <= to)
      out.push(this.tail);
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
   * Replaces the slots of consecutive segments `bases` by one for the rewritten segment at
   * `bases[0]` holding `count` records. Its index file is `prebuilt` (the rewrite built it beside
   * the segment), renamed into place, or else built in the background (a query before then builds
   * it itself). Builds under way finish first. Resolves once the file is in place (or gone),
   * durably, through the store.
   */
  async replaceSegments(bases: readonly number[], count: number, prebuilt?: string): Promise<void> {
    await this.pending;
    const at = this.sealed.findIndex((slot) => slot.base === bases[0]);
    assert(
      at >= 0 && bases.every((base, index) => this.sealed[at + index]?.base === base),
      'a merge replaces consecutive index segments',
    );
    const slot: SealedSlot = {
      base: bases[0],
      count,
      commits: segmentCommits(this.history, bases[0]),
      gaps: false,
      source: segmentSourceOf(this.history, bases[0]),
    };
    this.sealed.splice(at, bases.length, slot);
    for (const base of bases) {
      const cached = this.cache.get(base);
      if (!cached) continue;
      this.cache.delete(base);
      this.cachedBytes -= cached.bytes;
    }
    if (this.readOnly) return;
    // The first segment's file describes the segment that was there: replaced or gone before
    // any read can load it (a key-compacted segment covers the same positions, so its count
    // would not tell).
    // Inside the merge's exclusive switch-over: no read gets in while these are awaited.
    if (prebuilt !== undefined) {
      await this.store.putFile(path.basename(this.fileFor(bases[0])), prebuilt);
      return;
    }
    await this.store.delete(path.basename(this.fileFor(bases[0])));
    this.pending = this.pending
      .then(() => this.load(slot))
      .then(
        () => undefined,
        () => undefined,
      );
  }

  get cacheUse(): { segments: number; bytes: number } {
    return { segments: this.cache.size, bytes: this.cachedBytes };
  }

  /** The active segment's tail (what a checkpoint holds), if there is an active segment. */
  get activeTail(): TailIndex | undefined {
    return this.tail;
  }

  /**
   * Adds a published commit's records. When the commit lies in a new history segment, the tail
   * of the previous one is sealed into an index file first (written in the background: the file
   * is derived, and a crash before it lands only means it is rebuilt on the next open).
   */
  add(
    commit: CommitRecord,
    type: string | undefined,
    tags: readonly string[],
    locator: number,
    position: number,
  ): void {
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
      const slot: SealedSlot = {
        base: previous.base,
        count: previous.count,
        commits: segmentCommits(this.history, previous.base),
        gaps: false,
        source: segmentSourceOf(this.history, previous.base),
        resident: previous,
      };
      this.sealed.push(slot);
      const file = this.fileFor(previous.base);
      this.pending = this.pending
        .then(() => new Promise<void>((resolve) => setImmediate(resolve)))
        .then(async () => {
          const data = await buildIndexDataOffThread(this.kernels, previous.source());
          if (!this.readOnly)
            await this.store.put(path.basename(file), encodeIndexFile(this.kernels, data, slot.source()));
          this.remember(slot.base, new SealedIndex(this.kernels, data), data);
          slot.terms = new HeadTerms(data);
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
        throw new StreamStackError(
          'TYPE_LIMIT',
          `a feed holds at most ${typesPerFeedMax} distinct types; ${JSON.stringify(type)} would be one more`,
          {
            details: { type, limit: typesPerFeedMax },
          },
        );
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
