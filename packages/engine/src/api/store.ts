/**
 * A StreamStack store: one data directory, opened read-write by one process at a time.
 *
 * It is longer than 500 lines because it is the store's whole public surface — its options,
 * each documented, and one method per operation with its checks of the caller's arguments; the
 * work itself is in the coordinator (and a takeover's part on the store, in `store-takeover.ts`).
 *
 * @example
 * await using store = await Store.open('./data');
 * const feed = await store.createFeed('events');
 * await feed.append([{ payload: 'hello', type: 'greeting', tags: ['user:1'] }]);
 */
import crypto from 'node:crypto';
import path from 'node:path';
import type { ClusterFeed, ClusterInfo, LeaseGrant, TakeoverResult } from '@streamstack/protocol';
import { type RetentionPolicy, validateRetentionPolicy } from '../coordinator/maintenance/retention-state.js';
import {
  DataDirectory,
  deletedFeedError,
  feedTagFrom,
  validateFeedName,
} from '../coordinator/opening/data-directory.js';
import { readForkOrigin } from '../coordinator/opening/feed-fork.js';
import { type FeedVerification, historyLayout, verifyFeed } from '../coordinator/opening/verify.js';
import type { Subscriptions } from '../coordinator/reading/subscriptions.js';
import { type CoordinationOptions, EtcdLeases } from '../coordinator/writing/etcd-leases.js';
import { FeedWriter } from '../coordinator/writing/feed-writer.js';
import type { Durability } from '../coordinator/writing/feed-writer-open.js';
import { publishHeadHints } from '../coordinator/writing/head-hints.js';
import { isStreamStackError, StreamStackError } from '../errors.js';
import { type KernelChoice, loadKernels } from '../kernels/index.js';
import type { Kernels } from '../kernels/kernels.js';
import { segmentBytesDefault, segmentBytesMax, segmentBytesMin } from '../limits.js';
import { checkOnProgress, type OnProgress, type Progress, ProgressReporter } from '../progress.js';
import type { ObjectSegmentStore } from '../storage/object-segment-store.js';
import { Feed, type FeedInfo } from './feed.js';
import { FollowedFeeds } from './follower.js';
import type { FollowOptions } from './follower-tail.js';
import { localHistoryBudget, type ObjectStoreOptions, objectStoreSettings } from './object-store-options.js';
import { optionsOf } from './records.js';
import { forkInStore } from './store-fork.js';
import { takeOverInStore } from './store-takeover.js';

/** `store.verify`'s progress: bytes of history read, and the feed being verified. */
export interface VerifyProgress extends Progress {
  readonly feed: string;
}

