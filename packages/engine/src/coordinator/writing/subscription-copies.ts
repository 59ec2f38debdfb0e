/**
 * A replicated feed's subscriptions, copied to etcd by its writer on a node of a cluster
 * (`feeds/<feed>/subscriptions/<name>`: `{ name, cursor, createdAt, updatedAt }` as JSON), so a
 * node that takes the feed over delivers each commit exactly once across the failover: a
 * consumer's advance is acknowledged only once etcd holds it. Each change is a transaction
 * guarded by the writer's epoch: once another node took the feed over, the old writer's
 * changes are refused `FENCED`, and the new writer reads the copies when it lays the feed out.
 * Subscription groups are copied the same way (`feeds/<feed>/groups/<name>`: the group's
 * state-log record in base64), claims and delivery counts included.
 *
 * @example
 * subscriptions.mirrorTo(subscriptionMirror(client, '/streamstack/', 'orders', () => lease.epoch));
 */
import { StreamStackError } from '../../errors.js';
import type { EtcdClient, EtcdCompare, EtcdOperation } from '../../storage/etcd-client.js';
import { decodeGroupState, encodeGroupState, type GroupState } from '../reading/group-state.js';
import type { GroupCopy, GroupMirror } from '../reading/subscription-groups.js';
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
 * Puts and removes keys of `folder` under feed `feed`'s keys, each change a transaction guarded by
 * the epoch `epoch()` returns (the writer's current lease's): `FENCED` once another writer holds
 * a newer one.
 */
function guardedFolder(client: EtcdClient, prefix: string, feed: string, folder: string, epoch: () => number) {
  const epochKey = `${prefix}feeds/${feed}/epoch`;
  // Epoch 0 (no grant was ever made in etcd): no other writer may have raised the key either.
  const guard = (): EtcdCompare =>
    epoch() > 0 ? { key: epochKey, value: String(epoch()) } : { key: epochKey, version: '0' };
  const change = async (operation: EtcdOperation) => {
    const result = await client.txn([guard()], [operation]);
    if (!result.succeeded)
      throw new StreamStackError(
        'FENCED',
        `feed ${feed} has a newer writer (its epoch in etcd is past ${epoch()}): this node changes its ${folder} no more`,
        { details: { feed, epoch: epoch() } },
      );
  };
  const keyOf = (name: string) => `${prefix}feeds/${feed}/${folder}/${name}`;
  return {
    put: (name: string, value: string) => change({ put: { key: keyOf(name), value } }),
    remove: (name: string) => change({ delete: { key: keyOf(name) } }),
  };
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
  const folder = guardedFolder(client, prefix, feed, 'subscriptions', epoch);
  return {
    put: (state) => folder.put(state.name, JSON.stringify(state)),
    remove: (name) => folder.remove(name),
  };
}

/** Where feed `feed`'s subscription group copies are: each group's state-log record, in base64. */
function groupFolderOf(prefix: string, feed: string): string {
  return `${prefix}feeds/${feed}/groups/`;
}

/**
 * The mirror a replicated feed's subscription groups are copied to, in etcd: each group's whole
 * state (its state-log record), put before it is written locally, under the writer's epoch.
 */
export function groupMirror(client: EtcdClient, prefix: string, feed: string, epoch: () => number): GroupMirror {
  const folder = guardedFolder(client, prefix, feed, 'groups', epoch);
  return {
    put: (state) => folder.put(state.name, Buffer.from(encodeGroupState(state)).toString('base64')),
    remove: (name) => folder.remove(name),
  };
}

/** The copies of feed `feed`'s subscription groups, read from etcd now (a takeover lays them out). */
export async function groupCopies(client: EtcdClient, prefix: string, feed: string): Promise<GroupCopy[]> {
  const { kvs } = await client.getPrefix(groupFolderOf(prefix, feed));
  return kvs.map((kv) => {
    const name = kv.key.slice(groupFolderOf(prefix, feed).length);
    const record = new Uint8Array(Buffer.from(kv.value, 'base64'));
    let state: GroupState | undefined;
    try {
      state = decodeGroupState(record, kv.key);
    } catch {
      state = undefined;
    }
    if (!state || state.name !== name)
      throw new StreamStackError('CORRUPT', `etcd key ${kv.key} holds no subscription group of feed ${feed}`, {
        details: { key: kv.key },
      });
    return { name, record };
  });
}
