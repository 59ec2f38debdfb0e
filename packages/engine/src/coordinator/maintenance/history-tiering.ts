/**
 * Tiering: every sealed history segment, once its summary, tag index and dictionaries are
 * written, goes up to object storage in the background, then becomes visible there through its
 * descriptor (`storage/segment-descriptor.ts`), created with put-if-absent. Nothing here is on
 * the path of an acknowledgement: a writer never waits for an upload, and an object store that is
 * down only delays uploads, which are retried with backoff and reported (`status().lastError`).
 *
 * Each pass, run through the maintenance queue so that no trim or merge deletes a file while it
 * is read for upload: (1) sealed segments not yet given an ordinal get one, written durably to the
 * tiering log before any byte goes up; (2) each segment being uploaded has its files stored and
 * its descriptor created; a descriptor found already there is this writer's own from an upload a
 * crash cut (done) or another writer's (`FENCED`); (3) segments gone locally are retired: a
 * trim first moves the remote boundary past them, then deletes their objects; a rewrite's
 * replaced segments lose their files once the segment that replaces them is visible.
 *
 * (4) With a local budget (`localHistoryBytesMax`), sealed history segments past it whose
 * descriptors are confirmed are evicted, least recently read first: noted in the tiering log,
 * then cut locally to their headers (`TieredHistoryStore.evict`); their records are read back from
 * object storage from then on, and their summaries, indexes and dictionaries stay local.
 *
 * It is longer than 500 lines because the four steps are one pass over one tiering log, whose
 * writes they order among themselves; the uploads (`segment-upload.ts`) and the log's states
 * (`tiering-state.ts`) are apart already.
 */
import fsp from 'node:fs/promises';
import { ioError, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import {
  objectDeleteBatchKeys,
  segmentHeaderBytes,
  tieredSegmentsMax,
  tieringLagSamplesMax,
  tieringRetryMsMax,
  tieringRetryMsMin,
} from '../../limits.js';
import { segmentsOf } from '../../query/indexes/sealed-segments.js';
import { segmentFileName, segmentSuffix } from '../../storage/feed-layout.js';
import type { FeedStores } from '../../storage/feed-stores.js';
import type { History } from '../../storage/history-log.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import {
  boundaryObjectName,
  encodeBoundary,
  encodeDescriptor,
  ordinalName,
  segmentObjectName,
} from '../../storage/segment-descriptor.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import { historyFiles, indexFiles, SegmentUploads } from './segment-upload.js';
import {
  isVisibleRemotely,
  replacementVisible,
  type TierEntry,
  type TieringLog,
  type TieringState,
} from './tiering-state.js';

/** A feed's objects: its folder (the boundary), its segments' files and their descriptors. */
export interface FeedObjects {
  readonly root: ObjectSegmentStore;
  /** The folder of every generation of the feed's name, which holds its `feed.json`. */
  readonly feedFolder: ObjectSegmentStore;
  readonly segments: ObjectSegmentStore;
  readonly descriptors: ObjectSegmentStore;
}

export interface TieringContext {
  readonly kernels: Kernels;
  readonly feed: string;
  readonly feedTag: number;
  readonly history: History;
  readonly derived: () => DerivedIndexes;
  readonly stores: FeedStores;
  /** The feed's `feed.json`, published beside its objects for followers. */
  readonly feedConfigFile: string;
  /** True once another writer fenced this one off: nothing more goes up. */
  readonly fenced: () => boolean;
  /** Undefined for a read-only open: the state is reported, nothing is uploaded. */
  readonly objects: FeedObjects | undefined;
  readonly log: TieringLog;
  /** Bytes of sealed history segments kept locally once uploaded; undefined keeps them all. */
  readonly localHistoryBytesMax: number | undefined;
  /** The writer lease's epoch now (0 for a feed never leased). */
  readonly epoch: () => number;
  readonly clock: () => number;
  readonly newId: () => string;
  /** Runs maintenance one at a time (trims and merges share it). */
  readonly serial: <T>(work: () => Promise<T>) => Promise<T>;
}

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { TieringInfo } from '@streamstack/protocol';

export type { TieringInfo };

/** The sealed segments that hold records, each with its fingerprint. */
function sealedSegments(history: History): { base: number; count: number; source: number }[] {
  return segmentsOf(history)
    .sealed.filter((segment) => segment.count > 0)
    .map((segment) => ({ base: segment.base, count: segment.count, source: segment.source() }));
}

const noReads = { hits: 0, misses: 0, readAhead: 0, requests: 0, bytesFetched: 0 };