export interface StoreOptions {
  /** Which kernels to use: a choice for `loadKernels`, or a kernel set. Default: `auto`. */
  readonly kernels?: KernelChoice | Kernels;
  /** Milliseconds since the epoch. Injected by tests; default `Date.now`. */
  readonly clock?: () => number;
  /** Fresh unique ids for streams and lease tokens. Default: random UUIDs. */
  readonly newId?: () => string;
  /**
   * Capacity a feed's segments grow to: a log's first segment is preallocated to 64 KiB and each
   * next one to twice the one before, up to this (default 64 MiB). A record may be at most a
   * quarter of it.
   */
  readonly segmentBytes?: number;
  /**
   * Open to read only: take no lock and write nothing (no recovery cuts, no index files), so
   * reads can run beside the process that writes. Writes fail with `READ_ONLY`. A read-only
   * store sees the feeds as they were when each was first opened; `refresh` on a feed moves on.
   */
  readonly readOnly?: boolean;
  /**
   * Only where the native module cannot load (the lock is then a plain `LOCK` file): remove a
   * `LOCK` left by a process that died, then take the directory. Never needed with the OS lock.
   */
  readonly breakLock?: boolean;
  /**
   * Tier sealed history to S3-compatible object storage: each sealed segment, with its summary,
   * index and dictionaries, is uploaded in the background (never delaying an acknowledgement),
   * then made visible there by a descriptor object. `feed.info().tiering` says how far it got;
   * `feed.tiered()` waits until everything sealed is there; `verify` checks the remote copies
   * too. A read-only store uploads nothing, and uses it only to verify.
   */
  readonly objectStore?: ObjectStoreOptions;
  /**
   * Open as a follower of the feeds another machine writes and tiers to `objectStore` (required):
   * this directory keeps a copy of each feed's summaries, indexes and dictionaries, its records
   * are read from object storage, and each feed follows what its writer tiers (every
   * `followerRefreshMs`, or on `feed.refresh()`). Every read works as on the writer, over its
   * sealed history; writes fail with `READ_ONLY`. See docs/architecture.md (Followers).
   */
  readonly follower?: boolean;
  /**
   * A follower: also read each feed's unsealed tail from its writer's server (`streamstack
   * serve`), so that a commit is read here within a round trip of its seal rather than once its
   * segment is uploaded. `token` is sent as a bearer token when the server asks for one.
   *
   * @example
   * await Store.open('./replica', { objectStore, follower: true, follow: { url: 'http://writer:7070' } });
   */
  readonly follow?: FollowOptions;
  /**
   * Keep every feed's writer lease in etcd rather than in the feed's directory: a grant is then
   * one transaction that creates the feed's writer key (only if no one holds it) under an etcd
   * lease of the grant's TTL, and raises the feed's epoch there. A grant whose key is deleted or
   * taken over in etcd is lost at once: writes under its token fail `FENCED`. Opening fails with
   * `UNAVAILABLE` if etcd does not answer. See docs/cluster.md.
   *
   * @example
   * await Store.open('./data', { coordination: { etcd: 'http://127.0.0.1:2379' } });
   */
  readonly coordination?: CoordinationOptions;
}

const asyncDispose: typeof Symbol.asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose');

export class Store {
  private readonly feeds = new Map<string, Promise<Feed>>();
  /** Feeds a takeover just laid out, and their sealed segments written back from slots: for their next open. */
  private readonly restoredBases = new Map<string, ReadonlySet<number>>();
  /** Deletions under way, by feed name: a lookup or a creation of the name waits for its end. */
  private readonly deletions = new Map<string, Promise<void>>();
  private closed = false;

  private constructor(
    private readonly directory: DataDirectory,
    readonly kernels: Kernels,
    private readonly clock: () => number,
    private readonly newId: () => string,
    private readonly segmentBytes: number,
    private readonly objectStore: ObjectSegmentStore | undefined,
    /** Bytes of sealed history kept locally once uploaded (undefined: all of it). */
    private readonly localHistoryBytesMax: number | undefined,
    /** Set for a follower: its feeds are copies of those object storage holds. */
    private readonly followed: FollowedFeeds | undefined = undefined,
    /** The writer leases in etcd, when the store has a coordination store. */
    private readonly leases: EtcdLeases | undefined = undefined,
  ) {}

