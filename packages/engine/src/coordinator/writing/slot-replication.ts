/**
 * A replicated feed's slots (`durability: 'replicated'`): every group commit is also stored as
 * one object at the next slot number, created with put-if-absent, and acknowledged only once it
 * is both durable on the local disk and stored (the PUT runs while the local write does, once the
 * group's place is known). Slot numbers are taken in group order, so the slots of a writer are
 * contiguous; each carries the epoch it was written under.
 *
 * Fencing needs no cooperation from the writer fenced: a new writer puts fences, under its epoch,
 * at every free number among the newest slots (`fence`). A writer that lost its lease without
 * noticing (a paused process, a partitioned node) then finds its next slot taken — a 412 — and
 * stops with `FENCED`: nothing it writes after that is acknowledged, and groups it stored past
 * a fence are never read as history (`slot-restore.ts`). A slot found taken is read back first:
 * a put whose answer was lost on the way may have landed, and then the slot holds exactly our
 * bytes.
 *
 * While object storage is unavailable, a slot is tried again with a growing backoff, and nothing
 * after it is acknowledged; `info().stalled` says why. A local-durability feed never waits on
 * object storage.
 *
 * Slots are retired (deleted, oldest first) once what they hold is elsewhere: a history group
 * once every position up to its last is in a segment visible in object storage, a WAL group
 * once the stream it was written for is no longer open (its records are then in a sealed
 * commit's history group, or were aborted), a fence at once. The newest slot is never retired,
 * so slot numbers are never given out twice. Slots found at open are retired together, once the
 * history up to the head at open is in object storage and the stream open then is closed.
 */
import fsp from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ReplicationInfo } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import {
  objectDeleteBatchKeys,
  slotPutRetryMsMax,
  slotPutRetryMsMin,
  slotsFencedAroundNewest,
  slotsProbedMax,
  slotsRetireEvery,
} from '../../limits.js';
import { feedNameFolder, publishFeedConfig } from '../../storage/feed-config-object.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { feedObjectPrefix } from '../../storage/segment-descriptor.js';
import { isMissingFile } from '../../storage/segment-store.js';
import {
  decodeSlot,
  encodeSlot,
  type SlotLane,
  type SlotObject,
  slotObjectName,
  slotOfObjectName,
  slotPacksObjectFolder,
  slotsObjectFolder,
} from '../../storage/slot-object.js';
import { feedTagOf } from '../opening/data-directory.js';
import { type SlotFolders, SlotPacks } from './slot-packs.js';

