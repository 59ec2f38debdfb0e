import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { branchTally, expectSame, expectSameOutcome, native, pseudoRandomBytes, sameValue, ts } from './both.js';

const bigBytes = (length: number, seed: number): Uint8Array => pseudoRandomBytes(length, seed);

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

  it('agree on random bytes, seeds and unaligned views, and continue across any split', () => {
    const tally = branchTally('crc32 and crc32c', [
      'empty',
      'below 8 bytes',
      '8–15 bytes',
      '16–127 bytes',
      '128 bytes to 4 KiB',
      'over 4 KiB',
      'a tail after the 16-byte slices',
      'view off an 8-byte boundary',
      'seed 0',
      'seed non-zero',
      'split inside a 16-byte slice',
    ]);
    // Inputs of 0 bytes to 8 KiB: the short ones the byte loops alone handle (below 8 and 16
    // bytes) often, long ones past the 128 bytes where the native CRC-32 folds 64-byte blocks.
    // A view starts 0–15 bytes in and ends 0–15 bytes short, so its start is unaligned and its
    // length leaves tails. Seeds are 0 or any u32; the split point cuts the view anywhere.
    const bytesArb = fc.oneof(
      { weight: 2, arbitrary: fc.uint8Array({ maxLength: 40, size: 'max' }) },
      { weight: 3, arbitrary: fc.uint8Array({ minLength: 40, maxLength: 8192, size: 'max' }) },
    );
    const seedArb = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 0xffff_ffff }));
    fc.assert(
      fc.property(bytesArb, fc.nat(15), fc.nat(15), seedArb, fc.nat(), (bytes, shift, trim, seed, split) => {
        const start = Math.min(shift, bytes.length);
        const view = bytes.subarray(start, Math.max(start, bytes.length - trim));
        const length = view.length;
        tally.hit('empty', length === 0);
        tally.hit('below 8 bytes', length > 0 && length < 8);
        tally.hit('8–15 bytes', length >= 8 && length < 16);
        tally.hit('16–127 bytes', length >= 16 && length < 128);
        tally.hit('128 bytes to 4 KiB', length >= 128 && length <= 4096);
        tally.hit('over 4 KiB', length > 4096);
        tally.hit('a tail after the 16-byte slices', length > 16 && length % 16 !== 0);
        tally.hit('view off an 8-byte boundary', length > 0 && view.byteOffset % 8 !== 0);
        tally.hit(seed === 0 ? 'seed 0' : 'seed non-zero');
        const crc = expectSameOutcome((k) => k.crc32(view, seed));
        // zlib.crc32 returns 0 for an empty view with no backing store (zlib's NULL-buffer
        // shortcut); continuing a running CRC over nothing must give the seed back.
        expect(crc).toEqual({ ok: true, value: length === 0 ? seed : zlib.crc32(view, seed) });
        const crcC = expectSameOutcome((k) => k.crc32c(view, seed));
        // Continuing from the CRC of a first piece gives the CRC of the whole, on both kernels.
        const cut = length === 0 ? 0 : split % (length + 1);
        tally.hit('split inside a 16-byte slice', cut % 16 !== 0 && length - cut >= 16);
        const [first, rest] = [view.subarray(0, cut), view.subarray(cut)];
        for (const kernels of [native, ts]) {
          expect(kernels.crc32(rest, kernels.crc32(first, seed))).toBe(crc.ok && crc.value);
          expect(kernels.crc32c(rest, kernels.crc32c(first, seed))).toBe(crcC.ok && crcC.value);
        }
      }),
      { numRuns: 500 },
    );
    tally.expectAllReached();
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

/**
 * Lays frames of the given data lengths into one buffer, leaving the CRC fields zero. A frame
 * is a control record when `isControl(index)` says so (every third one unless told otherwise),
 * and `gaps[index]` bytes of filler go before frame `index`, so frames may start anywhere.
 */
function layFrames(
  lengths: readonly number[],
  isControl: (index: number) => boolean = (index) => index % 3 === 0,
  gaps: readonly number[] = [],
  seed = lengths.length,
): { buffer: Uint8Array; offsets: Uint32Array } {
  const offsets = new Uint32Array(lengths.length);
  let total = 0;
  lengths.forEach((length, index) => {
    total += gaps[index] ?? 0;
    offsets[index] = total;
    total += 8 + length;
  });
  const buffer = bigBytes(total, seed);
  const view = new DataView(buffer.buffer);
  lengths.forEach((length, index) => {
    const control = isControl(index) ? 0x8000_0000 : 0;
    view.setUint32(offsets[index], (length | control) >>> 0, true);
    view.setUint32(offsets[index] + 4, 0, true);
  });
  return { buffer, offsets };
}

