/**
 * A hash table from keys given as byte ranges to dense slots (0, 1, 2, …), for reads that meet
 * millions of keys: no string is made per record and no entry is an object. Keys are copied once,
 * into one growing arena, so the batches they came from need not be kept. Open addressing with
 * linear probing over typed arrays, at most half full.
 */
import { keyTableSlotsInitial } from '../limits.js';

export class ByteKeyTable {
  private arena = new Uint8Array(keyTableSlotsInitial * 16);
  private arenaUsed = 0;
  /** Per slot: where its key lies in the arena, and its hash. */
  private starts = new Uint32Array(keyTableSlotsInitial);
  private lengths = new Uint32Array(keyTableSlotsInitial);
  private hashes = new Uint32Array(keyTableSlotsInitial);
  /** The probe table: slot + 1, or 0 for empty. Twice the slots, a power of two. */
  private table = new Int32Array(keyTableSlotsInitial * 2);
  size = 0;

  /** FNV-1a over the bytes. */
  static hash(bytes: Uint8Array, start: number, end: number): number {
    let hash = 0x811c9dc5;
    for (let at = start; at < end; at++) hash = Math.imul(hash ^ bytes[at], 0x01000193);
    return hash >>> 0;
  }

  /**
   * The slot of the key `bytes[start, end)`; a new key gets the next slot (`size` before the
   * call), which tells the caller it was not there.
   */
  slotOf(bytes: Uint8Array, start: number, end: number): number {
    const hash = ByteKeyTable.hash(bytes, start, end);
    const length = end - start;
    const mask = this.table.length - 1;
    for (let probe = hash & mask; ; probe = (probe + 1) & mask) {
      const held = this.table[probe];
      if (held === 0) return this.insert(bytes, start, length, hash, probe);
      const slot = held - 1;
      if (this.hashes[slot] === hash && this.lengths[slot] === length && this.equals(slot, bytes, start, length)) return slot;
    }
  }

  private equals(slot: number, bytes: Uint8Array, start: number, length: number): boolean {
    const arena = this.arena;
    const from = this.starts[slot];
    for (let index = 0; index < length; index++) if (arena[from + index] !== bytes[start + index]) return false;
    return true;
  }

  private insert(bytes: Uint8Array, start: number, length: number, hash: number, probe: number): number {
    const slot = this.size++;
    if (slot === this.starts.length) this.growSlots();
    if (this.arenaUsed + length > this.arena.length) {
      const arena = new Uint8Array(Math.max(this.arena.length * 2, this.arenaUsed + length));
      arena.set(this.arena.subarray(0, this.arenaUsed));
      this.arena = arena;
    }
    this.arena.set(bytes.subarray(start, start + length), this.arenaUsed);
    this.starts[slot] = this.arenaUsed;
    this.lengths[slot] = length;
    this.hashes[slot] = hash;
    this.arenaUsed += length;
    this.table[probe] = slot + 1;
    // At most half full: probes stay short.
    if (this.size * 2 > this.table.length) this.rehash();
    return slot;
  }

  private growSlots(): void {
    const grow = (column: Uint32Array) => {
      const out = new Uint32Array(column.length * 2);
      out.set(column);
      return out;
    };
    this.starts = grow(this.starts);
    this.lengths = grow(this.lengths);
    this.hashes = grow(this.hashes);
  }

  private rehash(): void {
    const table = new Int32Array(this.table.length * 2);
    const mask = table.length - 1;
    for (let slot = 0; slot < this.size; slot++) {
      let probe = this.hashes[slot] & mask;
      while (table[probe] !== 0) probe = (probe + 1) & mask;
      table[probe] = slot + 1;
    }
    this.table = table;
  }
}
