/**
 * A feed: its writer lease, its streams, one-shot appends, and its commit history.
 *
 * @example
 * const feed = await store.createFeed('orders');
 * const { token } = await feed.acquireLease({ holder: 'ingest-1' });
 * const stream = await feed.openStream({ token, message: 'hourly poll' });
 * await stream.append([{ payload: '{"id":1}', key: 'order-1' }], { token });
 * const commit = await stream.seal({ token });
 *
 * It is longer than 500 lines because it is a feed's whole public surface, one method per
 * operation with its checks of the caller's arguments; the work itself is in the coordinator.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type {
  CommitRecords,
  FeedInfo,
  FollowerInfo,
  ReplicationInfo,
  SubscriptionGroupInfo,
  SubscriptionGroupOptions,
  TieringInfo,
} from '@streamstack/protocol';
import type { MergeProgress, MergeResult } from '../coordinator/maintenance/history-merge.js';
import type { RetentionInfo, TrimResult } from '../coordinator/maintenance/history-trim.js';
import type { KeyCompactionRequest, KeyCompactionResult } from '../coordinator/maintenance/key-compaction.js';
import { type RetentionPolicy, validateRetentionPolicy } from '../coordinator/maintenance/retention-state.js';
import { type FeedDiskUse, feedDiskUse } from '../coordinator/opening/disk-use.js';
import { readForkOrigin } from '../coordinator/opening/feed-fork.js';
import { sharedHistory } from '../coordinator/opening/feed-sharing.js';
import type { FeedReads } from '../coordinator/reading/feed-reads.js';
import { validateSubscriptionName } from '../coordinator/reading/subscriptions.js';
import { validateCondition } from '../coordinator/writing/conditions.js';
import type { FeedWriter } from '../coordinator/writing/feed-writer.js';
import type {
  AppendCondition,
  ColumnBatch,
  ExportManifest,
  ExportOptions,
  ReadOptions,
  TornTail,
} from '../coordinator/writing/feed-writer-types.js';
import type { GroupCommitStats } from '../coordinator/writing/group-commit.js';
import type { LeaseGrant } from '../coordinator/writing/lease.js';
import { StreamStackError } from '../errors.js';
import { leaseTtlMsDefault } from '../limits.js';
import { checkOnProgress, type OnProgress, type Progress } from '../progress.js';
import { FeedView, type FeedViews } from './feed-view.js';
import { FlatAsyncIterator } from './flat-iterator.js';
import { type FeedSiblings, GroupWork } from './group-work.js';
import {
  type AppendRecord,
  type Commit,
  optionsOf,
  readOptionNames,
  type StoredRecord,
  toCommit,
  validateCursor,
  validateMessage,
  validateRecords,
  validateToken,
} from './records.js';
import { Stream } from './stream.js';
import { Subscription, type SubscriptionInfo } from './subscription.js';
import { groupInfo, openGroup, SubscriptionGroup } from './subscription-group.js';

export type { CommitRecords, FeedInfo, FollowerInfo, ReplicationInfo, TieringInfo };

/** A read's options, their names and cursors checked (`what` names the call in errors). */
function checkedReadOptions(options: ReadOptions, what: string): ReadOptions {
  const checked = optionsOf(options, what, readOptionNames);
  return {
    ...checked,
    after: checkedCursor(checked.after, 'after'),
    upTo: checkedCursor(checked.upTo, 'upTo'),
    limit: validateCursor(checked.limit, 'limit'),
  };
}

/** A cursor option: a non-negative integer, checked against the head where it is used. */
function checkedCursor(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || (value as number) < 0) {
    throw new StreamStackError(
      'CURSOR_OUT_OF_RANGE',
      `${name} must be a commit number from 0 (the start) up to the head`,
      {
        details: { cursor: value },
      },
    );
  }
  return value as number;
}

export class Feed {
  private readonly view: FeedView;

  /** @internal */
  constructor(
    readonly name: string,
    private readonly createdAt: number,
    writer: FeedWriter,
    views?: FeedViews,
    /** The store's other feeds, on a store that writes (subscription groups park work in one). */
    private readonly siblings?: FeedSiblings,
  ) {
    this.view = new FeedView(writer, views);
  }