function fencedBy(slot: number, epoch: number, own: number): StreamStackError {
  return new StreamStackError(
    'FENCED',
    `slot ${slot} was written under epoch ${epoch}${epoch > own ? `, above this writer's ${own}` : ''}: another writer holds the feed`,
    { details: { slot, epoch } },
  );
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

/** What a slot still in object storage waits for before it may be retired. */
interface HeldSlots {
  /** The slots, `first` to `last`, that share the need. */
  readonly first: number;
  last: number;
  /** The last position of history they hold (0: none). */
  readonly position: number;
  /** The stream whose frames they hold, while it is open. */
  readonly stream: string | undefined;
}

/** Whether a slot's content is elsewhere: its history up to `position` is in object storage, and `stream` is not open. */
export type SlotNeedsMet = (position: number, stream: string | undefined) => boolean;

export class SlotReplication {
  private fenced: StreamStackError | undefined;
  private stalledBy: string | undefined;
  private written = 0;
  private requests = 0;
  /** Aborted by `close`: a slot waiting out a backoff gives up at once. */
  private readonly closing = new AbortController();

  /** Slots stored and not retired, oldest first (with those found at open as one entry). */
  private readonly held: HeldSlots[] = [];
  private retired = 0;
  /** The epoch of the newest slot found at open (0: none): the lease's epochs stay above it. */
  newestEpoch = 0;
  private sinceRetire = 0;
  /** The retirement under way, if any: one at a time. */
  private retiring: Promise<void> | undefined;

  /** The runs of slots moved into packs. */
  private readonly packs: SlotPacks;
  private readonly slots: ObjectSegmentStore;

  private constructor(
    private readonly kernels: Kernels,
    folders: SlotFolders,
    /** The next slot number to take. */
    private next: number,
    private readonly needsMet: SlotNeedsMet,
  ) {
    this.slots = folders.slots;
    this.packs = new SlotPacks(kernels, folders);
  }

  /**
   * Finds the newest slot (a listing, then a probe past it: a listing may lag a put) and takes
   * the one after it. A newest slot written under an epoch above `epochFloor` (every epoch this
   * node ever wrote under) means another writer took the feed over: every write is refused
   * `FENCED`.
   */
  static async open(
    kernels: Kernels,
    folders: SlotFolders,
    epochFloor: number,
    needsMet: SlotNeedsMet,
    /** What the slots found now may hold: history up to the head, and the stream open now. */
    atOpen: { position: number; stream: string | undefined },
  ): Promise<SlotReplication> {
    const names = await folders.slots.list();
    let first = Number.POSITIVE_INFINITY;
    let last = 0;
    for (const name of names) {
      const slot = slotOfObjectName(name);
      if (slot === undefined) continue;
      first = Math.min(first, slot);
      last = Math.max(last, slot);
    }
    const replication = new SlotReplication(kernels, folders, last + 1, needsMet);
    replication.requests += 1;
    if (Number.isFinite(first)) replication.oldestSlot = first;
    // Packs hold only slots below the newest, which always stay slots: they are listed after
    // the slots (a pack made in between deleted its slots only once it was stored).
    const [packed, probed] = await Promise.all([replication.packs.found(), replication.probe(last)]);
    last = probed;
    replication.next = last + 1;
    if (last > 0) {
      const newest = await replication.read(last);
      replication.newestEpoch = newest.epoch;
      if (newest.epoch > epochFloor) replication.fenced = fencedBy(last, newest.epoch, epochFloor);
      replication.held.push({ first: Math.min(first, packed ?? last, last), last, ...atOpen });
    }
    return replication;
  }

  /** True once a newer writer's slot or fence was found: this writer stores nothing more. */
  get fencedOff(): boolean {
    return this.fenced !== undefined;
  }

  /** The oldest slot (not in a pack) the listing at open found, or undefined for none. */
  oldestSlot: number | undefined;
  /** The newest slot this writer stored or fenced itself (0: none yet). */
  private ownNewest = 0;

  /** The newest slot at or past `known`, found by asking for each next one. */
  private async probe(known: number): Promise<number> {
    let last = known;
    for (let probed = 0; probed < slotsProbedMax; probed++) {
      this.requests++;
      if ((await this.slots.size(slotObjectName(last + 1))) === undefined) return last;
      last++;
    }
    throw new StreamStackError(
      'UNAVAILABLE',
      `more than ${slotsProbedMax} slots past the listing's newest: another writer is writing fast, or the listing is stale`,
    );
  }

  private async read(slot: number): Promise<SlotObject> {
    this.requests++;
    const name = slotObjectName(slot);
    const { bytes } = await this.slots.readStart(name, Number.POSITIVE_INFINITY);
    return decodeSlot(this.kernels, bytes, this.slots.prefix + name);
  }

  /** Slot `slot` as object storage holds it, or undefined when it holds none (retired, or never stored). */
  async readIfPresent(slot: number): Promise<SlotObject | undefined> {
    try {
      return await this.read(slot);
    } catch (error) {
      if (isMissingFile(error)) return undefined;
      throw error;
    }
  }

  /** Refuses with `FENCED` once a slot showed that another writer took the feed. */
  assertNotFenced(): void {
    if (this.fenced) throw this.fenced;
  }

  /** Takes the next slot number, for a group about to be written: called in group order. */
  reserve(): number {
    this.assertNotFenced();
    return this.next++;
  }

  /**
   * Stores the group `bytes` (lane `lane`, written at `segment`/`offset`, in a segment whose
   * header has `baseCommit` and `capacity`) at slot `slot`, under
   * `epoch`; resolves once object storage holds it. `FENCED` if the slot is another writer's.
   */
  storeGroup(
    slot: number,
    epoch: number,
    lane: SlotLane,
    location: { segment: number; offset: number; baseCommit: number; capacity: number },
    bytes: Uint8Array,
    needs: { position: number; stream: string | undefined },
  ): Promise<void> {
    this.hold(slot, needs);
    return this.store({ kind: 'group', epoch, slot, lane, ...location, bytes });
  }

  /** Notes what slot `slot` waits for, in slot order (a slot is reserved before the one after it is). */
  private hold(slot: number, needs: { position: number; stream: string | undefined }): void {
    const newest = this.held.at(-1);
    if (newest && newest.last === slot - 1 && newest.position === needs.position && newest.stream === needs.stream)
      newest.last = slot;
    else this.held.push({ first: slot, last: slot, ...needs });
  }

  /**
   * Fences the slots under `epoch`, so that no writer of an older epoch can store one from now
   * on; returns the number of the last fence. When the newest slot is this writer's own, one
   * fence after it does. Otherwise another writer may have slots reserved and not stored yet, up
   * to its groups in flight on either side of the newest slot stored (`slotsFencedAroundNewest`):
   * a fence goes at every free number among them, and this writer's slots start after them. A
   * group that writer stored past one of these fences was never acknowledged (its groups are
   * acknowledged in order, and the one fenced out before it failed), and a restore leaves it out.
   */
  async fence(epoch: number): Promise<number> {
    this.assertNotFenced();
    const newest = await this.probe(this.next - 1);
    const own = newest === this.ownNewest && newest > 0;
    if (!own && newest > 0) {
      // A writer of a newer epoch stored slots since: this grant came too late to write at all.
      const found = await this.readIfPresent(newest);
      if (found && found.epoch > epoch) {
        this.fenced ??= fencedBy(newest, found.epoch, epoch);
        throw this.fenced;
      }
    }
    const from = own ? newest + 1 : Math.max(1, newest - slotsFencedAroundNewest / 2 + 1);
    const through = own ? newest + 1 : newest + slotsFencedAroundNewest / 2;
    this.next = through + 1;
    const numbers: number[] = [];
    for (let slot = from; slot <= through; slot++) numbers.push(slot);
    const present = await Promise.all(
      numbers.map((slot) => (slot <= newest ? this.slotExists(slot) : Promise.resolve(false))),
    );
    const free = numbers.filter((_, index) => !present[index]);
    for (const slot of free) this.hold(slot, { position: 0, stream: undefined });
    // A fence that finds its number taken now read back a group of an older epoch: stored
    // after the probe, by the writer fenced here, and never acknowledged (`fencedBy` only
    // refuses an epoch above this one, see `store`).
    await Promise.all(free.map((slot) => this.store({ kind: 'fence', epoch, slot })));
    this.ownNewest = through;
    return through;
  }

  private async slotExists(slot: number): Promise<boolean> {
    this.requests++;
    return (await this.slots.size(slotObjectName(slot))) !== undefined;
  }

  private async store(object: SlotObject): Promise<void> {
    const name = slotObjectName(object.slot);
    const encoded = encodeSlot(this.kernels, object);
    for (let attempt = 0; ; attempt++) {
      try {
        this.requests++;
        if (await this.slots.putIfAbsent(name, encoded)) break;
        // Taken: by our own earlier try whose answer was lost, or by another writer.
        this.requests++;
        const { bytes } = await this.slots.readStart(name, Number.POSITIVE_INFINITY);
        if (sameBytes(bytes, encoded)) break;
        const other = decodeSlot(this.kernels, bytes, this.slots.prefix + name);
        // A fence that lost its number to a fenced writer's last group still fences: that
        // group is after a fence of this epoch, and a restore leaves it out.
        if (object.kind === 'fence' && other.epoch < object.epoch) break;
        this.fenced ??= fencedBy(object.slot, other.epoch, object.epoch);
        throw this.fenced;
      } catch (error) {
        if (!(error instanceof StreamStackError && error.code === 'UNAVAILABLE') || this.closing.signal.aborted)
          throw error;
        this.stalledBy = `slot ${object.slot} waits for object storage: ${error.message}`;
        const backoff = Math.min(slotPutRetryMsMax, slotPutRetryMsMin * 2 ** Math.min(attempt, 16));
        await sleep(backoff, undefined, { signal: this.closing.signal }).catch(() => undefined);
      }
    }
    this.stalledBy = undefined;
    this.written++;
    this.ownNewest = Math.max(this.ownNewest, object.slot);
    this.packs.stored(object.slot, encoded, this.next - 1 - slotsFencedAroundNewest);
    if (++this.sinceRetire >= slotsRetireEvery) {
      this.sinceRetire = 0;
      void this.retire().catch(() => undefined);
    }
  }

  /**
   * Deletes the oldest slots whose content is elsewhere, up to the first that is still needed
   * (never the newest). A failure leaves them for the next try. Resolves once done.
   */
  retire(): Promise<void> {
    this.retiring ??= this.retireNow().finally(() => {
      this.retiring = undefined;
    });
    return this.retiring;
  }

  private async retireNow(): Promise<void> {
    // A fenced writer deletes nothing: the slots are the new writer's to retire.
    if (this.fenced) return;
    const newest = this.next - 1;
    const names: string[] = [];
    let through = 0;
    let count = 0;
    for (const entry of this.held) {
      if (!this.needsMet(entry.position, entry.stream)) break;
      // The newest numbers stay: a new writer tells the ones never stored among them by their absence.
      const last = Math.min(entry.last, newest - slotsFencedAroundNewest);
      if (last < entry.first) break;
      for (let slot = Math.max(entry.first, through + 1); slot <= last; slot++) {
        count++;
        // A packed slot goes with its pack.
        if (!this.packs.holds(slot)) names.push(slotObjectName(slot));
      }
      through = last;
      if (last < entry.last) break;
    }
    if (count === 0) return;
    this.requests += Math.ceil(names.length / objectDeleteBatchKeys);
    await this.slots.deleteAll(names);
    await this.packs.retireThrough(through);
    this.retired += count;
    while (this.held.length > 0 && (this.held[0] as HeldSlots).last <= through) this.held.shift();
    const oldest = this.held[0];
    if (oldest && oldest.first <= through) this.held[0] = { ...oldest, first: through + 1 };
  }

  get info(): ReplicationInfo {
    return {
      lastSlot: this.next - 1,
      slotsWritten: this.written,
      requests: this.requests + this.packs.requests,
      stalled: this.stalledBy ?? null,
      slotsRetired: this.retired,
      slotsPacked: this.packs.packed,
    };
  }

  /** Stops retrying: a slot still waiting fails (its group is not acknowledged). */
  close(): void {
    this.closing.abort();
  }
}

/**
 * The slots of replicated feed `options.feed` (whose directory is `directory`), opened: in its
 * folder of the object store, after the newest slot there. `INVALID_ARGUMENT` without an object
 * store: a replicated feed's writer cannot acknowledge anything without one.
 */
export async function openReplication(
  kernels: Kernels,
  options: { readonly feed: string; readonly objectStore?: ObjectSegmentStore },
  directory: string,
  at: { epochFloor: number; needsMet: SlotNeedsMet; position: number; stream: string | undefined },
): Promise<SlotReplication> {
  if (!options.objectStore)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `feed ${options.feed} is replicated: its writer needs the object store its slots are kept in (objectStore, --object-store)`,
    );
  // The feed's `feed.json` goes up before its first slot: a node taking the feed over finds the
  // slots through it, so an acknowledged write never sits where no one would look for it.
  const config = new Uint8Array(await fsp.readFile(new FeedLayout(directory).config));
  await publishFeedConfig(feedNameFolder(options.objectStore, options.feed), config);
  const folders = slotFoldersOf(options.objectStore, options.feed, feedTagOf(directory));
  return SlotReplication.open(kernels, folders, at.epochFloor, at.needsMet, {
    position: at.position,
    stream: at.stream,
  });
}

/** Where the slots and slot packs of feed `feed` (tag `tag`) are in object storage. */
export function slotFoldersOf(objectStore: ObjectSegmentStore, feed: string, tag: number): SlotFolders {
  const folder = feedObjectPrefix(feed, tag);
  return {
    slots: objectStore.within(`${folder}${slotsObjectFolder}`),
    packs: objectStore.within(`${folder}${slotPacksObjectFolder}`),
  };
}