/** A copy of `bytes` that starts `shift` bytes into a fresh buffer: an unaligned view. */
function shifted(bytes: Uint8Array, shift: number): Uint8Array {
  const backing = new Uint8Array(bytes.length + shift);
  backing.set(bytes, shift);
  return backing.subarray(shift);
}

/** The first frame that runs past the buffer or fails its CRC, by zlib: the kernels' model. */
function firstBadFrame(buffer: Uint8Array, offsets: Uint32Array): number {
  const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  for (let index = 0; index < offsets.length; index++) {
    const offset = offsets[index];
    if (offset + 8 > buffer.length) return index;
    const end = offset + 8 + (view.getUint32(offset, true) & 0x7fff_ffff);
    if (end > buffer.length) return index;
    const data = buffer.subarray(offset + 8, end);
    // zlib.crc32 of an empty view is 0, which is also the CRC-32 of no bytes.
    if (view.getUint32(offset + 4, true) !== (data.length === 0 ? 0 : zlib.crc32(data))) return index;
  }
  return -1;
}

/** Whether any two frames (header and data) share a byte; every frame must fit. */
function framesOverlap(buffer: Uint8Array, offsets: Uint32Array): boolean {
  const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  const spans = [...offsets]
    .map((offset) => [offset, offset + 8 + (view.getUint32(offset, true) & 0x7fff_ffff)] as const)
    .sort((left, right) => left[0] - right[0]);
  return spans.some(([start], index) => index > 0 && start < spans[index - 1][1]);
}

/** Frames of 0–4,096 data bytes: empty and short ones often, since each is a branch of its own. */
const frameLengthArb = fc.oneof(
  { weight: 1, arbitrary: fc.constant(0) },
  { weight: 2, arbitrary: fc.nat(40) },
  { weight: 2, arbitrary: fc.nat(4096) },
);

/**
 * 0–60 frames, each maybe a control record and maybe after 0–7 bytes of filler; none, one or two
 * frames a sixth of the time, since the empty list and a lone frame are edges of their own.
 */
const frameArb = fc.record({ length: frameLengthArb, control: fc.boolean(), gap: fc.oneof(fc.constant(0), fc.nat(7)) });
const framesArb = fc.oneof(
  { weight: 1, arbitrary: fc.array(frameArb, { maxLength: 2, size: 'max' }) },
  { weight: 5, arbitrary: fc.array(frameArb, { maxLength: 60, size: 'max' }) },
);

/** A frame buffer laid out from `framesArb`, with its CRCs written, at an offset of 0–7 bytes. */
function writtenFrames(
  frames: readonly { length: number; control: boolean; gap: number }[],
  shift: number,
  seed: number,
) {
  const laid = layFrames(
    frames.map((frame) => frame.length),
    (index) => frames[index].control,
    frames.map((frame) => frame.gap),
    seed,
  );
  const buffer = shifted(laid.buffer, shift);
  native.frameChecksumsWrite(buffer, laid.offsets);
  return { buffer, offsets: laid.offsets };
}

/**
 * Damage to a written frame buffer: flip bits in a frame's length field, CRC field or data (the
 * frame and the byte chosen by `pick`), toggle a frame's control bit, truncate the buffer, extend
 * it, or move a frame's offset (by a few bytes, or past the end).
 */
type FrameDamage =
  | {
      readonly kind: 'flip';
      readonly field: 'length' | 'crc' | 'data';
      readonly pick: number;
      readonly at: number;
      readonly mask: number;
    }
  | { readonly kind: 'control'; readonly pick: number }
  | { readonly kind: 'truncate'; readonly keep: number }
  | { readonly kind: 'extend'; readonly bytes: Uint8Array }
  | { readonly kind: 'offset'; readonly pick: number; readonly by: number };

