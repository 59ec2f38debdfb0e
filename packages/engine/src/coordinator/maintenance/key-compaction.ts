/**
 * Key compaction up to a horizon commit H: the sealed segments wholly at or before H are
 * rewritten keeping, for each key, only its winner as of H (the highest version, then the
 * highest position); a key whose winner is a tombstone loses every record, the tombstone too;
 * records without a key stay unless the caller drops them. Positions and commit numbers never
 * change: a compacted run keeps each record's seq, so its positions become sparse. A dropped
 * record holding the first occurrence of a fingerprint that a later record repeats keeps that
 * fingerprint in the run (`retired`), so whole-history dedup after H is what it was; one no
 * later record repeats goes (a payload appended after the compaction whose only earlier
 * occurrences were dropped counts as a first occurrence, as after a trim).
 *
 * After it, RAW and dedup reads after H, latest reads at any cursor from H on (and from the
 * start), and `get(key, { asOf ≥ H })` answer exactly as before; cursors from the low mark to
 * H − 1 fail with `COMPACTED`. The horizon is recorded before any rewrite (`compaction-state.ts`);
 * each rewrite is switched in as a merge's is (`history-merge.ts`), and survives a crash the
 * same way. What each commit keeps is chosen on the rewrite's worker (`compaction-selection.ts`).
 */
import { StreamStackError } from '../../errors.js';
import { mergedSegmentBytesMax } from '../../limits.js';
import { type OnProgress, type Progress, ProgressReporter } from '../../progress.js';
import type { History } from '../../storage/history-log.js';
import type { SegmentFile } from '../../storage/segment.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { Watermark } from '../writing/published-state.js';
import type { CompactionLog } from './compaction-state.js';
import type { HistoryMerges } from './history-merge.js';
import type { RetentionPin } from './history-trim.js';

/** `feed.compactKeys`' progress: records of the segments below the horizon rewritten, and segments done. */
export interface KeyCompactionProgress extends Progress {
  readonly segmentsCompacted: number;
}

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { KeyCompactionRequest as KeyCompactionFields, KeyCompactionResult } from '@streamstack/protocol';

export type { KeyCompactionResult };

/** What `feed.compactKeys` takes: the fields the client sends too, and a progress callback, which stays in this process. */
export interface KeyCompactionRequest extends KeyCompactionFields {
  /** Called as the segments are rewritten; the last call, when it ends, has `done === total`. */
  readonly onProgress?: OnProgress<KeyCompactionProgress>;
}

export interface KeyCompactionContext {
  readonly history: History;
  readonly derived: () => DerivedIndexes;
  readonly subscriptions: Subscriptions;
  readonly merges: HistoryMerges;
  readonly log: CompactionLog;
  readonly watermark: () => Watermark;
  readonly serial: <T>(work: () => Promise<T>) => Promise<T>;
  readonly readOnly: boolean;
  readonly feed: string;
}

export class KeyCompaction {
  constructor(private readonly context: KeyCompactionContext) {}

  get horizon(): number {
    return this.context.history.commits.horizon;
  }

  compact(request: KeyCompactionRequest): Promise<KeyCompactionResult> {
    const { context } = this;
    if (context.readOnly)
      return Promise.reject(new StreamStackError('READ_ONLY', `feed ${context.feed} was opened read-only`));
    const head = context.watermark().commit;
    const commits = context.history.commits;
    if (!Number.isSafeInteger(request.horizon) || request.horizon < commits.low || request.horizon > head) {
      return Promise.reject(
        new StreamStackError(
          'CURSOR_OUT_OF_RANGE',
          `the horizon must be a commit from ${commits.low} (the low mark) to ${head} (the head), not ${String(request.horizon)}`,
          {
            details: { horizon: request.horizon, lowMark: commits.low, head },
          },
        ),
      );
    }
    return context.serial(() => this.compactNow(request));
  }