  /** Opens (creating if needed) the data directory `directory`; `LOCKED` if another opener has it. */
  static async open(directory: string, options: StoreOptions = {}): Promise<Store> {
    const kernels = typeof options.kernels === 'object' ? options.kernels : loadKernels(options.kernels);
    const segmentBytes = options.segmentBytes ?? segmentBytesDefault;
    if (!Number.isSafeInteger(segmentBytes) || segmentBytes < segmentBytesMin || segmentBytes > segmentBytesMax) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `segmentBytes must be from ${segmentBytesMin} to ${segmentBytesMax}`,
      );
    }
    // Checked before the directory is touched: a bad setting leaves nothing behind.
    const objectSettings = options.objectStore === undefined ? undefined : objectStoreSettings(options.objectStore);
    if (options.follower !== undefined && typeof options.follower !== 'boolean')
      throw new StreamStackError('INVALID_ARGUMENT', 'follower is true or false');
    if (options.follower && (!objectSettings || options.readOnly))
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        options.readOnly
          ? 'a follower keeps its copy in its directory: it cannot be opened readOnly'
          : 'a follower reads its feeds from object storage: give objectStore',
      );
    const follow = options.follow === undefined ? undefined : followOptions(options.follow, options.follower);
    if (options.coordination !== undefined && options.readOnly)
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        'coordination keeps writer leases and head hints: a read-only store takes none (a follower may watch the hints)',
      );
    // etcd is asked first: a store that cannot reach it touches nothing.
    const leases = options.coordination === undefined ? undefined : await EtcdLeases.open(options.coordination);
    let data: DataDirectory;
    try {
      data = await DataDirectory.open(path.resolve(directory), {
        ...(options.readOnly === undefined ? {} : { readOnly: options.readOnly }),
        ...(options.breakLock === undefined ? {} : { breakLock: options.breakLock }),
      });
    } catch (error) {
      await leases?.close();
      throw error;
    }
    // The SDK is loaded only by a store that tiers: every other store starts without it.
    const objectStore =
      objectSettings && new (await import('../storage/object-segment-store.js')).ObjectSegmentStore(objectSettings);
    const store: Store = new Store(
      data,
      kernels,
      options.clock ?? Date.now,
      options.newId ?? (() => crypto.randomUUID()),
      segmentBytes,
      objectStore,
      options.objectStore && localHistoryBudget(options.objectStore),
      options.follower && objectStore
        ? new FollowedFeeds(
            kernels,
            objectStore,
            data,
            (name, subscriptions): Promise<FeedWriter> => store.openWriter(name, true, subscriptions),
            options.clock ?? Date.now,
            follow,
            leases,
          )
        : undefined,
      leases,
    );
    return store;
  }

  /** Opens feed `name`'s writer over its directory (read-only for a follower's view). */
  private async openWriter(name: string, readOnly: boolean, subscriptions?: Subscriptions): Promise<FeedWriter> {
    // A follower's copy names its durability too, but the follower never writes: it is left out.
    const durability = this.followed ? undefined : this.directory.readMetadata(name).durability;
    const writer = await FeedWriter.open(this.directory.feedDirectory(name), {
      ...(durability ? { durability } : {}),
      feed: name,
      kernels: this.kernels,
      clock: this.clock,
      newId: this.newId,
      segmentBytes: this.segmentBytes,
      readOnly,
      ...(this.objectStore ? { objectStore: this.objectStore } : {}),
      ...(this.localHistoryBytesMax === undefined ? {} : { localHistoryBytesMax: this.localHistoryBytesMax }),
      ...(this.leases ? { leases: this.leases } : {}),
      // A follower's view writes into its copy the derived files it rebuilds.
      ...(subscriptions ? { subscriptions, derivedWritable: true } : {}),
      ...(readOnly ? {} : { restoredBases: this.takeRestoredBases(name) }),
    });
    // On a node of a cluster, the followers hear of each new head through etcd.
    if (this.leases && !readOnly && !this.followed) publishHeadHints(name, writer, this.leases);
    return writer;
  }

  /** The segments a takeover wrote back for feed `name`, once: a later open finds their files. */
  private takeRestoredBases(name: string): ReadonlySet<number> | undefined {
    const bases = this.restoredBases.get(name);
    this.restoredBases.delete(name);
    return bases;
  }

  /** True when the store follows feeds another machine writes (`follower`). */
  get follower(): boolean {
    return this.followed !== undefined;
  }

  /** True when the store was opened with `readOnly`. */
  get readOnly(): boolean {
    return this.directory.readOnly;
  }

  /** The data directory's absolute path. */
  get path(): string {
    return this.directory.root;
  }

  private assertOpen(): void {
    if (this.closed) throw new StreamStackError('CLOSED', 'the store is closed');
  }

  /**
   * Creates a feed; `FEED_EXISTS` if one has the name, `INVALID_NAME` if the name is not allowed.
   * `durability: 'replicated'` (with `objectStore`) acknowledges each write only once it is also
   * in object storage, as a slot object; the default, `local`, once the local fsync returns (see
   * docs/cluster.md for what each costs and promises).
   *
   * @example
   * await store.createFeed('payments', { durability: 'replicated' });
   */
  async createFeed(
    name: string,
    options: { retention?: RetentionPolicy; durability?: Durability } = {},
  ): Promise<Feed> {
    this.assertOpen();
    validateFeedName(name);
    options = optionsOf(options, 'store.createFeed');
    // Checked before anything is created: a bad policy leaves no feed behind.
    const retention = options.retention === undefined ? undefined : validateRetentionPolicy(options.retention);
    const durability = options.durability ?? 'local';
    if (durability !== 'local' && durability !== 'replicated')
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `durability is 'local' or 'replicated', not ${String(durability)}`,
      );
    if (durability === 'replicated' && !this.objectStore)
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        'a replicated feed keeps its slots in object storage: open the store with objectStore',
      );
    this.refuseOnFollower();
    await this.deletions.get(name);
    await this.directory.createFeed(name, this.clock(), feedTagFrom(this.newId()), durability);
    const feed = await this.feed(name);
    if (retention) await feed.setRetention(retention);
    return feed;
  }

  /** The feed `name`; `FEED_NOT_FOUND` if there is none. Its logs are recovered on first use. */
  feed(name: string): Promise<Feed> {
    this.assertOpen();
    const deleting = this.deletions.get(name);
    if (deleting) return deleting.then(() => this.feed(name));
    let feed = this.feeds.get(name);
    if (feed && this.directory.readOnly) {
      // A feed the writer deleted under this reader is looked up again: the name may be a
      // new feed now.
      const cached = feed;
      return cached.then((open) => {
        if (!open.writer.deleted) return open;
        if (this.feeds.get(name) === cached) this.feeds.delete(name);
        return this.feed(name);
      });
    }
    if (!feed) {
      const followed = this.followed;
      feed = followed
        ? followed.open(validateFeedName(name))
        : (async () => {
            const metadata = this.directory.readMetadata(name);
            const readOnly = this.directory.readOnly;
            const writer = await this.openWriter(name, readOnly);
            // A read-only feed moves on when asked (`feed.refresh`): it reopens its directory.
            return new Feed(
              name,
              metadata.createdAt,
              writer,
              readOnly ? { reopen: () => this.openWriter(name, true) } : undefined,
              readOnly ? undefined : this,
            );
          })();
      this.feeds.set(name, feed);
      feed.catch(() => this.feeds.delete(name));
    }
    return feed;
  }

  /**
   * Deletes the feed `name` and everything it holds, durably: `FEED_NOT_FOUND` if there is none,
   * `READ_ONLY` on a read-only store. The feed is closed first: writes already submitted settle
   * (written, or refused), and from then on every call on its `Feed`, `Stream` and
   * `Subscription` handles fails with `FEED_NOT_FOUND` (`details.deleted` is true), as a lookup
   * of the name does. Once this resolves the name is free: `createFeed(name)` makes a new,
   * empty feed. Crash-safe: a crash leaves the feed whole or deleted, never part of it (see
   * docs/faults.md). A reader opened read-only beside this store (another process) sees the
   * feed's calls fail with `FEED_NOT_FOUND` too.
   *
   * @example
   * await store.deleteFeed('ds-session-42');
   * const fresh = await store.createFeed('ds-session-42'); // empty
   */
  async deleteFeed(name: string): Promise<void> {
    this.assertOpen();
    validateFeedName(name);
    if (this.directory.readOnly) throw new StreamStackError('READ_ONLY', `${this.directory.root} was opened read-only`);
    this.refuseOnFollower();
    // One deletion of a name at a time: a second one waits, then finds no feed (or a new one).
    const earlier = this.deletions.get(name);
    const deletion = (async () => {
      await earlier;
      if (!this.directory.holdsFeed(name))
        throw new StreamStackError('FEED_NOT_FOUND', `no feed named ${name}`, { details: { feed: name } });
      const open = this.feeds.get(name);
      this.feeds.delete(name);
      const feed = open && (await open.catch(() => undefined));
      await feed?.writer.close(deletedFeedError(name));
      await this.directory.deleteFeed(name);
    })();
    return this.guard(name, deletion);
  }

  /** The names of every feed, sorted (a follower's: those object storage holds). */
  async feedNames(): Promise<string[]> {
    this.assertOpen();
    return this.followed ? this.followed.names() : this.directory.feedNames();
  }

  /** A follower creates and deletes no feed: its writer does. */
  private refuseOnFollower(): void {
    if (this.followed)
      throw new StreamStackError(
        'READ_ONLY',
        `${this.directory.root} follows its feeds: create and delete them on their writer`,
      );
  }

  async feedInfo(name: string): Promise<FeedInfo> {
    return (await this.feed(name)).info();
  }

  /**
   * Checks every CRC, the commit chain, manifests against packs and the WAL against history of
   * one feed or all; reports what it finds and repairs nothing. `onProgress` is called as it
   * goes, in bytes of history segments read (each is read twice: its frames scanned, then its
   * records checked), with the feed being verified.
   *
   * @example
   * await store.verify('orders', { onProgress: ({ done, total }) => console.log(`${done} of ${total} bytes`) });
   */
  async verify(name?: string, options: { onProgress?: OnProgress<VerifyProgress> } = {}): Promise<FeedVerification[]> {
    options = optionsOf(options, 'store.verify', ['onProgress']);
    const onProgress = checkOnProgress<VerifyProgress>(options.onProgress);
    this.assertOpen();
    const names = name === undefined ? await this.feedNames() : [name];
    const layouts = await Promise.all(
      names.map((feedName) => historyLayout(this.kernels, this.directory.feedDirectory(feedName))),
    );
    const reporter = new ProgressReporter(
      onProgress,
      'bytes',
      layouts.reduce((sum, layout) => sum + 2 * layout.bytes, 0),
      { feed: names[0] ?? '' },
    );
    reporter.advance(0, undefined, true);
    let offset = 0;
    const results: FeedVerification[] = [];
    for (const [at, feedName] of names.entries()) {
      const layout = layouts[at];
      const progress = { reporter, offset, layout };
      offset += 2 * layout.bytes;
      try {
        this.directory.readMetadata(feedName);
      } catch (error) {
        if (!(error instanceof StreamStackError) || error.code !== 'CORRUPT') throw error;
        const { file, offset } = error.details as { file: string; offset: number };
        results.push({
          feed: feedName,
          ok: false,
          lowMark: 1,
          commits: 0,
          records: 0,
          segments: 0,
          walEvents: 0,
          problems: [{ code: 'CORRUPT', message: error.message, file, offset }],
        });
        continue;
      }
      const open = this.feeds.get(feedName);
      const writer = open && (await open).writer;
      if (writer) await writer.idle();
      const verify = () =>
        verifyFeed(this.kernels, feedName, this.directory.feedDirectory(feedName), progress, this.objectStore);
      // An open feed's maintenance waits while its files are read: no trim, merge or eviction
      // changes one under the check.
      results.push(await (writer ? writer.maintenanceHeld(verify) : verify()));
    }
    reporter.finish();
    return results;
  }

  /**
   * The cluster this store is a node of (a store opened with `coordination`): every node and the
   * address it serves at, and who writes each leased feed, under which epoch, read from etcd now.
   * `INVALID_ARGUMENT` for a store without a coordination store.
   *
   * @example
   * const { nodes, feeds } = await store.cluster();
   */
  async cluster(): Promise<ClusterInfo> {
    this.assertOpen();
    if (!this.leases)
      throw new StreamStackError('INVALID_ARGUMENT', 'this store is no node of a cluster: open it with coordination');
    return this.leases.cluster();
  }

  /**
   * The writer lease of feed `name` for `holder`, as `feed.acquireLease` grants it. On a node of
   * a cluster with an object store, a replicated feed this node has no copy of, or whose copy
   * another writer fenced off, is taken over first (`takeOver`): a producer whose writer died
   * asks any other node for the lease.
   *
   * @example
   * const { token } = await store.acquireLease('orders', { holder: 'ingest-1' });
   */
  async acquireLease(name: string, options: { holder: string; ttlMs?: number }): Promise<LeaseGrant> {
    this.assertOpen();
    options = optionsOf(options, 'store.acquireLease');
    if (!this.leases || !this.objectStore || this.followed) return (await this.feed(name)).acquireLease(options);
    try {
      return await (await this.feed(name)).acquireLease(options);
    } catch (error) {
      if (!isStreamStackError(error, 'FEED_NOT_FOUND') && !isStreamStackError(error, 'FENCED')) throw error;
      return (await this.takeOver(name, options)).grant;
    }
  }

  /**
   * Makes this node the writer of replicated feed `name`, which another node wrote (its writer
   * key in etcd expired: it died, or stopped answering) or which fenced this node's copy off.
   * The lease is taken in etcd for `holder` under a new epoch; the slots are fenced, so nothing
   * the old writer still stores can be acknowledged; the feed is laid out from object storage
   * and its slots in place of any local copy (a stream left open comes back with its records:
   * seal or abort it), and opened. Needs `coordination` and `objectStore`; `LEASE_HELD` while
   * another grant lives in etcd; `INVALID_ARGUMENT` for a feed of `local` durability, whose
   * acknowledged writes only its writer's disk holds. See docs/cluster.md.
   *
   * @example
   * const { grant, activeStream } = await store.takeOver('orders', { holder: 'ingest-1' });
   */
  async takeOver(name: string, options: { holder: string; ttlMs?: number }): Promise<TakeoverResult> {
    this.assertOpen();
    validateFeedName(name);
    options = optionsOf(options, 'store.takeOver');
    const { leases, objectStore } = this;
    if (!leases || !objectStore || this.followed)
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        'a takeover needs a writable node of a cluster: open the store with coordination and objectStore',
      );
    // One takeover (or deletion) of a name at a time: a second one waits, then finds the lease held.
    for (let pending = this.deletions.get(name); pending; pending = this.deletions.get(name)) await pending;
    return takeOverInStore(
      {
        kernels: this.kernels,
        objectStore,
        leases,
        directory: this.directory,
        segmentBytes: this.segmentBytes,
        clock: this.clock,
        newId: this.newId,
        feed: (feed) => this.feed(feed),
        forget: (feed) => {
          const open = this.feeds.get(feed);
          this.feeds.delete(feed);
          return open;
        },
        // Lookups of the name wait while its directory is replaced.
        guard: (feed, work) => this.guard(feed, work),
        restored: (feed, bases) => this.restoredBases.set(feed, new Set(bases)),
      },
      name,
      options,
    );
  }

  /**
   * Forks feed `source` at commit `at` (default: its head) into a new feed `name`: its history is
   * the source's commits up to `at`, sharing the source's sealed segments instead of copying them
   * (only the segment holding `at` is copied, up to it), with its own lease, subscriptions and
   * writes from there on. Deleting, trimming or compacting either feed never changes what the
   * other reads. `CURSOR_OUT_OF_RANGE` past the head, `TRIMMED` or `COMPACTED` below what the
   * source keeps whole, `FEED_EXISTS` if `name` is taken.
   *
   * @example
   * const trial = await store.forkFeed('orders', 'orders-trial', { at: 1_000 });
   */
  async forkFeed(source: string, name: string, options: { at?: number } = {}): Promise<Feed> {
    this.assertOpen();
    validateFeedName(source);
    validateFeedName(name);
    options = optionsOf(options, 'store.forkFeed', ['at']);
    this.refuseOnFollower();
    if (this.directory.readOnly) throw new StreamStackError('READ_ONLY', 'the store was opened read-only');
    await this.deletions.get(name);
    const work = forkInStore(
      {
        directory: this.directory,
        tiered: this.objectStore !== undefined,
        clock: this.clock,
        feed: (feed) => this.feed(feed),
      },
      source,
      name,
      options.at,
    );
    await this.guard(name, work);
    return this.feed(name);
  }

  /**
   * The feeds of this store forked from `source` (`store.forkFeed`), sorted: each fork's origin
   * names the feed it was forked from; forks of those forks are not listed. It reads one small
   * file per feed and opens none.
   *
   * @example
   * if ((await store.forksOf('orders')).length === 0) await store.deleteFeed('orders');
   */
  async forksOf(source: string): Promise<string[]> {
    this.assertOpen();
    validateFeedName(source);
    return this.directory
      .feedNames()
      .filter((name) => readForkOrigin(this.directory.feedDirectory(name))?.feed === source);
  }

  /** Makes lookups (and creations, deletions) of feed `name` wait for `work` to settle. */
  private guard<T>(name: string, work: Promise<T>): Promise<T> {
    const settled = work.then(
      () => undefined,
      () => undefined,
    );
    this.deletions.set(name, settled);
    void settled.then(() => {
      if (this.deletions.get(name) === settled) this.deletions.delete(name);
    });
    return work;
  }

  /**
   * Who writes feed `name` when it is another node of the cluster: its node, the address it
   * serves at and its epoch, as this node's watch of etcd last saw the writer key. Undefined
   * when this node holds the lease, when nobody does, or for a store without coordination. A
   * server answers a request for such a feed with a redirect to that node (`NOT_OWNER`, 307): a
   * copy here, if any, was fenced off by that writer and is stale.
   *
   * @example
   * const owner = store.ownerElsewhere('orders'); // { node: 'b', url: 'http://10.0.0.2:4437', … }
   */
  ownerElsewhere(name: string): ClusterFeed | undefined {
    return this.leases?.ownerElsewhere(name);
  }

  /** True when the store keeps its leases in a coordination store (`coordination`). */
  get clustered(): boolean {
    return this.leases !== undefined;
  }

  /**
   * Names the address this node's server answers at (`streamstack serve` calls it once it
   * listens), for `cluster()` on every node. Nothing for a store without coordination.
   */
  async advertise(url: string): Promise<void> {
    this.assertOpen();
    await this.leases?.advertise(url);
  }

  /** Waits for queued writes, closes every feed and releases the lock. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.followed?.close();
    // A deletion under way finishes under the lock (its rename must not race another opener).
    await Promise.all(this.deletions.values());
    const feeds = await Promise.allSettled(this.feeds.values());
    for (const feed of feeds) if (feed.status === 'fulfilled') await feed.value.close();
    this.followed?.closeSubscriptions();
    this.objectStore?.close();
    await this.leases?.close();
    this.directory.close();
  }

  async [asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Checks a follower's `follow` option: an http(s) URL, on a follower only. */
function followOptions(follow: FollowOptions, follower: boolean | undefined): FollowOptions {
  if (!follower) throw new StreamStackError('INVALID_ARGUMENT', 'follow is for a follower: give follower: true');
  let url: URL;
  try {
    url = new URL(follow?.url);
  } catch {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `follow.url must be the writer's server address, not ${String(follow?.url)}`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new StreamStackError('INVALID_ARGUMENT', `follow.url must be an http or https address, not ${follow.url}`);
  if (follow.token !== undefined && typeof follow.token !== 'string')
    throw new StreamStackError('INVALID_ARGUMENT', 'follow.token is a string');
  return { url: url.href, ...(follow.token === undefined ? {} : { token: follow.token }) };
}
