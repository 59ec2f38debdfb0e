/**
 * A replicated feed's subscriptions, copied to etcd by its writer on a node of a cluster
 * (`feeds/<feed>/subscriptions/<name>`: `{ name, cursor, createdAt, updatedAt }` as JSON), so a
 * node that takes the feed over delivers each commit exactly once across the failover: a
 * consumer's advance is acknowledged only once etcd holds it. Each change is a transaction
 * guarded by the writer's epoch: once another node took the feed over, the old writer's
 * changes are refused `FENCED`, and the new writer reads the copies when it lays the feed out.
 *
 * @example
 * subscriptions.mirrorTo(subscriptionMirror(client, '/streamstack/', 'orders', () => lease.epoch));
 */
import { StreamStackError } from '../../errors.js';
import type { EtcdClient, EtcdCompare, EtcdOperation } from '../../storage/etcd-client.js';
import type { SubscriptionMirror, SubscriptionState } from '../reading/subscriptions.js';
import { parseSubscription } from './cluster-keys.js';

/** Where feed `feed`'s subscription copies are, under the cluster's key prefix. */
function folderOf(prefix: string, feed: string): string {
  return `${prefix}feeds/${feed}/subscriptions/`;
}

/** The copies of feed `feed`'s subscriptions, read from etcd now (a takeover lays them out). */
export async function subscriptionCopies(
  client: EtcdClient,
  prefix: string,
  feed: string,
): Promise<SubscriptionState[]> {
  const { kvs } = await client.getPrefix(folderOf(prefix, feed));
  const states: SubscriptionState[] = [];
  for (const kv of kvs) {
    const state = parseSubscription(kv.value);
    if (!state || kv.key !== `${folderOf(prefix, feed)}${state.name}`)
      throw new StreamStackError('CORRUPT', `etcd key ${kv.key} holds no subscription of feed ${feed}`, {
        details: { key: kv.key },
      });
    states.push(state);
  }
  return states;
}

/**
 * The mirror a replicated feed's subscriptions are copied to, in etcd, under the epoch
 * `epoch()` returns at each change (the writer's current lease's).
 */
export function subscriptionMirror(
  client: EtcdClient,
  prefix: string,
  feed: string,
  epoch: () => number,
): SubscriptionMirror {
  const epochKey = `${prefix}feeds/${feed}/epoch`;
  // Epoch 0 (no grant was ever made in etcd): no other writer may have raised the key either.
  const guard = (): EtcdCompare =>
    epoch() > 0 ? { key: epochKey, value: String(epoch()) } : { key: epochKey, version: '0' };
  const change = async (operation: EtcdOperation) => {
    const result = await client.txn([guard()], [operation]);
    if (!result.succeeded)
      throw new StreamStackError(
        'FENCED',
        `feed ${feed} has a newer writer (its epoch in etcd is past ${epoch()}): this node changes its subscriptions no more`,
        { details: { feed, epoch: epoch() } },
      );
  };
  return {
    put: (state) => change({ put: { key: `${folderOf(prefix, feed)}${state.name}`, value: JSON.stringify(state) } }),
    remove: (name) => change({ delete: { key: `${folderOf(prefix, feed)}${name}` } }),
  };
}
