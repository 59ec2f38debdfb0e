/**
 * Opens, recovers, appends to and reads the history segments of one feed. Segments are based by
 * their first position and also record their first commit. Following the commit chain on open is
 * `history-recovery.ts`; where sealed bytes are read from is the segment store.
 *
 * It is longer than 500 lines because every read of the history (runs, entries, payloads,
 * columns; async and the few warm synchronous ones) goes through one object that owns the
 * segments, the store, the payload cache and the scratch buffers those reads share.
 */
import path from 'node:path';
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import type { CommitRecord } from './commit-record.js';
import { equalBytes, type RetiredFingerprint, readManifest, readManifestEntryAt } from './commit-run.js';
import { FrameKind } from './frame-kinds.js';
import { type FrameBuilder, scanFrames } from './framing.js';
import { segmentEndGroupBytes } from './groups.js';
import type { RunBufferPool } from './run-buffers.js';
import { payloadElsewhere, type RunColumns } from './run-columns.js';
import {
  assertReadable,
  nextColumns,
  retiredOfRun,
  runColumnsDecoder,
  runsOfStretch,
  type SegmentRunSource,
  stretchColumnsDecoder,
  stretchesOf,
  withPlace,
} from './run-reads.js';

/** First read window for a single manifest entry: most entries are a few dozen bytes. */
const entryReadBytesInitial = 1024;
/** Largest window tried: the largest entry (64 tags of 256 bytes, a 1 KiB key…) fits. */
const entryReadBytesMax = 64 * 1024;

import { yieldWhenDue } from '../event-loop.js';
import {
  atHandFetchesMax,
  coalescedReadBytesMax,
  coalescedReadGapBytes,
  externalReadsInFlightMax,
  frameHeaderBytes,
  frameLengthMask,
  payloadCacheBlockBytes,
  payloadCacheBytesMax,
  remotePointReadBytesMax,
} from '../limits.js';
import { activeCheckpointName, type StoredPayloads, writeActiveCheckpoint } from './active-checkpoint.js';
import { ByteReader } from './codec.js';
import type { CommitList } from './commit-list.js';
import { type SummaryContent, segmentSource } from './commit-pages.js';
import { baseOfSegmentName, segmentFileName, segmentSuffix, summaryFileOf } from './feed-layout.js';
import type { ResumedCheckpoint } from './history-recovery.js';
import { HistoryChainRecovery, type HistoryVisitor } from './history-recovery.js';
import { PayloadCache } from './payload-cache.js';
import { type ManifestEntry, type PayloadLocation, type PublishedRecord, readPublishedRecord } from './records.js';
import type { Corruption } from './runs.js';
import type { SegmentFile } from './segment.js';
import { SegmentKind } from './segment.js';
import { readSegmentCuts } from './segment-cuts.js';
import { removeSegmentFilesBelow, SegmentSet } from './segment-set.js';
import type { SegmentStore } from './segment-store.js';
import { LocalSegmentStore } from './segment-store.js';
import { commitFrameHeader, type SummaryHead, writeSummary } from './segment-summary.js';
import { NotAtHand, TieredHistoryStore } from './tiered-history-store.js';

/** The records of one commit read back: their entries and the run's bytes they point into. */
export interface CommitRun {
  readonly commit: CommitRecord;
  readonly entries: ManifestEntry[];
  /** Where each entry starts in its segment (for the index's locator column). */
  readonly entryOffsets: readonly number[];
  /** The run's bytes (packs and manifests), starting at `commit.runStart`. */
  readonly bytes: Uint8Array;
}

export { assertReadable };

/** The history's state after recovery, for the writer. */
export interface HistoryRecovery {
  /**
   * Corruption after the last readable commit with no readable commit after it: the head of
   * the history is unknown, so nothing may be appended until the damage is repaired.
   */
  readonly headDamage?: Corruption;
}

export class History implements SegmentRunSource {
  /** Set when the head of the history is unknown (see `HistoryRecovery`). */
  headDamage: Corruption | undefined;

  private constructor(
    private readonly kernels: Kernels,
    readonly segments: SegmentSet,
    /**
     * Where sealed segments are read from (and their summaries written to). The active segment
     * is still appended to and fsync'd in place, so it stays a local file, read directly.
     */
    readonly store: TieredHistoryStore,
    /** Every commit in chain order, stand-ins for lost ones included; the writer adds new ones. */
    readonly commits: CommitList,
    private floor: { readonly commit: number; readonly position: number },
    /**
     * The segment each store name was last given for: the store finds the open file to read a
     * name through here, in one lookup, where searching the set cost every payload read of a
     * scan a walk over all the segments.
     */
    private readonly named: Map<string, SegmentFile> = new Map(),
  ) {}

  /** The first position the retained history holds (1 unless a trim removed what was before). */
  get floorPosition(): number {
    return this.floor.position;
  }

  /** The first commit and position the retained history holds: where a snapshot of it opens from. */
  get retainedStart(): { readonly commit: number; readonly position: number } {
    return this.floor;
  }

  /** Every corruption recovery found (torn tails are not corruption). */
  get corruptions(): readonly Corruption[] {
    return this.segments.corruptions;
  }

