import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { postingsBlockThreshold } from '../../packages/engine/src/limits.js';
import { expectSameOutcome, native, ts } from './both.js';

/** Strictly ascending u32 positions, sparse or dense, short or long enough for the block form. */
const sortedPositions = (maxLength: number) =>
  fc
    .tuple(fc.array(fc.integer({ min: 1, max: 5000 }), { maxLength }), fc.nat(1000))
    .map(([gaps, start]) => {
      const positions = new Uint32Array(gaps.length);
      let at = start;
      gaps.forEach((gap, index) => {
        positions[index] = at;
        at += gap;
      });
      return positions;
    });

function randomSorted(count: number, range: number, seed: number): Uint32Array {
  const chosen = new Set<number>();
  let state = seed;
  while (chosen.size < count) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    chosen.add(state % range);
  }
  return Uint32Array.from([...chosen].sort((a, b) => a - b));
}

describe('posting lists: native and ts agree', () => {
  it('encode to the same bytes, and each decodes what the other wrote', () => {
    fc.assert(
      fc.property(sortedPositions(600), (positions) => {
        const encoded = expectSameOutcome((k) => k.postingsEncode(positions));
        if (!encoded.ok) throw new Error(`encode failed: ${encoded.code}`);
        expect(encoded.value[0]).toBe(positions.length >= postingsBlockThreshold ? 1 : 0);
        expect(native.postingsDecode(encoded.value)).toEqual(positions);
        expect(ts.postingsDecode(encoded.value)).toEqual(positions);
      }),
    );
  });

  it('handle the empty list, one position, 0 and the largest u32', () => {
    for (const list of [[], [0], [0xffff_ffff], [0, 1, 0xffff_ffff]]) {
      const positions = Uint32Array.from(list);
      const encoded = expectSameOutcome((k) => k.postingsEncode(positions));
      expect(encoded.ok && native.postingsDecode(encoded.value)).toEqual(positions);
    }
    expect(native.postingsEncode(new Uint32Array(0))).toEqual(Uint8Array.of(0, 0));
  });

  it('reject unsorted or duplicated positions with the same code', () => {
    for (const list of [[2, 1], [5, 5], [1, 2, 3, 3]]) {
      const positions = Uint32Array.from(list);
      expect(expectSameOutcome((k) => k.postingsEncode(positions))).toEqual({
        ok: false,
        code: 'POSTINGS_NOT_SORTED',
      });
      expect(expectSameOutcome((k) => k.intersect(positions, Uint32Array.of(1)))).toEqual({
        ok: false,
        code: 'POSTINGS_NOT_SORTED',
      });
      expect(expectSameOutcome((k) => k.union(Uint32Array.of(1), positions))).toEqual({
        ok: false,
        code: 'POSTINGS_NOT_SORTED',
      });
    }
  });

  it('reject damaged encodings the same way, never crashing', () => {
    const encoded = native.postingsEncode(randomSorted(300, 100_000, 3));
    for (let at = 0; at < encoded.length; at++) {
      for (const damage of [0x01, 0x80, 0xff]) {
        const damaged = encoded.slice();
        damaged[at] ^= damage;
        expectSameOutcome((k) => k.postingsDecode(damaged));
      }
      expectSameOutcome((k) => k.postingsDecode(encoded.subarray(0, at)));
    }
    const trailing = new Uint8Array(encoded.length + 1);
    trailing.set(encoded);
    expect(expectSameOutcome((k) => k.postingsDecode(trailing))).toEqual({
      ok: false,
      code: 'CORRUPT',
    });
  });

  it('intersect and union like a set model', () => {
    fc.assert(
      fc.property(sortedPositions(400), sortedPositions(400), (a, b) => {
        const inB = new Set(b);
        const expectedIntersection = a.filter((x) => inB.has(x));
        const expectedUnion = Uint32Array.from(new Set([...a, ...b])).sort();
        expect(expectSameOutcome((k) => k.intersect(a, b))).toEqual({
          ok: true,
          value: expectedIntersection,
        });
        expect(expectSameOutcome((k) => k.union(a, b))).toEqual({ ok: true, value: expectedUnion });
      }),
    );
  });

  it('gallop correctly when the sizes differ a lot (10^3 against 10^6)', () => {
    const small = randomSorted(1000, 4_000_000, 5);
    const large = randomSorted(1_000_000, 4_000_000, 9);
    const inLarge = new Set(large);
    const expected = small.filter((x) => inLarge.has(x));
    expect(native.intersect(small, large)).toEqual(expected);
    expect(ts.intersect(large, small)).toEqual(expected);
    const encoded = native.postingsEncode(large);
    expect(ts.postingsEncode(large)).toEqual(encoded);
    expect(ts.postingsDecode(encoded)).toEqual(large);
  });
});