const frameDamageArb: fc.Arbitrary<FrameDamage> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('flip' as const),
      field: fc.constantFrom('length' as const, 'crc' as const, 'data' as const),
      pick: fc.nat(),
      at: fc.nat(),
      mask: fc.oneof(fc.constantFrom(0x01, 0x80, 0xff), fc.integer({ min: 1, max: 255 })),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('control' as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('truncate' as const), keep: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('extend' as const),
      bytes: fc.uint8Array({ minLength: 1, maxLength: 64, size: 'max' }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('offset' as const),
      pick: fc.nat(),
      by: fc.oneof(fc.integer({ min: -8, max: 8 }), fc.constant(1 << 30)),
    }),
  },
);

function applyFrameDamage(
  buffer: Uint8Array,
  offsets: Uint32Array,
  damage: FrameDamage,
): { buffer: Uint8Array; offsets: Uint32Array } {
  if (damage.kind === 'truncate') return { buffer: buffer.slice(0, damage.keep % (buffer.length + 1)), offsets };
  if (damage.kind === 'extend') {
    const longer = new Uint8Array(buffer.length + damage.bytes.length);
    longer.set(buffer);
    longer.set(damage.bytes, buffer.length);
    return { buffer: longer, offsets };
  }
  if (offsets.length === 0) return { buffer, offsets };
  const frame = damage.pick % offsets.length;
  const offset = offsets[frame];
  if (damage.kind === 'offset') {
    const moved = offsets.slice();
    moved[frame] = Math.max(0, offset + damage.by);
    return { buffer, offsets: moved };
  }
  // After an earlier truncation or a moved offset, the frame's header may lie past the end: a
  // damage then changes nothing that is not already gone.
  const damaged = buffer.slice();
  if (offset + 4 > damaged.length) return { buffer: damaged, offsets };
  if (damage.kind === 'control') {
    damaged[offset + 3] ^= 0x80;
    return { buffer: damaged, offsets };
  }
  const dataLength =
    new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength).getUint32(offset, true) & 0x7fff_ffff;
  const at =
    damage.field === 'length'
      ? offset + (damage.at % 4)
      : damage.field === 'crc'
        ? offset + 4 + (damage.at % 4)
        : offset + 8 + (damage.at % Math.max(1, dataLength));
  // A frame with no data has no data byte to flip; the damage then falls on the next byte, if any.
  if (at < damaged.length) damaged[at] ^= damage.mask;
  return { buffer: damaged, offsets };
}

