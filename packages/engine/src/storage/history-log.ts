/**
 * Opens, recovers and appends to the history segments of one feed, and keeps what is derived from
 * them as they change: summaries of finished segments, the active segment's checkpoint, trims
 * and merges. Segments are based by their first position and also record their first commit.
 * Following the commit chain on open is `history-recovery.ts`; where sealed bytes are read from
 * is the segment store. Reads go through the three objects a `History` holds: `runs`
 * (`history-runs.ts`), `entries` (`history-entries.ts`) and `bytes` (`history-bytes.ts`, payloads
 * and the cache they share).
 */
import path from 'node:path';
import { assert } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameHeaderBytes, frameLengthMask } from '../limits.js';
import { activeCheckpointName, type StoredPayloads, writeActiveCheckpoint } from './active-checkpoint.js';
import type { CommitList } from './commit-list.js';
import { type SummaryContent, segmentSource } from './commit-pages.js';
import type { CommitRecord } from './commit-record.js';
import { baseOfSegmentName, segmentFileName, segmentSuffix, summaryFileOf } from './feed-layout.js';
import type { FrameBuilder } from './framing.js';
import { segmentEndGroupBytes } from './groups.js';
import { HistoryBytes } from './history-bytes.js';
import { HistoryEntries } from './history-entries.js';
import type { ResumedCheckpoint } from './history-recovery.js';
import { HistoryChainRecovery, type HistoryVisitor } from './history-recovery.js';
import { HistoryRuns } from './history-runs.js';
import type { Corruption } from './runs.js';
import type { SegmentFile } from './segment.js';
import { SegmentKind } from './segment.js';
import { readSegmentCuts } from './segment-cuts.js';
import { removeSegmentFilesBelow, SegmentSet } from './segment-set.js';
import type { SegmentStore } from './segment-store.js';
import { LocalSegmentStore } from './segment-store.js';
import { commitFrameHeader, type SummaryHead, writeSummary } from './segment-summary.js';
import { TieredHistoryStore } from './tiered-history-store.js';

/** The history's state after recovery, for the writer. */
export interface HistoryRecovery {
  /**
   * Corruption after the last readable commit with no readable commit after it: the head of
   * the history is unknown, so nothing may be appended until the damage is repaired.
   */
  readonly headDamage?: Corruption;
}

export class History {
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
    /** The segments' bytes and payloads as reads get them, with the payload cache. */
    readonly bytes: HistoryBytes,
  ) {
    this.runs = new HistoryRuns(kernels, segments, bytes);
    this.entries = new HistoryEntries(kernels, segments, bytes);
  }

  /** Reads of commit runs: their entries, records, columns and bytes. */
  readonly runs: HistoryRuns;
  /** Reads of single manifest entries by where they lie (point lookups, index fetches). */
  readonly entries: HistoryEntries;

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
    let bytes: HistoryBytes | undefined;
    // The local store reads a sealed segment through the descriptor the set holds open for it,
    // once the set is open.
    const store = new TieredHistoryStore(
      new LocalSegmentStore(kernels, directory, (name) => bytes?.segmentNamed(name)),
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
    bytes = new HistoryBytes(kernels, segments, store);
    const history = new History(kernels, segments, store, recovery.list, floor, bytes);
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
    this.bytes.forgetNamesGone();
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
    this.bytes.forgetNamesGone();
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

  close(): void {
    this.bytes.cache.clear();
    this.segments.close();
  }
}

/** Deletes the checkpoints of segments before the active one (at `activeBase`): they were finished since. */
async function removeStaleCheckpoints(store: SegmentStore, activeBase: number): Promise<void> {
  const stale = (await store.list()).filter(
    (name) => name.endsWith(segmentSuffix.activeCheckpoint) && (baseOfSegmentName(name) ?? activeBase) < activeBase,
  );
  if (stale.length > 0) await store.deleteAll(stale);
}
