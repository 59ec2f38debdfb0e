/**
 * A replicated feed's slot packs: runs of consecutive slots moved into one object each, so that
 * the slots a takeover reads stay a few objects, not one per group since the last uploaded
 * segment (a segment of small groups has hundreds of thousands). The writer keeps the encoded
 * slots it stored until `slotsPerPackMin` of them lie below the newest ones it leaves alone
 * (`slotsFencedAroundNewest`: a new writer tells a number never stored there by its absence),
 * stores the oldest run as a pack, then deletes those slots. A pack holds the slots' objects as
 * they were, fences included: reading a pack is reading its slots. Packs are retired with the
 * slots they hold, once all of those may be.
 *
 * @example
 * const packs = new SlotPacks(kernels, folders);
 * packs.stored(slot, encoded, newestLeftAlone); // after each slot is stored
 */
import type { Kernels } from '../../kernels/kernels.js';
import {
  objectDeleteBatchKeys,
  slotPackBytesMax,
  slotsPerPackMax,
  slotsPerPackMin,
  slotsReadConcurrently,
} from '../../limits.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import {
  decodeSlotPack,
  encodeSlotPack,
  type SlotObject,
  slotObjectName,
  slotPackName,
  slotPackRange,
} from '../../storage/slot-object.js';

/** Where a feed's slots and its slot packs are. */
export interface SlotFolders {
  readonly slots: ObjectSegmentStore;
  readonly packs: ObjectSegmentStore;
}

interface HeldPack {
  readonly first: number;
  readonly last: number;
  readonly name: string;
}

/** The packs in object storage now, oldest first. */
export async function listPacks(packs: ObjectSegmentStore): Promise<HeldPack[]> {
  const found: HeldPack[] = [];
  for (const name of await packs.list()) {
    const range = slotPackRange(name);
    if (range) found.push({ ...range, name });
  }
  return found.sort((a, b) => a.first - b.first);
}

/** Every slot the packs in object storage hold now, by slot number, and the packs read. */
export async function readPacks(
  kernels: Kernels,
  packs: ObjectSegmentStore,
): Promise<{ slots: Map<number, SlotObject>; packs: number }> {
  const slots = new Map<number, SlotObject>();
  const found = await listPacks(packs);
  // Read a few at a time: a takeover waits for them.
  for (let at = 0; at < found.length; at += slotsReadConcurrently) {
    const batch = found.slice(at, at + slotsReadConcurrently);
    const read = await Promise.all(batch.map((pack) => packs.readStart(pack.name, Number.POSITIVE_INFINITY)));
    batch.forEach((pack, index) => {
      const { bytes } = read[index] as { bytes: Uint8Array };
      for (const slot of decodeSlotPack(kernels, bytes, packs.prefix + pack.name)) slots.set(slot.slot, slot);
    });
  }
  return { slots, packs: found.length };
}

export class SlotPacks {
  /** Slots this writer stored and has not packed or retired yet: their objects' bytes. */
  private readonly unpacked = new Map<number, Uint8Array>();
  private readonly held: HeldPack[] = [];
  private packing: Promise<void> | undefined;
  /** Slots moved into packs since the feed opened. */
  packed = 0;
  requests = 0;

  constructor(
    private readonly kernels: Kernels,
    private readonly folders: SlotFolders,
  ) {}

  /** Lists the packs there are (at open): they are retired with the slots found then. Returns the oldest slot they hold. */
  async found(): Promise<number | undefined> {
    this.requests++;
    this.held.push(...(await listPacks(this.folders.packs)));
    return this.held[0]?.first;
  }

  /**
   * Notes slot `slot`, stored by this writer as `encoded`; packs the oldest run of them once
   * enough lie at or below `top` (the newest slot that may be packed).
   */
  stored(slot: number, encoded: Uint8Array, top: number): void {
    this.unpacked.set(slot, encoded);
    if (this.packing || this.unpacked.size < slotsPerPackMin) return;
    this.packing = this.packOldest(top)
      // A pack that failed leaves its slots where they are: the next try packs them.
      .catch(() => undefined)
      .finally(() => {
        this.packing = undefined;
      });
  }

  private async packOldest(top: number): Promise<void> {
    const numbers = [...this.unpacked.keys()].sort((a, b) => a - b);
    const run: number[] = [];
    let bytes = 0;
    let full = false;
    for (const slot of numbers) {
      const encoded = this.unpacked.get(slot) as Uint8Array;
      if (slot > top || (run.length > 0 && slot !== (run.at(-1) as number) + 1)) break;
      // A pack is full by its count or its bytes (a slot larger than the bound goes alone).
      full = run.length >= slotsPerPackMax || (run.length > 0 && bytes + encoded.length > slotPackBytesMax);
      if (full) break;
      run.push(slot);
      bytes += encoded.length;
    }
    if (run.length < slotsPerPackMin && !full) return;
    await this.write(
      run.map((slot) => this.unpacked.get(slot) as Uint8Array),
      run[0] as number,
    );
    for (const slot of run) this.unpacked.delete(slot);
  }

  /**
   * Stores the slots `encoded` (consecutive from `first`) as one pack, then deletes them as
   * slots. A pack's name says which slots it holds, and slots never change: a pack found already
   * there holds the same bytes, and is put again harmlessly.
   */
  async write(encoded: readonly Uint8Array[], first: number): Promise<void> {
    const last = first + encoded.length - 1;
    const name = slotPackName(first, last);
    this.requests++;
    await this.folders.packs.put(name, encodeSlotPack(this.kernels, encoded));
    this.held.push({ first, last, name });
    this.held.sort((a, b) => a.first - b.first);
    const names: string[] = [];
    for (let slot = first; slot <= last; slot++) names.push(slotObjectName(slot));
    this.requests += Math.ceil(names.length / objectDeleteBatchKeys);
    await this.folders.slots.deleteAll(names);
    this.packed += encoded.length;
  }

  /** Whether slot `slot` is in a pack (it is no longer a slot of its own). */
  holds(slot: number): boolean {
    let low = 0;
    let high = this.held.length - 1;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const pack = this.held[middle] as HeldPack;
      if (slot < pack.first) high = middle - 1;
      else if (slot > pack.last) low = middle + 1;
      else return true;
    }
    return false;
  }

  /**
   * Deletes the packs whose slots are all at or below `through` (retired), and forgets those
   * slots. The packs are listed anew first: a writer fenced off by this one, still running
   * (paused, then resumed), may have stored a pack after this writer's listing at open, and
   * that pack must go with the slots it holds rather than stay behind forever.
   */
  async retireThrough(through: number): Promise<void> {
    for (const slot of this.unpacked.keys()) if (slot <= through) this.unpacked.delete(slot);
    this.requests++;
    for (const pack of await listPacks(this.folders.packs))
      if (!this.held.some((known) => known.name === pack.name)) this.held.push(pack);
    this.held.sort((a, b) => a.first - b.first);
    const gone = this.held.filter((pack) => pack.last <= through);
    if (gone.length === 0) return;
    this.requests += Math.ceil(gone.length / objectDeleteBatchKeys);
    await this.folders.packs.deleteAll(gone.map((pack) => pack.name));
    for (const pack of gone) this.held.splice(this.held.indexOf(pack), 1);
  }

  /** Resolves once a pack being written is done. */
  settled(): Promise<void> {
    return this.packing ?? Promise.resolve();
  }
}
