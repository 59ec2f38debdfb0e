import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expectSameOutcome, native, ts } from './both.js';

const bigBytes = (length: number, seed: number): Uint8Array => {
  const bytes = new Uint8Array(length);
  let state = seed >>> 0;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    bytes[i] = state >>> 24;
  }
  return bytes;
};

describe('crc32 and crc32c: native and ts agree', () => {
  it('matches zlib.crc32 and known check values', () => {
    const check = new TextEncoder().encode('123456789');
    for (const kernels of [native, ts]) {
      expect(kernels.crc32(check)).toBe(0xcbf43926);
      expect(kernels.crc32c(check)).toBe(0xe3069283);
      expect(kernels.crc32(new Uint8Array(0))).toBe(0);
      expect(kernels.crc32(check)).toBe(zlib.crc32(check));
    }
  });

  it('agree on random bytes, seeds and unaligned views', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 3000 }),
        fc.nat(7),
        fc.integer({ min: 0, max: 0xffff_ffff }),
        (bytes, shift, seed) => {
          const view = bytes.subarray(Math.min(shift, bytes.length));
          const crc = expectSameOutcome((k) => k.crc32(view, seed));
          // zlib.crc32 returns 0 for an empty view with no backing store (zlib's NULL-buffer
          // shortcut); continuing a running CRC over nothing must give the seed back.
          expect(crc).toEqual({ ok: true, value: view.length === 0 ? seed : zlib.crc32(view, seed) });
          expectSameOutcome((k) => k.crc32c(view, seed));
        },
      ),
    );
  });

  it('continue a running CRC across pieces', () => {
    const whole = bigBytes(10_000, 7);
    for (const kernels of [native, ts]) {
      const first = kernels.crc32c(whole.subarray(0, 4321));
      expect(kernels.crc32c(whole.subarray(4321), first)).toBe(kernels.crc32c(whole));
      const firstIeee = kernels.crc32(whole.subarray(0, 17));
      expect(kernels.crc32(whole.subarray(17), firstIeee)).toBe(kernels.crc32(whole));
    }
  });

  it('agree on a buffer over 16 MiB at an unaligned offset', () => {
    const bytes = bigBytes(17 * 1024 * 1024 + 3, 11).subarray(3);
    expect(native.crc32(bytes)).toBe(ts.crc32(bytes));
    expect(native.crc32(bytes)).toBe(zlib.crc32(bytes));
    expect(native.crc32c(bytes)).toBe(ts.crc32c(bytes));
  });
});

/** Lays frames of the given data lengths into one buffer, leaving the CRC fields zero. */
function layFrames(lengths: number[], controlEvery = 3): { buffer: Uint8Array; offsets: Uint32Array } {
  const offsets = new Uint32Array(lengths.length);
  let total = 0;
  lengths.forEach((length, index) => {
    offsets[index] = total;
    total += 8 + length;
  });
  const buffer = bigBytes(total, lengths.length);
  const view = new DataView(buffer.buffer);
  lengths.forEach((length, index) => {
    const control = index % controlEvery === 0 ? 0x8000_0000 : 0;
    view.setUint32(offsets[index], (length | control) >>> 0, true);
    view.setUint32(offsets[index] + 4, 0, true);
  });
  return { buffer, offsets };
}

describe('frame checksums: native and ts agree', () => {
  it('write the same CRCs, and each verifies what the other wrote', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(600), { maxLength: 40 }), (lengths) => {
        const fromNative = layFrames(lengths);
        const fromTs = layFrames(lengths);
        native.frameChecksumsWrite(fromNative.buffer, fromNative.offsets);
        ts.frameChecksumsWrite(fromTs.buffer, fromTs.offsets);
        expect(fromNative.buffer).toEqual(fromTs.buffer);
        expect(ts.frameChecksumsVerify(fromNative.buffer, fromNative.offsets)).toBe(-1);
        expect(native.frameChecksumsVerify(fromTs.buffer, fromTs.offsets)).toBe(-1);
      }),
    );
  });

  it('find the same first bad frame after any single byte flips', () => {
    const lengths = [0, 5, 70, 1, 300];
    const { buffer, offsets } = layFrames(lengths);
    native.frameChecksumsWrite(buffer, offsets);
    for (let at = 0; at < buffer.length; at++) {
      const damaged = buffer.slice();
      damaged[at] ^= 0x01;
      const found = expectSameOutcome((k) => k.frameChecksumsVerify(damaged, offsets));
      // The damaged byte lies in exactly one frame: its CRC, its data, or its length (which
      // then either disagrees with the CRC or runs past the buffer).
      const owner = offsets.findLastIndex((offset) => offset <= at);
      expect(found).toEqual({ ok: true, value: owner });
    }
  });

  it('reject a frame that runs past the buffer with the same error', () => {
    const { buffer, offsets } = layFrames([10, 10]);
    native.frameChecksumsWrite(buffer, offsets);
    const truncated = buffer.subarray(0, buffer.length - 1);
    const written = expectSameOutcome((k) => k.frameChecksumsWrite(truncated.slice(), offsets));
    expect(written).toEqual({ ok: false, code: 'INVALID_ARGUMENT' });
    expect(expectSameOutcome((k) => k.frameChecksumsVerify(truncated, offsets))).toEqual({
      ok: true,
      value: 1,
    });
  });
});
