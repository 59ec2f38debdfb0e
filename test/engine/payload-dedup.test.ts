/**
 * The writer's memory of stored payloads: a payload is found again only in the segment it was
 * stored in, only with the same bytes, and a new segment or the bound starts the memory over —
 * which may store a payload twice but never references one a segment does not hold.
 */
import { describe, expect, it } from 'vitest';
import { PayloadDedup } from '../../packages/engine/src/coordinator/writing/payload-dedup.js';
import { limits } from '../../packages/engine/src/index.js';
import type { PayloadLocation } from '../../packages/engine/src/storage/records.js';

const encoder = new TextEncoder();

/** A dedup over an in-memory "disk": each location's bytes, keyed by segment and offset. */
function dedupOverDisk(): {
  dedup: PayloadDedup;
  put: (payload: string, segment: number, offset: number) => void;
  store: (payload: string, crc: number, location: PayloadLocation) => void;
} {
  const disk = new Map<string, Uint8Array>();
  const dedup = new PayloadDedup((location, payload) => {
    const stored = disk.get(`${location.segment}:${location.offset}`);
    return (
      stored !== undefined &&
      stored.length === location.length &&
      stored.every((byte, index) => byte === payload[index])
    );
  });
  return {
    dedup,
    put(payload, segment, offset) {
      disk.set(`${segment}:${offset}`, encoder.encode(payload));
    },
    store(payload, crc, location) {
      disk.set(`${location.segment}:${location.offset}`, encoder.encode(payload));
      dedup.remember(crc, location);
    },
  };
}

