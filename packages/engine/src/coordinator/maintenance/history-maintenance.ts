/**
 * Sets up a feed's history maintenance once its logs are open: retention (trims), merging
 * compaction and key compaction, wired to one another as they must be. Trims, merges and key
 * compactions run one at a time through the retention keeper's queue, and both rewrites switch
 * files inside the feed's read gate. The feed writer holds what this returns; it only starts the
 * maintenance, never runs it.
 */
import type { Kernels } from '../../kernels/kernels.js';
import type { History } from '../../storage/history-log.js';
import type { DerivedIndexes } from '../opening/derived-indexes.js';
import type { ReadGate } from '../reading/read-gate.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { Watermark } from '../writing/published-state.js';
import type { CompactionLog } from './compaction-state.js';
import { HistoryMerges } from './history-merge.js';
import { HistoryRetention } from './history-trim.js';
import { KeyCompaction } from './key-compaction.js';
import type { MergeLog } from './merge-state.js';
import type { RetentionLog } from './retention-state.js';

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
}

/** A feed's history maintenance: its retention, its merges and its key compaction. */
export interface HistoryMaintenance {
  readonly retention: HistoryRetention;
  readonly merges: HistoryMerges;
  readonly keyCompaction: KeyCompaction;
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
  // One queue for all three: a merge never rewrites segments a trim is deleting, and back.
  const serial = <T>(work: () => Promise<T>) => retention.serial(work);
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
  return { retention, merges, keyCompaction };
}
