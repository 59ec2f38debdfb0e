/**
 * Failover of a replicated feed: a new writer lays the feed's directory out from object storage
 * alone — its tiered history, then its slots — once it holds the lease in etcd, so that a writer
 * that died (or stopped without noticing) loses no acknowledged write.
 *
 * 1. Fence: under the new epoch, at every free number among the newest slots
 *    (`SlotReplication.fence`). From then on no writer of an older epoch stores a slot, so none
 *    acknowledges anything: what the slots hold now is final.
 * 2. Read every slot from the oldest kept to the last fence. Walking them in slot order, a group
 *    of an epoch below a fence seen before it was stored after that fence by a writer fenced
 *    there, and never acknowledged (a writer acknowledges in order, and the group fenced out
 *    before it failed): it is left out. A slot of an epoch above this writer's means it was
 *    fenced itself: `FENCED`.
 * 3. Lay out the tiered history (`FollowerMirror`), after the reads: a slot the old writer
 *    retired meanwhile was retired because its history was uploaded, and this finds it there.
 * 4. History groups of segments past object storage's last are written back where they were,
 *    byte for byte: each segment with the header its slots carry, its groups at their offsets
 *    (which must follow each other from the header on), and a `SegmentEnd` naming the next. The
 *    first must start where object storage's history ends; otherwise the restore is `CORRUPT`.
 * 5. WAL groups are replayed, their stream events only, into a new WAL: the stream that was open
 *    comes back with its acknowledged records at their seqs, and the new writer may seal or
 *    abort it (an append to it needs its own epoch's stream).
 * 6. The tiering log names a writer of its own. With the lease granted in etcd written to its
 *    lease log (`writeLeaseLog`), the directory is an ordinary writer's, opened as any other.
 *
 * @example
 * const restored = await restoreFromSlots({ kernels, objectStore, feed: 'orders', directory,
 *   epoch: grant.epoch, writerId: newId(), segmentBytes });
 * await writeLeaseLog(kernels, directory, grant);
 */
import fsp from 'node:fs/promises';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import {
  frameHeaderBytes,
  segmentHeaderBytes,
  slotPackBytesMax,
  slotsFencedAroundNewest,
  slotsPerPackMax,
  slotsReadConcurrently,
} from '../../limits.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { FrameKind } from '../../storage/frame-kinds.js';
import { controlGroup, GroupBuilder, sealGroup } from '../../storage/groups.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { SegmentFile, SegmentKind } from '../../storage/segment.js';
import { encodeSlot, type SlotObject } from '../../storage/slot-object.js';
import { StateLog } from '../../storage/state-log.js';
import { Wal, walFrames, walGroupEvents } from '../../storage/wal.js';
import { TieringLog } from '../maintenance/tiering-state.js';
import { type LeaseState, recordLease } from '../writing/lease.js';
import { listPacks, readPacks, type SlotFolders, SlotPacks } from '../writing/slot-packs.js';
import type { SlotReplication } from '../writing/slot-replication.js';
import { feedTagOf } from './data-directory.js';
import { FollowerMirror } from './follower-mirror.js';
import type { SeedCounters } from './segment-seed.js';

type SlotGroup = Extract<SlotObject, { kind: 'group' }>;

/** What a restore found and did. */
export interface SlotRestoreReport {
  /** The last slot fenced before the slots were read: this writer's slots follow it. */
  readonly fence: number;
  /** Slots read, from the oldest kept to the fence. */
  readonly slotsRead: number;
  /** Groups written back: the history's (sealed commits not in tiered segments yet), the WAL's. */
  readonly historyGroups: number;
  readonly walGroups: number;
  /** Groups a fenced writer stored past a fence: never acknowledged, left out. */
  readonly groupsFenced: number;
  /** Requests made to object storage for the slots. */
  readonly requests: number;
  /**
   * The tiered history: requests made to object storage for it, and its files taken from the
   * node's own copy of the feed instead (`SegmentSeed`), or found there but not the described ones.
   */
  readonly history: { readonly requests: number } & SeedCounters;
  /** The sealed segments written back from their slots: they have no derived files yet. */
  readonly restoredBases: readonly number[];
}

export interface SlotRestoreOptions {
  readonly kernels: Kernels;
  readonly objectStore: ObjectSegmentStore;
  readonly feed: string;
  /** The feed's slots and slot packs. */
  readonly folders: SlotFolders;
  /** The slots, opened (`SlotReplication.open`) before the lease was taken. */
  readonly replication: SlotReplication;
  /** A directory that does not exist yet: the feed's directory is laid out there. */
  readonly directory: string;
  /** The epoch of the lease just granted in etcd: it fences the slots. */
  readonly epoch: number;
  /** The writer its tiering log names (descriptors it creates carry it). */
  readonly writerId: string;
  /** The store's segment size: the WAL's groups are laid out under its frame bound. */
  readonly segmentBytes: number;
  /** This node's copy of the feed, if it has one: its tiered files are taken, not fetched, where they are the same. */
  readonly localCopy?: string;
}