describe('batched checksums (crc32cRanges, payloadChecksums): native and ts agree', () => {
  it('give each range the CRCs a single call gives it, and refuse ranges that do not fit alike', () => {
    const tally = branchTally('batched checksums', [
      'no ranges',
      'an empty range',
      'overlapping ranges',
      'ranges out of order',
      'many ranges',
      'refused: odd count',
      'refused: reversed',
      'refused: past the end',
      'into a given buffer',
      'refused: an output of the wrong size',
    ]);
    // Buffers of 0 to 4 KiB and 0 to 300 ranges: mostly valid ranges anywhere in the buffer (empty,
    // overlapping, in any order), sometimes a bad one (reversed, past the end) or an odd count.
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 4096, size: 'max' }),
        fc.array(fc.tuple(fc.nat(), fc.nat(), fc.nat(20)), { maxLength: 300, size: 'max' }),
        fc.nat(20),
        (bytes, picks, spoil) => {
          const ranges: number[] = [];
          for (const [a, b] of picks) {
            const start = bytes.length === 0 ? 0 : a % (bytes.length + 1);
            const end = start + (bytes.length === 0 ? 0 : b % (bytes.length - start + 1));
            ranges.push(start, end);
          }
          if (spoil === 0 && ranges.length > 0) ranges.pop();
          if (spoil === 1 && ranges.length > 1 && ranges[1] > ranges[0])
            [ranges[0], ranges[1]] = [ranges[1], ranges[0]];
          if (spoil === 2 && ranges.length > 1) ranges[1] = bytes.length + 1;
          const input = Uint32Array.from(ranges);
          const valid =
            ranges.length % 2 === 0 &&
            ranges.every((value, at) => (at % 2 === 0 ? value <= ranges[at + 1] : value <= bytes.length));
          tally.hit('no ranges', ranges.length === 0);
          tally.hit('an empty range', valid && ranges.some((value, at) => at % 2 === 0 && value === ranges[at + 1]));
          tally.hit(
            'overlapping ranges',
            valid && ranges.length >= 4 && ranges[2] < ranges[1] && ranges[3] > ranges[0],
          );
          tally.hit('ranges out of order', valid && ranges.length >= 4 && ranges[2] < ranges[0]);
          tally.hit('many ranges', valid && ranges.length >= 200);
          tally.hit('refused: odd count', ranges.length % 2 === 1);
          tally.hit(
            'refused: reversed',
            ranges.length % 2 === 0 && ranges.some((value, at) => at % 2 === 0 && value > ranges[at + 1]),
          );
          tally.hit('refused: past the end', ranges.length % 2 === 0 && ranges.some((value) => value > bytes.length));
          const single = expectSameOutcome((kernels) => kernels.crc32cRanges(bytes, input));
          const both = expectSameOutcome((kernels) => kernels.payloadChecksums(bytes, input));
          expect(single.ok, 'crc32cRanges accepts exactly the valid ranges').toBe(valid);
          expect(both.ok, 'payloadChecksums accepts exactly the valid ranges').toBe(valid);
          if (!single.ok || !both.ok) {
            expect([single, both].map((outcome) => (outcome.ok ? 'ok' : outcome.code))).toEqual([
              'INVALID_ARGUMENT',
              'INVALID_ARGUMENT',
            ]);
            return;
          }
          for (let index = 0; index < ranges.length / 2; index++) {
            const piece = bytes.subarray(ranges[2 * index], ranges[2 * index + 1]);
            expect(single.value[index]).toBe(native.crc32c(piece));
            expect([both.value[2 * index], both.value[2 * index + 1]]).toEqual([
              native.crc32c(piece),
              zlib.crc32(piece),
            ]);
          }
          // Into a buffer the caller gives (a view into a larger one, as hot callers keep): the
          // same values, in that buffer; one of the wrong size is refused alike.
          const count = ranges.length / 2;
          const intoSingle = expectSameOutcome((kernels) =>
            Array.from(kernels.crc32cRanges(bytes, input, new Uint32Array(count + 3).subarray(1, count + 1))),
          );
          const intoBoth = expectSameOutcome((kernels) => {
            const out = new Uint32Array(2 * count);
            const returned = kernels.payloadChecksums(bytes, input, out);
            return { same: returned === out, values: Array.from(out) };
          });
          expect(intoSingle).toEqual({ ok: true, value: Array.from(single.value) });
          expect(intoBoth).toEqual({ ok: true, value: { same: true, values: Array.from(both.value) } });
          tally.hit('into a given buffer', count > 0);
          const wrong = spoil % 2 === 0 ? count + 1 : Math.max(0, count - 1);
          if (wrong !== count) {
            const refusedSingle = expectSameOutcome((kernels) =>
              kernels.crc32cRanges(bytes, input, new Uint32Array(wrong)),
            );
            const refusedBoth = expectSameOutcome((kernels) =>
              kernels.payloadChecksums(bytes, input, new Uint32Array(2 * wrong)),
            );
            expect([refusedSingle, refusedBoth]).toEqual([
              { ok: false, code: 'INVALID_ARGUMENT' },
              { ok: false, code: 'INVALID_ARGUMENT' },
            ]);
            tally.hit('refused: an output of the wrong size', true);
          }
        },
      ),
      // Random arrays of up to 300 ranges are seldom empty: one example always is.
      { numRuns: 300, examples: [[new Uint8Array(16), [], 5]] },
    );
    tally.expectAllReached();
  });
});