describe('PayloadDedup', () => {
  it('finds a stored payload by its bytes in its own segment, with its full location', () => {
    const { dedup, store } = dedupOverDisk();
    store('hello', 0xdead_beef, { segment: 3, offset: 100, length: 5, crc: 0xdead_beef });
    store('world', 0x1234_5678, { segment: 3, offset: 2 ** 40, length: 5, crc: 0x1234_5678 });
    expect(dedup.find(encoder.encode('hello'), 0xdead_beef, 3)).toEqual({
      segment: 3,
      offset: 100,
      length: 5,
      crc: 0xdead_beef,
    });
    // Offsets past 32 bits survive (segments are addressed by byte).
    expect(dedup.find(encoder.encode('world'), 0x1234_5678, 3)?.offset).toBe(2 ** 40);
    // Another segment never references it: every segment must hold its own payloads.
    expect(dedup.find(encoder.encode('hello'), 0xdead_beef, 4)).toBeUndefined();
  });

  it('does not confuse payloads whose keys collide, nor different bytes under the same CRC', () => {
    const { dedup, store } = dedupOverDisk();
    // These two CRCs share their low 30 bits, so they start probing at the same place.
    store('first', 0x4000_0001, { segment: 1, offset: 0, length: 5, crc: 0x4000_0001 });
    expect(dedup.find(encoder.encode('first'), 0x0000_0001, 1)).toBeUndefined();
    store('other', 0x0000_0001, { segment: 1, offset: 10, length: 5, crc: 0x0000_0001 });
    expect(dedup.find(encoder.encode('other'), 0x0000_0001, 1)?.offset).toBe(10);
    // Each keeps its own slot: the second did not take the first's.
    expect(dedup.find(encoder.encode('first'), 0x4000_0001, 1)?.offset).toBe(0);
    // Same CRC and length, other bytes: the byte comparison refuses it.
    expect(dedup.find(encoder.encode('OTHER'), 0x0000_0001, 1)).toBeUndefined();
  });

  it('forgets earlier segments once a later one is remembered, and ignores late earlier ones', () => {
    const { dedup, store } = dedupOverDisk();
    store('one', 7, { segment: 1, offset: 0, length: 3, crc: 7 });
    store('two', 8, { segment: 2, offset: 0, length: 3, crc: 8 });
    expect(dedup.find(encoder.encode('one'), 7, 1)).toBeUndefined();
    expect(dedup.find(encoder.encode('two'), 8, 2)?.segment).toBe(2);
    store('old', 9, { segment: 1, offset: 50, length: 3, crc: 9 });
    expect(dedup.find(encoder.encode('old'), 9, 1)).toBeUndefined();
    expect(dedup.find(encoder.encode('two'), 8, 2)?.segment).toBe(2);
  });

  it('keeps what a run needs, not its payloads: changing them after the run is remembered changes nothing', async () => {
    const { dedup, put } = dedupOverDisk();
    put('kept', 2, 4_000_016);
    put('also', 2, 4_000_020);
    const payloads = [
      { bytes: encoder.encode('kept'), crc: 0xfeed_0001, offset: 16, length: 4 },
      { bytes: encoder.encode('also'), crc: 0xfeed_0002, offset: 20, length: 4 },
    ];
    dedup.rememberRun(payloads.slice(0, 1), 2, 4_000_000);
    dedup.rememberRun(payloads.slice(1), 2, 4_000_000);
    // The writer's payload objects (and the records' bytes they point into) are free to go or to
    // be reused the moment the run is remembered: the run waits as columns of its own.
    for (const payload of payloads) Object.assign(payload, { bytes: new Uint8Array(0), crc: 0, offset: 0, length: 0 });
    // Both ways a waiting run is mapped: by `fold` in slices, and by a lookup, in one piece.
    await dedup.fold();
    expect(dedup.find(encoder.encode('kept'), 0xfeed_0001, 2)).toEqual({
      segment: 2,
      offset: 4_000_016,
      length: 4,
      crc: 0xfeed_0001,
    });
    expect(dedup.find(encoder.encode('also'), 0xfeed_0002, 2)?.offset).toBe(4_000_020);
    put('late', 2, 4_000_024);
    const late = { bytes: encoder.encode('late'), crc: 0xfeed_0003, offset: 24, length: 4 };
    dedup.rememberRun([late], 2, 4_000_000);
    Object.assign(late, { crc: 0, offset: 0, length: 0 });
    expect(dedup.find(encoder.encode('late'), 0xfeed_0003, 2)).toEqual({
      segment: 2,
      offset: 4_000_024,
      length: 4,
      crc: 0xfeed_0003,
    });
  });

  it('folds remembered runs before a lookup, and starts over at its bound', async () => {
    const { dedup, put, store } = dedupOverDisk();
    const count = limits.payloadDedupEntriesMax;
    // CRCs spread over all 32 bits, as real ones are (an odd multiplier maps distinct indexes
    // to distinct CRCs), so the probe table's growth places them anew each time.
    const crcOf = (index: number) => Math.imul(index, 0x9e37_79b1) >>> 0;
    for (let index = 0; index < count; index++)
      store(`p${index}`, crcOf(index), {
        segment: 5,
        offset: index * 16,
        length: `p${index}`.length,
        crc: crcOf(index),
      });
    // Up to the bound, through every growth of its table, each is found where it was stored.
    for (let index = 0; index < count; index += 997)
      expect(dedup.find(encoder.encode(`p${index}`), crcOf(index), 5)?.offset).toBe(index * 16);
    // A run folded lazily: the first find maps it.
    put('late', 5, 1008);
    dedup.rememberRun([{ bytes: encoder.encode('late'), crc: crcOf(count + 1), offset: 8, length: 4 }], 5, 1000);
    await dedup.fold();
    expect(dedup.find(encoder.encode('late'), crcOf(count + 1), 5)).toEqual({
      segment: 5,
      offset: 1008,
      length: 4,
      crc: crcOf(count + 1),
    });
    // At the bound the memory starts over: the old payloads are gone, the newest kept.
    expect(dedup.find(encoder.encode('p0'), crcOf(0), 5)).toBeUndefined();
    expect(dedup.find(encoder.encode(`p${count - 1}`), crcOf(count - 1), 5)).toBeUndefined();
    store('again', 3, { segment: 5, offset: 1_000_000, length: 5, crc: 3 });
    expect(dedup.find(encoder.encode('again'), 3, 5)?.offset).toBe(1_000_000);
  });
});
