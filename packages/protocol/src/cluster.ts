/** What `GET /v1/cluster` and `store.cluster()` report: a cluster's nodes, and who writes each leased feed. */

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
  readonly epoch: number;
}

export interface ClusterInfo {
  /** The node that answered. */
  readonly node: string;
  readonly nodes: ClusterNode[];
  readonly feeds: ClusterFeed[];
}
