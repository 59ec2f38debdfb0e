/**
 * A replicated feed's slots (`durability: 'replicated'`): every group commit is also stored as
 * one object at the next slot number, created with put-if-absent, and acknowledged only once it
 * is both durable on the local disk and stored (the PUT runs while the local write does, once the
 * group's place is known). Slot numbers are taken in group order, so the slots of a writer are
 * contiguous; each carries the epoch it was written under.
 *
 * Fencing needs no cooperation from the writer fenced: a new writer's first slot is a fence, put
 * at the next free number. A writer that lost its lease without noticing (a paused process, a
 * partitioned node) then finds its next slot taken — a 412 — and stops with `FENCED`: nothing it
 * writes after that is acknowledged. A slot found taken is read back first: a put whose answer
 * was lost on the way may have landed, and then the slot holds exactly our bytes.
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
import { setTimeout as sleep } from 'node:timers/promises';
import type { ReplicationInfo } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import {
  objectDeleteBatchKeys,
  slotPutRetryMsMax,
  slotPutRetryMsMin,
  slotsProbedMax,
  slotsRetireEvery,
} from '../../limits.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { feedObjectPrefix } from '../../storage/segment-descriptor.js';
import {
  decodeSlot,
  encodeSlot,
  type SlotLane,
  type SlotObject,
  slotObjectName,
  slotOfObjectName,
  slotsObjectFolder,
} from '../../storage/slot-object.js';
import { feedTagOf } from '../opening/data-directory.js';

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

  private constructor(
    private readonly kernels: Kernels,
    private readonly slots: ObjectSegmentStore,
    /** The next slot number to take. */
    private next: number,
    private readonly needsMet: SlotNeedsMet,
  ) {}

  /**
   * Finds the newest slot (a listing, then a probe past it: a listing may lag a put) and takes
   * the one after it. A newest slot written under an epoch above `epochFloor` (every epoch this
   * node ever wrote under) means another writer took the feed over: every write is refused
   * `FENCED`.
   */
  static async open(
    kernels: Kernels,
    slots: ObjectSegmentStore,
    epochFloor: number,
    needsMet: SlotNeedsMet,
    /** What the slots found now may hold: history up to the head, and the stream open now. */
    atOpen: { position: number; stream: string | undefined },
  ): Promise<SlotReplication> {
    const names = await slots.list();
    let first = Number.POSITIVE_INFINITY;
    let last = 0;
    for (const name of names) {
      const slot = slotOfObjectName(name);
      if (slot === undefined) continue;
      first = Math.min(first, slot);
      last = Math.max(last, slot);
    }
    const replication = new SlotReplication(kernels, slots, last + 1, needsMet);
    replication.requests += 1;
    last = await replication.probe(last);
    replication.next = last + 1;
    if (last > 0) {
      const newest = await replication.read(last);
      replication.newestEpoch = newest.epoch;
      if (newest.epoch > epochFloor) replication.fenced = fencedBy(last, newest.epoch, epochFloor);
      replication.held.push({ first: Math.min(first, last), last, ...atOpen });
    }
    return replication;
  }

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
   * Stores the group `bytes` (lane `lane`, written at `segment`/`offset`) at slot `slot`, under
   * `epoch`; resolves once object storage holds it. `FENCED` if the slot is another writer's.
   */
  storeGroup(
    slot: number,
    epoch: number,
    lane: SlotLane,
    location: { segment: number; offset: number },
    bytes: Uint8Array,
    needs: { position: number; stream: string | undefined },
  ): Promise<void> {
    this.hold(slot, needs);
    return this.store({ kind: 'group', epoch, slot, lane, segment: location.segment, offset: location.offset, bytes });
  }

  /** Notes what slot `slot` waits for, in slot order (a slot is reserved before the one after it is). */
  private hold(slot: number, needs: { position: number; stream: string | undefined }): void {
    const newest = this.held.at(-1);
    if (newest && newest.last === slot - 1 && newest.position === needs.position && newest.stream === needs.stream)
      newest.last = slot;
    else this.held.push({ first: slot, last: slot, ...needs });
  }

  /**
   * Puts a fence under `epoch` at the next free slot (past any another writer took meanwhile):
   * from then on, a writer of an older epoch cannot store a slot. Returns its number.
   */
  async fence(epoch: number): Promise<number> {
    this.assertNotFenced();
    // Slots another writer stored since this one last looked are skipped over, not fenced at.
    this.next = (await this.probe(this.next - 1)) + 1;
    const slot = this.next++;
    this.hold(slot, { position: 0, stream: undefined });
    await this.store({ kind: 'fence', epoch, slot });
    return slot;
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
    const newest = this.next - 1;
    const names: string[] = [];
    let through = 0;
    for (const entry of this.held) {
      if (!this.needsMet(entry.position, entry.stream)) break;
      const last = Math.min(entry.last, newest - 1);
      for (let slot = Math.max(entry.first, through + 1); slot <= last; slot++) names.push(slotObjectName(slot));
      through = last;
      if (last < entry.last) break;
    }
    if (names.length === 0) return;
    this.requests += Math.ceil(names.length / objectDeleteBatchKeys);
    await this.slots.deleteAll(names);
    this.retired += names.length;
    while (this.held.length > 0 && (this.held[0] as HeldSlots).last <= through) this.held.shift();
    const oldest = this.held[0];
    if (oldest && oldest.first <= through) this.held[0] = { ...oldest, first: through + 1 };
  }

  get info(): ReplicationInfo {
    return {
      lastSlot: this.next - 1,
      slotsWritten: this.written,
      requests: this.requests,
      stalled: this.stalledBy ?? null,
      slotsRetired: this.retired,
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
export function openReplication(
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
  const slots = options.objectStore.within(
    `${feedObjectPrefix(options.feed, feedTagOf(directory))}${slotsObjectFolder}`,
  );
  return SlotReplication.open(kernels, slots, at.epochFloor, at.needsMet, { position: at.position, stream: at.stream });
}
