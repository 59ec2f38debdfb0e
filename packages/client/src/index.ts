/**
 * @streamstack/client: a StreamStack server with the embedded API's shape (docs/http.md).
 *
 * @example
 * import { RemoteStore } from '@streamstack/client';
 * const store = await RemoteStore.open('http://127.0.0.1:4437');
 * const feed = await store.feed('orders');
 * for await (const record of feed.read({ after: 0, mode: 'latest' })) console.log(record.key);
 */

export type {
  AppendCondition,
  AppendRecord,
  Commit,
  CommitRecords,
  ErrorCode,
  ExportedFile,
  ExportFormat,
  ExportManifest,
  ExportOptions,
  FeedDiskUse,
  FeedInfo,
  FeedVerification,
  GroupClaim,
  GroupOrder,
  KeyCompactionRequest,
  KeyCompactionResult,
  LeaseGrant,
  MergeResult,
  NackResult,
  Plan,
  PollResult,
  Query,
  QueryItem,
  ReadMode,
  ReadOptions,
  RecordFilter,
  RetentionInfo,
  RetentionPin,
  RetentionPolicy,
  SegmentMerge,
  StoredRecord,
  StreamInfo,
  StreamRecord,
  SubscriptionGroupInfo,
  SubscriptionGroupOptions,
  SubscriptionInfo,
  TrimResult,
  VerificationCode,
  VerificationProblem,
} from '@streamstack/protocol';
// The error class and the API's types come from the protocol package the client is built on.
// They are re-exported here because a program that depends on the client alone may not import
// a dependency of a dependency (pnpm's strict node_modules refuses it): `instanceof
// StreamStackError` and `StoredRecord` must work from '@streamstack/client' itself.
export { isStreamStackError, StreamStackError } from '@streamstack/protocol';
export { RemoteFeed } from './remote-feed.js';
export type { RemoteStoreOptions } from './remote-store.js';
export { RemoteStore } from './remote-store.js';
export { RemoteStream } from './remote-stream.js';
export { RemoteSubscription } from './remote-subscription.js';
export { RemoteSubscriptionGroup } from './remote-subscription-group.js';
export type { TransportOptions } from './transport.js';
export { errorFromBody } from './transport.js';