export class HistoryTiering {
  private closed = false;
  /** The pass under way, if any; a request for another while it runs sets `again`. */
  private running: Promise<void> | undefined;
  private again = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private lastError: TieringInfo['lastError'] = null;
  /** Each segment's upload, and the counters of what went up. */
  private readonly uploads: SegmentUploads;
  /** Ordinals given out by this process: no descriptor of theirs can exist from before it. */
  private readonly assignedHere = new Set<number>();
  /** The latest visibility lags, a ring of `tieringLagSamplesMax`, and how many were noted. */
  private readonly lags: number[] = [];
  private lagCount = 0;
  /** Whether the last pass found nothing left to upload or retire. */
  private idle = false;
  /** The floor position of the boundary this process wrote last (none yet: undefined). */
  private boundaryPosition: number | undefined;

  /**
   * The writer named by the first state of a feed never tiered, drawn once here, when the feed
   * opens. Drawn later, by the pass in the background, it would take an id at a moment that
   * depends on timing, and the ids the writer draws after it (streams, commits) would change
   * with the machine's load.
   */
  private readonly freshWriter: string;

  constructor(private readonly context: TieringContext) {
    this.uploads = new SegmentUploads(context, () => this.objects);
    this.freshWriter = context.log.written ? '' : context.newId();
  }

  /** The tiering state now, or the first one of a feed never tiered. */
  private currentState(): TieringState {
    return this.context.log.stateOr(() => this.freshWriter);
  }

  /** The feed's objects; only passes use them, and a pass runs only when there are some. */
  private get objects(): FeedObjects {
    const { objects } = this.context;
    if (!objects) throw new StreamStackError('READ_ONLY', `feed ${this.context.feed} was opened read-only`);
    return objects;
  }

  /** Starts a pass (a segment was sealed, or the feed was opened). */
  segmentFinished(): void {
    this.schedule();
  }

  /**
   * The last position up to which the history is in object storage: every position from the
   * feed's floor (`lowPosition`, below which it was trimmed) to it lies in a segment visible
   * remotely. A replicated feed retires the slots of the groups up to it.
   */
  coveredThrough(lowPosition: number): number {
    const visible = this.context.log
      .stateOr(() => '')
      .entries.filter(isVisibleRemotely)
      .sort((a, b) => a.base - b.base);
    let covered = lowPosition - 1;
    for (const entry of visible) {
      if (entry.base > covered + 1) break;
      covered = Math.max(covered, entry.lastPosition);
    }
    return covered;
  }

  /** What is tiered, what is waiting, and the last failure (cleared by a pass that succeeds). */
  status(): TieringInfo {
    const state = this.context.log.stateOr(() => '');
    const sum = (entries: readonly TierEntry[]) => entries.reduce((total, entry) => total + entry.bytes, 0);
    const remote = state.entries.filter(isVisibleRemotely);
    const evicted = state.entries.filter((entry) => entry.state === 'evicted');
    const pending = state.entries.filter((entry) => entry.state === 'uploading');
    const known = new Set(state.entries.map((entry) => `${entry.base}:${entry.source}`));
    const unassigned = sealedSegments(this.context.history).filter(
      (segment) => !known.has(`${segment.base}:${segment.source}`),
    );
    return {
      remoteSegments: remote.length,
      remoteBytes: sum(remote),
      pendingSegments: pending.length + unassigned.length,
      // Segments not given an ordinal yet count their history segment's bytes (their derived
      // files are small, and not all written yet).
      pendingBytes:
        sum(pending) +
        unassigned.reduce((total, segment) => total + this.context.history.segments.byBase(segment.base).durableEnd, 0),
      retiringSegments: state.entries.length - remote.length - pending.length,
      nextOrdinal: state.nextOrdinal,
      uploadedObjects: this.uploads.counters.uploadedObjects,
      uploadedBytes: this.uploads.counters.uploadedBytes,
      requests: this.uploads.counters.requests,
      failures: this.failures,
      lastError: this.lastError,
      visibleLagMs: this.lagSummary(),
      evictedSegments: evicted.length,
      localHistoryBytes: this.localHistoryBytes(),
      localHistoryBytesMax: this.context.localHistoryBytesMax ?? null,
      remoteReads: { ...(this.context.history.store.cache?.counters ?? noReads) },
    };
  }

