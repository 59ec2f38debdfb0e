/**
 * Hash tables from keys to dense slots (0, 1, 2, …) for structures that meet millions of keys:
 * no entry is an object, and keys are copied once into one growing arena, so what they came
 * from need not be kept. Open addressing with linear probing over typed arrays, at most half
 * full. `ByteKeyTable` takes keys as byte ranges (what a latest-mode read finds in run bytes);
 * `StringKeyTable` takes strings (what a segment's key occurrences are kept by). Both keep
 * their keys off the collector's heap: a Map of a few hundred thousand strings held the event
 * loop's thread for tens of milliseconds at every full collection, to mark and move them.
 */
import { keyTableDecodeChunkUnits, keyTableSlotsInitial } from '../../limits.js';
import type { ByteReader, ByteWriter } from '../../storage/codec.js';
import type { PackedTermsWriter } from '../../storage/packed-terms.js';
import { columnBytes, columnOf, grown } from '../../typed-arrays.js';

/**
 * The columns both tables keep per slot (where its key lies in the arena, its length, its
 * hash) and the probe table over them.
 */
class KeySlots {
  starts: Uint32Array;
  lengths: Uint32Array;
  hashes: Uint32Array;
  /** The probe table: slot + 1, or 0 for empty. Twice the slots, a power of two. */
  table: Int32Array;
  size = 0;

  constructor(slotsInitial: number) {
    this.starts = new Uint32Array(slotsInitial);
    this.lengths = new Uint32Array(slotsInitial);
    this.hashes = new Uint32Array(slotsInitial);
    this.table = new Int32Array(slotsInitial * 2);
  }

  /** Gives the key at `start` of the arena the next slot, at the empty `probe`; returns it. */
  add(start: number, length: number, hash: number, probe: number): number {
    const slot = this.size++;
    if (slot === this.starts.length) {
      this.starts = grown(this.starts, slot * 2);
      this.lengths = grown(this.lengths, slot * 2);
      this.hashes = grown(this.hashes, slot * 2);
    }
    this.starts[slot] = start;
    this.lengths[slot] = length;
    this.hashes[slot] = hash;
    this.table[probe] = slot + 1;
    // At most half full: probes stay short.
    if (this.size * 2 > this.table.length) this.rehash();
    return slot;
  }

  private rehash(): void {
    this.table = probeTableOf(this.hashes, this.size, this.table.length * 2);
  }
}

/**
 * A probe table of `length` entries (a power of two, more than `count`) over the slots
 * `0 … count - 1` whose hashes are `hashes`: each slot + 1 at the first empty entry from its
 * hash on, 0 where none is. What a table grown past half full is rebuilt as.
 */
export function probeTableOf(hashes: Uint32Array, count: number, length: number): Int32Array<ArrayBuffer> {
  const table = new Int32Array(length);
  const mask = length - 1;
  for (let slot = 0; slot < count; slot++) {
    let probe = hashes[slot] & mask;
    while (table[probe] !== 0) probe = (probe + 1) & mask;
    table[probe] = slot + 1;
  }
  return table;
}

export class ByteKeyTable {
  private arena = new Uint8Array(keyTableSlotsInitial * 16);
  private arenaUsed = 0;
  private readonly slots = new KeySlots(keyTableSlotsInitial);

  /** FNV-1a over the bytes. */
  static hash(bytes: Uint8Array, start: number, end: number): number {
    let hash = 0x811c9dc5;
    for (let at = start; at < end; at++) hash = Math.imul(hash ^ bytes[at], 0x01000193);
    return hash >>> 0;
  }

  get size(): number {
    return this.slots.size;
  }

