/**
 * Merging compaction: adjacent sealed history segments become one, so a long-lived feed keeps
 * few files. Nothing is dropped and nothing moves in the history's order: every commit keeps
 * its number and every record its position, so every read, at every cursor, is unchanged. The
 * merged segment is written beside the live ones (reads and writes go on), then switched in
 * while no read holds the read gate, after its switch-over was recorded (`merge-state.ts`).
 */
import path from 'node:path';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { mergedSegmentBytesMax, mergeSegmentsTrigger, mergeSwitchWaitMs } from '../../limits.js';
import { type OnProgress, type Progress, ProgressReporter } from '../../progress.js';
import { summaryFileOf } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import { SegmentFile } from '../../storage/segment.js';
import { readSummaryHead } from '../../storage/segment-summary.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import type { ReadGate } from '../reading/read-gate.js';
import { type MergeLog, removeReplacedFiles } from './merge-state.js';
import { runRewrite } from './rewrite-offthread.js';
import { type RewriteJob, removeRewriteFiles, rewriteFiles } from './segment-rewrite.js';

/** `feed.compact`'s progress: records of the segments being merged that are rewritten, and the merges done. */
export interface MergeProgress extends Progress {
  readonly merges: number;
}

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { MergeResult, SegmentMerge } from '@streamstack/protocol';

export type { MergeResult, SegmentMerge };

export interface MergeContext {
  readonly kernels: Kernels;
  readonly feed: string;
  readonly directory: string;
  readonly history: History;
  readonly derived: () => DerivedIndexes;
  readonly gate: ReadGate;
  readonly log: MergeLog;
  readonly frameDataBytesMax: number;
  /** Runs maintenance one at a time (merges and trims share it). */
  readonly serial: <T>(work: () => Promise<T>) => Promise<T>;
  readonly readOnly: boolean;
}

export class HistoryMerges {
  private checkQueued = false;
  private closed = false;

  constructor(private readonly context: MergeContext) {}

  /**
   * Merges every run of adjacent sealed segments that fits in `mergedSegmentBytesMax` (two or
   * more; the active segment and the one before it, whose derived files may still be being
   * built, are left alone).
   */
  merge(signal?: AbortSignal, onProgress?: OnProgress<MergeProgress>): Promise<MergeResult> {
    if (this.context.readOnly)
      return Promise.reject(new StreamStackError('READ_ONLY', `feed ${this.context.feed} was opened read-only`));
    return this.context.serial(async () => {
      const merges: SegmentMerge[] = [];
      // The total is the records of every run there is to merge now; a segment finished while
      // the merges run may add a run, and its records then raise the total.
      // (A merge that runs on its own has no callback, and skips the planning.)
      let planned = 0;
      if (onProgress)
        for (let run = this.nextRun(); run; run = this.nextRun(run[run.length - 1])) planned += this.recordsOf(run);
      const progress = new ProgressReporter(onProgress, 'records', planned, { merges: 0 });
      progress.advance(0, undefined, true);
      let finished = 0;
      for (;;) {
        signal?.throwIfAborted();
        const run = this.nextRun();
        if (!run) break;
        const records = this.recordsOf(run);
        progress.grow(finished + records);
        const merged = await this.rewrite(run, signal, undefined, (done) => progress.advance(finished + done));
        if (!merged) {
          progress.finish({ merges: merges.length }, finished);
          return { merges, segments: this.context.history.segments.segments.length, putOff: true };
        }
        merges.push(merged);
        finished += records;
        progress.advance(finished, { merges: merges.length }, true);
      }
      progress.finish({ merges: merges.length });
      return { merges, segments: this.context.history.segments.segments.length, putOff: false };
    });
  }

  /** The records (entries) the segments of `run` hold. */
  private recordsOf(run: readonly SegmentFile[]): number {
    const { commits } = this.context.history;
    let records = 0;
    for (const segment of run)
      for (const commit of commits.commitsInSegment(segment.header.base)) records += commit.entries;
    return records;
  }

  /** The first run of adjacent sealed segments worth merging (after the segment `past`, when given), or undefined. */
  private nextRun(past?: SegmentFile): SegmentFile[] | undefined {
    const { history } = this.context;
    const segments = history.segments.segments;
    const lostSegments = new Set(history.commits.lost.map((commit) => commit.firstPosition));
    // The two newest are left: the active one, and the last finished one (its summary, index
    // file and dictionaries may be being built).
    const candidates = segments.slice(0, Math.max(0, segments.length - 2));
    // Only segments well below the merged size join a merge: a merged one is not rewritten
    // again and again as the feed grows, so each byte is rewritten a bounded number of times.
    const small = (segment: SegmentFile) => segment.durableEnd <= mergedSegmentBytesMax / 4;
    for (let start = past ? candidates.indexOf(past) + 1 : 0; start < candidates.length; start++) {
      let bytes = 0;
      let end = start;
      while (
        end < candidates.length &&
        small(candidates[end]) &&
        bytes + candidates[end].durableEnd <= mergedSegmentBytesMax &&
        !this.damaged(candidates[end], lostSegments)
      ) {
        bytes += candidates[end].durableEnd;
        end++;
      }
      if (end - start >= 2) return candidates.slice(start, end);
    }
    return undefined;
  }

  /** A segment whose commits corruption broke is never rewritten (its damage stays where it is). */
  damaged(segment: SegmentFile, lostStarts: ReadonlySet<number>): boolean {
    const extent = this.context.history.commits
      .segments()
      .find((candidate) => candidate.segment === segment.header.base);
    if (!extent?.summarized) return true;
    for (const start of lostStarts) if (start >= segment.header.base && start <= extent.lastPosition + 1) return true;
    return false;
  }