  /**
   * Opens the history. With `useSummaries` (the default), a finished segment whose summary holds
   * is not read at all: its commits come from the summary. `verify` reads every byte instead.
   */
  static async open(
    kernels: Kernels,
    directory: string,
    visitor: HistoryVisitor,
    readOnly = false,
    useSummaries = true,
    /** Where the retained history starts (a trim removed what lies before it). */
    floor: { readonly commit: number; readonly position: number } = { commit: 1, position: 1 },
    /** Segments a finished merge replaced, whose files a crash left (see `SegmentSet.open`). */
    replacedBases: ReadonlySet<number> = new Set(),
    /** The feed's tag (`feedTagOf`): a segment written for another feed is corruption. */
    feedTag = 0,
    /**
     * Segments tiering evicted (by base, with their ordinals and fingerprints): their files hold
     * only their headers, and their records are read from object storage once it is attached
     * (`store.attachRemote`).
     */
    evicted: ReadonlyMap<number, { readonly ordinal: number; readonly source: number }> = new Map(),
    /** A view of history another process writes: its newest segment may be finished before the next is there. */
    successorMayFollow = false,
  ): Promise<History> {
    let opened: SegmentSet | undefined;
    // The local store reads a sealed segment through the descriptor the set holds open for it.
    const named = new Map<string, SegmentFile>();
    const store = new TieredHistoryStore(
      new LocalSegmentStore(kernels, directory, (name) => named.get(name) ?? (opened && heldSegment(opened, name))),
    );
    for (const [base, { ordinal }] of evicted) store.markEvicted(segmentFileName(base, segmentSuffix.history), ordinal);
    // An interrupted trim may have left the summaries of segments it removed.
    if (!readOnly) await removeSegmentFilesBelow(store, floor.position);
    // Recovery reads the summaries through the same store (and the commit list their pages).
    const recovery = new HistoryChainRecovery(kernels, directory, visitor, floor, store);
    const segments = await SegmentSet.open<CommitRecord, SummaryHead, ResumedCheckpoint>(
      kernels,
      directory,
      SegmentKind.History,
      segmentSuffix.history,
      recovery.decoder,
      recovery.onEvent,
      readOnly,
      // An evicted segment opens by its summary even where every byte is read (verify): its
      // bytes are checked in object storage, block by block, instead.
      useSummaries
        ? recovery.summaryOf
        : (segment) => (evicted.has(segment.header.base) ? recovery.summaryOf(segment) : Promise.resolve(undefined)),
      floor.position,
      replacedBases,
      feedTag,
      store,
      new Set(evicted.keys()),
      successorMayFollow,
      // A fork holds the segment its fork point lies in only up to that point.
      readSegmentCuts(kernels, path.dirname(directory)),
      // `verify` reads every byte, the active segment's too.
      useSummaries ? recovery.checkpoints : undefined,
    );
    opened = segments;
    const history = new History(kernels, segments, store, recovery.list, floor, named);
    // A segment noted evicted that is another one now (a merge put its segment under the name
    // and a crash came before the tiering log said so) is local and whole: it is read here.
    for (const [base, { source }] of evicted) {
      const name = segmentFileName(base, segmentSuffix.history);
      const present = segments.segments.some((segment) => segment.header.base === base);
      if (!present || history.sourceOf(base) !== source) store.forget(name);
    }
    segments.corruptions.push(...recovery.extraCorruptions);
    history.headDamage = recovery.headDamage;
    const active = segments.active;
    history.activeBase = active?.header.base;
    history.heldPayloads = recovery.checkpointPayloads;
    // A feed that writes nothing before it closes leaves the checkpoint it opened from as it is.
    history.checkpointed = recovery.checkpointLast;
    if (recovery.checkpointProblem !== undefined && active) {
      const file = activeCheckpointName(active.header.base);
      history.summaryRebuilds.push({
        segment: active.header.base,
        file: path.join(directory, file),
        reason: `active checkpoint: ${recovery.checkpointProblem}`,
      });
    }
    // The checkpoints of segments finished since they were written stand for nothing now.
    if (!readOnly && active) await removeStaleCheckpoints(store, active.header.base);
    if (useSummaries && !readOnly) {
      for (const { segment, end, commits, reason } of recovery.unsummarized) {
        if (segment === active) continue;
        history.summaryRebuilds.push({ segment: segment.header.base, file: summaryFileOf(segment.file), reason });
        history.writeSummaryLater(segment, end, commits);
      }
      history.summarizeMissing();
    }
    return history;
  }

  /**
   * The active segment's payloads as its checkpoint held them (see `active-checkpoint.ts`), for
   * pack deduplication, when the open took one; the payloads of the runs read after it are
   * reported to the visitor as ever.
   */
  heldPayloads: StoredPayloads | undefined;

  /** The last commit the active segment's checkpoint on disk holds, when this process knows one. */
  checkpointed: number | undefined;

  /**
   * Writes the active segment's checkpoint (its commits, and `payloads`, those of it pack
   * deduplication remembers), so the next open reads the segment only after where it ends now.
   * Nothing when nothing was written since the last one, or when the segment's commits are not
   * whole and in order (damage, a merge's leftovers): a checkpoint is derived, never a guess.
   * Called once writes have stopped (the feed is closing).
   */
  async writeActiveCheckpoint(payloads: StoredPayloads): Promise<void> {
    const active = this.segments.active;
    if (!active || this.segments.readOnly || this.corruptions.length > 0 || this.commits.lost.length > 0) return;
    const { base } = active.header;
    const content = this.commits.heldSummaryContent(base, active.header);
    if (!content?.last || content.last.commit === this.checkpointed) return;
    // Only what the disk confirmed, and only when the last commit's frame ends it: the next open
    // finds that frame there, ending where the checkpoint says the segment ended.
    const end = active.durableEnd;
    const frame = commitFrameHeader(this.kernels, content.last);
    const frameEnd =
      frame.offset + frameHeaderBytes + (new DataView(frame.header.buffer).getUint32(0, true) & frameLengthMask);
    const group = active.lastGroupOffset;
    if (frameEnd !== end || end !== active.writeOffset || group === undefined || group >= frame.offset) return;
    await writeActiveCheckpoint(this.kernels, this.store, active.header, end, group, content, payloads);
    this.checkpointed = content.last.commit;
  }

  /** Summaries rebuilt on open (missing or damaged), as index rebuilds are reported. */
  readonly summaryRebuilds: { segment: number; file: string; reason: string }[] = [];
  /** The segment the last published commit lies in, and its commits: its summary, once finished. */
  private activeBase: number | undefined;
  /** Summary files being written in the background, one after another. */
  private summaryWrites: Promise<void> = Promise.resolve();

  /**
   * Notes a newly published commit. When it lies in a new segment, the segment before it is
   * finished (its `SegmentEnd` is durable), and its summary is written in the background.
   */
  published(commit: CommitRecord): void {
    this.commits.push(commit);
    if (commit.segment !== this.activeBase) {
      const finished =
        this.activeBase === undefined
          ? undefined
          : this.segments.segments.find((segment) => segment.header.base === this.activeBase);
      // A view writes nothing: the process that writes the history writes its summaries.
      if (finished && finished !== this.segments.active && !this.segments.readOnly) {
        this.summarizeIfWhole(finished);
        // Its checkpoint stands for nothing now (its summary does); derived, so a deletion that
        // fails or a crash before it leaves it to the next open's clean-up.
        const checkpoint = activeCheckpointName(finished.header.base);
        void this.store.delete(checkpoint).catch(() => undefined);
      }
      this.activeBase = commit.segment;
    }
  }

