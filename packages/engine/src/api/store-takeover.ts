/**
 * `store.takeOver`'s work on the store (see its doc comment): the takeover itself
 * (`coordinator/writing/feed-takeover.ts`) lays the feed out beside the feeds; this puts it in
 * place of the local copy, which is closed first (its handles fail `FENCED` from then on), opens
 * it, and says what was restored and what the local copy held that is gone.
 */
import type { FeedInfo, LeaseGrant, TakeoverResult } from '@streamstack/protocol';
import type { DataDirectory } from '../coordinator/opening/data-directory.js';
import type { EtcdLeases } from '../coordinator/writing/etcd-leases.js';
import { type TakeoverRequest, takeOverFeed } from '../coordinator/writing/feed-takeover.js';
import { validateHolder, validateTtl } from '../coordinator/writing/lease.js';
import { groupCopies, subscriptionCopies } from '../coordinator/writing/subscription-copies.js';
import { StreamStackError } from '../errors.js';
import type { Feed } from './feed.js';

/** What of the store a takeover uses. */
export interface StoreForTakeover
  extends Pick<TakeoverRequest, 'kernels' | 'objectStore' | 'segmentBytes' | 'clock' | 'newId'> {
  readonly leases: EtcdLeases;
  readonly directory: DataDirectory;
  /** The feed, opened (or as open already). */
  feed(name: string): Promise<Feed>;
  /** Drops the store's handle of the feed, returning it: the next lookup opens the directory anew. */
  forget(name: string): Promise<Feed> | undefined;
  /** Runs `work` with lookups of the feed waiting for it. */
  guard<T>(name: string, work: Promise<T>): Promise<T>;
  /** Tells the next open of feed `name` which sealed segments a takeover wrote back from slots. */
  restored(name: string, bases: readonly number[]): void;
}

export async function takeOverInStore(
  store: StoreForTakeover,
  name: string,
  options: { holder: string; ttlMs?: number },
): Promise<TakeoverResult> {
  validateHolder(options.holder);
  const ttlMs = validateTtl(options.ttlMs);
  const { directory } = store;
  const replacement = (async () => {
    const holdsCopy = directory.holdsFeed(name);
    const local = holdsCopy ? await store.feed(name).catch(() => undefined) : undefined;
    const before = await local?.info().catch(() => undefined);
    const restoring = await directory.restoringDirectory(name);
    const taken = await takeOverFeed({
      kernels: store.kernels,
      objectStore: store.objectStore,
      feed: name,
      remote: store.leases.forFeed(name),
      subscriptions: () => subscriptionCopies(store.leases.client, store.leases.prefix, name),
      groups: () => groupCopies(store.leases.client, store.leases.prefix, name),
      holder: options.holder,
      ttlMs,
      localEpoch: before?.epoch ?? 0,
      directory: restoring,
      localCopy: holdsCopy ? directory.feedDirectory(name) : undefined,
      segmentBytes: store.segmentBytes,
      clock: store.clock,
      newId: store.newId,
    }).catch(async (error: unknown) => {
      await directory.restoringDirectory(name);
      throw error;
    });
    try {
      const open = await store.forget(name)?.catch(() => undefined);
      await open?.writer.close(
        new StreamStackError('FENCED', `feed ${name} was taken over and laid out again: look it up again`, {
          details: { feed: name },
        }),
      );
      await directory.replaceFeed(name, restoring);
      store.restored(name, taken.restore.restoredBases);
    } catch (error) {
      taken.stopRenewing();
      throw error;
    }
    return { ...taken, localHead: before?.head?.commit ?? 0 };
  })();
  const { lease, restore, localHead, stopRenewing } = await store.guard(name, replacement);
  let grant: LeaseGrant;
  let info: FeedInfo;
  try {
    const feed = await store.feed(name);
    stopRenewing();
    // Opening a long history may outlast the TTL: the grant is renewed now that the feed is open,
    // under its own TTL.
    grant = await feed.writer.resumeLease(lease.token, ttlMs);
    info = await feed.info();
  } finally {
    stopRenewing();
  }
  const head = info.head?.commit ?? 0;
  return {
    grant,
    head,
    activeStream: info.activeStream,
    droppedCommits: Math.max(0, localHead - head),
    slots: {
      fence: restore.fence,
      read: restore.slotsRead,
      historyGroups: restore.historyGroups,
      walGroups: restore.walGroups,
      groupsFenced: restore.groupsFenced,
      requests: restore.requests,
    },
    history: restore.history,
  };
}
