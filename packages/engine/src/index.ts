/**
 * StreamStack: a durable stream store for Node.js.
 *
 * @example
 * import { loadKernels } from '@streamstack/engine';
 * const kernels = loadKernels(); // native when the module loads, else the TypeScript twins
 */

export type {
  ClusterFeed,
  ClusterInfo,
  ClusterNode,
  FeedSharing,
  GroupClaim,
  GroupOrder,
  NackResult,
  SubscriptionGroupInfo,
  SubscriptionGroupOptions,
} from '@streamstack/protocol';
export {
  appendRecordLine,
  byteLines,
  bytesField,
  isReadMode,
  nestsDeeperThan,
  parseLine,
  parseRecordLine,
  readModes,
  readModesInWords,
  readRecordLines,
  recordFromLine,
  recordLine,
  recordLines,
  storedRecordFromLine,
} from '@streamstack/protocol';
export type { CommitRecords, FeedInfo, FollowerInfo, ReplicationInfo, TieringInfo } from './api/feed.js';
export { Feed } from './api/feed.js';
export type { FollowOptions } from './api/follower-tail.js';
export { tailHeaders } from './api/follower-tail.js';
export { parkedTag } from './api/group-work.js';
export type { ObjectStoreOptions } from './api/object-store-options.js';
export { objectStoreFromAddress } from './api/object-store-options.js';
export type { AppendRecord, Commit, StoredRecord } from './api/records.js';
export type { StoreOptions, VerifyProgress } from './api/store.js';
export { Store } from './api/store.js';
export type { StreamInfo, StreamRecord } from './api/stream.js';
export { Stream } from './api/stream.js';
export type { PollResult, SubscriptionInfo } from './api/subscription.js';
export { Subscription } from './api/subscription.js';
export { SubscriptionGroup } from './api/subscription-group.js';
export type { MergeProgress, MergeResult, SegmentMerge } from './coordinator/maintenance/history-merge.js';
export type { RetentionInfo, RetentionPin, TrimResult } from './coordinator/maintenance/history-trim.js';
export type {
  KeyCompactionProgress,
  KeyCompactionRequest,
  KeyCompactionResult,
} from './coordinator/maintenance/key-compaction.js';
export type { RetentionPolicy } from './coordinator/maintenance/retention-state.js';
export type { FeedDiskUse } from './coordinator/opening/disk-use.js';
export { storeFormatVersion } from './coordinator/opening/store-marker.js';
export type { FeedVerification, VerificationProblem } from './coordinator/opening/verify.js';
export type { WriterRecord } from './coordinator/writing/cluster-keys.js';
export type { CoordinationOptions } from './coordinator/writing/etcd-leases.js';
export { readClusterOf } from './coordinator/writing/etcd-leases.js';
export type { Durability } from './coordinator/writing/feed-writer-open.js';
export type {
  AppendCondition,
  ExportedFile,
  ExportFormat,
  ExportManifest,
  ExportOptions,
  ExportProgress,
  Plan,
  Query,
  QueryItem,
  ReadMode,
  ReadOptions,
  RecordFilter,
  TornTail,
} from './coordinator/writing/feed-writer-types.js';
export { ColumnBatch, readExportManifest, verifyExport } from './coordinator/writing/feed-writer-types.js';
export type { GroupCommitStats } from './coordinator/writing/group-commit.js';
export type { LeaseGrant } from './coordinator/writing/lease.js';
export type { ErrorCode } from './errors.js';
export { ioError, isStreamStackError, StreamStackError } from './errors.js';
export type { FstEntries, FstRange, KernelChoice, Kernels, PackedBytes } from './kernels/index.js';
export { loadKernels, tsKernels } from './kernels/index.js';
export * as limits from './limits.js';
export type { OnProgress, Progress, ProgressUnit } from './progress.js';
