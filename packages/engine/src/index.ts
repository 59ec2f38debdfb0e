/**
 * StreamStack: a durable stream store for Node.js.
 *
 * @example
 * import { loadKernels } from '@streamstack/engine';
 * const kernels = loadKernels(); // native when the module loads, else the TypeScript twins
 */
export { loadKernels, tsKernels } from './kernels/index.js';
export type { FstEntries, FstRange, KernelChoice, Kernels, PackedBytes } from './kernels/index.js';
export { StreamStackError, isStreamStackError, ioError } from './errors.js';
export type { ErrorCode } from './errors.js';
export * as limits from './limits.js';
export { Store } from './api/store.js';
export type { StoreOptions } from './api/store.js';
export { Feed } from './api/feed.js';
export type { CommitRecords, FeedInfo } from './api/feed.js';
export { Stream } from './api/stream.js';
export type { StreamInfo, StreamRecord } from './api/stream.js';
export { Subscription } from './api/subscription.js';
export type { PollResult, SubscriptionInfo } from './api/subscription.js';
export type { AppendCondition, Plan, Query, QueryItem, ReadMode, ReadOptions, RecordFilter } from './coordinator/feed-writer-types.js';
export { ColumnBatch, readExportManifest, verifyExport } from './coordinator/feed-writer-types.js';
export type { ExportFormat, ExportManifest, ExportOptions, ExportProgress, ExportedFile } from './coordinator/feed-writer-types.js';
export type { AppendRecord, Commit, StoredRecord } from './api/records.js';
export {
  appendRecordLine,
  byteLines,
  bytesField,
  nestsDeeperThan,
  parseLine,
  parseRecordLine,
  readRecordLines,
  recordLines,
  recordFromLine,
  recordLine,
  storedRecordFromLine,
} from '@streamstack/protocol';
export type { LeaseGrant } from './coordinator/lease.js';
export type { RetentionInfo, RetentionPin, TrimResult } from './coordinator/history-trim.js';
export type { RetentionPolicy } from './coordinator/retention-state.js';
export type { MergeProgress, MergeResult, SegmentMerge } from './coordinator/history-merge.js';
export type { KeyCompactionProgress, KeyCompactionRequest, KeyCompactionResult } from './coordinator/key-compaction.js';
export type { OnProgress, Progress, ProgressUnit } from './progress.js';
export type { VerifyProgress } from './api/store.js';
export type { FeedDiskUse } from './coordinator/disk-use.js';
export type { GroupCommitStats } from './coordinator/group-commit.js';
export type { FeedVerification, VerificationProblem } from './coordinator/verify.js';
export type { TornTail } from './coordinator/feed-writer-types.js';
export { storeFormatVersion } from './coordinator/store-marker.js';