  /**
   * Writes in the background the summary of every sealed segment that has none, is not being
   * summarized and is local. Most get theirs when the next segment takes its first commit, or on
   * open when read whole with their `SegmentEnd`; this catches one whose `SegmentEnd` a crash
   * tore while the next segment was written (groups are pipelined): it is whole, as the next
   * segment starting where it ends shows, yet would be read whole on every open, and tiering,
   * which uploads a segment with its summary and keeps only the summary when it evicts it,
   * would wait for one forever. Await `summariesWritten()` after it.
   */
  summarizeMissing(): void {
    const segments = this.segments.segments;
    for (let at = 0; at + 1 < segments.length; at++) {
      const segment = segments[at];
      if (segment === this.segments.active || this.commits.summaryOf(segment.header.base)) continue;
      if (this.store.isEvicted(segmentFileName(segment.header.base, segmentSuffix.history))) continue;
      this.summarizeIfWhole(segment, segments[at + 1].header);
    }
  }

  /** Bases whose summary is being written. */
  private readonly summarizing = new Set<number>();

  /**
   * Writes `segment`'s summary in the background unless one is being written. A summary stands
   * for its whole segment: one whose commits corruption broke gets none, and is read whole (and
   * its damage reported) on every open.
   */
  private summarizeIfWhole(
    segment: SegmentFile,
    /** The next segment's header, when the segment's end is not known durable: it must start right after. */
    next?: { readonly base: number; readonly baseCommit: number },
  ): void {
    if (this.summarizing.has(segment.header.base)) return;
    // The pages the commit list holds encoded are the summary's: nothing is decoded or encoded again.
    const held = this.commits.heldSummaryContent(segment.header.base, segment.header);
    if (held) {
      if (next && (next.baseCommit !== held.last!.commit + 1 || next.base !== held.last!.lastPosition + 1)) return;
      this.writeSummaryLater(segment, segment.durableEnd, held);
      return;
    }
    const commits = this.commits.commitsInSegment(segment.header.base);
    const whole = commits.every(
      (commit, at) =>
        commit.damage === undefined &&
        (at === 0
          ? commit.commit === segment.header.baseCommit && commit.firstPosition === segment.header.base
          : commit.commit === commits[at - 1].commit + 1 && commit.firstPosition === commits[at - 1].lastPosition + 1),
    );
    const last = commits.at(-1);
    // A segment cut short (damage, not a torn segment end) would get a summary of what is left.
    if (next && (!last || next.baseCommit !== last.commit + 1 || next.base !== last.lastPosition + 1)) return;
    if (commits.length > 0 && whole) this.writeSummaryLater(segment, segment.durableEnd, commits);
  }

  /**
   * Writes a finished segment's summary in the background; once it is on disk, the commit list
   * lets go of the segment's commits and reads them from the summary instead.
   */
  private writeSummaryLater(
    segment: SegmentFile,
    end: number,
    commits: readonly CommitRecord[] | SummaryContent,
  ): void {
    const { base, baseCommit, capacity } = segment.header;
    const summary =
      'pages' in commits
        ? { base, baseCommit, capacity, end, content: commits }
        : { base, baseCommit, capacity, end, commits };
    const file = summaryFileOf(segment.file);
    // Through the store, as the segment's reads are: a summary lives where its segment does.
    const put = (bytes: Uint8Array) => this.store.put(path.basename(file), bytes);
    this.summarizing.add(base);
    this.summaryWrites = this.summaryWrites
      .then(async () => this.commits.summarized(await writeSummary(this.kernels, file, summary, segment.header, put)))
      // A summary is derived: if writing it fails, the next open reads the segment instead.
      .catch(() => undefined)
      .finally(() => this.summarizing.delete(base));
  }

  /**
   * Removes the history before `floor` (the first commit and position of a sealed segment, which
   * the caller recorded durably first): the commit list lets go of the earlier commits, and the
   * earlier segments and their summaries are deleted. Never the segment being written.
   */
  async trimBefore(floor: { readonly commit: number; readonly position: number }): Promise<void> {
    const kept = this.segments.segments.find((segment) => segment.header.base === floor.position);
    assert(
      kept !== undefined && kept.header.baseCommit === floor.commit,
      'a trim floor is where a kept segment starts',
    );
    // A summary being written for a segment about to go would be written after its deletion.
    await this.summariesWritten();
    this.commits.trimBefore(floor.commit, floor.position);
    this.floor = floor;
    await this.segments.trimBefore(floor.position);
    await removeSegmentFilesBelow(this.store, floor.position);
    this.forgetNamesGone();
  }

  /** Drops the names of segments the set no longer holds (trimmed, or replaced by a merge). */
  private forgetNamesGone(): void {
    const held = new Set(this.segments.segments);
    for (const [name, segment] of this.named) if (!held.has(segment)) this.named.delete(name);
  }

  /**
   * Switches the merged segment in for the consecutive sealed segments `replaced`, whose
   * commits it holds (described by `summary`, on disk already): the segment set and the commit
   * list change in one synchronous step. The caller made sure no read holds the old ones.
   */
  switchMerged(replaced: readonly SegmentFile[], merged: SegmentFile, summary: SummaryHead): void {
    this.segments.swapIn(replaced, merged);
    this.commits.replaceSegments(
      replaced.map((segment) => segment.header.base),
      summary,
    );
    this.forgetNamesGone();
  }

  /** Resolves once summaries being written in the background are on disk. */
  summariesWritten(): Promise<void> {
    return this.summaryWrites;
  }

