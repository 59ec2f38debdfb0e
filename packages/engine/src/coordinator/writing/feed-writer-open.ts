/**
 * How a feed's writer is opened (`FeedWriter.open`): the options it takes, its logs recovered
 * and its lease keeper over them, the history maintenance it sets up once its derived indexes
 * are open, the types of a stream it finds open, and a read-only reader's guard against the
 * feed being deleted under its open, or after it. The writer keeps the order of the steps, for
 * each one sets state it owns.
 *
 * @example
 * const { logs, lease } = await recoverFeed(directory, options);
 * const maintenance = await openMaintenance(directory, options, logs, parties);
 */
import type { Kernels } from '../../kernels/kernels.js';
import type { FeedIndex } from '../../query/indexes/feed-index.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { remoteSegmentFilesOf } from '../../storage/remote-segment-file.js';
import type { Wal } from '../../storage/wal.js';
import { type HistoryMaintenance, openHistoryMaintenance, tieringOf } from '../maintenance/history-maintenance.js';
import { deletedFeedError, feedIdentity, feedTagOf } from '../opening/data-directory.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import { type OpenStream, type RecoveredLogs, recoverLogs } from '../opening/feed-recovery.js';
import type { ReadGate } from '../reading/read-gate.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { EtcdLeases } from './etcd-leases.js';
import { LeaseKeeper } from './lease.js';
import type { Watermark } from './published-state.js';

export interface WriterOptions {
  /** The feed's name, as records and commits report it. */
  readonly feed: string;
  readonly kernels: Kernels;
  /** Milliseconds since the epoch; injected so tests and twins can pin time. */
  readonly clock: () => number;
  /** Fresh unique ids for streams and tokens; injected for the same reason. */
  readonly newId: () => string;
  /**
   * Capacity the WAL's and the history's segments grow to (the first ones are smaller, see
   * `segmentBytesFirst`); a record may be at most a quarter of it.
   */
  readonly segmentBytes: number;
  /** Open without writing anything: no recovery cuts, no index files, every write refused. */
  readonly readOnly?: boolean;
  /** The store's object storage, when its sealed history is tiered there (see `history-tiering.ts`). */
  readonly objectStore?: ObjectSegmentStore;
  /** Bytes of sealed history kept locally once uploaded; undefined keeps all of it. */
  readonly localHistoryBytesMax?: number;
  /**
   * A follower's subscriptions, its own and writable though the feed is opened read-only: one
   * set shared by every view of the feed, which the follower closes (the writer does not).
   */
  readonly subscriptions?: Subscriptions;
  /**
   * A follower's view: opened read-only, but the tag indexes and dictionaries it rebuilds (those
   * a trim left built over history it cut) are written into its copy, so the next view has them.
   */
  readonly derivedWritable?: boolean;
  /**
   * Sealed segments a takeover just wrote back from their slots (no derived files yet): their
   * dictionaries are built after the open (`DerivedIndexes.open`).
   */
  readonly restoredBases?: ReadonlySet<number>;
  /** The store's writer leases in etcd, when it has a coordination store (see `etcd-leases.ts`). */
  readonly leases?: EtcdLeases;
  /**
   * `replicated`: every group is also stored as a slot object before it is acknowledged (see
   * `slot-replication.ts`); needs `objectStore`. Default `local`: acknowledged once the local
   * fsync returns.
   */
  readonly durability?: Durability;
}

/** Where a feed's acknowledged writes are durable: on the local disk, or also in object storage. */
export type Durability = 'local' | 'replicated';

/**
 * Opens a read-only reader beside the writer with `open`: the writer may delete the feed while
 * it is opened here, and files then vanish under the open. Whatever the open found, the feed is
 * gone (`FEED_NOT_FOUND`) when its `feed.json` is no longer the one there before. `gone` tells
 * the reader the same later: true once the `feed.json` is no longer the one it opened (the
 * writer, in another process, deleted the feed, and may have created another of its name).
 */
export async function openWatched<T>(
  directory: string,
  feed: string,
  open: () => Promise<T>,
): Promise<{ opened: T; gone: () => boolean }> {
  const identity = feedIdentity(directory);
  let opened: T;
  try {
    opened = await open();
  } catch (error) {
    if (identity === undefined || feedIdentity(directory) !== identity) throw deletedFeedError(feed);
    throw error;
  }
  return { opened, gone: () => identity !== undefined && feedIdentity(directory) !== identity };
}

/** A feed's logs, recovered, and the keeper of its lease over them. */
export async function recoverFeed(
  directory: string,
  options: WriterOptions,
): Promise<{ logs: RecoveredLogs; lease: LeaseKeeper }> {
  const { kernels } = options;
  const readOnly = options.readOnly ?? false;
  const logs = await recoverLogs(kernels, directory, options.clock, readOnly, options.subscriptions);
  // Evicted segments are read from object storage from the start: a derived file rebuilt on
  // open (missing, damaged, or built over history a trim cut) reads its segment.
  if (options.objectStore)
    logs.history.store.attachRemote(
      remoteSegmentFilesOf(kernels, options.objectStore, options.feed, feedTagOf(directory)),
    );
  const lease = new LeaseKeeper(
    logs.leaseLog,
    options.clock,
    options.newId,
    logs.epochFloor,
    readOnly ? undefined : options.leases?.forFeed(options.feed),
  );
  return { logs, lease };
}

/** What the history maintenance needs of the writer it is set up for, each read as it is when asked. */
export interface MaintenanceParties {
  /** The derived indexes as they are now (open before the maintenance is). */
  derived(): DerivedIndexes;
  watermark(): Watermark;
  readonly gate: ReadGate;
  readonly frameDataBytesMax: number;
  /** The writer lease's epoch now. */
  epoch(): number;
  /** True once another writer fenced this one off (see `SlotReplication.fencedOff`). */
  fenced(): boolean;
}

/** Sets up the feed's history maintenance (see `history-maintenance.ts`); nothing runs yet. */
export async function openMaintenance(
  directory: string,
  options: WriterOptions,
  logs: RecoveredLogs,
  parties: MaintenanceParties,
): Promise<HistoryMaintenance> {
  return openHistoryMaintenance({
    kernels: options.kernels,
    feed: options.feed,
    directory,
    history: logs.history,
    derived: parties.derived,
    subscriptions: logs.subscriptions,
    watermark: parties.watermark,
    gate: parties.gate,
    clock: options.clock,
    frameDataBytesMax: parties.frameDataBytesMax,
    readOnly: options.readOnly ?? false,
    logs: { retention: logs.retention, merges: logs.merges, compaction: logs.compaction },
    ...(await tieringOf(directory, options, parties.epoch, parties.fenced)),
  });
}

/**
 * An open stream's types count toward the type limit before they are published; after a
 * restart they are found by reading its acknowledged records back once.
 */
export async function rememberOpenTypes(wal: Wal, open: OpenStream, index: FeedIndex): Promise<void> {
  for (const record of await wal.readRecords(open.records)) {
    if (record.type !== undefined && !index.typeNames.has(record.type)) open.types.add(record.type);
  }
}