  /**
   * The slot of the key `bytes[start, end)`; a new key gets the next slot (`size` before the
   * call), which tells the caller it was not there.
   */
  slotOf(bytes: Uint8Array, start: number, end: number): number {
    const hash = ByteKeyTable.hash(bytes, start, end);
    const length = end - start;
    const slots = this.slots;
    const mask = slots.table.length - 1;
    for (let probe = hash & mask; ; probe = (probe + 1) & mask) {
      const held = slots.table[probe];
      if (held === 0) return this.insert(bytes, start, length, hash, probe);
      const slot = held - 1;
      if (
        slots.hashes[slot] === hash &&
        slots.lengths[slot] === length &&
        this.equals(slots.starts[slot], bytes, start, length)
      )
        return slot;
    }
  }

  private equals(from: number, bytes: Uint8Array, start: number, length: number): boolean {
    const arena = this.arena;
    for (let index = 0; index < length; index++) if (arena[from + index] !== bytes[start + index]) return false;
    return true;
  }

  private insert(bytes: Uint8Array, start: number, length: number, hash: number, probe: number): number {
    if (this.arenaUsed + length > this.arena.length)
      this.arena = grown(this.arena, Math.max(this.arena.length * 2, this.arenaUsed + length));
    this.arena.set(bytes.subarray(start, start + length), this.arenaUsed);
    const slot = this.slots.add(this.arenaUsed, length, hash, probe);
    this.arenaUsed += length;
    return slot;
  }
}

/**
 * A table from strings to dense slots that keeps its keys as UTF-16 code units, so any string
 * (a fingerprint's bytes as characters, a key with a lone surrogate) comes back exactly. The
 * units are kept a byte each while every one is below 256 — ASCII keys, fingerprints (whose
 * characters are bytes) — and two from the first key that has a wider one: a segment's keys
 * held twice the bytes they needed.
 *
 * @example
 * const table = new StringKeyTable(16);
 * table.slotOf('account-1'); // 0
 * table.find('account-1'); // 0
 * table.keyAt(0); // 'account-1'
 */
export class StringKeyTable {
  /** The keys' code units: a byte each until one is 256 or more, then two (see `slotOf`). */
  private arena: Uint8Array | Uint16Array;
  private arenaUsed = 0;
  private readonly slots: KeySlots;

  constructor(slotsInitial = keyTableSlotsInitial) {
    this.arena = new Uint8Array(slotsInitial * 16);
    this.slots = new KeySlots(slotsInitial);
  }

  /** True once a key with a code unit of 256 or more made the arena two bytes a unit. */
  get wide(): boolean {
    return this.arena instanceof Uint16Array;
  }

  /** FNV-1a over the code units. */
  static hash(key: string): number {
    let hash = 0x811c9dc5;
    for (let at = 0; at < key.length; at++) hash = Math.imul(hash ^ key.charCodeAt(at), 0x01000193);
    return hash >>> 0;
  }

  get size(): number {
    return this.slots.size;
  }

  /** The slot of `key`, or -1 when it is not there. */
  find(key: string): number {
    const probe = this.probeFor(key, StringKeyTable.hash(key));
    return probe < 0 ? -probe - 1 : -1;
  }

  /** The slot of `key`; a new key gets the next slot (`size` before the call). */
  slotOf(key: string): number {
    const hash = StringKeyTable.hash(key);
    const probe = this.probeFor(key, hash);
    if (probe < 0) return -probe - 1;
    const length = key.length;
    if (this.arena instanceof Uint8Array) {
      for (let at = 0; at < length; at++) {
        if (key.charCodeAt(at) <= 0xff) continue;
        // The first unit a byte cannot hold: every key's units move to two bytes each.
        const wide = new Uint16Array(this.arena.length);
        wide.set(this.arena);
        this.arena = wide;
        break;
      }
    }
    if (this.arenaUsed + length > this.arena.length)
      this.arena = grown(this.arena, Math.max(this.arena.length * 2, this.arenaUsed + length));
    const arena = this.arena;
    const start = this.arenaUsed;
    for (let at = 0; at < length; at++) arena[start + at] = key.charCodeAt(at);
    this.arenaUsed += length;
    return this.slots.add(start, length, hash, probe);
  }