  /**
   * Resolves once a pass has found nothing left to upload or retire: every sealed segment is
   * visible remotely. Rejects with the failure when a pass fails (an upload is then retried in
   * the background all the same), so a caller that waits is told why.
   */
  async settled(): Promise<TieringInfo> {
    if (!this.context.objects)
      throw new StreamStackError('READ_ONLY', `feed ${this.context.feed} was opened read-only: it uploads nothing`);
    for (;;) {
      this.idle = false;
      this.schedule();
      await this.running;
      if (this.lastError)
        throw new StreamStackError(
          'UNAVAILABLE',
          `tiering of feed ${this.context.feed} failed: ${this.lastError.message}`,
          { details: { ...this.lastError } },
        );
      if (this.idle) return this.status();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    await this.running?.catch(() => undefined);
    this.context.log.close();
  }

  private schedule(): void {
    if (this.closed || !this.context.objects) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.running = (async () => {
      do {
        this.again = false;
        try {
          this.idle = await this.pass();
          this.failures = 0;
          this.lastError = null;
        } catch (error) {
          this.failures++;
          const typed = error instanceof StreamStackError ? error : undefined;
          this.lastError = {
            code: typed?.code ?? 'INTERNAL',
            message: error instanceof Error ? error.message : String(error),
            at: this.context.clock(),
          };
          this.again = false;
          this.retryLater();
        }
      } while (this.again && !this.closed);
    })().finally(() => {
      this.running = undefined;
    });
  }

  /** Tries again after a backoff that doubles with each failure in a row, up to its cap. */
  private retryLater(): void {
    if (this.closed) return;
    const delay = Math.min(tieringRetryMsMax, tieringRetryMsMin * 2 ** Math.min(this.failures - 1, 20));
    this.retryTimer = setTimeout(() => this.schedule(), delay);
    this.retryTimer.unref();
  }

  /** One pass; true when it found nothing to do. */
  private async pass(): Promise<boolean> {
    const { derived, history } = this.context;
    let worked = false;
    // A fenced writer's objects would replace the new writer's: it tiers nothing more.
    if (this.context.fenced()) return true;
    // The feed is there for followers from its first pass, before any segment is sealed.
    await this.uploads.publishFeedConfig();
    // Segments go up in ordinal order, each as soon as its five files are written; one still
    // waiting for a file (a dictionary being built) makes the pass wait for the builds, not for
    // the whole indexing backlog ahead of every segment.
    for (;;) {
      if (this.closed) return false;
      const state = await this.assignOrdinals();
      const entry = state.entries.find((candidate) => candidate.state === 'uploading');
      if (!entry) break;
      if (!(await this.uploads.complete(entry.base))) {
        await derived().flushed();
        // In the maintenance queue: no merge replaces a segment while its summary is written.
        await this.context.serial(async () => {
          history.summarizeMissing();
          await history.summariesWritten();
        });
        if (this.closed) return false;
      }
      const outcome = await this.context.serial(() => this.uploads.upload(this.currentState(), entry));
      if (outcome === 'gone') {
        // The next listing marks it retired; the loop then moves past it.
        const sealed = new Set(sealedSegments(history).map((segment) => `${segment.base}:${segment.source}`));
        if (sealed.has(`${entry.base}:${entry.source}`))
          throw new StreamStackError(
            'IO',
            `the files of the segment at ${entry.base} of feed ${this.context.feed} are missing`,
          );
        continue;
      }
      // Its bytes now that every file is written (when it was given its ordinal, some were not).
      await this.setState(entry.ordinal, 'remote', await this.uploads.localBytes(entry.base));
      this.noteVisible(entry);
      worked = true;
    }
    const retired = await this.retire();
    const evicted = await this.context.serial(() => this.evict());
    return retired === 0 && evicted === 0 && !worked;
  }

  /**
   * Evicts sealed history segments, least recently read first, until the local ones fit the
   * budget; only segments whose descriptor is confirmed. A segment noted evicted whose file a
   * crash left whole is cut again. Runs in the maintenance queue: no merge reads a segment by
   * path while it is cut. Returns how many it evicted.
   */
  private async evict(): Promise<number> {
    const budget = this.context.localHistoryBytesMax;
    const { history } = this.context;
    const store = history.store;
    const nameOf = (base: number) => segmentFileName(base, segmentSuffix.history);
    for (const entry of this.currentState().entries) {
      if (entry.state !== 'evicted' || this.cut.has(entry.ordinal)) continue;
      // Only a file that still is that segment: one a merge replaced under the same name (the
      // log not told yet) is whole, new, and read locally (`History.open` saw to that).
      if (store.evictedAs(nameOf(entry.base)) !== entry.ordinal) continue;
      await this.cutLocal(entry.base);
      this.cut.add(entry.ordinal);
    }
    if (budget === undefined) return 0;
    let local = this.localHistoryBytes();
    if (local <= budget) return 0;
    const live = new Set(sealedSegments(history).map((segment) => `${segment.base}:${segment.source}`));
    const candidates = this.currentState()
      .entries.filter((entry) => entry.state === 'remote' && live.has(`${entry.base}:${entry.source}`))
      .sort((a, b) => store.lastReadOf(nameOf(a.base)) - store.lastReadOf(nameOf(b.base)) || a.base - b.base);
    let evicted = 0;
    for (const entry of candidates) {
      if (local <= budget || this.closed) break;
      // Evicted, a segment has only its summary here to stand for it: one without is kept whole.
      if (!(await history.store.size(segmentFileName(entry.base, segmentSuffix.summary)))) continue;
      await this.setState(entry.ordinal, 'evicted');
      await store.evict(nameOf(entry.base), entry.ordinal, () => this.cutLocal(entry.base));
      this.cut.add(entry.ordinal);
      local -= history.segments.byBase(entry.base).header.capacity;
      evicted++;
    }
    return evicted;
  }

  /** The capacity of the sealed history segments still local (not evicted). */
  private localHistoryBytes(): number {
    const { history } = this.context;
    let local = 0;
    for (const segment of segmentsOf(history).sealed)
      if (!history.store.isEvicted(segmentFileName(segment.base, segmentSuffix.history)))
        local += history.segments.byBase(segment.base).header.capacity;
    return local;
  }

  /** Ordinals whose local file is known cut (this process cut it, or found it so). */
  private readonly cut = new Set<number>();

  /**
   * Cuts the history segment at `base` to its header, durably: the header is what opening the
   * history checks; everything else is in object storage. A cut that fails leaves the file whole,
   * which reads never use again, and is tried again by the next pass.
   */
  private async cutLocal(base: number): Promise<void> {
    const file = this.context.history.segments.fileFor(base);
    let handle: fsp.FileHandle | undefined;
    try {
      handle = await fsp.open(file, 'r+');
      if ((await handle.stat()).size > segmentHeaderBytes) {
        await handle.truncate(segmentHeaderBytes);
        await handle.sync();
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw ioError(error, `cannot cut the evicted segment ${file} to its header`);
    } finally {
      await handle?.close();
    }
  }

  /**
   * Gives every sealed segment without an ordinal the next one, and marks entries whose
   * segment is gone locally for retirement (trimmed below the floor, replaced above it), in one
   * durable write before any upload starts.
   */
  private async assignOrdinals(): Promise<TieringState> {
    const { log, history } = this.context;
    const state = this.currentState();
    const sealed = sealedSegments(history);
    const live = new Set(sealedSegments(history).map((segment) => `${segment.base}:${segment.source}`));
    const known = new Set(state.entries.map((entry) => `${entry.base}:${entry.source}`));
    const floor = history.floorPosition;
    let changed = false;
    const entries: TierEntry[] = state.entries.map((entry) => {
      if (entry.state === 'replaced' || entry.state === 'trimmed') return entry;
      if (live.has(`${entry.base}:${entry.source}`)) return entry;
      changed = true;
      return { ...entry, state: entry.lastPosition < floor ? 'trimmed' : 'replaced' };
    });
    let nextOrdinal = state.nextOrdinal;
    for (const segment of sealed) {
      if (known.has(`${segment.base}:${segment.source}`)) continue;
      entries.push({
        ordinal: this.assign(nextOrdinal++),
        base: segment.base,
        lastPosition: segment.base + segment.count - 1,
        source: segment.source,
        bytes: await this.uploads.localBytes(segment.base),
        state: 'uploading',
      });
      changed = true;
    }
    if (entries.length > tieredSegmentsMax) {
      throw new StreamStackError(
        'IO',
        `feed ${this.context.feed} has ${entries.length} segments to tier, more than the ${tieredSegmentsMax} its tiering log tracks: merge its history (compact) first`,
        { details: { segments: entries.length, limit: tieredSegmentsMax } },
      );
    }
    if (!changed) return state;
    const next = { ...state, nextOrdinal, entries };
    await log.write(next);
    return next;
  }

  /**
   * Notes how long after its last commit was sealed a segment became visible remotely: the lag a
   * reader elsewhere sees (`status().visibleLagMs`). Only segments sealed in this process count:
   * one found at open waited for the process, not for its upload.
   */
  private noteVisible(entry: TierEntry): void {
    if (!this.assignedHere.has(entry.ordinal)) return;
    const commits = this.context.history.commits;
    const last = commits.length > 0 ? commits.commitsInSegment(entry.base).at(-1) : undefined;
    if (!last) return;
    this.lags[this.lagCount++ % tieringLagSamplesMax] = Math.max(0, this.context.clock() - last.sealedAt);
  }

  /** The visibility lags noted, as percentiles. */
  private lagSummary(): TieringInfo['visibleLagMs'] {
    const samples = Float64Array.from(this.lags.slice(0, Math.min(this.lagCount, tieringLagSamplesMax))).sort();
    const at = (fraction: number) => samples[Math.min(samples.length - 1, Math.floor(samples.length * fraction))] ?? 0;
    return { count: this.lagCount, p50: at(0.5), p99: at(0.99), max: samples[samples.length - 1] ?? 0 };
  }

  /** Notes `ordinal` as given out now, and returns it. */
  private assign(ordinal: number): number {
    this.assignedHere.add(ordinal);
    return ordinal;
  }

  private async setState(ordinal: number, to: TierEntry['state'], bytes?: number): Promise<TieringState> {
    const state = this.currentState();
    const next = {
      ...state,
      entries: state.entries.map((entry) =>
        entry.ordinal === ordinal ? { ...entry, state: to, bytes: bytes ?? entry.bytes } : entry,
      ),
    };
    await this.context.log.write(next);
    return next;
  }

  /**
   * Retires what left the local history: trimmed segments (the boundary first, then their
   * objects) and replaced ones (their objects); descriptors go once the boundary passes them. The
   * boundary's ordinal is the lowest one still live, so a reader starts there and ignores a
   * descriptor whose segment ends before the boundary's position or that a later one replaces.
   * Returns how many segments it retired.
   */
  private async retire(): Promise<number> {
    const { log } = this.context;
    const objects = this.objects;
    const state = this.currentState();
    // Followers start where the writer's history does: the boundary says so once per floor.
    const floor = this.context.history.retainedStart;
    const gone = state.entries.filter(
      (entry) => entry.state === 'trimmed' || (entry.state === 'replaced' && replacementVisible(entry, state, floor)),
    );
    const floorMoved = floor.position > (this.boundaryPosition ?? 1);
    if (gone.length === 0 && !floorMoved) return 0;
    const trimmed = gone.filter((entry) => entry.state === 'trimmed');
    let lowOrdinal = state.lowOrdinal;
    if (trimmed.length > 0 || floorMoved) {
      const live = state.entries.filter((entry) => isVisibleRemotely(entry) || entry.state === 'uploading');
      if (trimmed.length > 0)
        lowOrdinal = Math.max(
          lowOrdinal,
          live.length > 0 ? Math.min(...live.map((entry) => entry.ordinal)) : state.nextOrdinal,
        );
      // The boundary moves first: a reader that finds it never looks below it, so what is
      // deleted after it is never asked for.
      this.uploads.counters.requests++;
      await objects.root.put(
        boundaryObjectName,
        encodeBoundary({ format: 1, lowOrdinal, lowPosition: floor.position, lowCommit: floor.commit }),
      );
      this.boundaryPosition = floor.position;
    }
    if (gone.length === 0) return 0;
    const names: string[] = [];
    for (const entry of gone)
      for (const suffix of [...historyFiles, ...indexFiles])
        names.push(segmentObjectName(entry.ordinal, segmentFileName(entry.base, suffix)));
    // Descriptors go only below the boundary, so every ordinal from the boundary's to the newest
    // has one: a reader walking them by GET meets no hole. One above it whose segment is retired
    // (a merged segment trimmed before older ordinals were) stays until the boundary passes it;
    // a reader skips it by its position, below the boundary's.
    const descriptorNames: string[] = [];
    for (let ordinal = state.lowOrdinal; ordinal < lowOrdinal; ordinal++) descriptorNames.push(ordinalName(ordinal));
    // An entry retired while it was going up may have no descriptor: it gets one that names no
    // files, so the ordinals stay without holes (one that got its real descriptor keeps it).
    for (const entry of gone) {
      if (entry.ordinal < lowOrdinal) continue;
      this.uploads.counters.requests++;
      await objects.descriptors.putIfAbsent(
        ordinalName(entry.ordinal),
        encodeDescriptor(this.uploads.retiredDescriptor(entry, state)),
      );
    }
    this.uploads.counters.requests += 1 + Math.ceil(descriptorNames.length / objectDeleteBatchKeys);
    await objects.segments.deleteAll(names);
    if (descriptorNames.length > 0) await objects.descriptors.deleteAll(descriptorNames);
    const retired = new Set(gone.map((entry) => entry.ordinal));
    const latest = this.currentState();
    await log.write({
      ...latest,
      lowOrdinal,
      entries: latest.entries.filter((entry) => !retired.has(entry.ordinal)),
    });
    return gone.length;
  }
}
