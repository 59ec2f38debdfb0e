/**
 * @streamstack/protocol: what the engine and its HTTP client share, with no dependencies and
 * nothing native: the `StreamStackError` class and its codes, the NDJSON record line format
 * (docs/cli.md), and the public types of records, options and reports. The engine re-exports
 * all of it, so there is one class and one set of types whichever package a program imports.
 *
 * @example
 * import { StreamStackError, recordFromLine } from '@streamstack/protocol';
 * const record = recordFromLine(JSON.parse(line)); // a StreamRecord, its payload as bytes
 */

export type { ClusterFeed, ClusterInfo, ClusterNode, TakeoverResult } from './cluster.js';
export type { ErrorCode } from './errors.js';
export { isStreamStackError, StreamStackError } from './errors.js';
export type {
  FeedDiskUse,
  FeedInfo,
  FeedSharing,
  FeedVerification,
  FollowerInfo,
  LeaseGrant,
  PollResult,
  ReplicationInfo,
  StreamInfo,
  SubscriptionInfo,
  TieringInfo,
  VerificationCode,
  VerificationProblem,
} from './feeds.js';
export type { GroupClaim, GroupOrder, NackResult, SubscriptionGroupInfo, SubscriptionGroupOptions } from './groups.js';
export { jsonNestingDepthMax } from './limits.js';
export type {
  ExportedFile,
  ExportFormat,
  ExportManifest,
  ExportOptions,
  ExportProgress,
  KeyCompactionRequest,
  KeyCompactionResult,
  MergeResult,
  OnProgress,
  Progress,
  ProgressUnit,
  RetentionInfo,
  RetentionPin,
  RetentionPolicy,
  SegmentMerge,
  TrimResult,
} from './maintenance.js';
export type { AppendCondition, Plan, Query, QueryItem, ReadMode, ReadOptions, RecordFilter } from './reads.js';
export { isReadMode, readModes, readModesInWords } from './reads.js';
export {
  appendRecordLine,
  byteLines,
  bytesField,
  nestsDeeperThan,
  parseLine,
  parseRecordLine,
  readRecordLines,
  recordFromLine,
  recordLine,
  recordLines,
  storedRecordFromLine,
} from './record-lines.js';
export type { AppendRecord, Commit, CommitRecords, StoredRecord, StreamRecord } from './records.js';
