/**
 * Sets up a feed's history maintenance once its logs are open: retention (trims), merging
 * compaction, key compaction and, with object storage, tiering, wired to one another as they
 * must be. Trims, merges, key compactions and uploads run one at a time through the retention
 * keeper's queue, and both rewrites switch files inside the feed's read gate. Whatever changes
 * the sealed segments (a trim, a merge, a key compaction) starts a tiering pass after it. The
 * feed writer holds what this returns; it only starts the maintenance, never runs it.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { feedNameFolder } from '../../storage/feed-config-object.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import type { History } from '../../storage/history-log.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { feedObjectPrefix, objectFolders } from '../../storage/segment-descriptor.js';
import { feedTagOf } from '../opening/data-directory.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import type { ReadGate } from '../reading/read-gate.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { Watermark } from '../writing/published-state.js';
import type { CompactionLog } from './compaction-state.js';
import { HistoryMerges } from './history-merge.js';
import { HistoryTiering } from './history-tiering.js';
import { HistoryRetention } from './history-trim.js';
import { KeyCompaction } from './key-compaction.js';
import type { MergeLog } from './merge-state.js';
import type { RetentionLog } from './retention-state.js';
import { TieringLog } from './tiering-state.js';

/** What a feed's maintenance needs from the open feed. */
export interface MaintenanceContext {
  readonly kernels: Kernels;
  readonly feed: string;
  readonly directory: string;
  readonly history: History;
  /** The derived indexes as they are now (a merge replaces them). */
  readonly derived: () => DerivedIndexes;
  readonly subscriptions: Subscriptions;
  readonly watermark: () => Watermark;
  readonly gate: ReadGate;
  readonly clock: () => number;
  readonly frameDataBytesMax: number;
  readonly readOnly: boolean;
  readonly logs: { readonly retention: RetentionLog; readonly merges: MergeLog; readonly compaction: CompactionLog };
  /** Given when the store tiers sealed history to object storage. */
  readonly tiering?: {
    /**
     * The store's object storage, at its configured prefix; undefined for a read-only open of a
     * tiered feed, which reports the tiering log's state and uploads nothing.
     */
    readonly objectStore: ObjectSegmentStore | undefined;
    /** Bytes of sealed history kept locally once uploaded; undefined keeps all of it. */
    readonly localHistoryBytesMax: number | undefined;
    readonly log: TieringLog;
    /** The writer lease's epoch now. */
    readonly epoch: () => number;
    /**
     * True once another writer fenced this one off (a replicated feed taken over): it uploads
     * nothing more, for its objects would replace the new writer's under the same names.
     */
    readonly fenced: () => boolean;
    readonly newId: () => string;
  };
}

/** A feed's history maintenance: its retention, its merges and its key compaction. */
export interface HistoryMaintenance {
  readonly retention: HistoryRetention;
  readonly merges: HistoryMerges;
  readonly keyCompaction: KeyCompaction;
  readonly tiering: HistoryTiering | undefined;
}

/** Builds the feed's maintenance; nothing runs until asked (or a policy or a finished segment asks). */
export function openHistoryMaintenance(context: MaintenanceContext): HistoryMaintenance {
  const { history, derived, readOnly } = context;
  const retention = new HistoryRetention(
    context.logs.retention,
    history,
    derived,
    context.subscriptions,
    context.watermark,
    context.clock,
    readOnly,
  );
  const tiering = context.tiering && openTiering(context, context.tiering, retention);
  // One queue for all: a merge never rewrites segments a trim is deleting or an upload reading,
  // and back. A rewrite's new segment goes up once the rewrite is done.
  const serial = <T>(work: () => Promise<T>) => retention.serial(work).finally(() => tiering?.segmentFinished());
  if (tiering) retention.onTrimmed = () => tiering.segmentFinished();
  const merges = new HistoryMerges({
    kernels: context.kernels,
    feed: context.feed,
    directory: context.directory,
    history,
    derived,
    gate: context.gate,
    log: context.logs.merges,
    frameDataBytesMax: context.frameDataBytesMax,
    serial,
    readOnly,
  });
  const keyCompaction = new KeyCompaction({
    history,
    derived,
    subscriptions: context.subscriptions,
    merges,
    log: context.logs.compaction,
    watermark: context.watermark,
    serial,
    readOnly,
    feed: context.feed,
  });
  return { retention, merges, keyCompaction, tiering };
}

/** The feed's tiering: its objects under the feed's own folder of the configured prefix. */
function openTiering(
  context: MaintenanceContext,
  tiering: NonNullable<MaintenanceContext['tiering']>,
  retention: HistoryRetention,
): HistoryTiering {
  const feedTag = feedTagOf(context.directory);
  const root = tiering.objectStore?.within(feedObjectPrefix(context.feed, feedTag));
  return new HistoryTiering({
    kernels: context.kernels,
    feed: context.feed,
    feedTag,
    history: context.history,
    derived: context.derived,
    stores: feedStores(context.kernels, context.directory),
    feedConfigFile: new FeedLayout(context.directory).config,
    objects: root && {
      root,
      feedFolder: feedNameFolder(tiering.objectStore!, context.feed),
      segments: root.within(objectFolders.segments),
      descriptors: root.within(objectFolders.descriptors),
    },
    log: tiering.log,
    fenced: tiering.fenced,
    localHistoryBytesMax: tiering.localHistoryBytesMax,
    epoch: tiering.epoch,
    clock: context.clock,
    newId: tiering.newId,
    serial: (work) => retention.serial(work),
  });
}

/**
 * The tiering a feed's maintenance runs: uploads, for a writer with object storage; the tiering
 * log's state alone, for a read-only open of a feed that was tiered (`feed info` shows it); none
 * otherwise (no file is made for a feed never tiered).
 */
export async function tieringOf(
  directory: string,
  options: {
    readonly kernels: Kernels;
    readonly readOnly?: boolean;
    readonly objectStore?: ObjectSegmentStore;
    readonly localHistoryBytesMax?: number;
    readonly newId: () => string;
  },
  epoch: () => number,
  fenced: () => boolean = () => false,
): Promise<{ tiering?: MaintenanceContext['tiering'] }> {
  const readOnly = options.readOnly ?? false;
  if (!options.objectStore && !readOnly) return {};
  const log = await TieringLog.open(options.kernels, directory, readOnly);
  if (!options.objectStore && !log.written) {
    log.close();
    return {};
  }
  return {
    tiering: {
      objectStore: readOnly ? undefined : options.objectStore,
      localHistoryBytesMax: options.localHistoryBytesMax,
      log,
      epoch,
      fenced,
      newId: options.newId,
    },
  };
}
