/**
 * Progress of a long operation (verify, compact, compactKeys, trim, export), reported through
 * its `onProgress` option in one shape: `done` of `total` in a unit. A reporter keeps the calls
 * cheap and honest: at most one every `progressIntervalMs` (the first, the first with work done
 * and the last always), `done` never goes back, and it reaches `total` only in the last call,
 * made when the work ends.
 * A callback that throws is not called again, and the work goes on.
 */
// The shape is public and shared with the client, so it is defined in @streamstack/protocol.
import type { OnProgress, Progress, ProgressUnit } from '@streamstack/protocol';
import { StreamStackError } from './errors.js';
import { progressIntervalMs } from './limits.js';

export type { OnProgress, Progress, ProgressUnit };

/** `value` as a progress callback: undefined when absent, `INVALID_ARGUMENT` when not a function. */
export function checkOnProgress<P extends Progress>(value: unknown): OnProgress<P> | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'function') {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `onProgress must be a function, not ${value === null ? 'null' : typeof value}`,
      { details: { field: 'onProgress' } },
    );
  }
  return value as OnProgress<P>;
}

/**
 * Calls one operation's `onProgress`, throttled and monotonic. `advance` may be called as often
 * as the work likes (per commit, say); `finish` makes the last call. Without a callback every
 * method does nothing, so the work need not check.
 */
export class ProgressReporter<Extra extends object = object> {
  private done = 0;
  private lastCall = Number.NEGATIVE_INFINITY;
  private finished = false;

  constructor(
    private readonly callback: OnProgress<Progress & Extra> | undefined,
    readonly unit: ProgressUnit,
    private total: number,
    private extra: Extra = {} as Extra,
    /** The shortest time between calls; an export calls once per batch read, as it always did. */
    private readonly intervalMs = progressIntervalMs,
  ) {}

  get active(): boolean {
    return this.callback !== undefined && !this.finished;
  }

  /** Raises the total (work found while the operation runs, such as segments finished meanwhile). */
  grow(total: number): void {
    if (total > this.total) this.total = total;
  }

  /**
   * Moves `done` to `done` (never back, and short of the total: the total is reached in
   * `finish`), calling back if the last call was long enough ago or `force`.
   */
  advance(done: number, extra?: Partial<Extra>, force = false): void {
    if (!this.active) return;
    if (extra) this.extra = { ...this.extra, ...extra };
    const before = this.done;
    this.done = Math.max(this.done, Math.min(done, this.total - 1));
    const now = performance.now();
    // The first work done is always shown, throttle or not: a display leaves 0 at once, and a
    // short operation whose only progress comes from a worker still shows some before it ends.
    const firstWork = before <= 0 && this.done > 0;
    if (!force && !firstWork && now - this.lastCall < this.intervalMs) return;
    this.lastCall = now;
    this.call();
  }

  /**
   * The last call: the work is done, so `done` is the total. With `total`, the work ended short
   * of what was planned (a merge put off): the total becomes what was done.
   */
  finish(extra?: Partial<Extra>, total?: number): void {
    if (!this.active) return;
    if (extra) this.extra = { ...this.extra, ...extra };
    if (total !== undefined) this.total = Math.max(this.done, total);
    this.done = this.total;
    this.call();
    this.finished = true;
  }

  private call(): void {
    try {
      this.callback!({ ...this.extra, done: Math.max(0, this.done), total: this.total, unit: this.unit });
    } catch {
      // A display that fails must not stop a trim or a merge half-way (nor, called from a rewrite
      // worker's message, become an uncaught exception): the callback is not called again.
      this.finished = true;
    }
  }
}