  /**
   * Writes the runs in `builder` (one or more, each ended by its commit record) with one
   * fdatasync. `first` names the first run's position and commit, which base a new segment.
   * `placed` is true when the group went into the active segment, its bytes reserved before this
   * returned (the next group may be laid out behind it); false when it needs a new segment (of
   * the next size up to `capacityMax`, see `SegmentSet.grownCapacity`). `bytes` is the group as
   * written, for a feed that also stores it elsewhere (a replicated feed's slots).
   */
  commit(
    builder: FrameBuilder,
    first: { position: number; commit: number },
    capacityMax: number,
  ): {
    placed: boolean;
    durable: Promise<{ segment: number; offset: number }>;
    bytes: Uint8Array;
    /** Where a placed group lands, known before it is durable (its bytes are final then too). */
    at?: { segment: number; offset: number };
  } {
    const bytes = builder.finish(this.kernels);
    const active = this.segments.activeWithRoom(bytes.length, capacityMax);
    if (active) {
      const at = { segment: active.header.base, offset: active.writeOffset };
      return { placed: true, durable: this.appendTo(active, bytes), bytes, at };
    }
    const durable = this.segments
      .roll(bytes.length, () => ({ base: first.position, baseCommit: first.commit }), capacityMax)
      .then((segment) => this.appendTo(segment, bytes));
    return { placed: false, durable, bytes };
  }

  private async appendTo(segment: SegmentFile, bytes: Uint8Array): Promise<{ segment: number; offset: number }> {
    const offset = await this.segments.appendGroup(segment, bytes);
    return { segment: segment.header.base, offset };
  }

  /**
   * The active segment, where the next group lands in it, and the bytes that group may take
   * (its `SegmentEnd` kept back); undefined before the first segment exists. A larger group
   * rolls to a new segment.
   */
  room(): { segment: number; offset: number; bytes: number } | undefined {
    const active = this.segments.active;
    if (!active) return undefined;
    return {
      segment: active.header.base,
      offset: active.writeOffset,
      bytes: Math.max(0, active.free - segmentEndGroupBytes),
    };
  }

  /** Reads a commit's run, verifies its frames, and decodes its manifests. */
  async readRun(commit: CommitRecord): Promise<CommitRun> {
    assertReadable(commit);
    try {
      return await this.readRunUnplaced(commit);
    } catch (error) {
      throw withPlace(error, this.segments.fileFor(commit.segment), commit.runStart);
    }
  }

  private async readRunUnplaced(commit: CommitRecord): Promise<CommitRun> {
    const segment = this.segments.byBase(commit.segment);
    return this.decodeRun(commit, segment, await this.read(segment, commit.runStart, commit.runBytes));
  }

  /**
   * Reads the runs of `commits` (in order, all readable) with one read per stretch of up to
   * `runsReadBytesMax` bytes of a segment: replaying a segment's many small commits costs a few
   * large reads instead of one read each.
   */
  async *readRuns(commits: readonly CommitRecord[]): AsyncGenerator<CommitRun> {
    for (const stretch of stretchesOf(commits)) {
      for (const commit of stretch) assertReadable(commit);
      const first = stretch[0];
      const last = stretch[stretch.length - 1];
      const segment = this.segments.byBase(first.segment);
      let bytes: Uint8Array;
      try {
        bytes = await this.read(segment, first.runStart, last.runStart + last.runBytes - first.runStart);
      } catch (error) {
        throw withPlace(error, segment.file, first.runStart);
      }
      for (const commit of stretch) {
        const from = commit.runStart - first.runStart;
        try {
          yield this.decodeRun(commit, segment, bytes.subarray(from, from + commit.runBytes));
        } catch (error) {
          throw withPlace(error, segment.file, commit.runStart);
        }
      }
    }
  }

