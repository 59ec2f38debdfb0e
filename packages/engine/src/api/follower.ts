/**
 * A follower store's feeds: feeds another machine writes and tiers to object storage, read here
 * from a local copy (`follower-mirror.ts`) that holds every sealed segment's summary, index and
 * dictionaries, with the records read from object storage in checked blocks. Each feed's copy is
 * brought up to object storage when it is first looked up, then every `followerRefreshMs`, and
 * on `feed.refresh()`; when it changed, the feed moves to a new read-only view of it (reads under
 * way finish on the old one). A follower sees what its writer tiered: a prefix of the writer's
 * history that ends at the last sealed segment's last commit, never a gap and never a commit the
 * writer does not have. Its subscriptions are its own (kept in its directory, shared by every
 * view). With object storage down it reads what its copy holds (reads of records
 * fail with `UNAVAILABLE` until it is back) and catches up once it is.
 *
 * @example
 * await using follower = await Store.open('./replica', { objectStore, follower: true });
 * const feed = await follower.feed('orders'); // the writer's sealed history
 * for await (const record of feed.read({ mode: 'latest' })) console.log(record.key);
 */

import { type DataDirectory, validateFeedName } from '../coordinator/opening/data-directory.js';
import { FollowerMirror } from '../coordinator/opening/follower-mirror.js';
import { Subscriptions } from '../coordinator/reading/subscriptions.js';
import type { EtcdLeases } from '../coordinator/writing/etcd-leases.js';
import type { FeedWriter } from '../coordinator/writing/feed-writer.js';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { followerHintedRefreshMs, followerRefreshMs } from '../limits.js';
import { FeedLayout } from '../storage/feed-layout.js';
import type { ObjectSegmentStore } from '../storage/object-segment-store.js';
import { feedsObjectPrefix } from '../storage/segment-descriptor.js';
import type { FollowerInfo } from './feed.js';
import { Feed } from './feed.js';
import { FollowerTail, type FollowOptions } from './follower-tail.js';

/** True for an error that says object storage could not be reached (trying later may work). */
function isUnreachable(error: unknown): boolean {
  return error instanceof StreamStackError && error.code === 'UNAVAILABLE';
}

/** Whether a folder's name is a feed's (another tool's folder beside them is not). */
function isFeedName(name: string): boolean {
  try {
    validateFeedName(name);
    return true;
  } catch {
    return false;
  }
}

