/**
 * Retention of one feed's history: deciding which whole history segments go (by the policy, or
 * an explicit `before`), holding back for subscriptions that have not passed them, and trimming
 * them crash-safely. A trim never rewrites a segment; it removes the oldest ones, with their
 * summaries, index files and dictionaries, after recording the new floor durably (see
 * `retention-state.ts` for how recovery finishes one that was interrupted).
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { RetentionInfo, RetentionPin, TrimResult } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import { retentionCheckIntervalMs } from '../../limits.js';
import { type OnProgress, type Progress, ProgressReporter } from '../../progress.js';
import type { History } from '../../storage/history-log.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { Watermark } from '../writing/published-state.js';
import type { RetentionLog, RetentionPolicy } from './retention-state.js';

export type { RetentionInfo, RetentionPin, TrimResult };

/** What a trim is asked to remove: the commits before `before`, what the policy allows, or both. */
export interface TrimRequest {
  /** Remove the segments whose commits all lie before this commit. */
  readonly before?: number;
  /** Apply the feed's retention policy too. */
  readonly policy?: boolean;
  /** Remove what subscriptions have not passed yet, too. */
  readonly force?: boolean;
  /**
   * Called in records removed: once when the plan is made, once after the segments' files are
   * gone, and last when the new floor is recorded as done.
   */
  readonly onProgress?: OnProgress<Progress>;
}

/** One trim's plan: how many leading segments go, and what held it back. */
interface TrimPlan {
  readonly removable: number;
  readonly wanted: number;
  readonly pin: RetentionPin | undefined;
}

export class HistoryRetention {
  private chain: Promise<unknown> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private checkQueued = false;
  private lastError: { code: string; message: string } | null = null;
  private closed = false;
  /** Told after a trim that removed segments (tiering retires them remotely). */
  onTrimmed: (() => void) | undefined;

  constructor(
    private readonly log: RetentionLog,
    private readonly history: History,
    private readonly derived: () => DerivedIndexes,
    private readonly subscriptions: Subscriptions,
    private readonly watermark: () => Watermark,
    private readonly clock: () => number,
    private readonly readOnly: boolean,
  ) {
    this.arm();
  }

  get policy(): RetentionPolicy {
    return this.log.state.policy;
  }

  /** Sets the policy durably; the next check (started now) applies it. */
  setPolicy(policy: RetentionPolicy): Promise<RetentionPolicy> {
    return this.serial(async () => {
      await this.log.write({ ...this.log.state, policy });
      this.arm();
      this.check();
      return policy;
    });
  }

  /**
   * Removes the oldest segments the request allows. Resolves once the removal is durable (the
   * key and fingerprint dictionaries are rebuilt after, in the background; lookups wait).
   */
  trim(request: TrimRequest): Promise<TrimResult> {
    if (this.readOnly) return Promise.reject(new StreamStackError('READ_ONLY', 'the feed was opened read-only'));
    return this.serial(() => this.trimNow(request)).then((result) => {
      if (result.segmentsRemoved > 0) this.onTrimmed?.();
      return result;
    });
  }

  private async trimNow(request: TrimRequest): Promise<TrimResult> {
    // The indexes take a published commit a slice at a time after it is published. Were a trim
    // planned while some of the commits it removes were still queued for them, the indexes would
    // take those commits after the trim: index files and dictionaries named for a segment that
    // is gone (left below the floor for good) and key winners in trimmed commits. So the plan is
    // made in the same turn as the check that every published commit is in the indexes; commits
    // published later lie in segments this plan keeps.
    while (!this.derived().indexedAll) await this.derived().caughtUp();
    const commits = this.history.commits;
    const plan = this.plan(request);
    const unchanged = {
      lowMark: commits.low,
      lowPosition: commits.lowPosition,
      segmentsRemoved: 0,
      commitsRemoved: 0,
      recordsRemoved: 0,
      bytesRemoved: 0,
      ...(plan.pin ? { heldBy: plan.pin } : {}),
    };
    if (plan.removable === 0) {
      new ProgressReporter(request.onProgress, 'records', 0).finish();
      return unchanged;
    }
    const segments = this.history.segments.segments;
    const kept = segments[plan.removable].header;
    const floor = { commit: kept.baseCommit, position: kept.base };
    const bytesRemoved = segments.slice(0, plan.removable).reduce((sum, segment) => sum + segment.header.capacity, 0);
    const before = { commit: commits.low, position: commits.lowPosition };
    const progress = new ProgressReporter(request.onProgress, 'records', floor.position - before.position);
    progress.advance(0, undefined, true);
    // The floor is durable before any file goes: recovery deletes the rest if this stops.
    await this.log.write({ policy: this.log.state.policy, floor, pending: true });
    // The indexes first: from here on, key lookups and dedup wait for dictionaries rebuilt over
    // what is kept, so none answers with a record that is gone.
    const derived = this.derived().trimBefore(floor.position);
    await this.history.trimBefore(floor);
    await derived.removed;
    // The files are gone; only the record that the trim is done remains (done stops short of the total until then).
    progress.advance(floor.position - before.position, undefined, true);
    await this.log.write({ policy: this.log.state.policy, floor, pending: false });
    // Rebuilt in the background; a failure there only means the next open rebuilds them.
    derived.rebuilt.catch(() => undefined);
    progress.finish();
    return {
      lowMark: floor.commit,
      lowPosition: floor.position,
      segmentsRemoved: plan.removable,
      commitsRemoved: floor.commit - before.commit,
      recordsRemoved: floor.position - before.position,
      bytesRemoved,
      ...(plan.pin ? { heldBy: plan.pin } : {}),
    };
  }

