/**
 * `copyRange`: the native kernel (`memcpy`) and its TypeScript twin (`TypedArray.prototype.set`)
 * leave the same bytes in the target, from ordinary and shared buffers, at every relative
 * alignment (V8 copies a misaligned range from a shared buffer byte by byte, which is why the
 * kernel exists), between views of one buffer, and refuse the same ranges, copying nothing.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { branchTally, expectSameOutcomes, native, pseudoRandomBytes, ts } from './both.js';

/** A buffer of `length` pseudo-random bytes, in an ordinary or a shared buffer. */
const filled = (length: number, seed: number, shared: boolean): Uint8Array =>
  pseudoRandomBytes(length, seed, shared ? new SharedArrayBuffer(length) : undefined);

describe('copyRange: native and ts agree', () => {
  it('copy the same bytes at any alignment, from shared buffers too, and refuse the same ranges', () => {
    const tally = branchTally('copyRange', [
      'shared source',
      'ordinary source',
      'offsets equal modulo 8',
      'offsets differ modulo 8',
      'longer than the kernel threshold',
      'empty range',
      'views of one buffer',
      'refused: source range',
      'refused: target too short',
    ]);
    // Sources and targets of 0 to 3 * copyRangeKernelBytesMin bytes, so ranges fall on both
    // sides of the length export hands to the kernel. Four calls in five copy a valid range (its
    // start, length and target offset drawn within the buffers); the fifth breaks one bound, by
    // reversing the range or running it past the source or the target. A fifth of the calls
    // copy within one buffer.
    const maxBytes = 3 * limits.copyRangeKernelBytesMin;
    const call = fc.record({
      sourceBytes: fc.integer({ min: 0, max: maxBytes }),
      targetBytes: fc.integer({ min: 0, max: maxBytes }),
      draws: fc.tuple(fc.nat(), fc.nat(), fc.nat()),
      broken: fc.oneof(
        { weight: 16, arbitrary: fc.constant('none' as const) },
        fc.constantFrom('reversed' as const, 'past source' as const, 'past target' as const),
      ),
      shared: fc.boolean(),
      oneBuffer: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, fc.constant(true)),
      seed: fc.integer(),
    });
    fc.assert(
      fc.property(call, ({ sourceBytes, targetBytes: drawnTargetBytes, draws, broken, shared, oneBuffer, seed }) => {
        const targetBytes = oneBuffer ? sourceBytes : drawnTargetBytes;
        let start = draws[0] % (sourceBytes + 1);
        let length = draws[1] % (Math.min(sourceBytes - start, targetBytes) + 1);
        let targetAt = draws[2] % (targetBytes - length + 1);
        if (broken === 'reversed') length = -1 - (draws[1] % 8);
        if (broken === 'past source') start = sourceBytes - length + 1 + (draws[0] % 8);
        if (broken === 'past target') targetAt = targetBytes - length + 1 + (draws[2] % 8);
        const end = start + length;
        const run = (kernels: typeof native) => {
          const source = filled(sourceBytes, seed, shared);
          const target = oneBuffer ? source : filled(targetBytes, ~seed, false);
          const before = target.slice();
          try {
            kernels.copyRange(target, targetAt, source, start, end);
          } catch (error) {
            // A refusal copies nothing.
            expect(Buffer.from(target).equals(Buffer.from(before))).toBe(true);
            throw error;
          }
          return target.slice();
        };
        const { native: fromNative, ts: fromTs } = expectSameOutcomes(run);
        if (fromTs.ok) {
          // The twin is `set`, the reference: check it once more against a plain copy.
          const source = filled(sourceBytes, seed, false);
          const expected = oneBuffer ? source.slice() : filled(targetBytes, ~seed, false);
          expected.set(source.slice(start, end), targetAt);
          expect(Buffer.from(fromTs.value).equals(Buffer.from(expected))).toBe(true);
        }
        expect(fromNative.ok).toBe(fromTs.ok);
        tally.hit(shared ? 'shared source' : 'ordinary source', fromTs.ok);
        tally.hit(
          (targetAt - start) % 8 === 0 ? 'offsets equal modulo 8' : 'offsets differ modulo 8',
          fromTs.ok && length > 0,
        );
        tally.hit('longer than the kernel threshold', fromTs.ok && length >= limits.copyRangeKernelBytesMin);
        tally.hit('empty range', fromTs.ok && length === 0);
        tally.hit('views of one buffer', fromTs.ok && oneBuffer && length > 0);
        if (!fromTs.ok) {
          tally.hit(
            fromTs.message.startsWith('source range') ? 'refused: source range' : 'refused: target too short',
            true,
          );
        }
      }),
      { numRuns: 800 },
    );
    tally.expectAllReached();
  });

  it('refuses numbers that are not byte offsets, which napi would wrap into a u32', () => {
    const source = filled(64, 1, true);
    for (const [targetAt, start, end] of [
      [-1, 0, 8],
      [0, -1, 8],
      [0.5, 0, 8],
      [0, 0, 2 ** 32 + 8],
      [2 ** 32, 0, 8],
    ]) {
      for (const kernels of [native, ts]) {
        const target = new Uint8Array(64);
        expect(() => kernels.copyRange(target, targetAt, source, start, end)).toThrow(
          expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
        );
        expect(target.every((byte) => byte === 0)).toBe(true);
      }
    }
  });
});
