/**
 * The write coordinator of one feed (docs/architecture.md, Writing): the single writer that
 * checks leases and fencing tokens, matches sequence numbers, opens, appends to, seals and aborts
 * streams, writes one-shot commits, and group-commits all of it. It moves the published state
 * (`published-state.ts`) only after the disk confirmed a commit.
 *
 * It is longer than 500 lines because it is the one owner of every change to a feed: the staged
 * head, the open stream and the group committer are one state, and the invariants between them
 * (a request is staged only once it is surely part of its group, the staged head never falls
 * behind the published one) hold because one class changes them. Readers reach the published
 * state, the indexes, the history and whether the feed is still open through it too, each in a
 * few lines over the state it holds. What needs none of that state stands beside it: the steps
 * of its open and the options it takes (`feed-writer-open.ts`), recovery (`feed-recovery.ts`),
 * the derived indexes, publishing, the deletion of finished WAL segments (`wal-retention.ts`),
 * what a group's requests share (`writer-group.ts`), the checks of stream requests
 * (`stream-checks.ts`), a replicated feed's slots (`replicated-writes.ts`) and a follower's tail
 * (`tail-handout.ts`).
 */
import { assert, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { frameHeaderBytes, groupsInFlightMax, replicatedGroupsInFlightMax } from '../../limits.js';
import type { FeedIndex, IndexRebuild } from '../../query/indexes/feed-index.js';
import type { KeyIndex } from '../../query/indexes/key-index.js';
import type { Query } from '../../query/reading/planner.js';
import { corruptionError, type Snapshot } from '../../query/reading/snapshot.js';
import { type CommitRecord, commitRecord } from '../../storage/commit-record.js';
import type { FrameBuilder } from '../../storage/framing.js';
import { GroupBuilder, writeLiveSegments } from '../../storage/groups.js';
import type { History } from '../../storage/history-log.js';
import type { TailGroups } from '../../storage/history-tail.js';
import type { RecordData } from '../../storage/records.js';
import type { Corruption, TornTail } from '../../storage/runs.js';
import type { StateLog } from '../../storage/state-log.js';
import { type Wal, walFrames } from '../../storage/wal.js';
import { WalLocations } from '../../storage/wal-locations.js';
import type { CompactionLog } from '../maintenance/compaction-state.js';
import type { HistoryMerges } from '../maintenance/history-merge.js';
import type { HistoryTiering } from '../maintenance/history-tiering.js';
import type { HistoryRetention } from '../maintenance/history-trim.js';
import type { KeyCompaction } from '../maintenance/key-compaction.js';
import type { MergeLog } from '../maintenance/merge-state.js';
import type { RetentionLog } from '../maintenance/retention-state.js';
import { WalRetention } from '../maintenance/wal-retention.js';
import { deletedFeedError } from '../opening/data-directory.js';
import { DerivedIndexes } from '../opening/derived-indexes.js';
import { type OpenStream, replayStreams } from '../opening/feed-recovery.js';
import { ReadGate } from '../reading/read-gate.js';
import type { GroupMirror } from '../reading/subscription-groups.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { ConditionChecker } from './conditions.js';
import {
  type Durability,
  openMaintenance,
  openWatched,
  recoverFeed,
  rememberOpenTypes,
  type WriterOptions,
} from './feed-writer-open.js';
import {
  type GroupCommitStats,
  GroupCommitter,
  type GroupLocation,
  type GroupWrite,
  type Lane,
} from './group-commit.js';
import type { LeaseGrant, LeaseKeeper } from './lease.js';
import { PayloadDedup } from './payload-dedup.js';
import { PublishedState, type Watermark } from './published-state.js';
import { ReplicatedEnd } from './replicated-end.js';
import {
  type LocalWrite,
  openReplicated,
  type ReplicatedParties,
  replicatedGroup,
  replicatedGroupMirror,
} from './replicated-writes.js';
import { layRun } from './run-layout.js';
import type { SlotReplication } from './slot-replication.js';
import {
  checkNoneOpen,
  checkSeq,
  checkWritable,
  openStreamRecords,
  type StreamStatus,
  type Streams,
  streamStatusOf,
} from './stream-checks.js';
import { handOutTail, type TailParties, type TailRequest, takeCopiedTail } from './tail-handout.js';
import { newWriterGroup, stagedTypes, type WriterGroup } from './writer-group.js';

/** A record as the coordinator takes it: validated by the API, the timestamp optional. */
export type RecordInput = Omit<RecordData, 'timestamp'> & { readonly timestamp?: number };

export type { Watermark } from './published-state.js';

export class FeedWriter {
  /** The commit list and the watermark, and the readers waiting on them. */
  readonly published: PublishedState;
  private aborted = new Set<string>();
  private readonly payloads: PayloadDedup;
  private readonly retention: WalRetention;
  private openStream: OpenStream | undefined;
  /** The head as prepared requests left it: ahead of the watermark while a group is in flight. */
  private stagedHead = 0;
  private stagedNextPosition = 1;
  /** How far a replicated feed's history may be handed to followers (`historyTail`). */
  private readonly replicatedEnd = new ReplicatedEnd();
  private readonly committer: GroupCommitter<WriterGroup>;
  /** What the feed derives from its published records (see `derived-indexes.ts`). */
  private derived!: DerivedIndexes;
  /** The retention policy and trims of the history (see `history-trim.ts`). */
  historyRetention: HistoryRetention | undefined;
  /** Merging compaction of the history (see `history-merge.ts`). */
  historyMerges: HistoryMerges | undefined;
  /** Key compaction of the history (see `key-compaction.ts`). */
  keyCompaction: KeyCompaction | undefined;
  /** Uploads of sealed segments to object storage, when the store has one (see `history-tiering.ts`). */
  historyTiering: HistoryTiering | undefined;
  /** A replicated feed's slots in object storage (undefined for a local-durability feed, or read-only). */
  replication: SlotReplication | undefined;

  /** What the feed's acknowledgements promise (see `WriterOptions.durability`). */
  get durability(): Durability {
    return this.options.durability ?? 'local';
  }

  /** The kernels and the clock the feed was opened with, for state kept beside it (subscription groups). */
  get kernels(): Kernels {
    return this.options.kernels;
  }

  now(): number {
    return this.options.clock();
  }
  private readonly frameDataBytesMax: number;

  /** The tag and type index: sealed segments from their files, the active one in memory. */
  get index(): FeedIndex {
    return this.derived.index;
  }

  /** The key index: sealed segments' dictionaries, the active segment's keys in memory. */
  get keys(): KeyIndex {
    return this.derived.keys;
  }

  /** Each fingerprint's first occurrence, per sealed segment, for whole-history dedup. */
  get fingerprints(): KeyIndex {
    return this.derived.fingerprints;
  }

  private get conditions(): ConditionChecker {
    return this.derived.conditions;
  }

  private constructor(
    readonly directory: string,
    private readonly options: WriterOptions,
    private readonly history: History,
    private readonly wal: Wal,
    readonly lease: LeaseKeeper,
    private readonly leaseLog: StateLog,
    readonly subscriptions: Subscriptions,
    readonly tornTails: readonly TornTail[],
    private readonly retentionLog: RetentionLog,
    private readonly mergeLog: MergeLog,
    private readonly compactionLog: CompactionLog,
  ) {
    this.frameDataBytesMax = Math.floor(options.segmentBytes / 4) - frameHeaderBytes;
    this.published = new PublishedState(history.commits);
    this.stagedHead = this.published.watermark.commit;
    this.stagedNextPosition = this.published.watermark.position + 1;
    this.payloads = new PayloadDedup((location, payload) => history.bytes.storedPayloadEquals(location, payload));
    this.committer = new GroupCommitter(
      { wal: new GroupBuilder(this.frameDataBytesMax), history: new GroupBuilder(this.frameDataBytesMax) },
      (lane, builder, group) => this.writeGroup(lane, builder as GroupBuilder, group),
      () => undefined,
      newWriterGroup,
      // A replicated group waits mostly on its slot's PUT, not the disk: more of them in flight
      // overlap those round trips.
      options.durability === 'replicated' ? replicatedGroupsInFlightMax : groupsInFlightMax,
    );
    this.retention = new WalRetention(wal, (bases) =>
      this.committer.submit('wal', (builder) => {
        writeLiveSegments(builder as GroupBuilder, bases);
        return () => undefined;
      }),
    );
  }

  /** Opens a feed's logs, recovering them, and rebuilds the state they imply (see `feed-writer-open.ts`). */
  static async open(directory: string, options: WriterOptions): Promise<FeedWriter> {
    const readOnly = options.readOnly ?? false;
    if (!readOnly) return FeedWriter.openLogs(directory, options);
    const { opened: writer, gone } = await openWatched(directory, options.feed, () =>
      FeedWriter.openLogs(directory, options),
    );
    writer.gone = gone;
    writer.assertPresent();
    return writer;
  }

  private static async openLogs(directory: string, options: WriterOptions): Promise<FeedWriter> {
    const readOnly = options.readOnly ?? false;
    const { logs, lease } = await recoverFeed(directory, options);
    const { history, wal } = logs;
    const writer = new FeedWriter(
      directory,
      options,
      history,
      wal,
      lease,
      logs.leaseLog,
      logs.subscriptions,
      [...history.segments.tornTails, ...wal.segments.tornTails],
      logs.retention,
      logs.merges,
      logs.compaction,
    );
    // The payloads the active segment's checkpoint holds come before those of the runs after it.
    const held = history.heldPayloads;
    if (held && history.segments.active) writer.payloads.rememberColumns(history.segments.active.header.base, held);
    history.heldPayloads = undefined;
    for (const { crc, location } of logs.payloads) writer.payloads.remember(crc, location);
    try {
      // A lease live in the local log is live only if etcd still has it.
      await lease.reconcile();
      if (options.durability === 'replicated' && !readOnly)
        writer.replication = await openReplicated(writer.replicatedParties(), options, directory, logs.events);
      const trimPending = logs.retention.state.pending;
      writer.derived = await DerivedIndexes.open(
        options.kernels,
        directory,
        history,
        writer.watermark.position,
        // A follower writes the derived files it rebuilds into its copy, though it writes nothing else.
        readOnly && !options.derivedWritable,
        trimPending,
        logs.rewrittenBase,
        options.restoredBases,
      );
      // The history and the indexes were opened from the floor, and what lay below it deleted:
      // the interrupted trim is finished.
      if (trimPending && !readOnly) await logs.retention.write({ ...logs.retention.state, pending: false });
      const maintenance = await openMaintenance(directory, options, logs, {
        derived: () => writer.derived,
        watermark: () => writer.watermark,
        gate: writer.readGate,
        frameDataBytesMax: writer.frameDataBytesMax,
        epoch: () => writer.lease.epoch,
        fenced: () => writer.replication?.fencedOff ?? false,
      });
      writer.historyRetention = maintenance.retention;
      writer.historyMerges = maintenance.merges;
      writer.keyCompaction = maintenance.keyCompaction;
      writer.historyTiering = maintenance.tiering;
      // Segments sealed before the open (or an upload a crash cut) go up now.
      writer.historyTiering?.segmentFinished();
    } catch (error) {
      await writer.close();
      throw error;
    }
    for (const event of logs.events) writer.retention.note(event.segment, event.stream);
    const streams = replayStreams(logs.events, (stream) => writer.published.commitOfStream(stream) !== undefined);
    writer.openStream = streams.open;
    writer.aborted = streams.aborted;
    if (writer.openStream && !writer.walDamage) await rememberOpenTypes(wal, writer.openStream, writer.index);
    return writer;
  }

  get watermark(): Watermark {
    return this.published.watermark;
  }

  /**
   * Corruption in the WAL: which streams are open, and what they hold, cannot be known, so every
   * stream operation fails with `CORRUPT` until the damage is repaired. Published history reads
   * and one-shot appends are not affected.
   */
  get walDamage(): Corruption | undefined {
    return this.wal.corruptions.find((corruption) => !corruption.harmless);
  }

  /** Published commit `commit` (1 ≤ commit ≤ the watermark's). */
  commitAt(commit: number): CommitRecord {
    assert(commit >= 1 && commit <= this.watermark.commit, `commit ${commit} is published`);
    return this.published.commits.at(commit);
  }

  /** Reads of sealed history hold it; a merge switches files only while none does. */
  readonly readGate = new ReadGate();

  /** Runs a read of sealed history inside the read gate (live tails, one commit at a time). */
  holdReads<T>(read: () => Promise<T>): Promise<T> {
    return this.readGate.hold(read);
  }

  /** Merging compaction of the history; set once the feed is open. */
  merges(): HistoryMerges {
    assert(this.historyMerges !== undefined, 'an open feed has its merges');
    return this.historyMerges;
  }

  /** Key compaction of the history; set once the feed is open. */
  compaction(): KeyCompaction {
    assert(this.keyCompaction !== undefined, 'an open feed has its key compaction');
    return this.keyCompaction;
  }

  /** The retention of the history; set once the feed is open. */
  retentionKeeper(): HistoryRetention {
    assert(this.historyRetention !== undefined, 'an open feed has its retention');
    return this.historyRetention;
  }

  /** The low mark: the first commit the history keeps (1 until a trim). */
  get lowMark(): number {
    return this.published.commits.low;
  }

  /** Fails with `TRIMMED` when cursor `cursor` lies before the commit just before the low mark. */
  assertNotTrimmed(cursor: number, name: string): void {
    this.published.commits.assertCursorKept(cursor, name);
  }

  /** The latest published commit, if any. */
  headCommit(): CommitRecord | undefined {
    const head = this.watermark.commit;
    return head === 0 ? undefined : this.published.commits.at(head);
  }

  /** Index files and key dictionaries rebuilt since the feed opened. */
  get indexRebuilds(): readonly IndexRebuild[] {
    return this.index.rebuilt;
  }

  /** Segment summaries rebuilt on open. */
  get summaryRebuilds(): readonly { segment: number; file: string; reason: string }[] {
    return this.history.summaryRebuilds;
  }

  /** Corruption past the last readable commit: nothing may be appended (see `History`). */
  get headDamage(): Corruption | undefined {
    return this.history.headDamage;
  }

  /** Fails when a write may not be made: read-only, or the history's head is unknown. */
  private assertWritable(): void {
    if (this.options.readOnly)
      throw new StreamStackError('READ_ONLY', `feed ${this.options.feed} was opened read-only`);
    if (this.headDamage) throw corruptionError(this.headDamage, `feed ${this.options.feed} cannot be written`);
  }

  /** Fails when the open stream's state cannot be trusted (the WAL is damaged). */
  private assertStreamsKnown(): void {
    if (this.walDamage)
      throw corruptionError(this.walDamage, `the streams of feed ${this.options.feed} cannot be known`);
  }

  /** The view a read runs over: everything published now, and nothing later. */
  snapshot(): Snapshot {
    this.assertPresent();
    return {
      feed: this.options.feed,
      watermark: this.published.watermark,
      commits: this.published.commits,
      history: this.history,
      index: this.index,
      kernels: this.options.kernels,
      lost: this.published.lost,
      headDamage: this.history.headDamage,
    };
  }

  /**
   * Resolves once the watermark passes commit `after` (at once if it already has), or rejects
   * when `signal` aborts or the feed closes (`CLOSED`). This is what a live tail waits on.
   */
  waitForCommitAfter(after: number, signal?: AbortSignal): Promise<void> {
    if (this.watermark.commit <= after) this.assertOpen();
    return this.published.waitForCommitAfter(after, signal);
  }

  get failed(): StreamStackError | undefined {
    return this.committer.failed;
  }

  /** How the feed's writes have been grouped since it opened. */
  get groupCommitStats(): GroupCommitStats {
    return this.committer.stats;
  }

  // ---- Leases ------------------------------------------------------------------------------

  /**
   * Grants the lease to `holder`. A takeover does not wait for queued writes (they are refused
   * when their turn comes), but it resolves only once the groups already in flight have
   * settled: when the new holder has its token, no write of the old lease is left to land.
   */
  async acquireLease(holder: string, ttlMs?: number): Promise<LeaseGrant> {
    this.assertOpen();
    this.assertWritable();
    // A copy another writer fenced off takes no grant: the feed must be taken over instead.
    this.replication?.assertNotFenced();
    const grant = await this.lease.acquire(holder, ttlMs);
    await this.committer.inFlightSettled();
    // A replicated feed's new writer fences the slots: a writer of an older epoch elsewhere that
    // has not noticed its loss finds its next slot taken, and stops.
    try {
      await this.replication?.fence(grant.epoch);
    } catch (error) {
      // Not fenced, the grant would hold the feed in etcd for nothing until its TTL.
      await this.lease.release(grant.token).catch(() => undefined);
      throw error;
    }
    return grant;
  }

  renewLease(token: string, ttlMs?: number): Promise<LeaseGrant> {
    this.assertOpen();
    this.assertWritable();
    return this.lease.renew(token, ttlMs);
  }

  /** Renews a takeover's grant of `token` once the feed is open, though it expired here meanwhile (see `LeaseKeeper.resume`). */
  resumeLease(token: string, ttlMs: number): Promise<LeaseGrant> {
    this.assertOpen();
    this.assertWritable();
    return this.lease.resume(token, ttlMs);
  }

  releaseLease(token: string): Promise<void> {
    this.assertOpen();
    this.assertWritable();
    return this.lease.release(token);
  }

  // ---- Streams -----------------------------------------------------------------------------

  /** The status of stream `id` (see `stream-checks.ts`). */
  streamStatus(id: string): StreamStatus {
    return streamStatusOf(id, this.streams(), () => this.assertStreamsKnown());
  }

  /** The open stream's id, if any. */
  get activeStream(): string | undefined {
    this.assertStreamsKnown();
    return this.openStream?.id;
  }

  /** The acknowledged records of the open stream `id`, from seq `fromSeq` on. */
  async readOpenStream(id: string, fromSeq: number): Promise<{ seq: number; record: RecordData }[]> {
    this.assertStreamsKnown();
    return openStreamRecords(this.wal, this.openStream, id, fromSeq);
  }

  /** Opens a stream under the lease `token`; fails with `STREAM_OPEN` while one is open. */
  openStreamWith(token: string, message?: string): Promise<{ stream: string; epoch: number; openedAt: number }> {
    this.assertWritable();
    this.assertStreamsKnown();
    return this.committer.submit('wal', (builder) => {
      const epoch = this.lease.check(token).epoch;
      checkNoneOpen(this.openStream);
      const id = this.options.newId();
      const openedAt = this.options.clock();
      walFrames.open(builder, id, epoch, openedAt, message);
      this.openStream = {
        id,
        epoch,
        openedAt,
        ...(message === undefined ? {} : { message }),
        nextSeq: 1,
        records: new WalLocations(),
        types: new Set(),
      };
      return (location) => {
        this.retention.note(location.segment, id);
        return { stream: id, epoch, openedAt };
      };
    });
  }

  /** The open stream `id`, checked for a write under `token` by the current lease. */
  private writableStream(id: string, token: string, action: 'append' | 'seal' | 'abort'): OpenStream {
    const epoch = this.lease.check(token).epoch;
    return checkWritable(id, epoch, action, this.streams());
  }

  /** The streams as the checks see them now (see `stream-checks.ts`). */
  private streams(): Streams {
    return { open: this.openStream, aborted: this.aborted, published: this.published };
  }

  /** Appends one batch to the open stream; resolves once it is in the WAL and fsync'd. */
  append(
    id: string,
    token: string,
    records: readonly RecordInput[],
    expectedSeq?: number,
  ): Promise<{ stream: string; firstSeq: number; lastSeq: number }> {
    this.assertWritable();
    this.assertStreamsKnown();
    return this.committer.submit('wal', (builder, group) => {
      const open = this.writableStream(id, token, 'append');
      checkSeq(open, expectedSeq);
      const types = this.index.newTypes(
        records.map((record) => record.type),
        stagedTypes(group, open.types),
      );
      const now = this.options.clock();
      const firstSeq = open.nextSeq;
      const spans = walFrames.batch(builder, id, open.epoch, firstSeq, records, now);
      open.nextSeq += records.length;
      for (const type of types) {
        group.newTypes.add(type);
        open.types.add(type);
      }
      return (location) => {
        this.retention.note(location.segment, id);
        for (const span of spans) {
          open.records.push({
            segment: location.segment,
            dataStart: location.offset + span.dataStart,
            dataEnd: location.offset + span.dataEnd,
          });
        }
        return { stream: id, firstSeq, lastSeq: firstSeq + records.length - 1 };
      };
    });
  }

  /** Aborts the open stream: its batches are never published. */
  abort(id: string, token: string): Promise<void> {
    this.assertWritable();
    this.assertStreamsKnown();
    return this.committer.submit('wal', (builder) => {
      const open = this.writableStream(id, token, 'abort');
      walFrames.abort(builder, id, this.lease.epoch, this.options.clock());
      this.openStream = undefined;
      this.aborted.add(open.id);
      return (location) => {
        this.retention.note(location.segment, id);
        this.retention.schedule(() => this.openStream?.id);
      };
    });
  }

  /** Seals the open stream into one commit run; resolves with the commit once it is durable. */
  seal(
    id: string,
    token: string,
    message?: string,
    condition?: { query: Query | undefined; after: number },
  ): Promise<CommitRecord> {
    this.assertWritable();
    this.assertStreamsKnown();
    // A writer never runs ahead of the derived indexes by more than their backlog's bound.
    const room = this.derived?.roomInBacklog();
    if (room) return room.then(() => this.seal(id, token, message, condition));
    return this.committer.submit('history', async (builder, group) => {
      const open = this.writableStream(id, token, 'seal');
      if (condition) await this.checkCondition(condition, group);
      const records = await this.wal.readRecords(open.records);
      const finish = await this.prepareRun(builder, group, {
        stream: id,
        openedAt: open.openedAt,
        message: message ?? open.message,
        epoch: open.epoch,
        oneShot: false,
        records,
      });
      this.conditions.stage(group, records);
      this.openStream = undefined;
      return (location: GroupLocation) => {
        const commit = finish(location);
        this.retention.schedule(() => this.openStream?.id);
        return commit;
      };
    });
  }

  /** Writes `records` straight into history as one commit (an implicit stream, no WAL). */
  appendOneShot(
    records: readonly RecordInput[],
    token?: string,
    message?: string,
    condition?: { query: Query | undefined; after: number },
  ): Promise<CommitRecord> {
    this.assertWritable();
    const room = this.derived?.roomInBacklog();
    if (room) return room.then(() => this.appendOneShot(records, token, message, condition));
    return this.committer.submit('history', async (builder, group) => {
      const epoch = this.lease.checkOptional(token);
      if (condition) await this.checkCondition(condition, group);
      const types = this.index.newTypes(
        records.map((record) => record.type),
        stagedTypes(group, this.openStream?.types),
      );
      const now = this.options.clock();
      const finish = await this.prepareRun(builder, group, {
        stream: this.options.newId(),
        openedAt: now,
        message,
        epoch,
        oneShot: true,
        records,
      });
      // Staged only once the request is surely part of the group.
      this.conditions.stage(group, records);
      for (const type of types) group.newTypes.add(type);
      return finish;
    });
  }

  /**
   * Both arms of a condition. A record staged by an earlier request of this group matches:
   * `SAME_BATCH`, for the two cannot be told apart before the group is written. One staged by a
   * group in flight before it matches: that group is published (or refused) within its fsync, so
   * the request waits for it, and the durable arm decides with the record in the history — a
   * `SAME_BATCH` here would be answered again, in microtasks alone, to a client that retries at
   * once, and the fsync that would settle it could never be handled.
   */
  private async checkCondition(
    condition: { query: Query | undefined; after: number },
    group: WriterGroup,
  ): Promise<void> {
    const lowPosition = this.history.commits.lowPosition;
    if (condition.after < lowPosition - 1) {
      // What lay between `after` and the low mark is gone: no answer over it could be trusted.
      throw new StreamStackError(
        'TRIMMED',
        `a condition after position ${condition.after} reaches trimmed history: the history starts at position ${lowPosition}`,
        {
          details: { after: condition.after, lowPosition, lowMark: this.history.commits.low },
        },
      );
    }
    const horizon = this.history.commits.horizon;
    if (horizon >= this.history.commits.low) {
      // Below the horizon only each key's winner is left: a record that matched may be gone,
      // from the start too, so a condition over it is refused rather than answered wrongly.
      const horizonPosition = this.history.commits.at(horizon).lastPosition;
      if (condition.after < horizonPosition) {
        throw new StreamStackError(
          'COMPACTED',
          `a condition after position ${condition.after} reaches compacted history: conditions run after position ${horizonPosition} (commit ${horizon})`,
          {
            details: { after: condition.after, horizon, horizonPosition },
          },
        );
      }
    }
    this.conditions.checkStaged(condition.query, group);
    for (const earlier of group.earlier) {
      if (this.conditions.stagedMatch(condition.query, earlier.scratch)) await earlier.settled;
    }
    // Published records the indexes have not folded in yet are looked at here rather than
    // waited for: waiting would fold them now, on the CPU this group's fsync leaves idle later,
    // instead of during it. Only a match among them waits, so the durable arm, looking in the
    // indexes, names the first match. Checked in the turn the snapshot is taken: every record
    // the snapshot holds is then either in the indexes or among those looked at.
    if (this.derived.unindexedMatch(condition.query, condition.after)) await this.indexed();
    const snapshot = this.snapshot();
    await this.readGate.hold(() =>
      this.conditions.checkDurable(condition.query, condition.after, snapshot, this.index),
    );
  }

  private async prepareRun(
    builder: FrameBuilder,
    group: WriterGroup,
    run: {
      stream: string;
      openedAt: number;
      message: string | undefined;
      epoch: number;
      oneShot: boolean;
      records: readonly RecordInput[];
    },
  ): Promise<(location: GroupLocation) => CommitRecord> {
    // Payloads of runs published before are mapped before this run looks any up.
    await this.payloads.fold();
    const commitNumber = this.stagedHead + 1;
    const sealedAt = this.options.clock();
    const { run: built, landing } = await layRun(
      this.options.kernels,
      builder as GroupBuilder,
      {
        commit: commitNumber,
        stream: run.stream,
        parent: this.stagedHead,
        firstPosition: this.stagedNextPosition,
        openedAt: run.openedAt,
        sealedAt,
        ...(run.message === undefined ? {} : { message: run.message }),
        epoch: run.epoch,
        oneShot: run.oneShot,
        records: run.records,
        timestampDefault: run.openedAt,
      },
      this.frameDataBytesMax,
      this.history.room(),
      group.payloads,
      group.earlier.map((earlier) => earlier.scratch.payloads),
      this.payloads,
    );
    group.first ??= { position: this.stagedNextPosition, commit: commitNumber };
    this.stagedHead = commitNumber;
    this.stagedNextPosition += run.records.length;
    return (location) => {
      assert(
        !landing || (location.segment === landing.segment && location.offset === landing.offset),
        'a group lands where its runs were laid for',
      );
      const runStart = location.offset + built.runStart;
      const commit = commitRecord(built.commit, location.segment, runStart);
      this.payloads.rememberRun(built.newPayloads, location.segment, runStart);
      this.derived.push(
        {
          commit,
          records: run.records,
          runStart,
          entryOffsets: built.entryOffsets,
          fingerprints: built.fingerprintTerms,
        },
        built.types,
      );
      const newestSegment = this.history.commits.lastSegment;
      const finishedSegment = newestSegment !== undefined && newestSegment !== commit.segment;
      this.history.published(commit);
      this.publish(commit);
      if (finishedSegment) {
        this.historyRetention?.segmentFinished();
        this.historyMerges?.segmentFinished();
        this.historyTiering?.segmentFinished();
      }
      return commit;
    };
  }

  // ---- Published state ---------------------------------------------------------------------

  /** Adds a durable commit to the published state; the staged head never falls behind it. */
  private publish(commit: CommitRecord): void {
    this.published.publish(commit);
    this.stagedHead = Math.max(this.stagedHead, commit.commit);
    this.stagedNextPosition = Math.max(this.stagedNextPosition, commit.lastPosition + 1);
  }

  /**
   * Where a replicated feed's subscription groups are copied, on a node of a cluster: etcd,
   * under this writer's epoch (see `replicated-writes.ts`). None for other feeds.
   */
  groupMirror(): GroupMirror | undefined {
    return replicatedGroupMirror(this.options, this.lease);
  }

  private writeGroup(lane: Lane, builder: GroupBuilder, group: WriterGroup): GroupWrite {
    group.earlier = [];
    const replication = this.replication;
    // The slot is taken before the local write: a fenced writer writes nothing more.
    const slot = replication?.reserve();
    // Where the history's stored slots end before this group: followers read no further.
    const active = this.history.segments.active;
    let written: LocalWrite;
    if (lane === 'wal') written = this.wal.commit(builder, this.options.segmentBytes);
    else {
      assert(group.first !== undefined, 'a history group holds a run');
      written = this.history.commit(builder, group.first, this.options.segmentBytes);
    }
    if (!replication || slot === undefined) return written;
    return replicatedGroup(this.replicatedParties(), lane, written, { replication, slot, before: active });
  }

  /** What the replicated write path reads of this writer (see `replicated-writes.ts`). */
  private replicatedParties(): ReplicatedParties {
    return {
      wal: this.wal,
      history: this.history,
      lease: this.lease,
      published: this.published,
      subscriptions: this.subscriptions,
      end: this.replicatedEnd,
      stagedPosition: () => this.stagedNextPosition - 1,
      openStream: () => this.openStream?.id,
      tiering: () => this.historyTiering,
    };
  }

  // ---- Reading history ---------------------------------------------------------------------

  /** The run of a published commit: its manifest entries and bytes. */
  readRun(commit: CommitRecord) {
    return this.history.runs.readRun(commit);
  }

  /**
   * The durable groups of the active history segment from `request.from` on, for a follower on
   * another machine, when the segment is based at `request.base` (see `tail-handout.ts`).
   */
  async historyTail(request: TailRequest): Promise<{ base: number | undefined; tail?: TailGroups }> {
    this.assertPresent();
    return handOutTail(this.tailParties(), request);
  }

  /**
   * A read-only view of a follower's copy takes the commits its active segment gained up to
   * `end`; how many, or undefined when a newer view must be opened (see `tail-handout.ts`).
   */
  async catchUp(base: number, end: number, replaced: boolean): Promise<number | undefined> {
    assert(this.options.readOnly === true, 'only a read-only view catches up with its files');
    this.assertOpen();
    return takeCopiedTail(this.tailParties(), base, end, replaced);
  }

  private tailParties(): TailParties {
    return {
      kernels: this.options.kernels,
      history: this.history,
      published: this.published,
      holdReads: (read) => this.holdReads(read),
      take: (run, types) => {
        this.history.published(run.commit);
        this.derived.push(run, types);
        this.publish(run.commit);
      },
      visibleEnd: (base) => this.replicatedEnd.visibleEnd(base),
    };
  }

  /** Resolves once the indexes and condition maps hold every commit published so far. */
  indexed(): Promise<void> {
    return this.derived.caughtUp();
  }

  /** Whether `indexed()` would resolve at once. */
  get isIndexed(): boolean {
    return this.derived.isCaughtUp;
  }

  /** Runs `work` in the feed's maintenance queue: no trim, merge, key compaction or eviction runs meanwhile. */
  maintenanceHeld<T>(work: () => Promise<T>): Promise<T> {
    return this.historyRetention ? this.historyRetention.serial(work) : work();
  }

  /** Resolves once every write submitted so far has settled, and maintenance with it. */
  async idle(): Promise<void> {
    await this.committer.idle();
    await this.retention.idle();
    await this.derived?.flushed();
    await this.history.summariesWritten();
  }

  /** Set once the feed is closed: every later call is refused with it. */
  closedError: StreamStackError | undefined;

  /** Read-only: true once the feed's `feed.json` is no longer the one opened (see `openWatched`). */
  private gone = () => false;

  /**
   * Throws `CLOSED` once the feed (its store) is closed, `FEED_NOT_FOUND` once it was deleted.
   * Cheap: for calls made many times in one operation (once per commit of a listing).
   */
  assertOpen(): void {
    if (this.closedError) throw this.closedError;
  }

  /**
   * True once the feed was deleted. A writer is closed before its feed is deleted; a read-only
   * reader finds out here, when its `feed.json` is no longer the one it opened (the writer, in
   * another process, deleted the feed, and may have created another of its name), and closes
   * the feed with `FEED_NOT_FOUND`.
   */
  get deleted(): boolean {
    if (this.closedError) return this.closedError.code === 'FEED_NOT_FOUND';
    if (!this.gone()) return false;
    this.close(deletedFeedError(this.options.feed)).catch(() => undefined);
    return true;
  }

  /** `assertOpen`, and read-only also that the feed is still there: where an operation starts. */
  assertPresent(): void {
    if (this.deleted) throw this.closedError;
    this.assertOpen();
  }

  /**
   * What an operation that failed throws: its error, or `FEED_NOT_FOUND` when the feed was
   * deleted meanwhile (a read-only reader's files vanish under it, and fail as they may).
   */
  orDeleted(error: unknown): unknown {
    return this.deleted ? this.closedError : error;
  }

  /**
   * Closes the feed: requests already submitted settle (written or refused), later ones and
   * every call on its handles fail with `reason` — `CLOSED` when the store closes, or
   * `FEED_NOT_FOUND` when the feed is being deleted.
   */
  async close(reason?: StreamStackError): Promise<void> {
    if (this.closedError) return;
    this.closedError =
      reason ?? new StreamStackError('CLOSED', `feed ${this.options.feed} is closed (its store was closed)`);
    this.committer.refuse(this.closedError);
    this.published.close(this.closedError);
    // A slot waiting for object storage stops waiting: its group is not acknowledged.
    this.replication?.close();
    await this.idle();
    // The active segment's tails, so that the next open replays none of its commits (not for a
    // feed being deleted, nor one whose writes failed).
    if (!reason && !this.failed && this.derived) await this.derived.writeCheckpoint(this.history, this.headCommit());
    // And its commits and payloads, so that it reads none of the segment's commit frames either.
    // Derived: a checkpoint that fails to be written leaves the next open to read the segment.
    if (!reason && !this.failed)
      await this.history
        .writeActiveCheckpoint(await this.payloads.columnsOf(this.history.segments.active?.header.base))
        .catch(() => undefined);
    await this.wal.segments.dropSpare();
    await this.history.segments.dropSpare();
    // Uploads stop first: they read segment files the closes below release.
    await this.historyTiering?.close();
    this.historyMerges?.close();
    if (this.historyRetention) await this.historyRetention.close();
    else this.retentionLog.close();
    this.mergeLog.close();
    this.compactionLog.close();
    this.derived?.close();
    this.history.close();
    this.wal.close();
    this.leaseLog.close();
    if (this.subscriptions !== this.options.subscriptions) this.subscriptions.close();
  }
}
