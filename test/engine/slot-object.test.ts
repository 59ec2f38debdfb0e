/**
 * Slot objects (a replicated feed's group commits in object storage) are whole or `CORRUPT`:
 * every byte is under the CRC, a slot names itself, and a fence holds no group.
 */
import { describe, expect, it } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import {
  decodeSlot,
  decodeSlotPack,
  encodeSlot,
  encodeSlotPack,
  type SlotObject,
  slotHeaderBytes,
  slotObjectName,
  slotOfObjectName,
  slotPackName,
  slotPackRange,
} from '../../packages/engine/src/storage/slot-object.js';

const group: SlotObject = {
  kind: 'group',
  epoch: 7,
  slot: 42,
  lane: 'history',
  segment: 1_000_001,
  offset: 65_536,
  baseCommit: 3_001,
  capacity: 8_388_608,
  bytes: new TextEncoder().encode('the bytes of one group, exactly as written'),
};

function corruptCode(bytes: Uint8Array, name: string): string {
  try {
    decodeSlot(tsKernels, bytes, name);
  } catch (error) {
    if (error instanceof StreamStackError) return error.code;
    throw error;
  }
  return 'none';
}

describe('slot objects', () => {
  it('round-trip groups of both lanes and fences, under names that sort as numbers', () => {
    for (const slot of [
      group,
      { ...group, lane: 'wal' as const, bytes: new Uint8Array(0) },
      { kind: 'fence' as const, epoch: 9, slot: 43 },
    ]) {
      const encoded = encodeSlot(tsKernels, slot);
      expect(decodeSlot(tsKernels, encoded, `feeds/x/slots/${slotObjectName(slot.slot)}`)).toEqual(slot);
    }
    expect(slotObjectName(42)).toBe('0000000000000042');
    expect(slotOfObjectName(slotObjectName(42))).toBe(42);
    expect(slotOfObjectName('0000000000000000')).toBeUndefined();
    expect(slotOfObjectName('notaslot')).toBeUndefined();
    expect([slotObjectName(9), slotObjectName(10)].sort()).toEqual([slotObjectName(9), slotObjectName(10)]);
  });

  it('is CORRUPT when any byte changes, when cut short, or under another slot name', () => {
    const encoded = encodeSlot(tsKernels, group);
    const name = slotObjectName(42);
    // Every byte, header and group alike: a flip anywhere is caught.
    for (let index = 0; index < encoded.length; index++) {
      const damaged = encoded.slice();
      damaged[index] = (damaged[index] ?? 0) ^ 0x20;
      expect(corruptCode(damaged, name)).toBe('CORRUPT');
    }
    expect(corruptCode(encoded.subarray(0, encoded.length - 1), name)).toBe('CORRUPT');
    expect(corruptCode(encoded.subarray(0, slotHeaderBytes - 1), name)).toBe('CORRUPT');
    expect(corruptCode(encoded, slotObjectName(43))).toBe('CORRUPT');
    expect(corruptCode(encoded, name)).toBe('none');
  });

  it('packs a run of slots, fences included, and reads back exactly that run, or CORRUPT', () => {
    const run: SlotObject[] = [
      { ...group, slot: 42 },
      { kind: 'fence', epoch: 9, slot: 43 },
      { ...group, slot: 44, epoch: 9, lane: 'wal' },
    ];
    const packed = encodeSlotPack(
      tsKernels,
      run.map((slot) => encodeSlot(tsKernels, slot)),
    );
    const name = `feeds/x/slot-packs/${slotPackName(42, 44)}`;
    expect(decodeSlotPack(tsKernels, packed, name)).toEqual(run);
    expect(slotPackRange(slotPackName(42, 44))).toEqual({ first: 42, last: 44 });
    expect(slotPackRange(slotObjectName(42))).toBeUndefined();
    const code = (bytes: Uint8Array, as: string) => {
      try {
        decodeSlotPack(tsKernels, bytes, as);
        return 'none';
      } catch (error) {
        return error instanceof StreamStackError ? error.code : 'thrown';
      }
    };
    for (let index = 0; index < packed.length; index += 7) {
      const damaged = packed.slice();
      damaged[index] = (damaged[index] ?? 0) ^ 0x01;
      expect(code(damaged, name)).toBe('CORRUPT');
    }
    // A pack must hold exactly the run its name says.
    expect(code(packed, `feeds/x/slot-packs/${slotPackName(42, 45)}`)).toBe('CORRUPT');
    expect(code(packed, `feeds/x/slot-packs/${slotPackName(41, 43)}`)).toBe('CORRUPT');
    expect(code(packed.subarray(0, packed.length - 1), name)).toBe('CORRUPT');
  });
});
