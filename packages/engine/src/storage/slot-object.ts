/**
 * Slot objects: a feed with `durability: 'replicated'` stores each group commit, as well as on
 * its local disk, as one immutable object in object storage, created with put-if-absent at the
 * next slot number (`slots/<slot>` in the feed's folder). A new writer's first act is a fence
 * slot: a writer that lost its lease without noticing then finds its next slot taken and stops.
 * The format is in docs/formats.md (Slot objects):
 *
 *   magic "SSLT" · version u8 · kind u8 (0 group, 1 fence) · lane u8 (0 WAL, 1 history) · 0 u8
 *   epoch u64 · slot u64 · segment base u64 · offset u64 · base commit u64 · capacity u64
 *   length u32 · CRC-32 u32
 *   the group's bytes, exactly as written to the segment (`length` of them)
 *
 * The segment's base commit and capacity are its header's: with them, a new writer rebuilds a
 * history segment that was never uploaded byte for byte from its slots (`slot-restore.ts`).
 *
 * The CRC-32 covers every byte before it and the group's bytes after it: a slot is whole or
 * `CORRUPT`, never half believed.
 */
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { ByteReader, ByteWriter } from './codec.js';

/** The folder, in a feed's object folder, of its slots. */
export const slotsObjectFolder = 'slots/';

/** Digits of a slot number in its object name: names sort as numbers do, so a listing's last is the newest. */
const slotDigits = 16;

const magic = [0x53, 0x53, 0x4c, 0x54]; // "SSLT"
const version = 2;
/** Bytes before a slot's group bytes. */
export const slotHeaderBytes = 4 + 4 + 8 * 6 + 4 + 4;

export type SlotLane = 'wal' | 'history';

/** A slot as read back. */
export type SlotObject =
  | {
      readonly kind: 'group';
      readonly epoch: number;
      readonly slot: number;
      readonly lane: SlotLane;
      /** Where the group lies locally: the base of its segment, and its offset there. */
      readonly segment: number;
      readonly offset: number;
      /** The header of that segment: its first commit (0 for the WAL's) and its capacity in bytes. */
      readonly baseCommit: number;
      readonly capacity: number;
      readonly bytes: Uint8Array;
    }
  | { readonly kind: 'fence'; readonly epoch: number; readonly slot: number };

/** The object name of slot `slot`. */
export function slotObjectName(slot: number): string {
  assert(Number.isSafeInteger(slot) && slot >= 1, 'slots count from 1');
  return String(slot).padStart(slotDigits, '0');
}

/** The slot an object name spells, or undefined for any other name. */
export function slotOfObjectName(name: string): number | undefined {
  if (name.length !== slotDigits || !/^\d+$/.test(name)) return undefined;
  const slot = Number(name);
  return Number.isSafeInteger(slot) && slot >= 1 ? slot : undefined;
}

export function encodeSlot(kernels: Pick<Kernels, 'crc32'>, slot: SlotObject): Uint8Array {
  const bytes = slot.kind === 'group' ? slot.bytes : new Uint8Array(0);
  const writer = new ByteWriter(slotHeaderBytes + bytes.length);
  for (const byte of magic) writer.u8(byte);
  writer
    .u8(version)
    .u8(slot.kind === 'group' ? 0 : 1)
    .u8(slot.kind === 'group' && slot.lane === 'history' ? 1 : 0)
    .u8(0)
    .u64(slot.epoch)
    .u64(slot.slot)
    .u64(slot.kind === 'group' ? slot.segment : 0)
    .u64(slot.kind === 'group' ? slot.offset : 0)
    .u64(slot.kind === 'group' ? slot.baseCommit : 0)
    .u64(slot.kind === 'group' ? slot.capacity : 0)
    .u32(bytes.length);
  const header = writer.peek();
  writer.u32(kernels.crc32(bytes, kernels.crc32(header))).raw(bytes);
  const encoded = writer.finish().slice();
  assert(encoded.length === slotHeaderBytes + bytes.length, 'a slot is its header and its group');
  return encoded;
}

