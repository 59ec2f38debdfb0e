/**
 * Subscription groups: one subscription shared by competing workers. Each commit goes to one
 * worker at a time, which acknowledges it (`ack`) or gives it back (`nack`); work not acknowledged
 * within `ackTimeoutMs` goes to another worker, and work delivered `maxDeliveries` times without an
 * acknowledgement is parked in the dead-letter feed with its reason.
 */
import type { Commit, StoredRecord } from './records.js';

/** How a group orders its work: any order (`commit`), or each key's commits one at a time, in order (`key`). */
export type GroupOrder = 'commit' | 'key';

export interface SubscriptionGroupOptions {
  /** How long a worker holds what it claimed before it goes to another worker (default 30 s). */
  readonly ackTimeoutMs?: number;
  /** Deliveries of one commit before it is parked (default 5). */
  readonly maxDeliveries?: number;
  /** `commit` (the default) or `key`; fixed when the group is created. */
  readonly orderedBy?: GroupOrder;
  /** The feed parked work is appended to (default `<feed>.<group>.parked`, created when first needed). */
  readonly deadLetter?: string;
  /** Where a new group starts: after this commit (default 0, the start). */
  readonly after?: number;
}

export interface SubscriptionGroupInfo {
  readonly name: string;
  readonly ackTimeoutMs: number;
  readonly maxDeliveries: number;
  readonly orderedBy: GroupOrder;
  readonly deadLetter: string;
  /** Every commit up to this one is acknowledged or parked. */
  readonly cursor: number;
  /** Commits workers hold now. */
  readonly held: number;
  /** Commits given back (a nack, or a claim whose time ran out) and waiting for another delivery. */
  readonly released: number;
  /** Commits after the cursor already acknowledged or parked. */
  readonly settledAhead: number;
  readonly acked: number;
  readonly parked: number;
  /** Deliveries after the first. */
  readonly redelivered: number;
  /** How far the cursor is behind the head. */
  readonly lag: { readonly commits: number; readonly records: number; readonly bytes: number };
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** A commit handed to a worker: it holds it until `deadline` (ms since the epoch). */
export interface GroupClaim {
  readonly commit: Commit;
  readonly records: StoredRecord[];
  /** 1 for the first delivery, more for redeliveries. */
  readonly delivery: number;
  readonly deadline: number;
  /** Why the commit was last given back, when it was. */
  readonly reason?: string;
}

/** What became of a commit a worker gave back. */
export interface NackResult {
  readonly commit: number;
  /** `released` (another worker will get it) or `parked` (its deliveries are spent). */
  readonly outcome: 'released' | 'parked';
  readonly deliveries: number;
}
