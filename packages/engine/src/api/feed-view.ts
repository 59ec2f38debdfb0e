/**
 * The view of its history a `Feed` reads through. On a store that writes it is the feed's writer,
 * always current. On a read-only store or a follower, history moves on elsewhere: `refresh`
 * opens a newer view and later calls use it, while the view before stays open for reads already
 * begun on it (until none holds it, and at least `followerViewGraceMs`). A follower's `follow`
 * goes on across views, waiting for the next one when it has read the current one to its head.
 *
 * @example
 * const view = new FeedView(writer, { reopen: () => openWriterAgain() });
 * await view.refresh(); // view.current is the newest
 */

import type { FollowerInfo } from '@streamstack/protocol';
import { FeedReads } from '../coordinator/reading/feed-reads.js';
import type { FeedWriter } from '../coordinator/writing/feed-writer.js';
import type { StreamStackError } from '../errors.js';
import { followerViewGraceMs } from '../limits.js';
import type { FollowSource } from '../query/reading/follow.js';

/** How a read-only or follower feed moves to newer history. @internal */
export interface FeedViews {
  /** Opens a new view (a follower first brings its copy up to object storage), or says there is nothing newer. */
  reopen(): Promise<FeedWriter | undefined>;
  /** Set for a follower: the error every write fails with. */
  readonly writesRefused?: StreamStackError;
  /** Set for a follower: how its syncs with object storage go. */
  status?(): FollowerInfo;
}

export class FeedView {
  private writer: FeedWriter;
  private viewReads: FeedReads;
  /** The refresh running, and the one asked for while it runs. */
  private refreshing: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  /** Readers of `follow` waiting for a newer view. */
  private readonly waiting = new Set<() => void>();

  constructor(
    writer: FeedWriter,
    private readonly views?: FeedViews,
  ) {
    this.writer = writer;
    this.viewReads = new FeedReads(writer);
  }

  get current(): FeedWriter {
    return this.writer;
  }

  get reads(): FeedReads {
    return this.viewReads;
  }

  /** A follower's sync status, as `feed.info()` shows it (nothing for other feeds). */
  followerStatus(): { follower?: FollowerInfo } {
    const status = this.views?.status?.();
    return status ? { follower: status } : {};
  }

  /** Throws a follower's refusal of writes. */
  refuseWrites(): void {
    if (this.views?.writesRefused) throw this.views.writesRefused;
  }

  /**
   * Opens a newer view, when there is one. One refresh at a time: a call while one runs waits
   * for it and then for one of its own (shared by every call meanwhile), since the one running
   * may have looked before what the caller expects to see.
   */
  refresh(): Promise<void> {
    if (!this.views) return Promise.resolve();
    if (this.refreshing) {
      this.queued ??= this.refreshing
        .catch(() => undefined)
        .then(() => {
          this.queued = undefined;
          return this.refresh();
        });
      return this.queued;
    }
    this.refreshing = (async () => {
      try {
        const next = await this.views!.reopen();
        if (next) this.replace(next);
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  /** Later calls use `next`; the view before closes once its grace is over and no read holds it. */
  private replace(next: FeedWriter): void {
    const before = this.writer;
    this.writer = next;
    this.viewReads = new FeedReads(next);
    for (const wake of this.waiting) wake();
    const timer = setTimeout(() => void before.readGate.whenIdle().then(() => before.close()), followerViewGraceMs);
    timer.unref();
  }

  /**
   * The source `follow` reads from: the writer itself, or, for a feed whose views move on, the
   * newest view each time, waiting for a newer view when the current one has nothing after.
   */
  followSource(): FollowSource {
    if (!this.views) return this.writer;
    return {
      snapshot: () => this.writer.snapshot(),
      holdReads: (read) => this.writer.holdReads(read),
      waitForCommitAfter: (after, signal) => this.viewPast(after, signal),
    };
  }

  /** Resolves once a view's head is past `after`; rejects when `signal` aborts or the view closes. */
  private async viewPast(after: number, signal?: AbortSignal): Promise<void> {
    while (this.writer.watermark.commit <= after) {
      signal?.throwIfAborted();
      this.writer.assertOpen();
      await new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          this.waiting.delete(wake);
          reject(signal!.reason);
        };
        const wake = () => {
          this.waiting.delete(wake);
          signal?.removeEventListener('abort', onAbort);
          resolve();
        };
        this.waiting.add(wake);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    }
  }

  /** Catch-ups of the current view with its tail segment, one after another. */
  private catchingUp: Promise<number | undefined> = Promise.resolve(0);

  /**
   * A follower: the current view takes what its tail segment (based at `base`) gained up to
   * `end` (opening it first when it follows the view's finished one), and `follow` readers waiting
   * for more wake. Resolves to the commits it took, or undefined when the view cannot take them
   * (another segment, or with `replaced` a file made anew): a newer view must be opened.
   */
  catchUp(base: number, end: number, replaced: boolean): Promise<number | undefined> {
    const next = this.catchingUp
      .catch(() => 0)
      .then(async () => {
        const taken = await this.writer.catchUp(base, end, replaced);
        if (taken !== undefined && taken > 0) for (const wake of this.waiting) wake();
        return taken;
      });
    this.catchingUp = next;
    return next;
  }

  /** Closes the current view, and wakes readers waiting for a newer one (they then see it closed). */
  async close(reason?: StreamStackError): Promise<void> {
    await this.writer.close(reason);
    for (const wake of this.waiting) wake();
  }
}