  /** Verifies a run's frames (its bytes read from `segment`) and decodes its manifests. */
  private decodeRun(commit: CommitRecord, segment: SegmentFile, bytes: Uint8Array): CommitRun {
    const frames = scanFrames(this.kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${segment.file} is damaged`, {
        details: { file: segment.file, offset: commit.runStart + frameEnd },
      });
    }
    const entries: ManifestEntry[] = [];
    const entryOffsets: number[] = [];
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      const what = `manifest at ${segment.file}:${commit.runStart + frame.offset}`;
      readManifest(bytes, frame.dataStart, frame.dataEnd, commit.segment, commit.runStart, what, (entry, offset) => {
        entries.push(entry);
        entryOffsets.push(commit.runStart + offset);
      });
    }
    if (entries.length !== commit.entries) {
      throw new StreamStackError(
        'CORRUPT',
        `commit ${commit.commit} names ${commit.entries} records but its manifests hold ${entries.length}`,
        {
          details: { file: segment.file, offset: commit.runStart },
        },
      );
    }
    return { commit, entries, entryOffsets, bytes };
  }

  /**
   * Runs the synchronous `read` until it finds every byte at hand: a segment evicted to object
   * storage has its blocks fetched as the read meets them (`NotAtHand`), a local one reads at
   * once. What the asynchronous readers below are, for a fetch or a point lookup that may reach
   * evicted history.
   */
  private async whenAtHand<T>(read: () => T, widen: (miss: NotAtHand) => NotAtHand = (miss) => miss): Promise<T> {
    const fetched: NotAtHand[] = [];
    let verified = false;
    for (;;) {
      try {
        return read();
      } catch (error) {
        if (error instanceof StreamStackError && error.code === 'CORRUPT' && fetched.length > 0 && !verified) {
          // Bytes fetched in pieces failed a record's CRC: the same ranges come again in blocks
          // checked against the descriptor, so damage in object storage is reported naming the
          // object (and a piece garbled on the way is replaced by sound bytes).
          verified = true;
          for (const miss of fetched) await this.store.fetch(miss.file, miss.offset, miss.length, true);
          continue;
        }
        // Each miss brings one more piece or block; a read that keeps missing has more than the
        // cache holds, which is a bug to report, not a loop.
        if (!(error instanceof NotAtHand) || fetched.length >= atHandFetchesMax) throw error;
        const wanted = widen(error);
        fetched.push(wanted);
        await this.store.fetch(wanted.file, wanted.offset, wanted.length, verified);
      }
    }
  }

  /**
   * `readEntrySync`, for a segment that may be evicted. A point lookup reads the entry and then
   * its payload, which, for a record whose payload was new in its run, lies before the entry in
   * the same run (packs come before manifests): so a miss fetches back towards the run's start,
   * up to `remotePointReadBytesMax` in all, and the payload read that follows usually finds its
   * bytes at hand instead of making a second request in turn.
   */
  entryAt(segment: number, offset: number, runStart: number): Promise<ManifestEntry> {
    return this.whenAtHand(
      () => this.readEntrySync(segment, offset, runStart),
      (miss) => {
        const end = miss.offset + miss.length;
        const start = Math.min(miss.offset, Math.max(runStart, end - remotePointReadBytesMax));
        return new NotAtHand(miss.file, start, end - start);
      },
    );
  }

  /** `readEntriesSync`, for a segment that may be evicted. */
  entriesAt(
    segment: number,
    offsets: readonly number[],
    runStarts: number | readonly number[],
  ): Promise<ManifestEntry[]> {
    return this.whenAtHand(() => this.readEntriesSync(segment, offsets, runStarts));
  }

  /** `readPayloadsSync`, for segments that may be evicted. */
  payloadsAt(locations: readonly PayloadLocation[]): Promise<Uint8Array[]> {
    return this.whenAtHand(() => this.readPayloadsSync(locations));
  }

  /** `readPayloadSync`, for a segment that may be evicted. */
  payloadAt(location: PayloadLocation): Promise<Uint8Array> {
    return this.whenAtHand(() => this.readPayloadSync(location));
  }

  /**
   * Reads the manifest entry at `offset` of segment `segment` (whose run starts at `runStart`),
   * for fetching single records by position. Entries are small; a read window that turns out
   * too short is doubled and tried again.
   */
  readEntrySync(segment: number, offset: number, runStart: number): ManifestEntry {
    const file = this.segments.byBase(segment);
    let window = entryReadBytesInitial;
    for (;;) {
      // The common window reuses one scratch buffer: an entry's fields are copied out of it.
      const scratch = window === entryReadBytesInitial ? this.entryScratch : new Uint8Array(window);
      const length = this.readSyncInto(
        file,
        scratch.subarray(0, Math.min(window, file.header.capacity - offset)),
        offset,
      );
      try {
        const entry = readManifestEntryAt(
          this.crc32c,
          scratch.subarray(0, length),
          0,
          segment,
          runStart,
          `manifest entry at ${file.file}:${offset}`,
        );
        // The fingerprint is a view of the scratch buffer, which the next read overwrites.
        return { ...entry, fingerprint: entry.fingerprint.slice() };
      } catch (error) {
        if (length < window || window >= entryReadBytesMax) throw withPlace(error, file.file, offset);
        window *= 4;
      }
    }
  }

  private readonly entryScratch = new Uint8Array(entryReadBytesInitial);

  /**
   * The manifest entries at `offsets` (ascending) of segment `segment`, as `readEntrySync` reads
   * them one at a time, but with one read for each stretch of entries lying within
   * `coalescedReadGapBytes` of each other (an index fetch's hits, sorted by where they lie).
   * `runStarts` is where the run of each entry starts, or of all of them when they share one.
   */
  readEntriesSync(segment: number, offsets: readonly number[], runStarts: number | readonly number[]): ManifestEntry[] {
    const file = this.segments.byBase(segment);
    const runStartOf = (at: number) => (typeof runStarts === 'number' ? runStarts : runStarts[at]);
    const entries = new Array<ManifestEntry>(offsets.length);
    for (let first = 0; first < offsets.length; ) {
      let last = first + 1;
      while (
        last < offsets.length &&
        offsets[last] >= offsets[last - 1] &&
        offsets[last] - offsets[last - 1] <= coalescedReadGapBytes &&
        offsets[last] + entryReadBytesInitial - offsets[first] <= coalescedReadBytesMax
      ) {
        last++;
      }
      if (last === first + 1) {
        entries[first] = this.readEntrySync(segment, offsets[first], runStartOf(first));
      } else {
        const start = offsets[first];
        // A short read (a file cut short) leaves the entries past its end to be read alone.
        const window = new Uint8Array(
          Math.min(offsets[last - 1] + entryReadBytesInitial, file.header.capacity) - start,
        );
        const bytes = window.subarray(0, this.readSyncInto(file, window, start));
        for (let at = first; at < last; at++) {
          try {
            entries[at] = readManifestEntryAt(
              this.crc32c,
              bytes,
              offsets[at] - start,
              segment,
              runStartOf(at),
              `manifest entry at ${file.file}:${offsets[at]}`,
            );
          } catch {
            // An entry running past the read (a long one), or a damaged one: read alone, which
            // widens its window or reports the damage with its place.
            entries[at] = this.readEntrySync(segment, offsets[at], runStartOf(at));
          }
        }
      }
      first = last;
    }
    return entries;
  }

  /**
   * Payloads, each checked by its CRC, as `readPayloadSync` reads them, but with one read for
   * each stretch of payloads of a segment lying within `coalescedReadGapBytes` of each other.
   */
  readPayloadsSync(locations: readonly PayloadLocation[]): Uint8Array[] {
    const payloads = new Array<Uint8Array>(locations.length);
    const order = locations
      .map((_, index) => index)
      .sort((a, b) => locations[a].segment - locations[b].segment || locations[a].offset - locations[b].offset);
    for (let first = 0; first < order.length; ) {
      const head = locations[order[first]];
      const segment = this.segments.byBase(head.segment);
      let end = head.offset + head.length;
      let last = first + 1;
      for (; last < order.length; last++) {
        const next = locations[order[last]];
        if (
          next.segment !== head.segment ||
          next.offset - end > coalescedReadGapBytes ||
          next.offset + next.length - head.offset > coalescedReadBytesMax
        )
          break;
        end = Math.max(end, next.offset + next.length);
      }
      if (last === first + 1) {
        payloads[order[first]] = this.readPayloadSync(head);
      } else {
        const bytes = this.readSync(segment, head.offset, end - head.offset);
        for (let at = first; at < last; at++) {
          const location = locations[order[at]];
          const from = location.offset - head.offset;
          payloads[order[at]] = this.checkPayload(bytes.subarray(from, from + location.length), location, segment.file);
        }
      }
      first = last;
    }
    return payloads;
  }

  /**
   * Reads a commit's run straight into published records, payloads included: what a scan
   * reads, with one object per record and payloads as views of the run's bytes.
   */
  async readRunRecords(commit: CommitRecord, feed: string): Promise<PublishedRecord[]> {
    return this.decodeRunRecords(commit, feed, await this.readRunBytes(commit));
  }

  /**
   * The fingerprints a key-compacted run retired (its `retired` frames, see `commit-run.ts`),
   * from the run's bytes when the caller read them already. Empty for every other run.
   */
  async readRetired(commit: CommitRecord, runBytes?: Uint8Array): Promise<RetiredFingerprint[]> {
    if (commit.retired.length === 0) return [];
    assertReadable(commit);
    const segment = this.segments.byBase(commit.segment);
    return retiredOfRun(
      this.kernels,
      segment.file,
      commit,
      runBytes ?? (await this.read(segment, commit.runStart, commit.runBytes)),
    );
  }

  /**
   * A commit's run as bytes (packs and manifests), for `decodeRunRecords`. The bytes are also
   * held in the payload cache: later records of the segment that repeat a payload stored in
   * this run find it there. Read into a buffer of `pool` when given, and then not cached: the
   * buffer is read into again once its reader and consumer are done with it.
   */
  async readRunBytes(commit: CommitRecord, pool?: RunBufferPool): Promise<Uint8Array> {
    assertReadable(commit);
    const segment = this.segments.byBase(commit.segment);
    if (pool) return this.readInto(segment, pool.take(commit.runBytes), commit.runStart);
    const bytes = await this.read(segment, commit.runStart, commit.runBytes);
    if (commit.packs.length > 0) this.cache.add(segment, commit.runStart, bytes);
    return bytes;
  }

  /**
   * The runs of `commits` (consecutive, readable, of one segment, spanning at most
   * `runsReadBytesMax`) with one read: a scan of many small commits costs one read per stretch,
   * not one (a trip through the thread pool) per commit. The bytes run from the first run's
   * start to the last run's end, and are read into a buffer of `pool` when given (see
   * `readRunBytes`).
   */
  async readStretchBytes(commits: readonly CommitRecord[], pool?: RunBufferPool): Promise<Uint8Array> {
    for (const commit of commits) assertReadable(commit);
    const first = commits[0];
    const last = commits[commits.length - 1];
    assert(
      commits.every((commit) => commit.segment === first.segment),
      'a stretch of runs lies in one segment',
    );
    if (commits.length === 1) return this.readRunBytes(first, pool);
    const segment = this.segments.byBase(first.segment);
    const length = last.runStart + last.runBytes - first.runStart;
    const bytes = pool
      ? await this.readInto(segment, pool.take(length), first.runStart)
      : await this.read(segment, first.runStart, length);
    if (!pool) this.cache.add(segment, first.runStart, bytes);
    return bytes;
  }

  /** The runs of `commits` as `readStretchBytes` reads them, each a view of the stretch. */
  async readRunsBytes(commits: readonly CommitRecord[], pool?: RunBufferPool): Promise<Uint8Array[]> {
    return runsOfStretch(commits, await this.readStretchBytes(commits, pool));
  }

  /**
   * Each of `commits` (consecutive, readable) with its run's bytes, read a stretch at a time
   * (`readRunsBytes`): how a derived file's rebuild walks a segment.
   */
  async *runsInStretches(
    commits: readonly CommitRecord[],
  ): AsyncGenerator<{ commit: CommitRecord; bytes: Uint8Array }> {
    for (const stretch of stretchesOf(commits)) {
      const runs = await this.readRunsBytes(stretch);
      for (const [index, commit] of stretch.entries()) yield { commit, bytes: runs[index] };
    }
  }

  /**
   * The source fingerprint of the finished segment at `base` (`segmentSource`), which its derived
   * files must carry: from its summary's head when its commits are read from one, else computed
   * from the commits held.
   */
  sourceOf(base: number): number {
    return (
      this.commits.summaryOf(base)?.source ??
      this.commits.heldSourceOf(base) ??
      segmentSource(this.kernels, this.commits.commitsInSegment(base))
    );
  }

  /** The file of the segment at `base`. */
  fileFor(base: number): string {
    return this.segments.fileFor(base);
  }

  /**
   * The local files of the sealed segment at `base` and of its summary, for a worker thread to
   * open by path (an index or dictionary build reads the segment itself, its commits from its
   * summary, off the event loop); undefined when the store keeps no local file of them. Then the
   * caller reads the segment here, through the store, and hands the worker what it read: a
   * remote store's bytes are never opened by path.
   */
  localPathOf(base: number): { readonly file: string; readonly summary: string } | undefined {
    const file = this.segments.fileFor(base);
    const local = this.store.localPath(path.basename(file));
    const summary = this.store.localPath(path.basename(summaryFileOf(file)));
    return local === undefined || summary === undefined ? undefined : { file: local, summary };
  }

  /** Recently read segment bytes, for payloads referenced from other runs. */
  private readonly cache = new PayloadCache(payloadCacheBytesMax);

  /** Verifies a run's frames and decodes its records (see `readRunRecords`). */
  async decodeRunRecords(commit: CommitRecord, feed: string, bytes: Uint8Array): Promise<PublishedRecord[]> {
    assertReadable(commit);
    try {
      return await this.decodeRunRecordsUnplaced(commit, feed, bytes);
    } catch (error) {
      throw withPlace(error, this.segments.fileFor(commit.segment), commit.runStart);
    }
  }

  private async decodeRunRecordsUnplaced(
    commit: CommitRecord,
    feed: string,
    bytes: Uint8Array,
  ): Promise<PublishedRecord[]> {
    const segment = this.segments.byBase(commit.segment);
    const frames = scanFrames(this.kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${segment.file} is damaged`, {
        details: { file: segment.file, offset: commit.runStart + frameEnd },
      });
    }
    const records = new Array<PublishedRecord>(commit.entries);
    const sparse = commit.entries !== commit.records;
    const external: { index: number; location: PayloadLocation }[] = [];
    const run = {
      feed,
      commit: commit.commit,
      stream: commit.stream,
      segment: commit.segment,
      runStart: commit.runStart,
    };
    let count = 0;
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      const reader = new ByteReader(
        bytes,
        frame.dataStart + 1,
        frame.dataEnd,
        `manifest at ${segment.file}:${commit.runStart + frame.offset}`,
      );
      reader.u32();
      const entries = reader.u32();
      if (count + entries > commit.entries) break;
      for (let index = 0; index < entries; index++) {
        // A run of 100,000 records is decoded a slice at a time: reads and appends go on.
        const pause = yieldWhenDue(count);
        if (pause) await pause;
        records[count] = readPublishedRecord(
          reader,
          run,
          sparse ? undefined : commit.firstPosition + count,
          bytes,
          (location) => external.push({ index: count, location }),
          commit.firstPosition,
        );
        if (sparse)
          checkSparsePosition(
            commit,
            records[count].position,
            count === 0 ? commit.firstPosition - 1 : records[count - 1].position,
            segment.file,
          );
        count++;
      }
      reader.expectEnd();
    }
    if (count !== commit.entries) {
      throw new StreamStackError(
        'CORRUPT',
        `commit ${commit.commit} names ${commit.entries} records but its manifests hold ${count}`,
        {
          details: { file: segment.file, offset: commit.runStart },
        },
      );
    }
    for (const { index, location } of external) {
      // Most repeats find their payload in the cache: the await is only for the rest.
      const cached = this.cachedPayload(segment, location);
      records[index].payload = cached ?? (await this.readPayload(location));
    }
    return records;
  }

  /**
   * Verifies a run's frames and decodes its records into columns, at most `rowsMax` rows at a
   * time (see `RunColumns`). Payloads stored by other runs are read (most from the cache) and
   * gathered into each batch's `externalBytes`; the run's own bytes are never copied.
   */
  async *runColumns(
    commit: CommitRecord,
    bytes: Uint8Array,
    rowsMax: number,
    /** False when the payloads are not wanted (a key dictionary's build): stored elsewhere, they are not read. */
    payloads = true,
  ): AsyncGenerator<RunColumns> {
    assertReadable(commit);
    const segment = this.segments.byBase(commit.segment);
    const decoder = runColumnsDecoder(this.kernels, segment.file, commit, bytes);
    while (!decoder.done) {
      let columns = nextColumns(decoder, segment.file, commit.runStart, rowsMax);
      if (payloads && columns.external.length > 0) {
        try {
          columns = await this.gatherExternal(segment, columns);
        } catch (error) {
          throw withPlace(error, segment.file, commit.runStart);
        }
      }
      yield columns;
    }
  }

  /**
   * The runs of `commits` (a stretch: consecutive, readable, of one segment, read as `bytes`
   * from the first run's start) as columns of at most `rowsMax` rows each, whose batches span
   * commits (`RunColumns.rowRuns` names each row's). What a scan of many small commits reads:
   * one kernel call per batch, not one per commit.
   */
  async *stretchColumns(
    commits: readonly CommitRecord[],
    bytes: Uint8Array,
    /** Asked before each batch: a read with a limit takes no more rows than it still wants. */
    rowsMax: () => number,
  ): AsyncGenerator<RunColumns> {
    const segment = this.segments.byBase(commits[0].segment);
    const offset = commits[0].runStart;
    const decoder = stretchColumnsDecoder(this.kernels, segment.file, commits, bytes);
    while (!decoder.done) {
      let columns = nextColumns(decoder, segment.file, offset, rowsMax());
      if (columns.external.length > 0) {
        try {
          columns = await this.gatherExternal(segment, columns);
        } catch (error) {
          throw withPlace(error, segment.file, offset);
        }
      }
      yield columns;
    }
  }

  /** Reads the payloads other runs stored for `columns` into one buffer of their own. */
  private async gatherExternal(segment: SegmentFile, columns: RunColumns): Promise<RunColumns> {
    const payloads = new Array<Uint8Array>(columns.external.length);
    const missing: number[] = [];
    for (const [index, { location }] of columns.external.entries()) {
      const cached = this.cachedPayload(segment, location);
      if (cached) payloads[index] = cached;
      else missing.push(index);
    }
    // The payloads not cached are read side by side, a few at a time: each waits for a read (of
    // evicted history, a request), and a run's repeats lie all over its segment.
    for (let first = 0; first < missing.length; first += externalReadsInFlightMax) {
      const slice = missing.slice(first, first + externalReadsInFlightMax);
      const read = await Promise.all(slice.map((index) => this.readPayload(columns.external[index].location)));
      for (const [at, index] of slice.entries()) payloads[index] = read[at];
    }
    let total = 0;
    for (const payload of payloads) total += payload.length;
    const externalBytes = new Uint8Array(total);
    let at = 0;
    for (const [index, { row }] of columns.external.entries()) {
      externalBytes.set(payloads[index], at);
      columns.payloadStarts[row] = at;
      at += payloads[index].length;
      columns.payloadEnds[row] = at;
      columns.flags[row] |= payloadElsewhere;
    }
    return { ...columns, externalBytes };
  }

  /** A payload's bytes, from the run already read when it lies there, else from its segment. */
  async readPayload(location: PayloadLocation, run?: CommitRun): Promise<Uint8Array> {
    if (run && location.segment === run.commit.segment) {
      const start = location.offset - run.commit.runStart;
      if (start >= 0 && start + location.length <= run.bytes.length) {
        return run.bytes.subarray(start, start + location.length);
      }
    }
    const segment = this.segments.byBase(location.segment);
    const cached = this.cachedPayload(segment, location);
    if (cached) return cached;
    // The block around the payload is read and held: the payloads near a repeated one tend to
    // be repeated too, by the records that follow.
    const blockStart = location.offset - (location.offset % payloadCacheBlockBytes);
    const blockEnd = Math.min(blockStart + payloadCacheBlockBytes, segment.durableEnd, segment.header.capacity);
    if (blockEnd < location.offset + location.length) {
      return this.checkPayload(await this.read(segment, location.offset, location.length), location, segment.file);
    }
    // Payloads read side by side (`gatherExternal`) often share a block: it is read once.
    const key = `${segment.header.base}:${blockStart}`;
    let reading = this.payloadBlocksReading.get(key);
    if (!reading) {
      reading = this.read(segment, blockStart, blockEnd - blockStart).then((bytes) => {
        this.cache.add(segment, blockStart, bytes);
        return bytes;
      });
      this.payloadBlocksReading.set(key, reading);
      const forget = () => this.payloadBlocksReading.delete(key);
      reading.then(forget, forget);
    }
    const block = await reading;
    const from = location.offset - blockStart;
    return this.checkPayload(block.subarray(from, from + location.length), location, segment.file);
  }

  /** Payload cache blocks being read, by segment base and offset. */
  private readonly payloadBlocksReading = new Map<string, Promise<Uint8Array>>();

  /** A payload from the cache, checked by its CRC, or undefined when the cache lacks it. */
  private cachedPayload(segment: SegmentFile, location: PayloadLocation): Uint8Array | undefined {
    const cached = this.cache.find(segment, location.offset, location.length);
    return cached && this.checkPayload(cached, location, segment.file);
  }

  /** A payload's bytes read on their own, synchronously (point lookups), checked by its CRC. */
  readPayloadSync(location: PayloadLocation): Uint8Array {
    const segment = this.segments.byBase(location.segment);
    return (
      this.cachedPayload(segment, location) ??
      this.checkPayload(this.readPayloadUnchecked(location), location, segment.file)
    );
  }

  /**
   * A payload's bytes without the CRC check: only for comparing a candidate byte for byte with
   * a new payload (dedup), where damaged bytes simply fail to match.
   */
  private readPayloadUnchecked(location: PayloadLocation): Uint8Array {
    return this.readSync(this.segments.byBase(location.segment), location.offset, location.length);
  }

  /** Scratch for `storedPayloadEquals`, grown to the largest payload compared. */
  private compareScratch = new Uint8Array(4096);

  /**
   * True when the payload stored at `location` has exactly the bytes `payload` has: what pack
   * dedup confirms a candidate with. The bytes come from the payload cache when it holds them,
   * or are read into a reused buffer: a seal of 100,000 records confirms thousands of repeats.
   */
  storedPayloadEquals(location: PayloadLocation, payload: Uint8Array): boolean {
    if (location.length !== payload.length) return false;
    const segment = this.segments.byBase(location.segment);
    const cached = this.cache.find(segment, location.offset, location.length);
    if (cached) return equalBytes(cached, payload);
    if (this.compareScratch.length < location.length) this.compareScratch = new Uint8Array(location.length);
    const into = this.compareScratch.subarray(0, location.length);
    return this.readSyncInto(segment, into, location.offset) === location.length && equalBytes(into, payload);
  }

  private checkPayload(bytes: Uint8Array, location: PayloadLocation, file: string): Uint8Array {
    if (this.kernels.crc32c(bytes) !== location.crc) {
      throw new StreamStackError('CORRUPT', `the payload at ${file}:${location.offset} fails its CRC`, {
        details: { file, offset: location.offset },
      });
    }
    return bytes;
  }

  private readonly crc32c = (bytes: Uint8Array): number => this.kernels.crc32c(bytes);

  /**
   * The store's name of `segment` when it is sealed; undefined for the active segment, which is
   * still appended to in place and so is read as the local file it is. Called in the same
   * synchronous step as the `byBase` that found the segment, so the name is that segment's (a
   * merge that reuses the name switches segments only between reads).
   */
  private sealedName(segment: SegmentFile): string | undefined {
    if (segment === this.segments.active) return undefined;
    // Named and then read in one synchronous step: the store's lookup finds this very segment,
    // even where a merge gave its name to a new one meanwhile.
    const name = storeName(segment);
    this.named.set(name, segment);
    return name;
  }

  /** Reads `length` bytes at `offset` of `segment`: through the store once it is sealed. */
  private read(segment: SegmentFile, offset: number, length: number): Promise<Uint8Array> {
    const name = this.sealedName(segment);
    return name === undefined ? segment.read(offset, length) : this.store.read(name, offset, length);
  }

  /** `read` into a buffer of a `RunBufferPool`. */
  private readInto(segment: SegmentFile, into: Uint8Array, offset: number): Promise<Uint8Array> {
    const name = this.sealedName(segment);
    return name === undefined ? segment.readInto(into, offset) : this.store.readInto(name, into, offset);
  }

  /**
   * `read`, synchronously: only for the point lookups and index fetches that cannot await (a
   * `get`, `readPayloadsSync`), which a store offers while it has the bytes at hand
   * (`SyncSegmentReads`).
   */
  private readSync(segment: SegmentFile, offset: number, length: number): Uint8Array {
    const name = this.sealedName(segment);
    return name === undefined ? segment.readSync(offset, length) : this.store.readSync(name, offset, length);
  }

  /**
   * Reads up to `into.length` bytes synchronously, returning how many: manifest entries for an
   * index fetch, and pack dedup's comparison while a seal is laid out, which cannot await.
   */
  private readSyncInto(segment: SegmentFile, into: Uint8Array, offset: number): number {
    const name = this.sealedName(segment);
    return name === undefined ? segment.readSyncInto(into, offset) : this.store.readSyncInto(name, into, offset);
  }

  close(): void {
    this.cache.clear();
    this.segments.close();
  }
}