export class FollowedFeeds {
  private readonly timers = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly kernels: Kernels,
    private readonly objectStore: ObjectSegmentStore,
    private readonly directory: DataDirectory,
    /** Opens a read-only view of the feed's local copy, with the follower's subscriptions. */
    private readonly openView: (name: string, subscriptions: Subscriptions) => Promise<FeedWriter>,
    private readonly clock: () => number,
    /** Where the unsealed tails are read, when they are: the writer's server. */
    private readonly follow?: FollowOptions,
    /** The cluster's head hints, for a follower opened with `coordination`. */
    private readonly hints?: Pick<EtcdLeases, 'onHeadHint'>,
  ) {}

  /** Stops hearing of head hints, when the store closes. */
  private readonly unlisten = new Set<() => void>();

  /** The tails being followed, stopped when the store closes. */
  private readonly tails = new Set<FollowerTail>();

  /** Each followed feed's subscriptions (the views share them; the store closes them last). */
  private readonly subscriptions: Subscriptions[] = [];

  /** The error every write on a follower fails with. */
  private refusal(name: string): StreamStackError {
    return new StreamStackError(
      'READ_ONLY',
      `feed ${name} is followed from object storage (${this.objectStore.bucket}/${this.objectStore.prefix}): write through its writer`,
      { details: { feed: name, follower: true } },
    );
  }

  /** Opens the followed feed `name`; `FEED_NOT_FOUND` when object storage and the copy hold none. */
  async open(name: string): Promise<Feed> {
    const mirror = await FollowerMirror.open(this.kernels, this.objectStore, name, this.directory.feedDirectory(name));
    const status = { syncedAt: 0, syncs: 0, changes: 0, requests: 0, failures: 0, lastError: null } as {
      -readonly [K in keyof Omit<FollowerInfo, 'tail'>]: FollowerInfo[K];
    };
    const noteFailure = (error: unknown) => {
      const failure = error instanceof StreamStackError ? error : new StreamStackError('IO', String(error));
      status.failures++;
      status.lastError = { code: failure.code, message: failure.message, at: this.clock() };
    };
    // Syncs with object storage and copies of the tail change the copy one at a time.
    let queue: Promise<unknown> = Promise.resolve();
    const serial = <T>(work: () => Promise<T>): Promise<T> => {
      const next = queue.catch(() => undefined).then(work);
      queue = next;
      return next;
    };
    /** One sync, counted; a failure is kept for `info` and thrown. */
    const sync = async (): Promise<boolean> => {
      try {
        const done = await serial(() => mirror.sync());
        Object.assign(status, {
          syncedAt: this.clock(),
          syncs: status.syncs + 1,
          changes: status.changes + (done.changed ? 1 : 0),
          requests: status.requests + done.requests,
          failures: 0,
          lastError: null,
        });
        return done.changed;
      } catch (error) {
        noteFailure(error);
        throw error;
      }
    };
    /** A new view of the copy after a sync that changed it; a view that fails to open is a failure too. */
    // Set while the copy changed since the current view opened: a view that failed to open is tried again.
    let stale = false;
    const reopen = async (): Promise<FeedWriter | undefined> => {
      if (this.closed) return undefined;
      stale = (await sync()) || stale;
      if (!stale || this.closed) return undefined;
      try {
        const view = await this.openView(name, subscriptions);
        stale = false;
        return view;
      } catch (error) {
        noteFailure(error);
        throw error;
      }
    };
    await this.syncOrCached(mirror, sync);
    const metadata = this.directory.readMetadata(name);
    // The follower's own subscriptions: one writable set for every view, closed with the store.
    const subscriptions = await Subscriptions.open(
      this.kernels,
      new FeedLayout(this.directory.feedDirectory(name)).subscriptions,
      this.clock,
    );
    this.subscriptions.push(subscriptions);
    let tail: FollowerTail | undefined;
    const feed = new Feed(name, metadata.createdAt, await this.openView(name, subscriptions), {
      // Nothing is opened once the store closes: the view would outlive it.
      reopen,
      writesRefused: this.refusal(name),
      status: () => ({
        ...status,
        tail: tail ? { url: tail.url, commits: tail.tailCommits, requests: tail.tailRequests } : null,
      }),
    });
    if (!this.closed && this.follow) {
      tail = new FollowerTail(name, this.follow, mirror, () => feed, serial, noteFailure);
      this.tails.add(tail);
      await tail.start();
    }
    if (!this.closed) {
      // A failed refresh keeps the view it had; the next one, or `feed.refresh()`, tries again.
      const refresh = () => feed.refresh().catch(() => undefined);
      if (this.hints) this.followHints(name, feed, () => tail, refresh);
      else {
        const timer = setInterval(() => void refresh(), followerRefreshMs);
        timer.unref();
        this.timers.add(timer);
      }
    }
    return feed;
  }

  /**
   * Refreshes feed `name` as its head hints say: every `followerRefreshMs` while the last hint
   * is past the view's head (the writer's segments reach object storage some time after their
   * commits), and every `followerHintedRefreshMs` once caught up, since a hint can lag or be
   * lost with a broken watch. A hint from a writer at another address than the tail's moves the
   * tail there (the feed was taken over).
   */
  private followHints(
    name: string,
    feed: Feed,
    tail: () => FollowerTail | undefined,
    refresh: () => Promise<unknown>,
  ): void {
    let hinted = 0;
    let timer: NodeJS.Timeout | undefined;
    // When the timer fires (none while a refresh runs: it schedules the next when done).
    let due = Number.POSITIVE_INFINITY;
    let refreshing = false;
    let lastRefresh = Number.NEGATIVE_INFINITY;
    const behind = () => hinted > feed.writer.watermark.commit;
    const schedule = (delayMs: number) => {
      // Never sooner than `followerRefreshMs` after the last refresh, however fast hints come.
      const at = Math.max(this.clock() + delayMs, lastRefresh + followerRefreshMs);
      if (this.closed || refreshing || at >= due) return;
      if (timer) this.timers.delete(timer);
      clearTimeout(timer);
      due = at;
      timer = setTimeout(() => {
        due = Number.POSITIVE_INFINITY;
        refreshing = true;
        lastRefresh = this.clock();
        void refresh().finally(() => {
          refreshing = false;
          schedule(behind() ? followerRefreshMs : followerHintedRefreshMs);
        });
      }, at - this.clock());
      timer.unref();
      this.timers.add(timer);
    };
    schedule(followerHintedRefreshMs);
    this.unlisten.add(
      this.hints!.onHeadHint((hintedFeed, hint) => {
        if (hintedFeed !== name || this.closed) return;
        const following = tail();
        if (following && hint.url !== null && !following.readsFrom(hint.url)) following.pointAt(hint.url);
        hinted = hint.commit;
        if (behind()) schedule(0);
      }),
    );
  }

  /** Syncs the copy; with object storage unreachable, goes on with the copy a run before left. */
  private async syncOrCached(mirror: FollowerMirror, sync: () => Promise<boolean>): Promise<void> {
    try {
      await sync();
    } catch (error) {
      if (!isUnreachable(error) || !mirror.hasCopy) throw error;
    }
  }

  /**
   * The feeds object storage holds (one LIST of the feeds' folders), with those whose copy is
   * here: all of them, when object storage cannot be reached.
   */
  async names(): Promise<string[]> {
    const local = this.directory.feedNames();
    let remote: string[] = [];
    try {
      remote = (await this.objectStore.within(feedsObjectPrefix).folders()).filter(isFeedName);
    } catch (error) {
      if (!isUnreachable(error)) throw error;
    }
    return [...new Set([...local, ...remote])].sort();
  }

  /** Stops the refreshes and the tails; the store closes the views. */
  async close(): Promise<void> {
    this.closed = true;
    for (const unlisten of this.unlisten) unlisten();
    this.unlisten.clear();
    for (const timer of this.timers) clearInterval(timer);
    this.timers.clear();
    await Promise.all([...this.tails].map((tail) => tail.stop()));
    this.tails.clear();
  }

  /** Closes the subscriptions, once the views are closed. */
  closeSubscriptions(): void {
    for (const subscriptions of this.subscriptions.splice(0)) subscriptions.close();
  }
}