/** Decodes slot object `name` (its bytes `encoded`); `CORRUPT` naming it when it does not check. */
export function decodeSlot(kernels: Pick<Kernels, 'crc32'>, encoded: Uint8Array, name: string): SlotObject {
  const corrupt = (reason: string) =>
    new StreamStackError('CORRUPT', `slot object ${name} ${reason}`, { details: { object: name } });
  if (encoded.length < slotHeaderBytes || magic.some((byte, index) => encoded[index] !== byte))
    throw corrupt('is not a slot');
  const reader = new ByteReader(encoded, 4, encoded.length, `slot object ${name}`);
  if (reader.u8() !== version) throw corrupt('has a version this release does not read');
  const kind = reader.u8();
  const lane = reader.u8();
  reader.u8();
  const epoch = reader.u64();
  const slot = reader.u64();
  const segment = reader.u64();
  const offset = reader.u64();
  const baseCommit = reader.u64();
  const capacity = reader.u64();
  const length = reader.u32();
  const crc = reader.u32();
  if (encoded.length !== slotHeaderBytes + length)
    throw corrupt(`holds ${encoded.length} bytes, not ${slotHeaderBytes + length}`);
  const bytes = encoded.subarray(slotHeaderBytes);
  if (kernels.crc32(bytes, kernels.crc32(encoded.subarray(0, slotHeaderBytes - 4))) !== crc)
    throw corrupt('fails its CRC');
  if (kind > 1 || lane > 1 || slotObjectName(slot) !== name.slice(-slotDigits))
    throw corrupt('does not describe itself');
  return kind === 1
    ? { kind: 'fence', epoch, slot }
    : {
        kind: 'group',
        epoch,
        slot,
        lane: lane === 1 ? 'history' : 'wal',
        segment,
        offset,
        baseCommit,
        capacity,
        bytes,
      };
}

/**
 * Slot packs: a run of consecutive slots moved into one object (`slot-packs/<first>-<last>` in
 * the feed's folder), so that a takeover reads a few large objects rather than every group's
 * slot. A pack holds the slots' objects exactly as stored, fences included, so reading it is
 * reading them:
 *
 *   magic "SSPK" · version u8 · 0 u8 · 0 u16 · count u32
 *   count × (length u32 · the slot object's bytes)
 *   CRC-32 u32 of every byte before it
 */
export const slotPacksObjectFolder = 'slot-packs/';

const packMagic = [0x53, 0x53, 0x50, 0x4b]; // "SSPK"
const packVersion = 1;

/** The object name of the pack of slots `first` to `last`. */
export function slotPackName(first: number, last: number): string {
  assert(last >= first, 'a pack holds a run of slots');
  return `${slotObjectName(first)}-${slotObjectName(last)}`;
}

/** The slots a pack's object name spells, or undefined for any other name. */
export function slotPackRange(name: string): { first: number; last: number } | undefined {
  const dash = name.indexOf('-');
  if (dash !== slotDigits || name.length !== 2 * slotDigits + 1) return undefined;
  const first = slotOfObjectName(name.slice(0, dash));
  const last = slotOfObjectName(name.slice(dash + 1));
  return first !== undefined && last !== undefined && last >= first ? { first, last } : undefined;
}

/** A pack of the encoded slots `encoded`, consecutive from the first. */
export function encodeSlotPack(kernels: Pick<Kernels, 'crc32'>, encoded: readonly Uint8Array[]): Uint8Array {
  const size = 12 + encoded.reduce((sum, slot) => sum + 4 + slot.length, 0) + 4;
  const writer = new ByteWriter(size);
  for (const byte of packMagic) writer.u8(byte);
  writer.u8(packVersion).u8(0).u8(0).u8(0).u32(encoded.length);
  for (const slot of encoded) writer.u32(slot.length).raw(slot);
  writer.u32(kernels.crc32(writer.peek()));
  const bytes = writer.finish().slice();
  assert(bytes.length === size, 'a pack is its header, its slots and its CRC');
  return bytes;
}

/**
 * The slots of pack `name` (its bytes `encoded`), in order; `CORRUPT` naming it when it does not
 * check, or when its slots are not exactly the run its name says.
 */
export function decodeSlotPack(kernels: Pick<Kernels, 'crc32'>, encoded: Uint8Array, name: string): SlotObject[] {
  const corrupt = (reason: string) =>
    new StreamStackError('CORRUPT', `slot pack ${name} ${reason}`, { details: { object: name } });
  const range = slotPackRange(name.slice(name.lastIndexOf('/') + 1));
  if (!range) throw corrupt('has no pack name');
  if (encoded.length < 16 || packMagic.some((byte, index) => encoded[index] !== byte)) throw corrupt('is not a pack');
  const view = new DataView(encoded.buffer, encoded.byteOffset, encoded.byteLength);
  if (kernels.crc32(encoded.subarray(0, encoded.length - 4)) !== view.getUint32(encoded.length - 4, true))
    throw corrupt('fails its CRC');
  const reader = new ByteReader(encoded, 4, encoded.length - 4, `slot pack ${name}`);
  if (reader.u8() !== packVersion) throw corrupt('has a version this release does not read');
  reader.u8();
  reader.u8();
  reader.u8();
  const count = reader.u32();
  if (count !== range.last - range.first + 1)
    throw corrupt(`holds ${count} slots, not ${range.last - range.first + 1}`);
  const slots: SlotObject[] = [];
  for (let index = 0; index < count; index++) {
    const length = reader.u32();
    const slot = decodeSlot(kernels, reader.raw(length), `${name}/${slotObjectName(range.first + index)}`);
    slots.push(slot);
  }
  reader.expectEnd();
  return slots;
}
