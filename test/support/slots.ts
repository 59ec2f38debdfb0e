/**
 * Every slot of a replicated feed, as object storage holds it now: those that are objects of
 * their own and those in packs, decoded, in slot order. The slots are read before the packs: a
 * writer packing meanwhile deletes slots only once their pack is stored, so a slot gone between
 * the listing and its read is in a pack read after it.
 */
import { readPacks } from '../../packages/engine/src/coordinator/writing/slot-packs.js';
import { slotFoldersOf } from '../../packages/engine/src/coordinator/writing/slot-replication.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import type { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import { decodeSlot, type SlotObject, slotOfObjectName } from '../../packages/engine/src/storage/slot-object.js';

export async function allSlots(store: ObjectSegmentStore, feed: string, tag: number): Promise<SlotObject[]> {
  const folders = slotFoldersOf(store, feed, tag);
  const found = new Map<number, SlotObject>();
  for (const name of (await folders.slots.list()).filter((entry) => slotOfObjectName(entry) !== undefined)) {
    const read = await folders.slots.readStart(name, Number.POSITIVE_INFINITY).catch(() => undefined);
    if (!read) continue;
    const slot = decodeSlot(tsKernels, read.bytes, name);
    found.set(slot.slot, slot);
  }
  for (const [number, slot] of (await readPacks(tsKernels, folders.packs)).slots) found.set(number, slot);
  return [...found.values()].sort((a, b) => a.slot - b.slot);
}
