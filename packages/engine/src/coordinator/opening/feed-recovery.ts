/**
 * Recovery of one feed's logs when it opens: the history (commits, with stand-ins for those
 * corruption took, and the payloads of the active segment for dedup), the WAL's events replayed
 * into the open stream's state, the lease log and the subscriptions.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import { History } from '../../storage/history-log.js';
import type { PayloadLocation } from '../../storage/records.js';
import { StateLog } from '../../storage/state-log.js';
import { Wal, type WalEvent } from '../../storage/wal.js';
import { WalLocations } from '../../storage/wal-locations.js';
import { CompactionLog } from '../maintenance/compaction-state.js';
import { horizonWithFloor, retainedFloor } from '../maintenance/history-floors.js';
import { leftoverBases, MergeLog, removeReplacedFiles, switchedOver } from '../maintenance/merge-state.js';
import { RetentionLog } from '../maintenance/retention-state.js';
import { evictedSegments } from '../maintenance/tiering-state.js';
import { Subscriptions } from '../reading/subscriptions.js';
import { feedTagOf } from './data-directory.js';

/** A stream that is open: acknowledged records in the WAL, not yet sealed or aborted. */
export interface OpenStream {
  readonly id: string;
  readonly epoch: number;
  readonly openedAt: number;
  readonly message?: string;
  /** The seq the next record gets, counting batches prepared but not yet durable. */
  nextSeq: number;
  /** Where every acknowledged record lies, in seq order. */
  readonly records: WalLocations;
  /** Types of its acknowledged records not yet published: they count toward the type limit. */
  readonly types: Set<string>;
}

/** A feed's logs, opened and recovered. */
export interface RecoveredLogs {
  readonly history: History;
  readonly wal: Wal;
  readonly leaseLog: StateLog;
  readonly subscriptions: Subscriptions;
  /** The retention policy and floor; the floor is where the history was opened from. */
  readonly retention: RetentionLog;
  /** The record of the last merge's switch-over (finished here when a crash interrupted it). */
  readonly merges: MergeLog;
  /** The key-compaction horizon (cursors below it fail with `COMPACTED`). */
  readonly compaction: CompactionLog;
  /**
   * Read-only: the segment a rewrite switched in without finishing (its derived files are the
   * replaced segment's); a read-write open finishes the switch-over instead.
   */
  readonly rewrittenBase: number | undefined;
  /** The payloads stored in the active history segment (runs reference only their own segment's). */
  readonly payloads: { crc: number; location: PayloadLocation }[];
  readonly events: WalEvent[];
  /** The highest epoch any write was made under: fencing never goes back below it. */
  readonly epochFloor: number;
}

export async function recoverLogs(
  kernels: Kernels,
  directory: string,
  clock: () => number,
  readOnly: boolean,
  /** A follower's own subscriptions, opened once for every view of the feed. */
  sharedSubscriptions?: Subscriptions,
): Promise<RecoveredLogs> {
  // Let go of once recovery is done: the history keeps its recovery's visitor for the segments
  // it opens later, and a quarter of a million payloads of a replay would stay with it.
  let payloads: { crc: number; location: PayloadLocation }[] | undefined = [];
  const retention = await RetentionLog.open(kernels, directory, readOnly);
  const merges = await MergeLog.open(kernels, directory, readOnly);
  const compaction = await CompactionLog.open(kernels, directory, readOnly);
  // A merge that switched its segment in and stopped before deleting the segments it replaced:
  // their files are skipped (read-only) or deleted now, and the merge marked done.
  const stores = feedStores(kernels, directory);
  const leftovers = await leftoverBases(kernels, stores, merges.record);
  const mergePending = merges.record?.pending === true;
  const rewrittenBase =
    readOnly && merges.record && (await switchedOver(kernels, stores, merges.record))
      ? merges.record.replaced[0]
      : undefined;
  if (mergePending && !readOnly) {
    if (await switchedOver(kernels, stores, merges.record!))
      await removeReplacedFiles(stores, merges.record!.replaced, true);
    await merges.write({ ...merges.record!, pending: false });
  }
  // Where the history opens from: the retention log's floor, or the oldest segment's start when
  // the log was lost (the low mark never goes back to a trimmed range).
  const retained = await retainedFloor(kernels, directory, retention);
  // Segments carry their feed's tag: one written for another feed is corruption, never read as ours.
  const feedTag = feedTagOf(directory);
  let history: History;
  try {
    history = await History.open(
      kernels,
      new FeedLayout(directory).history,
      { onPayload: (crc, location) => payloads?.push({ crc, location }) },
      readOnly,
      true,
      retained.floor,
      leftovers,
      feedTag,
      await evictedSegments(kernels, directory),
      // A reader lists the segments while the writer (or a follower's tail) may be rolling.
      readOnly,
    );
  } catch (error) {
    retention.close();
    merges.close();
    compaction.close();
    throw error;
  }
  // The horizon never goes back below the compacted history, even with the compaction log lost.
  history.commits.setHorizon(horizonWithFloor(history.commits, compaction.horizon, directory).horizon);
  const events: WalEvent[] = [];
  try {
    const wal = await Wal.open(
      kernels,
      new FeedLayout(directory).wal,
      (event) => events.push(event),
      readOnly,
      feedTag,
    );
    const leaseLog = await StateLog.open(kernels, new FeedLayout(directory).stateLog('lease'), readOnly);
    const subscriptions =
      sharedSubscriptions ??
      (await Subscriptions.open(kernels, new FeedLayout(directory).subscriptions, clock, readOnly));
    const active = history.room()?.segment;
    // Even if the lease log was lost, no write may be fenced by an epoch below one already used.
    let epochFloor = history.commits.epochMax;
    for (const event of events) epochFloor = Math.max(epochFloor, event.epoch);
    const activePayloads = payloads.filter(({ location }) => location.segment === active);
    payloads = undefined;
    return {
      history,
      wal,
      leaseLog,
      subscriptions,
      retention,
      merges,
      compaction,
      rewrittenBase,
      payloads: activePayloads,
      events,
      epochFloor,
    };
  } catch (error) {
    history.close();
    retention.close();
    merges.close();
    compaction.close();
    throw error;
  }
}

/**
 * Replays the WAL's events (after the history is published): the stream still open, if any,
 * with its acknowledged records, and the streams that were aborted.
 */
export function replayStreams(
  events: readonly WalEvent[],
  isSealed: (stream: string) => boolean,
): { open: OpenStream | undefined; aborted: Set<string> } {
  let open: OpenStream | undefined;
  const aborted = new Set<string>();
  // A stream has many events (one per batch), and asking whether it was sealed may read.
  const sealed = new Map<string, boolean>();
  for (const event of events) {
    let isSealedStream = sealed.get(event.stream);
    if (isSealedStream === undefined) sealed.set(event.stream, (isSealedStream = isSealed(event.stream)));
    if (isSealedStream) continue;
    if (event.kind === 'open') {
      open = {
        id: event.stream,
        epoch: event.epoch,
        openedAt: event.openedAt,
        ...(event.message === undefined ? {} : { message: event.message }),
        nextSeq: 1,
        records: new WalLocations(),
        types: new Set(),
      };
    } else if (event.kind === 'abort') {
      aborted.add(event.stream);
      if (open?.id === event.stream) open = undefined;
    } else if (open?.id === event.stream) {
      for (const location of event.records) open.records.push(location);
      open.nextSeq = event.firstSeq + event.records.length;
    }
  }
  return { open, aborted };
}