/** Lays out the directory of replicated feed `feed` from object storage and its slots (see above). */
export async function restoreFromSlots(options: SlotRestoreOptions): Promise<SlotRestoreReport> {
  const { kernels, objectStore, feed, directory, epoch, replication, folders } = options;
  const fence = await replication.fence(epoch);
  // The tiered history is laid out while the slots are read, and looked at again after them
  // (step 3): that second look only fetches what was uploaded meanwhile.
  const [read, mirror] = await Promise.all([
    readSlotsAndPacks(kernels, replication, folders, fence),
    FollowerMirror.open(kernels, objectStore, feed, directory, options.localCopy).then(async (opened) => {
      return { opened, first: await opened.sync() };
    }),
  ]);
  const tag = feedTagOf(directory);
  const { groups, groupsFenced } = acknowledgeable(read.all, epoch);
  const tail = await layOutTieredHistory(mirror.opened);
  const history = groups.filter((group) => group.lane === 'history' && group.segment >= tail.base);
  const restoredBases = await writeHistorySegments(kernels, directory, tag, history, tail);
  const wal = groups.filter((group) => group.lane === 'wal');
  await replayWal(kernels, directory, tag, wal, options.segmentBytes);
  await nameTieringWriter(kernels, directory, options.writerId);
  // The slots read one by one go into packs: the next takeover reads them in a few objects.
  const packer = new SlotPacks(kernels, folders);
  await packSlots(packer, read.individually, fence - 2 * slotsFencedAroundNewest, kernels);
  return {
    fence,
    slotsRead: read.all.length,
    historyGroups: history.length,
    walGroups: wal.length,
    groupsFenced,
    requests: replication.info.requests + packer.requests + read.requests,
    history: { requests: mirror.first.requests + tail.requests, ...mirror.opened.seeded },
    restoredBases,
  };
}

/**
 * Every slot from the oldest kept to `fence`, in order: those that are slots of their own (read
 * a few at a time), and those in packs. The packs are listed again after the slots are read: a
 * writer that packed slots meanwhile deleted them as slots only once their pack was stored.
 */
async function readSlotsAndPacks(
  kernels: Kernels,
  replication: SlotReplication,
  folders: SlotFolders,
  fence: number,
): Promise<{ all: SlotObject[]; individually: SlotObject[]; requests: number }> {
  const packedBefore = await listPacks(folders.packs);
  const packed = (slot: number) => packedBefore.some((pack) => pack.first <= slot && slot <= pack.last);
  const numbers: number[] = [];
  for (let slot = replication.oldestSlot ?? fence; slot <= fence; slot++) if (!packed(slot)) numbers.push(slot);
  const individually: SlotObject[] = [];
  for (let at = 0; at < numbers.length; at += slotsReadConcurrently) {
    const batch = numbers.slice(at, at + slotsReadConcurrently);
    for (const slot of await Promise.all(batch.map((number) => replication.readIfPresent(number))))
      if (slot) individually.push(slot);
  }
  const { slots: all, packs } = await readPacks(kernels, folders.packs);
  for (const slot of individually) all.set(slot.slot, slot);
  return {
    all: [...all.values()].sort((a, b) => a.slot - b.slot),
    individually,
    // Two listings and a read per pack; the slots' own reads are counted by the replication.
    requests: 2 + packs,
  };
}

/** Moves the slots of `slots` at or below `through` into packs, each a run of consecutive ones. */
async function packSlots(packer: SlotPacks, slots: readonly SlotObject[], through: number, kernels: Kernels) {
  let run: SlotObject[] = [];
  let bytes = 0;
  const flush = async () => {
    if (run.length > 0)
      await packer.write(
        run.map((slot) => encodeSlot(kernels, slot)),
        (run[0] as SlotObject).slot,
      );
    run = [];
    bytes = 0;
  };
  for (const slot of slots) {
    if (slot.slot > through) break;
    const size = slot.kind === 'group' ? slot.bytes.length : 0;
    const follows = run.length > 0 && (run.at(-1) as SlotObject).slot + 1 === slot.slot;
    if (run.length > 0 && (!follows || run.length >= slotsPerPackMax || bytes + size > slotPackBytesMax)) await flush();
    run.push(slot);
    bytes += size;
  }
  await flush();
}

/**
 * The groups that may have been acknowledged, in slot order: each of an epoch at least that of
 * every fence before it. `FENCED` when a slot is of an epoch above `epoch`.
 */
function acknowledgeable(slots: readonly SlotObject[], epoch: number): { groups: SlotGroup[]; groupsFenced: number } {
  let fencedBelow = 0;
  let groupsFenced = 0;
  const groups: SlotGroup[] = [];
  for (const slot of slots) {
    if (slot.epoch > epoch)
      throw new StreamStackError(
        'FENCED',
        `slot ${slot.slot} was written under epoch ${slot.epoch}, above this writer's ${epoch}: another writer holds the feed`,
        { details: { slot: slot.slot, epoch: slot.epoch } },
      );
    if (slot.kind === 'fence') fencedBelow = Math.max(fencedBelow, slot.epoch);
    else if (slot.epoch < fencedBelow) groupsFenced++;
    else groups.push(slot);
  }
  return { groups, groupsFenced };
}