  /** The feed's subscription groups, opened on first use. */
  private groupWork: Promise<GroupWork> | undefined;

  /** @internal The feed's writer (on a read-only store or a follower: its newest view). */
  get writer(): FeedWriter {
    return this.view.current;
  }

  /** @internal */
  get reads(): FeedReads {
    return this.view.reads;
  }

  /**
   * Moves a read-only feed or a follower's to its newest history: a read-only store reopens it
   * from its directory (what the writer beside it has published since), a follower first fetches
   * what object storage holds (it also does so by itself every `followerRefreshMs`). Reads under
   * way finish on the history they started on; later calls use the new one. Resolves to the head
   * then. On a store that writes, the feed is always current: it resolves to the head.
   *
   * @example
   * const head = await feed.refresh(); // a follower: the writer's last tiered commit
   */
  async refresh(): Promise<Commit | undefined> {
    this.writer.assertPresent();
    await this.view.refresh();
    return this.headNow();
  }

  /**
   * @internal The durable groups of the feed's active history segment from byte `from` on, when
   * it is based at `base` (else only which base is active), waiting up to `waitMs` for some: what
   * a follower on another machine copies as its tail (`GET /v1/feeds/{feed}/history/tail`).
   */
  historyTail(options: { base: number; from: number; bytesMax: number; waitMs: number; signal?: AbortSignal }) {
    this.refuseOnFollower();
    return this.writer.historyTail(options);
  }

  /** @internal A follower: the view takes what its tail segment gained (see `FeedView.catchUp`). */
  catchUpTail(base: number, end: number, replaced: boolean): Promise<number | undefined> {
    return this.view.catchUp(base, end, replaced);
  }

  /** @internal Closes the feed's view and ends the follows waiting on it (the store is closing). */
  async close(): Promise<void> {
    const groups = this.groupWork;
    this.groupWork = undefined;
    if (groups) (await groups.catch(() => undefined))?.close();
    return this.view.close();
  }

  /** Throws a follower's refusal: it reads what its writer tiered and writes nothing. */
  private refuseOnFollower(): void {
    this.view.refuseWrites();
  }

  /** What recovery cut off torn tails when this feed was opened (empty after a clean close). */
  get recovery(): readonly TornTail[] {
    return this.writer.tornTails;
  }

