/**
 * A takeover: a node of a cluster becomes the writer of a replicated feed another node wrote
 * (it died, or stopped answering, and its writer key in etcd expired), or that this node wrote
 * before and was fenced off. The lease is taken in etcd first, under an epoch above every
 * epoch the slots and the local copy hold; then the feed's directory is laid out anew, beside
 * the feeds, from object storage and the slots (`slot-restore.ts`), with that lease as its
 * grant. The caller puts it in place of any local copy and opens it.
 *
 * The grant is held in etcd with a TTL of at least `takeoverLeaseTtlMsMin`, renewed while the
 * restore runs and until the feed is open: laying out and opening a long history may take
 * longer than a short TTL (and block the event loop for a while), and the feed must not change
 * hands under it. Once the feed is open, the grant's own TTL takes over.
 */
import { setInterval } from 'node:timers';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { takeoverLeaseTtlMsMin } from '../../limits.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { publishedFeedConfig } from '../opening/follower-mirror.js';
import { restoreFromSlots, type SlotRestoreReport, writeLeaseLog } from '../opening/slot-restore.js';
import { type GroupCopy, restoreGroups } from '../reading/subscription-groups.js';
import { restoreSubscriptions, type SubscriptionState } from '../reading/subscriptions.js';
import { heldError } from './cluster-keys.js';
import type { RemoteLease } from './etcd-leases.js';
import type { LeaseState } from './lease.js';
import type { SlotFolders } from './slot-packs.js';
import { SlotReplication, slotFoldersOf } from './slot-replication.js';

export interface TakeoverRequest {
  readonly kernels: Kernels;
  readonly objectStore: ObjectSegmentStore;
  readonly feed: string;
  /** The feed's lease in etcd. */
  readonly remote: RemoteLease;
  readonly holder: string;
  readonly ttlMs: number;
  /** The highest epoch the local copy of the feed knows (0 without one). */
  readonly localEpoch: number;
  /** An empty place to lay the feed out in. */
  readonly directory: string;
  /** This node's copy of the feed, if it has one: what of it object storage holds too is taken, not fetched. */
  readonly localCopy?: string;
  readonly segmentBytes: number;
  readonly clock: () => number;
  readonly newId: () => string;
  /** The copies of the feed's subscriptions (in etcd), laid out with it. */
  readonly subscriptions: () => Promise<SubscriptionState[]>;
  /** The copies of the feed's subscription groups (in etcd), laid out with it. */
  readonly groups: () => Promise<GroupCopy[]>;
}

/**
 * A takeover done: the grant (renewed in etcd every third of its TTL until `stopRenewing`, for
 * the caller opens the feed first, which may take longer than the TTL) and what the restore did.
 */
export interface TakenOver {
  readonly lease: LeaseState;
  readonly restore: SlotRestoreReport;
  stopRenewing(): void;
}

/** Takes feed `request.feed` over (see above); returns the grant and what the restore did. */
export async function takeOverFeed(request: TakeoverRequest): Promise<TakenOver> {
  const { kernels, objectStore, feed, remote } = request;
  // A key this node sees live in etcd refuses at once, before any request to object storage: a
  // producer retries until its TTL runs out, and each try should cost nothing.
  const holder = remote.heldElsewhere(undefined);
  if (holder) throw heldError(holder, feed);
  const published = await publishedFeedConfig(objectStore, feed);
  if (!published)
    throw new StreamStackError('FEED_NOT_FOUND', `object storage holds no feed named ${feed}`, { details: { feed } });
  const durability = durabilityOf(published.bytes);
  if (durability !== 'replicated')
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `feed ${feed} acknowledges writes once they are on its writer's disk (durability ${durability}): no other node holds them, so none can take it over`,
      { details: { feed, durability } },
    );
  const folders = slotFoldersOf(objectStore, feed, published.tag);
  // The epoch goes above every one a slot was written under, whatever etcd remembers.
  const replication = await SlotReplication.open(kernels, folders, Number.MAX_SAFE_INTEGER, () => false, {
    position: 0,
    stream: undefined,
  });
  try {
    return await takeOverWith(request, replication, folders);
  } finally {
    replication.close();
  }
}

async function takeOverWith(
  request: TakeoverRequest,
  replication: SlotReplication,
  folders: SlotFolders,
): Promise<TakenOver> {
  const { kernels, objectStore, feed, remote } = request;
  // Held in etcd with a TTL long enough to outlast a busy event loop while the feed is laid out
  // and opened; the grant's own TTL takes over once it is open (`LeaseKeeper.resume`). Nothing
  // is written under it meanwhile: only a takeover that dies holds the feed that much longer.
  const holdMs = Math.max(request.ttlMs, takeoverLeaseTtlMsMin);
  const { epoch, token } = await remote.acquire({
    holder: request.holder,
    nonce: request.newId(),
    epochFloor: Math.max(replication.newestEpoch, request.localEpoch),
    ttlMs: holdMs,
    replacing: undefined,
  });
  const renewal = setInterval(() => void remote.renew(token, holdMs).catch(() => undefined), holdMs / 3);
  renewal.unref();
  try {
    const restore = await restoreFromSlots({
      kernels,
      objectStore,
      feed,
      folders,
      replication,
      directory: request.directory,
      epoch,
      writerId: request.newId(),
      segmentBytes: request.segmentBytes,
      localCopy: request.localCopy,
    });
    // Read once the slots are fenced: the old writer changes no subscription after that.
    await restoreSubscriptions(kernels, new FeedLayout(request.directory).subscriptions, await request.subscriptions());
    await restoreGroups(kernels, new FeedLayout(request.directory).groups, await request.groups());
    const lost = remote.lostReason(token);
    if (lost !== undefined)
      throw new StreamStackError('FENCED', `the lease of ${feed} was lost in etcd during its takeover: ${lost}`, {
        details: { feed, epoch },
      });
    // Its expiry here never passes etcd's: it counts the grant's TTL from now, within the hold.
    const lease = {
      epoch,
      holder: request.holder,
      token,
      expiresAt: request.clock() + request.ttlMs,
      released: false,
    };
    await writeLeaseLog(kernels, request.directory, lease);
    return { lease, restore, stopRenewing: () => clearInterval(renewal) };
  } catch (error) {
    clearInterval(renewal);
    await remote.release(token).catch(() => undefined);
    throw error;
  }
}

function durabilityOf(bytes: Uint8Array): string {
  try {
    const config = JSON.parse(new TextDecoder().decode(bytes)) as { durability?: unknown };
    return typeof config.durability === 'string' ? config.durability : 'local';
  } catch {
    return 'local';
  }
}