/**
 * Brings the tiered history in; returns where it ends (the base and first commit of the segment
 * after it) and the requests this made.
 */
async function layOutTieredHistory(
  mirror: FollowerMirror,
): Promise<{ base: number; commit: number; requests: number }> {
  const { requests } = await mirror.sync();
  const tail = mirror.tailPlaced;
  if (!tail) throw new StreamStackError('IO', 'the tiered history was laid out without a place for what follows it');
  return { ...tail, requests };
}

/**
 * Writes the history segments the groups of `history` (in slot order) were written to, as they
 * were; returns the bases of those it finished (all but the last, which goes on as the active one).
 */
async function writeHistorySegments(
  kernels: Kernels,
  directory: string,
  feedTag: number,
  history: readonly SlotGroup[],
  tail: { base: number; commit: number },
): Promise<number[]> {
  const segments: SlotGroup[][] = [];
  for (const group of history) {
    const current = segments.at(-1);
    if (current && (current[0] as SlotGroup).segment === group.segment) current.push(group);
    else segments.push([group]);
  }
  const corrupt = (reason: string, group: SlotGroup) =>
    new StreamStackError('CORRUPT', `cannot rebuild history segment ${group.segment} from its slots: ${reason}`, {
      details: { slot: group.slot, segment: group.segment },
    });
  for (let index = 0; index < segments.length; index++) {
    const groups = segments[index] as SlotGroup[];
    const first = groups[0] as SlotGroup;
    const previous = segments[index - 1]?.[0];
    const expected = previous === undefined ? tail : undefined;
    if (expected && (first.segment !== expected.base || first.baseCommit !== expected.commit))
      throw corrupt(
        `tiered history ends before position ${expected.base} (commit ${expected.commit}), where the slots' first segment should start`,
        first,
      );
    if (previous && first.segment <= previous.segment) throw corrupt('its slots come after a later segment', first);
    const segment = await SegmentFile.create(kernels, new FeedLayout(directory).historySegment(first.segment), {
      kind: SegmentKind.History,
      base: first.segment,
      baseCommit: first.baseCommit,
      capacity: first.capacity,
      feedTag,
    });
    try {
      let at = segmentHeaderBytes;
      for (const group of groups) {
        if (group.offset !== at) throw corrupt(`slot ${group.slot} is at offset ${group.offset}, not ${at}`, group);
        if (group.capacity !== first.capacity || group.baseCommit !== first.baseCommit)
          throw corrupt(`slot ${group.slot} names another header for the segment`, group);
        if (group.offset + group.bytes.length > group.capacity) throw corrupt(`slot ${group.slot} ends past it`, group);
        await segment.append(kernels, group.bytes);
        at += group.bytes.length;
      }
      const next = segments[index + 1]?.[0];
      if (next) {
        // Finished as the old writer finished it: the log goes on in the next segment.
        const end = controlGroup(FrameKind.SegmentEnd, (writer) =>
          writer.u64(next.segment).u64(next.baseCommit),
        ).finish(kernels);
        sealGroup(kernels, end, at, at);
        await segment.append(kernels, end);
      }
    } finally {
      segment.close();
    }
  }
  return segments.slice(0, -1).map((groups) => (groups[0] as SlotGroup).segment);
}

/** Replays the stream events of the WAL groups (in slot order) into a new WAL in `directory`. */
async function replayWal(
  kernels: Kernels,
  directory: string,
  feedTag: number,
  groups: readonly SlotGroup[],
  segmentBytes: number,
): Promise<void> {
  const folder = new FeedLayout(directory).wal;
  await fsp.mkdir(folder, { recursive: true });
  const wal = await Wal.open(kernels, folder, () => undefined, false, feedTag);
  try {
    for (const group of groups) {
      const builder = new GroupBuilder(Math.floor(segmentBytes / 4) - frameHeaderBytes);
      const events = walGroupEvents(kernels, group.bytes, `slot ${group.slot}`);
      for (const { event, records } of events) {
        if (event.kind === 'open') walFrames.open(builder, event.stream, event.epoch, event.openedAt, event.message);
        else if (event.kind === 'abort') walFrames.abort(builder, event.stream, event.epoch, event.at);
        else walFrames.batch(builder, event.stream, event.epoch, event.firstSeq, records, 0);
      }
      if (events.length > 0) await wal.commit(builder, segmentBytes).durable;
    }
  } finally {
    wal.close();
  }
}

/** Names this writer in the tiering log the mirror wrote (a follower's), so descriptors it creates are its own. */
async function nameTieringWriter(kernels: Kernels, directory: string, writer: string): Promise<void> {
  const log = await TieringLog.open(kernels, directory, false);
  try {
    await log.write({ ...log.stateOr(() => writer), writer });
  } finally {
    log.close();
  }
}

/** Writes `lease` to the directory's lease log: the feed opens with it as its current grant. */
export async function writeLeaseLog(kernels: Kernels, directory: string, lease: LeaseState): Promise<void> {
  const log = await StateLog.open(kernels, new FeedLayout(directory).stateLog('lease'), false);
  try {
    await recordLease(log, lease);
  } finally {
    log.close();
  }
}
