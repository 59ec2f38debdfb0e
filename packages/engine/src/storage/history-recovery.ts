/**
 * Recovery of a feed's history as its segments open, in log order: it follows the commit chain
 * (each commit continues the one before in commit number and position), turns what breaks it into
 * corruption or lost commits (stand-ins that keep the chain's numbers, docs/faults.md), takes a
 * finished segment's commits from its summary when that holds, and notes the finished segments
 * read whole, whose summaries are then rebuilt. `History.open` hands its segment set this
 * recovery's decoder, event handler and summary reader, and builds the history from what it found.
 */
import path from 'node:path';
import type { Kernels } from '../kernels/kernels.js';
import { type ActiveCheckpoint, readActiveCheckpoint, type StoredPayloads } from './active-checkpoint.js';
import { CommitList, lostCommits } from './commit-list.js';
import { type CommitRecord, readCommitRecord } from './commit-record.js';
import { readPackDirectory } from './commit-run.js';
import { segmentFile, segmentSuffix, summaryFileOf } from './feed-layout.js';
import { FrameKind } from './frame-kinds.js';
import type { ScannedFrame } from './framing.js';
import type { PayloadLocation } from './records.js';
import type { Corruption, MarkerDecoder } from './runs.js';
import type { SegmentFile } from './segment.js';
import type { OpenedSegment, Resumable, ResumePoint, SegmentEvent } from './segment-set.js';
import {
  checkSummaryAgainstSegment,
  orphanSummaryCommits,
  readSummaryHead,
  type SummaryHead,
} from './segment-summary.js';
import type { TieredHistoryStore } from './tiered-history-store.js';

/** What opening the history reports besides its commit list (`History.commits`). */
export interface HistoryVisitor {
  /** A commit read from its segment (a summarized segment's commits are not read). */
  onCommit?(commit: CommitRecord): void;
  onPayload?(crc: number, location: PayloadLocation): void;
  /**
   * Commits `from`..`to` (positions `fromPosition`..`toPosition`) cannot be read: corruption
   * took them. They are known to have existed because a later commit follows them.
   */
  onLost?(lost: LostCommits): void;
}

/** A run of commits that corruption made unreadable, and where the corruption lies. */
export interface LostCommits {
  readonly from: number;
  readonly to: number;
  readonly fromPosition: number;
  readonly toPosition: number;
  readonly damage: Corruption;
}

/** A finished segment read whole because it had no sound summary: its summary is rebuilt. */
export interface UnsummarizedSegment {
  readonly segment: SegmentFile;
  readonly end: number;
  readonly commits: CommitRecord[];
  readonly reason: string;
}

/** A checkpoint of the active segment, and the place in the segment it must be borne out at. */
export type ResumedCheckpoint = ActiveCheckpoint & ResumePoint;

/** The commit chain as recovery follows it through the segments, and what it found on the way. */
export class HistoryChainRecovery {
  /** Every commit in chain order, stand-ins for lost ones included. */
  readonly list: CommitList;
  /** Corruption found here rather than by the segment set: sound runs or segments off the chain. */
  readonly extraCorruptions: Corruption[] = [];
  /** Finished segments read whole, in order (see `UnsummarizedSegment`). */
  readonly unsummarized: UnsummarizedSegment[] = [];
  private readonly summaryProblems = new Map<string, string>();
  /** Why the active segment's checkpoint that is there was passed over (undefined: taken, or none). */
  checkpointProblem: string | undefined;
  /** The payloads of the active segment the checkpoint taken holds (see `History.heldPayloads`). */
  checkpointPayloads: StoredPayloads | undefined;
  /** The last commit of the checkpoint taken. */
  checkpointLast: number | undefined;
  private expectedCommit: number;
  private expectedPosition: number;
  private segmentBase = 0;
  /** The first damage since the last commit that continued the chain. */
  private pending: Corruption | undefined;
  /** Where the previous segment's sound bytes ended (for a break between segments). */
  private previousEnd: Corruption | undefined;
  /** Where the segment before, read whole, ended when it had no segment end (not finished). */
  private previousUnfinished: Corruption | undefined;

  constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly visitor: HistoryVisitor,
    floor: { readonly commit: number; readonly position: number },
    /** Where the history's summaries are read from (the store its sealed segments are in). */
    private readonly store: TieredHistoryStore,
  ) {
    this.list = new CommitList(kernels, floor, store);
    this.expectedCommit = floor.commit;
    this.expectedPosition = floor.position;
  }

  /** Damage after the last commit that continued the chain: the head of the history is unknown. */
  get headDamage(): Corruption | undefined {
    return this.pending;
  }

  /** How the segment set decodes a history run's marker: its commit record, if it names its frames. */
  readonly decoder: MarkerDecoder<CommitRecord> = {
    isMarker: (frame) => frame.kind === FrameKind.Commit,
    decode: (bytes, frame, runFrames) => this.decodeCommit(bytes, frame, runFrames),
    beginSegment: (header) => {
      this.segmentBase = header.base;
    },
  };

  /** A finished segment's summary, checked against it; undefined (and the problem kept) when it does not hold. */
  readonly summaryOf = async (segment: SegmentFile): Promise<SummaryHead | undefined> => {
    const file = summaryFileOf(segment.file);
    try {
      const head = await readSummaryHead(this.kernels, this.store, path.basename(file), segment.header);
      // An evicted segment's file holds only its header: its bytes are checked in object
      // storage, against its descriptor's CRCs, as they are read back.
      if (head && !this.store.isEvicted(path.basename(segment.file))) checkSummaryAgainstSegment(head, segment.file);
      return head;
    } catch (error) {
      this.summaryProblems.set(file, (error as Error).message);
      return undefined;
    }
  };

  /** The newest segment's checkpoint (`active-checkpoint.ts`), when one holds together. */
  readonly checkpoints: Resumable<ResumedCheckpoint> = {
    of: async (segment) => {
      const { checkpoint, problem } = await readActiveCheckpoint(this.kernels, this.store, segment.header);
      this.checkpointProblem = problem;
      if (!checkpoint) return undefined;
      const { head } = checkpoint;
      return {
        ...checkpoint,
        end: head.end,
        lastFrameOffset: head.lastFrameOffset,
        lastFrameHeader: head.lastFrameHeader,
      };
    },
    refused: (reason) => {
      this.checkpointProblem = reason;
    },
  };

  /** What the segment set reports, in log order. */
  readonly onEvent = (event: SegmentEvent<CommitRecord, SummaryHead, ResumedCheckpoint>): void => {
    if (event.kind === 'corruption') {
      this.note(event.corruption);
      return;
    }
    const segment = event.kind === 'segment' ? event.opened.segment : event.segment;
    this.checkSegmentStart(segment);
    if (event.kind === 'summary') this.takeSummary(segment, event.summary);
    else this.takeScanned(event.opened);
  };

  private decodeCommit(bytes: Uint8Array, frame: ScannedFrame, runFrames: readonly ScannedFrame[]) {
    return commitOfRun(bytes, frame, runFrames, this.segmentBase);
  }

  private note(damage: Corruption): void {
    this.pending ??= damage;
  }

  /** Takes commits `first`..`last` (one commit, or a summarized segment's) if they continue the chain. */
  private accept(
    first: { commit: number; firstPosition: number },
    last: { commit: number; lastPosition: number },
    where: Corruption,
  ): boolean {
    if (
      first.commit < this.expectedCommit ||
      (first.commit === this.expectedCommit && first.firstPosition !== this.expectedPosition) ||
      first.firstPosition < this.expectedPosition
    ) {
      // A sound run that does not continue the chain is corruption (a copied or moved run).
      this.extraCorruptions.push(where);
      this.note(where);
      return false;
    }
    if (first.commit > this.expectedCommit) this.loseUpTo(first, where);
    this.pending = undefined;
    this.expectedCommit = last.commit + 1;
    this.expectedPosition = last.lastPosition + 1;
    return true;
  }

  /** The commits before `first` that the chain expected are lost: their stand-ins join the list. */
  private loseUpTo(first: { commit: number; firstPosition: number }, where: Corruption): void {
    const lost = {
      from: this.expectedCommit,
      to: first.commit - 1,
      fromPosition: this.expectedPosition,
      toPosition: first.firstPosition - 1,
      damage: this.pending ?? where,
    };
    this.visitor.onLost?.(lost);
    // A lost segment's summary may have survived it: its commits keep their own positions.
    const known = (
      orphanSummaryCommits(
        this.kernels,
        this.store,
        path.basename(summaryFileOf(segmentFile(this.directory, this.expectedPosition, segmentSuffix.history))),
        this.expectedPosition,
        this.expectedCommit,
      ) ?? []
    ).filter((commit) => commit.commit <= lost.to && commit.lastPosition <= lost.toPosition);
    for (const standIn of lostCommits(lost, known)) this.list.push(standIn);
  }

  /** A segment that does not start where the chain left off: the gap is corruption, unless damage explains it. */
  private checkSegmentStart(segment: SegmentFile): void {
    const { header } = segment;
    if (header.baseCommit !== this.expectedCommit || header.base !== this.expectedPosition) {
      // Segments are named by their first position, so the lost segment's name is known; but
      // where the segment before ended without its segment end (an older copy of it, say),
      // the commits it lacks were lost from it.
      const missing = this.previousUnfinished
        ? {
            ...this.previousUnfinished,
            reason: `${path.basename(this.previousUnfinished.file)} ends at offset ${this.previousUnfinished.offset} without its segment end: the commits from ${this.expectedCommit} (position ${this.expectedPosition}) that ${path.basename(segment.file)} follows are missing from it`,
          }
        : {
            file: segmentFile(this.directory, this.expectedPosition, segmentSuffix.history),
            offset: 0,
            reason: `the segment holding commits from ${this.expectedCommit} (position ${this.expectedPosition}) is missing: ${path.basename(segment.file)} starts at commit ${header.baseCommit}`,
          };
      if (header.baseCommit > this.expectedCommit && header.base > this.expectedPosition) {
        // Damage just before this segment may be what took the commits; else it is the gap.
        if (!this.pending) this.extraCorruptions.push(missing);
        this.note(missing);
      }
    } else if (this.pending && this.previousEnd) {
      // The damage before this segment took no commits (it was after the last one).
      this.pending = undefined;
    }
  }

  /** A finished segment whose summary stood in for reading it. */
  private takeSummary(segment: SegmentFile, head: SummaryHead): void {
    const first = { commit: head.baseCommit, firstPosition: head.base };
    const last = { commit: head.baseCommit + head.commitCount - 1, lastPosition: head.lastPosition };
    // A summary's commits follow each other (its pages are checked when read), so the segment
    // continues the chain when its first commit does.
    if (
      head.commitCount > 0 &&
      this.accept(first, last, {
        file: segment.file,
        offset: 0,
        reason: `commit ${head.baseCommit} does not continue the chain`,
      })
    ) {
      this.list.pushSummary(head);
    }
    this.previousEnd = {
      file: segment.file,
      offset: head.end,
      reason: `the history breaks after ${path.basename(segment.file)}`,
    };
    this.previousUnfinished = undefined;
  }

  /** A segment read whole: each sound run's commit joins the chain if it continues it. */
  private takeScanned({ segment, bytes, scanned, resumed }: OpenedSegment<CommitRecord, ResumedCheckpoint>): void {
    const segmentCommits: CommitRecord[] = [];
    let sound = true;
    if (resumed) sound = this.takeCheckpoint(segment, resumed);
    for (const entry of scanned.entries) {
      if (entry.kind === 'damage') {
        sound = false;
        if (!entry.harmless) this.note({ file: segment.file, offset: entry.offset, reason: entry.reason });
        continue;
      }
      const commit = entry.run.decoded;
      const where = {
        file: segment.file,
        offset: commit.runStart,
        reason: `commit ${commit.commit} does not continue the chain`,
      };
      if (!this.accept(commit, commit, where)) {
        sound = false;
        continue;
      }
      segmentCommits.push(commit);
      if (this.visitor.onPayload) {
        for (const frame of entry.run.frames) {
          if (frame.kind !== FrameKind.Pack) continue;
          const what = `pack at ${segment.file}:${frame.offset}`;
          for (const { crc, location } of readPackDirectory(bytes, frame, segment.header.base, what))
            this.visitor.onPayload(crc, location);
        }
      }
      this.list.push(commit);
      this.visitor.onCommit?.(commit);
    }
    if (sound && scanned.trailer) {
      // A finished segment read whole: its summary spares the next open from reading it.
      const reason = this.summaryProblems.get(summaryFileOf(segment.file)) ?? 'missing';
      const commits = resumed ? this.list.commitsInSegment(segment.header.base) : segmentCommits;
      this.unsummarized.push({ segment, end: scanned.end, commits, reason });
    }
    this.previousEnd = {
      file: segment.file,
      offset: scanned.end,
      reason: `the history breaks after ${path.basename(segment.file)}`,
    };
    this.previousUnfinished = scanned.trailer ? undefined : { file: segment.file, offset: scanned.end, reason: '' };
  }

  /**
   * The commits a checkpoint of the segment holds, up to where the segment is read from: they
   * join the chain as held ones (as a summary's do, when the first continues it). False when
   * they do not continue it.
   */
  private takeCheckpoint(segment: SegmentFile, checkpoint: ResumedCheckpoint): boolean {
    const { head } = checkpoint;
    const first = { commit: head.baseCommit, firstPosition: head.base };
    const last = { commit: head.baseCommit + head.commitCount - 1, lastPosition: head.lastPosition };
    const where = { file: segment.file, offset: 0, reason: `commit ${head.baseCommit} does not continue the chain` };
    if (!this.accept(first, last, where)) return false;
    this.list.pushHeld(head, checkpoint.summaryBytes);
    this.checkpointPayloads = checkpoint.payloads;
    this.checkpointLast = last.commit;
    return true;
  }
}

/**
 * The commit record that ends a run in a segment based at `segmentBase`, when the run is exactly
 * the frames it names; undefined otherwise.
 */
export function commitOfRun(
  bytes: Uint8Array,
  frame: ScannedFrame,
  runFrames: readonly ScannedFrame[],
  segmentBase: number,
): CommitRecord | undefined {
  let commit: CommitRecord;
  try {
    commit = readCommitRecord(bytes, frame, segmentBase, `commit record at offset ${frame.offset}`);
  } catch {
    return undefined;
  }
  // The run must be exactly the frames the commit record names.
  const named = new Set(
    [...commit.manifests, ...commit.packs, ...commit.retired].map((offset) => commit.runStart + offset),
  );
  const runOk =
    runFrames.length === named.size &&
    runFrames.every((runFrame) => named.has(runFrame.offset)) &&
    (runFrames.length === 0 ? commit.runStart === frame.offset : runFrames[0].offset === commit.runStart);
  return runOk ? commit : undefined;
}