describe('frame checksums: native and ts agree', () => {
  it('write the same CRCs, and each verifies what the other wrote', () => {
    const tally = branchTally('frame checksums', [
      'no frames',
      'more than 10 frames',
      'empty data',
      'data of 16 bytes or more',
      'control record',
      'filler between frames',
      'buffer at an unaligned offset',
    ]);
    // 0–60 frames of 0–4,096 data bytes each (see framesArb), in a buffer shifted 0–7 bytes.
    fc.assert(
      fc.property(framesArb, fc.nat(7), fc.nat(), (frames, shift, seed) => {
        tally.hit('no frames', frames.length === 0);
        tally.hit('more than 10 frames', frames.length > 10);
        tally.hit(
          'empty data',
          frames.some((frame) => frame.length === 0),
        );
        tally.hit(
          'data of 16 bytes or more',
          frames.some((frame) => frame.length >= 16),
        );
        tally.hit(
          'control record',
          frames.some((frame) => frame.control),
        );
        tally.hit(
          'filler between frames',
          frames.some((frame, index) => index > 0 && frame.gap > 0),
        );
        tally.hit('buffer at an unaligned offset', frames.length > 0 && shift % 8 !== 0);
        const fromNative = writtenFrames(frames, shift, seed);
        const laid = layFrames(
          frames.map((frame) => frame.length),
          (index) => frames[index].control,
          frames.map((frame) => frame.gap),
          seed,
        );
        const fromTs = { buffer: shifted(laid.buffer, shift), offsets: laid.offsets };
        ts.frameChecksumsWrite(fromTs.buffer, fromTs.offsets);
        expectSame(fromNative.buffer, fromTs.buffer);
        expect(firstBadFrame(fromNative.buffer, fromNative.offsets)).toBe(-1);
        expect(ts.frameChecksumsVerify(fromNative.buffer, fromNative.offsets)).toBe(-1);
        expect(native.frameChecksumsVerify(fromTs.buffer, fromTs.offsets)).toBe(-1);
      }),
      { numRuns: 200 },
    );
    tally.expectAllReached();
  });

  it('verify and rewrite generated damaged buffers alike, finding the first bad frame', () => {
    const tally = branchTally('damaged frames', [
      'flip in a length field',
      'flip in a CRC field',
      'flip in data',
      'control bit toggled',
      'truncated',
      'extended',
      'offset moved',
      'still sound',
      'control bit change unnoticed (the CRC covers the data only)',
      'first frame bad',
      'a later frame bad',
      'runs past the buffer',
      'CRC mismatch',
      'rewrite refused',
      'rewrite accepted',
    ]);
    // Written buffers of 1–60 frames with one or two damages each (see frameDamageArb).
    const framesAtLeastOne = framesArb.filter((frames) => frames.length > 0);
    fc.assert(
      fc.property(
        framesAtLeastOne,
        fc.nat(7),
        fc.array(frameDamageArb, { minLength: 1, maxLength: 2, size: 'max' }),
        (frames, shift, damages) => {
          let { buffer, offsets } = writtenFrames(frames, shift, frames.length);
          const original = buffer.slice();
          for (const damage of damages) {
            ({ buffer, offsets } = applyFrameDamage(buffer, offsets, damage));
            tally.hit(
              damage.kind === 'flip'
                ? damage.field === 'length'
                  ? 'flip in a length field'
                  : damage.field === 'crc'
                    ? 'flip in a CRC field'
                    : 'flip in data'
                : damage.kind === 'control'
                  ? 'control bit toggled'
                  : damage.kind === 'truncate'
                    ? 'truncated'
                    : damage.kind === 'extend'
                      ? 'extended'
                      : 'offset moved',
            );
          }
          const expected = firstBadFrame(buffer, offsets);
          expect(expectSameOutcome((k) => k.frameChecksumsVerify(buffer, offsets))).toEqual({
            ok: true,
            value: expected,
          });
          if (expected === -1) {
            tally.hit('still sound');
            const toggledOnly = damages.every((damage) => damage.kind === 'control');
            tally.hit(
              'control bit change unnoticed (the CRC covers the data only)',
              toggledOnly && !sameValue(buffer, original),
            );
          } else {
            tally.hit(expected === 0 ? 'first frame bad' : 'a later frame bad');
            const offset = offsets[expected];
            const fits =
              offset + 8 <= buffer.length &&
              offset +
                8 +
                (new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength).getUint32(offset, true) &
                  0x7fff_ffff) <=
                buffer.length;
            tally.hit(fits ? 'CRC mismatch' : 'runs past the buffer');
          }
          // Rewriting the CRCs: the same outcome, and the same bytes left behind (the frames before
          // a frame that does not fit get their CRCs on both kernels).
          const forNative = buffer.slice();
          const forTs = buffer.slice();
          const rewritten = expectSameOutcome((k) => k.frameChecksumsWrite(k === native ? forNative : forTs, offsets));
          expectSame(forNative, forTs);
          if (rewritten.ok) {
            tally.hit('rewrite accepted');
            // Frames that overlap (a moved offset, a longer length) share bytes, so writing a later
            // frame's CRC may change an earlier frame's data; disjoint frames must all verify.
            if (!framesOverlap(buffer, offsets)) expect(native.frameChecksumsVerify(forNative, offsets)).toBe(-1);
          } else {
            tally.hit('rewrite refused');
            expect(rewritten.code).toBe('INVALID_ARGUMENT');
          }
        },
      ),
      { numRuns: 600 },
    );
    tally.expectAllReached();
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
