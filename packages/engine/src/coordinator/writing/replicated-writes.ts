/**
 * A replicated feed's write path, beside its writer (`feed-writer.ts`): opening its slots on
 * open, storing each group the writer writes locally as a slot object too, acknowledged only
 * once both are durable (`slot-replication.ts`), telling when a slot may be retired, and, on a
 * node of a cluster, copying the subscriptions' and subscription groups' changes to etcd
 * (`subscription-copies.ts`). The writer stays the owner of the state these read: its staged
 * head, its open stream and its lease.
 *
 * @example
 * const replication = await openReplicated(parties, options, directory, logs.events);
 * return replicatedGroup(parties, lane, written, { replication, slot, before: active });
 */
import { assert } from '../../errors.js';
import type { History } from '../../storage/history-log.js';
import type { SegmentFile } from '../../storage/segment.js';
import type { Wal, WalEvent } from '../../storage/wal.js';
import type { HistoryTiering } from '../maintenance/history-tiering.js';
import { replayStreams } from '../opening/feed-recovery.js';
import type { GroupMirror } from '../reading/subscription-groups.js';
import type { Subscriptions } from '../reading/subscriptions.js';
import type { WriterOptions } from './feed-writer-open.js';
import type { GroupWrite, Lane } from './group-commit.js';
import type { LeaseKeeper } from './lease.js';
import type { PublishedState } from './published-state.js';
import type { ReplicatedEnd } from './replicated-end.js';
import { openReplication, type SlotReplication } from './slot-replication.js';
import { groupMirror, subscriptionMirror } from './subscription-copies.js';

/** What a replicated feed's writes need of its writer, each read as it is when asked. */
export interface ReplicatedParties {
  readonly wal: Wal;
  readonly history: History;
  readonly lease: LeaseKeeper;
  readonly published: PublishedState;
  readonly subscriptions: Subscriptions;
  /** How far the history may be handed to followers: a history group's stored slot moves it. */
  readonly end: ReplicatedEnd;
  /** The last position staged: a history group's slot holds the runs up to it. */
  stagedPosition(): number;
  /** The stream open now, if any: a WAL group's slot holds its frames. */
  openStream(): string | undefined;
  /** The uploads of sealed segments, when the store has object storage. */
  tiering(): HistoryTiering | undefined;
}

/** A group as the local write left it (see `Wal.commit`): where it lands, and its bytes. */
export type LocalWrite = ReturnType<Wal['commit']>;

/**
 * Opens a replicated feed's slots (after the newest in object storage) and, on a node of a
 * cluster, copies the subscriptions' changes to etcd, so consumers' cursors outlive the writer.
 */
export async function openReplicated(
  parties: ReplicatedParties,
  options: Pick<WriterOptions, 'kernels' | 'feed' | 'objectStore' | 'leases'>,
  directory: string,
  events: readonly WalEvent[],
): Promise<SlotReplication> {
  const { lease, published } = parties;
  const replication = await openReplication(options.kernels, options, directory, {
    epochFloor: lease.epoch,
    needsMet: (position, stream) => slotNeedsMet(parties, position, stream),
    position: published.watermark.position,
    stream: replayStreams(events, (stream) => published.commitOfStream(stream) !== undefined).open?.id,
  });
  // An epoch found in the slots is one no grant here may reuse, whatever the logs and etcd say.
  lease.raiseFloor(replication.newestEpoch);
  const { leases } = options;
  if (leases)
    parties.subscriptions.mirrorTo(
      subscriptionMirror(leases.client, leases.prefix, options.feed, () => lease.grantedEpoch),
    );
  return replication;
}

/**
 * Where a replicated feed's subscription groups are copied, on a node of a cluster: etcd,
 * under its writer's epoch (see `groupMirror`). None for other feeds.
 */
export function replicatedGroupMirror(
  options: Pick<WriterOptions, 'feed' | 'leases' | 'durability'>,
  lease: LeaseKeeper,
): GroupMirror | undefined {
  const { leases } = options;
  if (!leases || options.durability !== 'replicated') return undefined;
  return groupMirror(leases.client, leases.prefix, options.feed, () => lease.grantedEpoch);
}

/**
 * A group written locally whose slot (`slot`, reserved before the local write) goes up too:
 * durable once both are. A history group is noted in `parties.end` as well, from where the
 * active segment (`before`, as it was before the local write) was durable to: followers read
 * no further than the stored slots.
 */
export function replicatedGroup(
  parties: ReplicatedParties,
  lane: Lane,
  written: LocalWrite,
  slot: { replication: SlotReplication; slot: number; before: SegmentFile | undefined },
): GroupWrite {
  const replicated = slotGroup(parties, lane, written, slot.replication, slot.slot);
  if (lane === 'history') {
    const { before } = slot;
    parties.end.note(before?.header.base ?? 0, before?.durableEnd ?? 0, replicated.durable, written.bytes.length);
  }
  return replicated;
}

/** A group written locally whose slot goes up too: durable once both are. */
function slotGroup(
  parties: ReplicatedParties,
  lane: Lane,
  written: LocalWrite,
  replication: SlotReplication,
  slot: number,
): GroupWrite {
  const epoch = parties.lease.epoch;
  // What the slot holds that is not elsewhere yet: a history group's runs, up to the last
  // position staged; a WAL group's frames of the stream open now.
  const needs =
    lane === 'history'
      ? { position: parties.stagedPosition(), stream: undefined }
      : { position: 0, stream: parties.openStream() };
  // A placed group's bytes and place are final already: its slot goes up while the local
  // write is under way, so an acknowledgement waits for the slower of the two, not both.
  const { at } = written;
  // The segment's header goes with the group: a new writer rebuilds the segment from its slots.
  const placedIn = (where: { segment: number; offset: number }) => {
    const segments = lane === 'wal' ? parties.wal.segments : parties.history.segments;
    const { baseCommit, capacity } = segments.byBase(where.segment).header;
    return { ...where, baseCommit, capacity };
  };
  if (at) {
    const stored = replication.storeGroup(slot, epoch, lane, placedIn(at), written.bytes, needs);
    return {
      placed: written.placed,
      durable: Promise.all([written.durable, stored]).then(([location]) => {
        assert(
          location.segment === at.segment && location.offset === at.offset,
          'a placed group lands where it was placed',
        );
        return location;
      }),
    };
  }
  return {
    placed: written.placed,
    durable: written.durable.then(async (location) => {
      await replication.storeGroup(slot, epoch, lane, placedIn(location), written.bytes, needs);
      return location;
    }),
  };
}

/**
 * Whether a replicated feed's slot may be retired: the history up to `position` is in object
 * storage (every segment to there visible, or trimmed away), and `stream` is not open.
 */
function slotNeedsMet(parties: ReplicatedParties, position: number, stream: string | undefined): boolean {
  if (stream !== undefined && parties.openStream() === stream) return false;
  if (position === 0) return true;
  const covered = parties.tiering()?.coveredThrough(parties.history.commits.lowPosition) ?? 0;
  return covered >= position;
}