/**
 * A compacted run's entry is placed by its seq: positions ascend within the commit's span, or
 * the run is corrupt (checked after reading, as every place a read trusts).
 */
export function checkSparsePosition(commit: CommitRecord, position: number, previous: number, file: string): void {
  if (position > previous && position <= commit.lastPosition) return;
  throw new StreamStackError(
    'CORRUPT',
    `commit ${commit.commit} places a record at position ${position}, outside ${previous + 1}..${commit.lastPosition}`,
    {
      details: { file, offset: commit.runStart },
    },
  );
}

/** Each segment's name in the store, kept: a point lookup should not parse its path again. */
const storeNames = new WeakMap<SegmentFile, string>();

/** The name of `segment` in the store: its file's name, in the folder the store holds. */
function storeName(segment: SegmentFile): string {
  let name = storeNames.get(segment);
  if (name === undefined) storeNames.set(segment, (name = path.basename(segment.file)));
  return name;
}

/**
 * The sealed history segment named `name` that `segments` holds open, for the local store to
 * read through; undefined for any other name (a summary, say).
 */
function heldSegment(segments: SegmentSet, name: string): SegmentFile | undefined {
  // A summary's page is read by name too: it is no segment, and is answered without a walk.
  if (!name.endsWith(segmentSuffix.history)) return undefined;
  return segments.segments.find((segment) => storeName(segment) === name);
}

/** Deletes the checkpoints of segments before the active one (at `activeBase`): they were finished since. */
async function removeStaleCheckpoints(store: SegmentStore, activeBase: number): Promise<void> {
  const stale = (await store.list()).filter(
    (name) => name.endsWith(segmentSuffix.activeCheckpoint) && (baseOfSegmentName(name) ?? activeBase) < activeBase,
  );
  if (stale.length > 0) await store.deleteAll(stale);
}