  /**
   * How many of the oldest segments the request would remove, and how many subscriptions let
   * it. Only whole sealed segments go, never the active one, and never the segment holding the
   * head commit: the low mark is always a published commit.
   */
  private plan(request: TrimRequest): TrimPlan {
    const segments = this.history.segments.segments;
    const head = this.watermark();
    const commits = this.history.commits;
    const policy = request.policy ? this.log.state.policy : {};
    const now = this.clock();
    let bytesAfter = 0;
    for (const segment of segments.slice(1)) bytesAfter += segment.durableEnd;
    let wanted = 0;
    for (let at = 0; at + 1 < segments.length; at++) {
      const next = segments[at + 1].header;
      if (next.baseCommit > head.commit) break;
      const lastCommit = next.baseCommit - 1;
      const lastPosition = next.base - 1;
      const byBefore = request.before !== undefined && lastCommit < request.before;
      const byAge =
        policy.maxAgeMs !== undefined &&
        lastCommit >= commits.low &&
        commits.at(lastCommit).sealedAt < now - policy.maxAgeMs;
      const byRecords = policy.maxRecords !== undefined && head.position - lastPosition >= policy.maxRecords;
      const byBytes = policy.maxBytes !== undefined && bytesAfter >= policy.maxBytes;
      if (!(byBefore || byAge || byRecords || byBytes)) break;
      wanted = at + 1;
      bytesAfter -= segments[at + 1].durableEnd;
    }
    const pin = this.lowestSubscription();
    if (request.force || !pin) return { removable: wanted, wanted, pin: undefined };
    let allowed = 0;
    while (allowed < wanted && segments[allowed + 1].header.baseCommit - 1 <= pin.cursor) allowed++;
    return { removable: allowed, wanted, pin: allowed < wanted ? pin : undefined };
  }

  /** The subscription with the lowest cursor (the first by name among equals), if any. */
  private lowestSubscription(): RetentionPin | undefined {
    let lowest: RetentionPin | undefined;
    for (const state of this.subscriptions.list()) {
      if (!lowest || state.cursor < lowest.cursor) lowest = { subscription: state.name, cursor: state.cursor };
    }
    return lowest;
  }

  info(): RetentionInfo {
    const commits = this.history.commits;
    const plan = this.plan({ policy: true });
    const segments = this.history.segments.segments;
    const policyLowMark = plan.wanted === 0 ? commits.low : segments[plan.wanted].header.baseCommit;
    return {
      policy: this.log.state.policy,
      lowMark: commits.low,
      lowPosition: commits.lowPosition,
      policyLowMark,
      pinnedBy: plan.pin ?? null,
      lastError: this.lastError,
    };
  }

  /** A history segment was finished: the policy may allow a trim now. */
  segmentFinished(): void {
    this.check();
  }

  /** Applies the policy soon, once (checks asked for meanwhile are one). */
  private check(): void {
    if (this.readOnly || this.closed || this.checkQueued || !hasLimits(this.log.state.policy)) return;
    this.checkQueued = true;
    setImmediate(() => {
      this.checkQueued = false;
      if (this.closed) return;
      this.trim({ policy: true }).then(
        () => {
          this.lastError = null;
        },
        (error: unknown) => {
          // A trim on its own has no caller to tell: the failure is kept for `info`, and the
          // next check tries again (an interrupted trim is finished on the next open anyway).
          this.lastError = { code: (error as StreamStackError).code ?? 'INTERNAL', message: (error as Error).message };
        },
      );
    });
  }

  /** Starts (or stops) the periodic check, which only a policy with limits needs. */
  private arm(): void {
    const wanted = !this.readOnly && !this.closed && hasLimits(this.log.state.policy);
    if (wanted && !this.timer) {
      this.timer = setInterval(() => this.check(), retentionCheckIntervalMs);
      this.timer.unref();
    } else if (!wanted && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** Runs history maintenance (trims, merges) one at a time, in call order. */
  serial<T>(change: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new StreamStackError('CLOSED', 'the feed is closed'));
    const result = this.chain.then(change);
    this.chain = result.catch(() => undefined);
    return result;
  }

  /** Stops the periodic check and waits for a trim under way. */
  async close(): Promise<void> {
    this.closed = true;
    this.arm();
    await this.chain;
    this.log.close();
  }
}

function hasLimits(policy: RetentionPolicy): boolean {
  return policy.maxAgeMs !== undefined || policy.maxRecords !== undefined || policy.maxBytes !== undefined;
}