  /** Takes the feed's writer lease with a new, strictly larger epoch and a fresh fencing token. */
  async acquireLease(options: { holder: string; ttlMs?: number }): Promise<LeaseGrant> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.acquireLease');
    return this.writer.acquireLease(options.holder, options.ttlMs ?? leaseTtlMsDefault);
  }

  async renewLease(options: { token: string; ttlMs?: number }): Promise<LeaseGrant> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.renewLease');
    return this.writer.renewLease(validateToken(options.token), options.ttlMs ?? leaseTtlMsDefault);
  }

  async releaseLease(options: { token: string }): Promise<void> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.releaseLease');
    return this.writer.releaseLease(validateToken(options.token));
  }

  /** Opens a stream (one at a time per feed) under the lease. */
  async openStream(options: { token: string; message?: string }): Promise<Stream> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.openStream');
    const opened = await this.writer.openStreamWith(validateToken(options.token), validateMessage(options.message));
    return new Stream(this, opened.stream);
  }

  /**
   * The stream `id`, open, sealed or aborted; `STREAM_NOT_FOUND` if the feed does not know it
   * (as `store.feed` fails for a missing feed). Async, as it is in the client, which asks the
   * server.
   *
   * @example
   * // A producer that restarted goes on with the stream it had open.
   * const stream = await feed.stream(savedStreamId);
   * const { records = 0 } = await stream.info();
   * await stream.append(batch, { token, expectedSeq: records + 1 });
   */
  async stream(id: string): Promise<Stream> {
    if (typeof id !== 'string' || id.length === 0)
      throw new StreamStackError('INVALID_ARGUMENT', 'a stream id is a non-empty string');
    this.writer.assertPresent();
    if (this.writer.streamStatus(id).state === 'unknown') {
      throw new StreamStackError('STREAM_NOT_FOUND', `no stream ${id} on feed ${this.name}`, {
        details: { stream: id },
      });
    }
    return new Stream(this, id);
  }

  /** The open stream, if there is one (a new lease holder finds its predecessor's here). */
  async activeStream(): Promise<Stream | undefined> {
    this.writer.assertPresent();
    const id = this.writer.activeStream;
    return id === undefined ? undefined : new Stream(this, id);
  }

  /**
   * One-shot append: the records become one commit of their own, written straight into history
   * with one fsync (shared with concurrent one-shot appends). While a lease is live, `token` is
   * required. With `condition`, the append is refused (`CONDITION_FAILED`, naming the first
   * matching position) when a record matching `condition.failIfMatch` lies after
   * `condition.after`, or (`SAME_BATCH`, retryable) when a matching record was accepted into the
   * same group commit and is not published yet. A matching record of a group commit still in
   * flight is waited for: once it is published, the condition fails on it (or holds, past it).
   *
   * @example
   * // Book a seat only if no one booked course 7 since we read it at position p.
   * await feed.append([{ payload, type: 'booked', tags: ['course:7'] }], {
   *   condition: { failIfMatch: { items: [{ types: ['booked'], tags: ['course:7'] }] }, after: p },
   * });
   */
  async append(
    records: readonly AppendRecord[],
    options: { token?: string; message?: string; condition?: AppendCondition } = {},
  ): Promise<Commit> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.append');
    const validated = validateRecords(records);
    const token = options.token === undefined ? undefined : validateToken(options.token);
    const condition = validateCondition(options.condition);
    const commit = await this.writer.appendOneShot(validated, token, validateMessage(options.message), condition);
    return toCommit(this.name, commit);
  }

  /**
   * The commit history after cursor `after` (a commit sequence; 0, the default, is the start),
   * oldest first, up to the head as it is now, at most `limit` commits. Commits are read as the
   * iteration reaches them (those of sealed segments from their summaries, a page at a time), so
   * listing millions of commits takes bounded memory. A bad cursor fails at once.
   *
   * @example
   * for await (const commit of feed.commits({ after: 0, limit: 100 })) console.log(commit.commit, commit.message);
   */
  commits(options: { after?: number; limit?: number; signal?: AbortSignal } = {}): AsyncGenerator<Commit> {
    options = optionsOf(options, 'feed.commits');
    this.writer.assertPresent();
    const after = checkedCursor(options.after, 'after') ?? this.writer.lowMark - 1;
    this.writer.assertNotTrimmed(after, 'after');
    const limit = validateCursor(options.limit, 'limit') ?? Number.POSITIVE_INFINITY;
    const head = this.writer.watermark.commit;
    if (after > head) {
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', `cursor ${after} is beyond the head (${head})`, {
        details: { cursor: after, head },
      });
    }
    return this.commitsFrom(after + 1, Math.min(head, after + limit), options.signal);
  }

  private async *commitsFrom(first: number, last: number, signal: AbortSignal | undefined): AsyncGenerator<Commit> {
    for (let commit = first; commit <= last; commit++) {
      signal?.throwIfAborted();
      this.writer.assertOpen();
      let record;
      try {
        record = this.writer.commitAt(commit);
      } catch (error) {
        // A sealed segment's commits are read from its summary: a read-only reader whose feed
        // was deleted under it finds the file gone.
        throw this.writer.orDeleted(error);
      }
      yield toCommit(this.name, record);
    }
  }

  /**
   * Reads the feed forward from cursor `after` over a snapshot taken now: every record of the
   * later commits up to commit `upTo` (default: the head), in RAW (default), `dedup` or `latest`
   * mode, optionally filtered by type and tags. An `upTo` past the head is `CURSOR_OUT_OF_RANGE`,
   * one before `after` is `INVALID_ARGUMENT`.
   *
   * @example
   * for await (const record of feed.read({ after: 0, mode: 'latest', signal })) console.log(record.key);
   * for await (const record of feed.read({ after: 10, upTo: 20 })) console.log(record.commit); // 11 … 20
   */
  read(options: ReadOptions = {}): AsyncGenerator<StoredRecord, undefined> {
    // Records one at a time, made from columns as they are handed out; the options are checked
    // at the first `next`, as a generator's would be.
    // The signal is looked at before each record; a bad one is refused with the other options.
    const signal = (options as ReadOptions | null)?.signal;
    return new FlatAsyncIterator(
      () => this.reads.records(checkedReadOptions(options, 'feed.read')),
      signal instanceof AbortSignal ? signal : undefined,
    );
  }

  /** The batch form of `read`: arrays of records (one commit's worth each), for throughput. */
  readBatches(options: ReadOptions = {}): AsyncGenerator<StoredRecord[]> {
    return this.reads.batches(checkedReadOptions(options, 'feed.readBatches'));
  }

  /**
   * The columnar form of `read`, and the fastest: batches of records, every field a typed array,
   * variable-length fields ranges of the bytes read from disk. A batch holds one commit's records,
   * or — where the read meets small commits — several consecutive commits' (`batch.spansCommits`;
   * `batch.commitOf(i)`, `batch.streamOf(i)` and `batch.commits` name each row's). Records are
   * made only when asked for (`batch.record(i)`); `batch.toArrow()` converts a batch.
   *
   * @example
   * for await (const batch of feed.readColumns({ mode: 'dedup' })) {
   *   for (let i = 0; i < batch.length; i++) bytes += batch.payloadEnds[i] - batch.payloadStarts[i];
   * }
   */
  readColumns(options: ReadOptions = {}): AsyncGenerator<ColumnBatch> {
    options = optionsOf(options, 'feed.readColumns', readOptionNames);
    return this.reads.columns({
      ...options,
      after: checkedCursor(options.after, 'after'),
      upTo: checkedCursor(options.upTo, 'upTo'),
      limit: validateCursor(options.limit, 'limit'),
    });
  }

  /**
   * `read` as NDJSON: the record lines `streamstack read` prints and `GET …/records` serves
   * (docs/cli.md), in chunks of whole lines (about 256 KiB each, every one a fresh buffer),
   * written natively from the columns. The fastest way to hand a read to a file, a pipe or a
   * socket; options and errors are those of `read`.
   *
   * @example
   * for await (const chunk of feed.readLines({ after: 0, mode: 'latest' })) process.stdout.write(chunk);
   */
  async *readLines(options: ReadOptions = {}): AsyncGenerator<Uint8Array> {
    // Bad options fail the first step, as `read`'s do (and as over HTTP), not the call.
    options = optionsOf(options, 'feed.readLines', readOptionNames);
    yield* this.reads.lines({
      ...options,
      after: checkedCursor(options.after, 'after'),
      upTo: checkedCursor(options.upTo, 'upTo'),
      limit: validateCursor(options.limit, 'limit'),
    });
  }

  /**
   * Exports the records of the commits after `after` (default 0) up to `upTo` (default: the
   * head), in RAW (default), `dedup` or `latest` mode, to the directory `to` as `ndjson`, `arrow`
   * (Arrow IPC file) or `parquet` files, then a manifest (`manifest.json`: the range, record
   * count, each file's SHA-256, the columns) written last. The same range and options give
   * byte-identical files; an export `after` a previous one's `upTo` continues it exactly.
   * Options and cursors are checked before anything is written (`INVALID_ARGUMENT`,
   * `CURSOR_OUT_OF_RANGE`); `to` must not already hold an export. See docs/history.md.
   *
   * @example
   * const first = await feed.export({ format: 'parquet', to: 'exports/1' });
   * // Later: only what was committed since.
   * await feed.export({ format: 'parquet', to: 'exports/2', after: first.upTo });
   */
  async export(options: ExportOptions): Promise<ExportManifest> {
    options = optionsOf(options, 'feed.export');
    this.writer.assertPresent();
    const after = checkedCursor(options.after, 'after');
    const upTo = checkedCursor(options.upTo, 'upTo');
    return this.reads.export({
      ...options,
      ...(after === undefined ? {} : { after }),
      ...(upTo === undefined ? {} : { upTo }),
    });
  }

  /** The records of commit `commit`, in position order. */
  async readCommit(commit: number): Promise<StoredRecord[]> {
    return this.reads.commit(commit);
  }

  /**
   * The current value of `key`: the record with the highest version (then the highest
   * position) among commits up to `asOf` (default: the head), or undefined when the key was
   * never written or its winner is a tombstone. Answered from the key index, never a scan.
   */
  async get(key: string, options: { asOf?: number } = {}): Promise<StoredRecord | undefined> {
    options = optionsOf(options, 'feed.get');
    if (typeof key !== 'string' || key.length === 0)
      throw new StreamStackError('INVALID_ARGUMENT', 'a key is a non-empty string');
    return this.reads.get(key, checkedCursor(options.asOf, 'asOf'));
  }

  /**
   * Every commit after `after`, then each new one as it is published, until `signal` aborts:
   * catch-up and live tail in one loop, so nothing is skipped or delivered twice.
   */
  async *follow(options: { after?: number; signal?: AbortSignal } = {}): AsyncGenerator<CommitRecords> {
    options = optionsOf(options, 'feed.follow');
    // A follower's follow goes on across its views: each new one brings the commits after.
    const source = this.view.followSource();
    for await (const batch of this.reads.follow(checkedCursor(options.after, 'after'), options.signal, source)) {
      yield { commit: toCommit(this.name, batch.commit), records: batch.records };
    }
  }

  /** Creates a named, durable cursor, starting after commit `after` (default 0, the start). */
  async createSubscription(name: string, options: { after?: number } = {}): Promise<Subscription> {
    options = optionsOf(options, 'feed.createSubscription');
    const after = this.startCursor(checkedCursor(options.after, 'after'));
    await this.writer.subscriptions.create(name, after);
    return new Subscription(this, name);
  }

  /** Where a new subscription starts: after `after`, by default the low mark's commit before. */
  private startCursor(given: number | undefined): number {
    this.writer.assertPresent();
    const after = given ?? this.writer.lowMark - 1;
    this.writer.assertNotTrimmed(after, 'after');
    const head = this.writer.watermark.commit;
    if (after > head) {
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', `cursor ${after} is beyond the head (${head})`, {
        details: { cursor: after, head },
      });
    }
    return after;
  }

  /** The subscription `name`; `SUBSCRIPTION_NOT_FOUND` if there is none. */
  async subscription(name: string): Promise<Subscription> {
    this.writer.assertPresent();
    this.writer.subscriptions.get(name);
    return new Subscription(this, name);
  }

  /** Where the feed was forked from, and what of its history it shares (`info().fork`, `.shared`). */
  private forkInfo(): Pick<FeedInfo, 'fork' | 'shared'> {
    const origin = readForkOrigin(this.writer.directory);
    const shared = sharedHistory(this.writer.directory);
    return { ...(origin ? { fork: origin } : {}), ...(shared ? { shared } : {}) };
  }

  /**
   * Forks this feed at commit `at` (default: the head) into a new feed `name` that shares its
   * sealed history (see `store.forkFeed`).
   *
   * @example
   * const replay = await feed.fork('orders-replay', { at: 5_000 });
   */
  async fork(name: string, options: { at?: number } = {}): Promise<Feed> {
    this.refuseOnFollower();
    const siblings = this.siblings;
    if (!siblings) throw new StreamStackError('READ_ONLY', `feed ${this.name} was opened read-only`);
    return siblings.forkFeed(this.name, name, options);
  }

  /** @internal The feed's subscription groups; `READ_ONLY` on a store that does not write. */
  groups(): Promise<GroupWork> {
    this.refuseOnFollower();
    this.writer.assertPresent();
    const siblings = this.siblings;
    if (!siblings) return Promise.reject(new StreamStackError('READ_ONLY', `feed ${this.name} was opened read-only`));
    if (!this.groupWork) {
      const opening = GroupWork.open(this, siblings);
      this.groupWork = opening;
      opening.catch(() => {
        if (this.groupWork === opening) this.groupWork = undefined;
      });
    }
    return this.groupWork;
  }

  /**
   * The subscription group `name`, created with `options` when there is none (its cursor is the
   * subscription of the same name, so the name must be free). For a group that exists, the
   * options given replace its ack timeout, deliveries and dead-letter feed; its order is fixed.
   *
   * @example
   * const group = await feed.subscriptionGroup('thumbnails', { maxDeliveries: 3 });
   * const [claim] = await group.claim({ worker: 'w1', waitMs: 5_000 });
   */
  async subscriptionGroup(name: string, options: SubscriptionGroupOptions = {}): Promise<SubscriptionGroup> {
    options = optionsOf(options, 'feed.subscriptionGroup', [
      'ackTimeoutMs',
      'maxDeliveries',
      'orderedBy',
      'deadLetter',
      'after',
    ]);
    validateSubscriptionName(name);
    const work = await this.groups();
    const given = options.after === undefined ? undefined : checkedCursor(options.after, 'after');
    await openGroup(this, work, name, options, () => this.startCursor(given));
    return new SubscriptionGroup(this, name, work);
  }

  /** The subscription group `name`; `SUBSCRIPTION_NOT_FOUND` if there is none. */
  async existingSubscriptionGroup(name: string): Promise<SubscriptionGroup> {
    validateSubscriptionName(name);
    const work = await this.groups();
    work.groups.get(name);
    return new SubscriptionGroup(this, name, work);
  }

  /** Every subscription group with its options, counts and lag, by name. */
  async subscriptionGroups(): Promise<SubscriptionGroupInfo[]> {
    const work = await this.groups();
    return work.groups.list().map((state) => groupInfo(this, state));
  }

  /** @internal Fails when subscription `name` is a group's cursor: only the group moves it. */
  async assertNotGrouped(name: string): Promise<void> {
    if (!this.siblings) return;
    if ((await this.groups()).groups.has(name))
      throw new StreamStackError(
        'SUBSCRIPTION_GROUPED',
        `subscription ${name} is the cursor of subscription group ${name}: claim, ack or reset through the group`,
        { details: { subscription: name } },
      );
  }

  /**
   * Every subscription with its cursor and lag, by name.
   *
   * @example
   * for (const { name, lag } of await feed.subscriptions()) console.log(name, lag.commits);
   */
  async subscriptions(): Promise<SubscriptionInfo[]> {
    this.writer.assertPresent();
    return Promise.all(this.writer.subscriptions.list().map((state) => new Subscription(this, state.name).info()));
  }

  /**
   * Index files rebuilt from their history segments since this feed was opened, and why: a
   * file's head is checked on open, the rest when a query first loads it.
   */
  get indexRebuilds(): readonly { segment: number; file: string; reason: string }[] {
    return this.writer.indexRebuilds;
  }

  /** Segment summaries rebuilt when this feed was opened (missing or damaged), and why. */
  get summaryRebuilds(): readonly { segment: number; file: string; reason: string }[] {
    return this.writer.summaryRebuilds;
  }

  /**
   * How this feed's writes were grouped since it was opened: group commits written (one
   * fdatasync each), the requests they carried, how many were written while the one before was
   * still being synced (pipelined), and how many are in flight now.
   *
   * @example
   * const { groups, requests } = feed.groupCommitStats();
   * console.log(`${(requests / groups).toFixed(1)} requests per fsync`);
   */
  groupCommitStats(): GroupCommitStats {
    this.writer.assertPresent();
    return this.writer.groupCommitStats;
  }

  /**
   * Trims the history: removes the oldest whole history segments (with their summaries, index
   * files and dictionaries; nothing is rewritten) whose commits all lie before `before`, or, with
   * no `before`, what the retention policy allows now. Segments holding commits a subscription
   * has not passed stay unless `force` (the result's `heldBy` names the subscription). The new
   * floor is durable before any file goes, so a crash mid-way is finished on the next open.
   * Afterwards reads start at the low mark; a cursor below it fails with `TRIMMED`.
   *
   * @example
   * const { lowMark, segmentsRemoved, heldBy } = await feed.trim({ before: 5000 });
   */
  async trim(
    options: { before?: number; force?: boolean; onProgress?: OnProgress<Progress> } = {},
  ): Promise<TrimResult> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.trim');
    this.writer.assertPresent();
    const before = checkedCursor(options.before, 'before');
    const head = this.writer.watermark.commit;
    if (before !== undefined && before > head + 1) {
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', `before ${before} is beyond the next commit (${head + 1})`, {
        details: { cursor: before, head },
      });
    }
    if (options.force !== undefined && typeof options.force !== 'boolean')
      throw new StreamStackError('INVALID_ARGUMENT', 'force is a boolean');
    const onProgress = checkOnProgress(options.onProgress);
    return this.writer.retentionKeeper().trim({
      ...(before === undefined ? { policy: true } : { before }),
      force: options.force === true,
      ...(onProgress ? { onProgress } : {}),
    });
  }

  /**
   * Sets the retention policy, durably: keep commits younger than `maxAgeMs`, the newest
   * `maxRecords` records, the newest `maxBytes` bytes of history segments — any combination; `{}`
   * keeps everything. Whole segments past any limit are trimmed on their own, after each
   * segment the feed finishes and every minute, never past a subscription (see `trim`).
   *
   * @example
   * await feed.setRetention({ maxAgeMs: 7 * 24 * 3600_000, maxBytes: 50 * 2 ** 30 });
   */
  async setRetention(policy: RetentionPolicy): Promise<RetentionInfo> {
    this.refuseOnFollower();
    this.writer.assertPresent();
    const checked = validateRetentionPolicy(policy);
    await this.writer.retentionKeeper().setPolicy(checked);
    return this.retention();
  }

  /**
   * Merging compaction: joins adjacent sealed history segments into larger ones (up to 512 MiB,
   * `mergedSegmentBytesMax`), so a long-lived feed keeps few files. Nothing is dropped: every
   * commit, position and record stays as it was, and every read at every cursor is unchanged.
   * Each merged segment is written beside the live ones (reads and writes go on) and switched in
   * while no read is in progress; a read that holds an iteration open for longer than
   * `mergeSwitchWaitMs` puts the switch off (`putOff`), never breaks. It also runs on its own
   * once a feed has more than `mergeSegmentsTrigger` sealed segments.
   *
   * @example
   * const { merges, segments } = await feed.compact();
   */
  async compact(options: { signal?: AbortSignal; onProgress?: OnProgress<MergeProgress> } = {}): Promise<MergeResult> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.compact');
    this.writer.assertOpen();
    for (const name of Object.keys(options)) {
      if (name !== 'signal' && name !== 'onProgress') {
        throw new StreamStackError(
          'INVALID_ARGUMENT',
          `feed.compact takes { signal, onProgress }, not ${JSON.stringify(name)}`,
          { details: { field: name } },
        );
      }
    }
    return this.writer.merges().merge(options.signal, checkOnProgress(options.onProgress));
  }

  /**
   * Key compaction up to commit `horizon`: the sealed history segments wholly at or before it
   * are rewritten keeping only each key's winner as of the horizon (the highest version, then
   * the highest position). A key whose winner is a tombstone goes entirely; records without a
   * key stay, unless `keyless: 'drop'`. Positions and commit numbers never change.
   *
   * Afterwards RAW and dedup reads after the horizon, latest reads from the horizon on (or from
   * the start), and `get(key, { asOf })` with `asOf` from the horizon on answer exactly as
   * before; cursors from the low mark to `horizon - 1` fail with `COMPACTED`. A read with no
   * cursor reads what is kept, from the start. The horizon stops at a subscription that has not
   * reached it (`heldBy`), unless `force`.
   *
   * @example
   * const { recordsBefore, recordsAfter } = await feed.compactKeys({ horizon: (await feed.info()).commits });
   */
  async compactKeys(options: KeyCompactionRequest): Promise<KeyCompactionResult> {
    this.refuseOnFollower();
    options = optionsOf(options, 'feed.compactKeys');
    this.writer.assertOpen();
    for (const name of Object.keys(options)) {
      if (!['horizon', 'force', 'keyless', 'signal', 'onProgress'].includes(name)) {
        throw new StreamStackError(
          'INVALID_ARGUMENT',
          `feed.compactKeys takes { horizon, force, keyless, signal, onProgress }, not ${JSON.stringify(name)}`,
          { details: { field: name } },
        );
      }
    }
    if (options.keyless !== undefined && options.keyless !== 'keep' && options.keyless !== 'drop') {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `keyless must be keep or drop, not ${JSON.stringify(options.keyless)}`,
        { details: { field: 'keyless' } },
      );
    }
    if (options.force !== undefined && typeof options.force !== 'boolean') {
      throw new StreamStackError('INVALID_ARGUMENT', `force must be a boolean, not ${JSON.stringify(options.force)}`, {
        details: { field: 'force' },
      });
    }
    checkOnProgress(options.onProgress);
    return this.writer.compaction().compact(options);
  }

  /** The retention policy, the low mark, and the subscription holding it back, if one does. */
  async retention(): Promise<RetentionInfo> {
    this.writer.assertPresent();
    return this.writer.retentionKeeper().info();
  }

  /**
   * What the feed takes on disk: its history segments, and every file and allocated byte under
   * its directory (index files and dictionaries included, which background builds write, so
   * this moves without a write of the caller's). Async: it walks the directory. A tiered feed
   * also says what object storage holds and what is not uploaded yet.
   *
   * @example
   * const { historySegments, bytes } = await feed.diskUse();
   */
  async diskUse(): Promise<FeedDiskUse> {
    this.writer.assertOpen();
    const local = await feedDiskUse(this.writer.directory);
    const tiering = this.writer.historyTiering?.status();
    return tiering ? { ...local, remoteBytes: tiering.remoteBytes, notUploadedBytes: tiering.pendingBytes } : local;
  }

  /** The latest commit, or undefined when the feed has none. */
  async head(): Promise<Commit | undefined> {
    this.writer.assertPresent();
    return this.headNow();
  }

  private headNow(): Commit | undefined {
    const head = this.writer.headCommit();
    return head && toCommit(this.name, head);
  }

  /**
   * The feed's counts, head, lease, low mark, retention and horizon, as they are now.
   *
   * @example
   * const { commits, records, head } = await feed.info();
   */
  async info(): Promise<FeedInfo> {
    this.writer.assertPresent();
    const live = this.writer.lease.live();
    const head = this.headNow();
    return {
      name: this.name,
      createdAt: this.createdAt,
      commits: this.writer.watermark.commit,
      records: this.writer.watermark.position,
      head: head ?? null,
      activeStream: this.writer.activeStream ?? null,
      lease: live ? { epoch: live.epoch, holder: live.holder, expiresAt: live.expiresAt } : null,
      epoch: this.writer.lease.epoch,
      durability: this.writer.durability,
      lowMark: this.writer.lowMark,
      lowPosition: this.writer.published.commits.lowPosition,
      retention: this.writer.retentionKeeper().info(),
      horizon: this.writer.compaction().horizon,
      ...(this.writer.historyTiering ? { tiering: this.writer.historyTiering.status() } : {}),
      ...this.view.followerStatus(),
      ...(this.writer.replication ? { replication: this.writer.replication.info } : {}),
      ...this.forkInfo(),
    };
  }

  /**
   * Resolves once the work the feed has in hand has settled: writes submitted so far, the
   * maintenance they scheduled, and what it builds and checks in the background (index files
   * and dictionaries of sealed segments, the checks its open makes of them, summaries). Reads
   * never need it: one that needs a file being built waits for it. It is for a caller that wants
   * the machine quiet first, such as a benchmark, or one about to measure the disk.
   *
   * @example
   * const fork = await feed.fork('trial', { at: 100 });
   * await fork.settled(); // its cut segment's index and dictionaries are on disk
   */
  async settled(): Promise<void> {
    this.writer.assertPresent();
    await this.writer.idle();
  }

  /**
   * Resolves once every sealed segment of the feed is in object storage (its descriptor
   * confirmed) and what a trim or rewrite left behind there is retired; rejects with
   * `UNAVAILABLE` when an upload fails (it is retried in the background all the same), and with
   * `INVALID_ARGUMENT` for a store opened without `objectStore`. The active segment goes up once
   * it is sealed, not before.
   *
   * @example
   * const { remoteSegments, pendingSegments } = await feed.tiered(); // pendingSegments === 0
   */
  async tiered(): Promise<TieringInfo> {
    this.writer.assertPresent();
    const tiering = this.writer.historyTiering;
    if (!tiering)
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `feed ${this.name} is not tiered: open the store with objectStore`,
      );
    return tiering.settled();
  }
}