  /** Appends the key of `slot` to `writer` as UTF-8, with no string made of it. */
  packInto(slot: number, writer: PackedTermsWriter): void {
    const start = this.slots.starts[slot];
    writer.add(this.arena, start, start + this.slots.lengths[slot]);
  }

  /** Code units all the keys take together. */
  get units(): number {
    return this.arenaUsed;
  }

  /** The key of `slot`. */
  keyAt(slot: number): string {
    const start = this.slots.starts[slot];
    const end = start + this.slots.lengths[slot];
    let key = '';
    for (let at = start; at < end; at += keyTableDecodeChunkUnits) {
      key += String.fromCharCode.apply(
        null,
        this.arena.subarray(at, Math.min(end, at + keyTableDecodeChunkUnits)) as unknown as number[],
      );
    }
    return key;
  }

  /** Writes the table as a tail checkpoint holds it (`tail-checkpoint.ts`): its keys and slots. */
  writeTo(writer: ByteWriter): void {
    const { size, starts, lengths, hashes, table } = this.slots;
    writer
      .u8(this.wide ? 1 : 0)
      .varint(size)
      .varint(this.arenaUsed)
      .varint(table.length);
    writer.bytes(columnBytes(this.arena, this.arenaUsed));
    writer.bytes(columnBytes(starts, size)).bytes(columnBytes(lengths, size)).bytes(columnBytes(hashes, size));
  }

  /**
   * The table `writeTo` wrote, its probe table made again from the hashes; `CORRUPT` (through
   * `reader`) when its parts do not hold together. The checkpoint's CRC vouches for the bytes;
   * this checks what a wrong read would otherwise turn into reads out of range.
   */
  static readFrom(reader: ByteReader): StringKeyTable {
    const wide = reader.u8() === 1;
    const size = reader.varint();
    const units = reader.varint();
    const tableLength = reader.varint();
    const arena = wide
      ? columnOf(Uint16Array, reader.bytes(), units, units * 2)
      : columnOf(Uint8Array, reader.bytes(), units, units * 2);
    const starts = columnOf(Uint32Array, reader.bytes(), size, size * 2);
    const lengths = columnOf(Uint32Array, reader.bytes(), size, size * 2);
    const hashes = columnOf(Uint32Array, reader.bytes(), size, size * 2);
    if (!arena || !starts || !lengths || !hashes) throw reader.corrupt('a key table column does not fit its count');
    if (tableLength < 2 || (tableLength & (tableLength - 1)) !== 0 || size * 2 > tableLength)
      throw reader.corrupt(`a key table of ${size} keys cannot have ${tableLength} probes`);
    for (let slot = 0; slot < size; slot++) {
      if (starts[slot] + lengths[slot] > units) throw reader.corrupt(`key ${slot} lies past the table's keys`);
    }
    const restored = new StringKeyTable(1);
    restored.arena = arena;
    restored.arenaUsed = units;
    Object.assign(restored.slots, { starts, lengths, hashes, size, table: probeTableOf(hashes, size, tableLength) });
    return restored;
  }

  /** `-(slot + 1)` when `key` holds a slot, else the empty probe where it would go. */
  private probeFor(key: string, hash: number): number {
    const slots = this.slots;
    const mask = slots.table.length - 1;
    const length = key.length;
    for (let probe = hash & mask; ; probe = (probe + 1) & mask) {
      const held = slots.table[probe];
      if (held === 0) return probe;
      const slot = held - 1;
      if (slots.hashes[slot] === hash && slots.lengths[slot] === length && this.equals(slots.starts[slot], key))
        return -held;
    }
  }

  private equals(from: number, key: string): boolean {
    const arena = this.arena;
    for (let index = 0; index < key.length; index++) if (arena[from + index] !== key.charCodeAt(index)) return false;
    return true;
  }
}