  /**
   * Rewrites consecutive sealed segments `replaced` as one (a merge; with `keep`, a key
   * compaction's group), switches it in, and returns what changed — or undefined when reads held
   * the gate too long and the switch was put off. Call it through `serial`. The rewrite runs on a
   * worker thread over a snapshot of the feed (`rewrite-offthread.ts`), which also builds the
   * segment's index file and dictionaries; this thread renames them in.
   */
  async rewrite(
    replaced: SegmentFile[],
    signal: AbortSignal | undefined,
    keep?: RewriteJob['keep'],
    /** Called as the rewrite goes, with the records of `replaced` rewritten so far. */
    onRecords?: (records: number) => void,
  ): Promise<SegmentMerge | undefined> {
    const { kernels, history, feed, directory, gate, log } = this.context;
    const bases = replaced.map((segment) => segment.header.base);
    const first = replaced[0];
    const successor =
      history.segments.segments[history.segments.segments.indexOf(replaced[replaced.length - 1]) + 1].header;
    const commits = bases.reduce((sum, base) => sum + history.commits.commitsInSegment(base).length, 0);
    const derived = this.context.derived();
    // Builds under way finish first: the rewritten segment's dictionaries are merged with the
    // files before it, and the switch-over then keeps reads out only briefly.
    await derived.flushed();
    const job: RewriteJob = {
      kernels: kernels.name,
      feed,
      feedDirectory: directory,
      floor: history.retainedStart,
      replaced: bases,
      successor: { base: successor.base, baseCommit: successor.baseCommit },
      frameDataBytesMax: this.context.frameDataBytesMax,
      capacityToAvoid: first.header.capacity,
      ...(keep ? { keep } : {}),
      earlier: { latest: derived.keys.earlierFiles(bases[0]), first: derived.fingerprints.earlierFiles(bases[0]) },
    };
    const files = rewriteFiles(directory, bases[0]);
    const written = await runRewrite(
      kernels,
      job,
      () => ({ history, indexes: { keys: derived.keys, fingerprints: derived.fingerprints } }),
      signal,
      onRecords,
      history.store.evictedCount > 0,
    );
    try {
      await log.write({ replaced: bases, capacity: written.header.capacity, pending: true });
    } catch (error) {
      await removeRewriteFiles(files);
      throw error;
    }
    const summaryFile = summaryFileOf(first.file);
    let dictionaries: { swapped: Promise<void>; ready: Promise<void> }[] = [];
    const switched = await gate.exclusive(async () => {
      // The merged segment and its summary go into the history's store under the first replaced
      // segment's names (a local store renames them in; each resolves once durable).
      await history.store.putFile(path.basename(first.file), files.segment);
      await history.store.putFile(path.basename(summaryFile), files.summary);
      const segment = SegmentFile.open(kernels, first.file);
      segment.writeOffset = written.end;
      segment.durableEnd = written.end;
      // Read back through the store its summaries are read from (the rename above put it there).
      const summary = await readSummaryHead(kernels, history.store, path.basename(summaryFile), written.header);
      if (!summary) throw new StreamStackError('INTERNAL', `the merged summary ${summaryFile} did not read back`);
      // One synchronous step: the history, then the dictionaries (whose lookups wait from now
      // on for the rewritten segment's), before any read gets in again.
      history.switchMerged(replaced, segment, summary);
      dictionaries = (['latest', 'first'] as const).map((order) =>
        (order === 'latest' ? derived.keys : derived.fingerprints).replaceSegments(
          bases,
          written.count,
          written.built[order] ? files[order] : undefined,
        ),
      );
      await derived.index.replaceSegments(bases, written.count, written.built.index ? files.index : undefined);
    }, mergeSwitchWaitMs);
    if (!switched) {
      // Nothing was switched: the record says pending, and recovery would find the first
      // segment unchanged; it is marked done now.
      await removeRewriteFiles(files);
      await log.write({ replaced: bases, capacity: written.header.capacity, pending: false });
      return undefined;
    }
    // The replaced segments' descriptors close a moment after the switch; their files go now.
    await removeReplacedFiles({ history: history.store, index: derived.store }, bases, false, false);
    // Recovery of a pending switch-over deletes the first segment's derived files, and a done
    // one trusts them: the dictionaries are in place before it is marked done.
    await Promise.all(dictionaries.map((dictionary) => dictionary.swapped));
    await log.write({ replaced: bases, capacity: written.header.capacity, pending: false });
    // Rebuilt in the background when not prebuilt (lookups wait); a failure only means the next open rebuilds.
    for (const dictionary of dictionaries) dictionary.ready.catch(() => undefined);
    return {
      base: first.header.base,
      segments: replaced.length,
      commits,
      records: written.records,
      bytesBefore: replaced.reduce((sum, segment) => sum + segment.header.capacity, 0),
      bytesAfter: written.header.capacity,
    };
  }

  /** A history segment was finished: merge on its own once enough segments could be joined. */
  segmentFinished(): void {
    if (this.context.readOnly || this.closed || this.checkQueued) return;
    const sealed = this.context.history.segments.segments.length - 2;
    if (sealed <= mergeSegmentsTrigger) return;
    this.checkQueued = true;
    setImmediate(() => {
      this.checkQueued = false;
      if (this.closed) return;
      // A merge on its own has no caller to tell: a failure is retried after the next segment.
      this.merge().catch(() => undefined);
    });
  }

  close(): void {
    this.closed = true;
  }
}
