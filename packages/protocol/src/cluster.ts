/** What `GET /v1/cluster` and `store.cluster()` report: a cluster's nodes, and who writes each leased feed. */

import type { LeaseGrant } from './feeds.js';

/** A node of the cluster, as its key in etcd says. */
export interface ClusterNode {
  readonly node: string;
  /** Where its server answers (`streamstack serve`), or null when it serves nothing. */
  readonly url: string | null;
  /** When the node's store opened (milliseconds since the epoch). */
  readonly startedAt: number;
}

/** A leased feed's writer. Never its fencing token: that would let a reader write under the lease. */
export interface ClusterFeed {
  readonly feed: string;
  readonly holder: string;
  readonly node: string;
  /** Where the writer's node served when it took the lease (null: it served nothing, or an older release took it). */
  readonly url: string | null;
  readonly epoch: number;
  /** The last commit the writer hinted in etcd under this epoch (it may lag the head), or null. */
  readonly head: number | null;
}

export interface ClusterInfo {
  /** The node that answered. */
  readonly node: string;
  readonly nodes: ClusterNode[];
  readonly feeds: ClusterFeed[];
}

/**
 * What a takeover did (`POST /v1/feeds/{feed}/takeover`, `store.takeOver`): this node became the
 * writer of a replicated feed, laid out from object storage and its slots.
 */
export interface TakeoverResult {
  /** The grant the takeover made, as `acquireLease` returns it. */
  readonly grant: LeaseGrant;
  /** The last commit of the feed as restored (0: none). */
  readonly head: number;
  /** The stream that was open, restored with its acknowledged records (seal or abort it), or null. */
  readonly activeStream: string | null;
  /** Commits the local copy held past the restored head, dropped: none was acknowledged. */
  readonly droppedCommits: number;
  /** The slots: the last fence put, slots read, groups restored and groups left out (stored past a fence). */
  readonly slots: {
    readonly fence: number;
    readonly read: number;
    readonly historyGroups: number;
    readonly walGroups: number;
    readonly groupsFenced: number;
    readonly requests: number;
  };
  /**
   * The tiered history: requests made to object storage for it, and the files taken from this
   * node's own copy of the feed instead of fetched (each checked against what object storage
   * holds), their bytes, and files of the copy that were not the same and were fetched.
   */
  readonly history: {
    readonly requests: number;
    readonly filesReused: number;
    readonly bytesReused: number;
    readonly filesRefused: number;
  };
}
