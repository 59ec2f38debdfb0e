/**
 * What a cluster's keys in etcd hold, read back: a feed's writer record (`feeds/<feed>/writer`),
 * the nodes' records (`nodes/<node>`), and the cluster listing built from both — never a fencing
 * token. The writing side (grants, the watch) is etcd-leases.ts.
 */
import type { ClusterFeed, ClusterInfo, ClusterNode } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { EtcdClient } from '../../storage/etcd-client.js';
import type { SubscriptionState } from '../reading/subscriptions.js';

/** Who holds a feed's writer lease, as its key in etcd says. */
export interface WriterRecord {
  readonly holder: string;
  readonly node: string;
  /** Where the node's server answered when it took the lease (absent from an older release's keys). */
  readonly url?: string | null;
  readonly epoch: number;
  readonly token: string;
}

/**
 * A feed's head hint (`feeds/<feed>/head`): the last commit its writer published, put at most
 * every `headHintIntervalMs` under the writer's epoch. A hint can lag the head; it never names
 * a commit the writer does not have.
 */
export interface HeadHint {
  readonly epoch: number;
  readonly commit: number;
  readonly node: string;
  /** Where the writer's node serves (its tail, for followers), or null. */
  readonly url: string | null;
}

/** A head hint, or undefined for a value this release cannot read. */
export function parseHeadHint(raw: string): HeadHint | undefined {
  try {
    const hint = JSON.parse(raw) as HeadHint;
    return Number.isSafeInteger(hint.epoch) && Number.isSafeInteger(hint.commit) && typeof hint.node === 'string'
      ? { epoch: hint.epoch, commit: hint.commit, node: hint.node, url: typeof hint.url === 'string' ? hint.url : null }
      : undefined;
  } catch {
    return undefined;
  }
}

/** A subscription's copy (`feeds/<feed>/subscriptions/<name>`), or undefined for a value this release cannot read. */
export function parseSubscription(raw: string): SubscriptionState | undefined {
  try {
    const state = JSON.parse(raw) as SubscriptionState;
    const counts = [state.cursor, state.createdAt, state.updatedAt];
    return typeof state.name === 'string' && counts.every((count) => Number.isSafeInteger(count) && count >= 0)
      ? { name: state.name, cursor: state.cursor, createdAt: state.createdAt, updatedAt: state.updatedAt }
      : undefined;
  } catch {
    return undefined;
  }
}

/** A writer record, or undefined for a value this release cannot read. */
export function parseRecord(raw: string): WriterRecord | undefined {
  try {
    const record = JSON.parse(raw) as WriterRecord;
    return typeof record.token === 'string' && Number.isSafeInteger(record.epoch) ? record : undefined;
  } catch {
    return undefined;
  }
}

/** `LEASE_HELD`, naming who holds feed `feed`'s writer key (`record`). */
export function heldError(record: WriterRecord | undefined, feed: string): StreamStackError {
  return new StreamStackError(
    'LEASE_HELD',
    record
      ? `the lease of ${feed} is held by ${record.holder} on node ${record.node} (epoch ${record.epoch})`
      : `the lease of ${feed} is held by an unreadable writer key in etcd`,
    { details: record ? { holder: record.holder, node: record.node, epoch: record.epoch } : {} },
  );
}

/** What the cluster listing says of feed `feed`'s writer: never its fencing token. */
export function clusterFeedOf(feed: string, record: WriterRecord, hint?: HeadHint): ClusterFeed {
  return {
    feed,
    holder: record.holder,
    node: record.node,
    url: typeof record.url === 'string' ? record.url : null,
    epoch: record.epoch,
    // The hint of this writer's epoch only: an older writer's says nothing of this one.
    head: hint && hint.epoch === record.epoch ? hint.commit : null,
  };
}

/** The cluster under `prefix`, read from etcd now, as node `node` sees it. */
export async function readCluster(client: EtcdClient, prefix: string, node: string): Promise<ClusterInfo> {
  const { kvs } = await client.getPrefix(prefix);
  const nodes: ClusterNode[] = [];
  const writers = new Map<string, WriterRecord>();
  const hints = new Map<string, HeadHint>();
  const feedsPrefix = `${prefix}feeds/`;
  for (const kv of kvs) {
    if (kv.key.startsWith(feedsPrefix) && kv.key.endsWith('/writer')) {
      const record = parseRecord(kv.value);
      if (record) writers.set(kv.key.slice(feedsPrefix.length, -'/writer'.length), record);
    } else if (kv.key.startsWith(feedsPrefix) && kv.key.endsWith('/head')) {
      const hint = parseHeadHint(kv.value);
      if (hint) hints.set(kv.key.slice(feedsPrefix.length, -'/head'.length), hint);
    } else if (kv.key.startsWith(`${prefix}nodes/`)) {
      try {
        const record = JSON.parse(kv.value) as ClusterNode;
        if (typeof record.node === 'string')
          nodes.push({ node: record.node, url: record.url ?? null, startedAt: record.startedAt });
      } catch {
        // A node key this release cannot read is not listed.
      }
    }
  }
  const feeds = [...writers].map(([feed, record]) => clusterFeedOf(feed, record, hints.get(feed)));
  return { node, nodes, feeds };
}