  private async compactNow(request: KeyCompactionRequest): Promise<KeyCompactionResult> {
    const { history, subscriptions, merges, log } = this.context;
    const derived = this.context.derived();
    // As for a trim: every published commit is in the indexes before the plan is made.
    while (!derived.indexedAll) await derived.caughtUp();
    // The last finished segment's index file and dictionaries are built before it is planned for.
    await derived.flushed();
    while (!derived.indexedAll) await derived.caughtUp();
    const commits = history.commits;
    const pin = this.lowestBelow(request.horizon, subscriptions);
    const horizon = pin && !request.force ? pin.cursor : request.horizon;
    const heldBy = pin && !request.force ? { heldBy: pin } : {};
    const segments = this.segmentsUpTo(horizon);
    const groups = groupsOf(segments);
    const recordsIn = (run: readonly SegmentFile[]) =>
      run.reduce(
        (sum, segment) =>
          sum +
          history.commits.commitsInSegment(segment.header.base).reduce((total, commit) => total + commit.entries, 0),
        0,
      );
    const progress = new ProgressReporter(
      request.onProgress,
      'records',
      horizon < commits.horizon ? 0 : groups.reduce((sum, run) => sum + recordsIn(run), 0),
      { segmentsCompacted: 0 },
    );
    progress.advance(0, undefined, true);
    const nothing = {
      horizon: commits.horizon,
      segmentsCompacted: 0,
      segmentsAfter: 0,
      recordsBefore: 0,
      recordsAfter: 0,
      bytesBefore: 0,
      bytesAfter: 0,
      putOff: false,
      ...heldBy,
    };
    // The same horizon again rewrites again: a compaction that failed (a full disk) or was put
    // off recorded its horizon before it rewrote everything below it.
    if (segments.length === 0 || horizon < commits.horizon) {
      progress.finish();
      return nothing;
    }
    if (horizon > commits.horizon) {
      // The decision is durable, and reads below it refused, before any segment is rewritten.
      await log.write({ horizon });
      commits.setHorizon(horizon);
    }
    const keep = { horizonPosition: commits.at(horizon).lastPosition, keyless: request.keyless ?? 'keep' } as const;
    let segmentsCompacted = 0;
    let segmentsAfter = 0;
    let recordsBefore = 0;
    let recordsAfter = 0;
    let bytesBefore = 0;
    let bytesAfter = 0;
    // What the compaction did so far, whether it went through or a rewrite was put off.
    const result = (putOff: boolean) => ({
      horizon,
      segmentsCompacted,
      segmentsAfter,
      recordsBefore,
      recordsAfter,
      bytesBefore,
      bytesAfter,
      putOff,
      ...heldBy,
    });
    for (const run of groups) {
      request.signal?.throwIfAborted();
      const before = recordsBefore;
      recordsBefore += recordsIn(run);
      const rewritten = await merges.rewrite(run, request.signal, keep, (done) => progress.advance(before + done));
      if (!rewritten) {
        progress.finish({ segmentsCompacted }, before);
        return result(true);
      }
      segmentsCompacted += rewritten.segments;
      segmentsAfter++;
      recordsAfter += rewritten.records;
      bytesBefore += rewritten.bytesBefore;
      bytesAfter += rewritten.bytesAfter;
      progress.advance(recordsBefore, { segmentsCompacted }, true);
    }
    progress.finish({ segmentsCompacted });
    return result(false);
  }

  /**
   * The subscription with the lowest cursor between the low mark and `horizon − 1`: compacting
   * past it would take records it has not read. (One at the start reads the compacted history
   * from its beginning, as any new reader does; one a forced trim or compaction left behind has
   * lost them already.)
   */
  private lowestBelow(horizon: number, subscriptions: Subscriptions): RetentionPin | undefined {
    const { low, horizon: current } = this.context.history.commits;
    let lowest: RetentionPin | undefined;
    for (const state of subscriptions.list()) {
      // One a forced compaction left below the current horizon fails until it is reset: it
      // holds nothing back any more.
      if (state.cursor < low || state.cursor < current || state.cursor >= horizon) continue;
      if (!lowest || state.cursor < lowest.cursor) lowest = { subscription: state.name, cursor: state.cursor };
    }
    return lowest;
  }

  /**
   * The sealed segments whose commits all lie at or before `horizon`, oldest first, stopping at
   * the first that does not (or that corruption damaged, or whose summary is not written yet).
   * The active segment is never rewritten; the last finished one may be, once its derived files
   * are built (the caller waits for them).
   */
  private segmentsUpTo(horizon: number): SegmentFile[] {
    const { history, merges } = this.context;
    const segments = history.segments.segments;
    const lostStarts = new Set(history.commits.lost.map((commit) => commit.firstPosition));
    const out: SegmentFile[] = [];
    for (let at = 0; at + 1 < segments.length; at++) {
      const lastCommit = segments[at + 1].header.baseCommit - 1;
      if (lastCommit > horizon || merges.damaged(segments[at], lostStarts)) break;
      out.push(segments[at]);
    }
    return out;
  }
}

/** Consecutive segments in groups a merged segment may hold (`mergedSegmentBytesMax`). */
function groupsOf(segments: readonly SegmentFile[]): SegmentFile[][] {
  const groups: SegmentFile[][] = [];
  let bytes = 0;
  for (const segment of segments) {
    const last = groups[groups.length - 1];
    if (last && bytes + segment.durableEnd <= mergedSegmentBytesMax) {
      last.push(segment);
      bytes += segment.durableEnd;
    } else {
      groups.push([segment]);
      bytes = segment.durableEnd;
    }
  }
  return groups;
}
