import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { intersectGallopRatio, postingsBlockLength, postingsBlockThreshold } from '../../packages/engine/src/limits.js';
import { branchTally, expectSame, expectSameOutcome, expectSameOutcomes, native, sameValue, ts } from './both.js';

const u32Max = 0xffff_ffff;

/** The form byte that starts each encoding (docs/formats.md). */
const plainForm = 0;
const blockForm = 1;

/**
 * Gaps between neighbouring positions: dense runs (one-byte deltas, and lists that overlap one
 * another), medium gaps (two-byte deltas) and sparse ones (three-byte deltas).
 */
const gapArb = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 1, max: 3 }) },
  { weight: 3, arbitrary: fc.integer({ min: 1, max: 5000 }) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 1 << 21 }) },
);

/**
 * The first position: near 0 mostly, sometimes past 2^28 so that the first delta takes a
 * five-byte varint, and sometimes so close to 2^32 that the list ends on the largest u32.
 */
const startArb = fc.oneof(
  { weight: 6, arbitrary: fc.nat(1000) },
  { weight: 2, arbitrary: fc.integer({ min: 2 ** 28, max: u32Max }) },
  { weight: 1, arbitrary: fc.integer({ min: u32Max - 10_000, max: u32Max }) },
);

/**
 * Strictly ascending u32 positions, exactly as many as the gap array is long. A gap that would
 * carry the list past 2^32 - 1 is cut short so that every later entry still fits, so a list that
 * starts high ends on the largest u32.
 */
const sortedPositions = (minLength: number, maxLength: number) =>
  fc.tuple(fc.array(gapArb, { minLength, maxLength, size: 'max' }), startArb).map(([gaps, start]) => {
    const positions = new Uint32Array(gaps.length);
    let at = Math.min(start, u32Max - gaps.length + 1);
    gaps.forEach((gap, index) => {
      positions[index] = at;
      at = Math.min(at + gap, u32Max - (gaps.length - 2 - index));
    });
    return positions;
  });

/**
 * Lists of 0–3,000 positions: empty and tiny ones, the plain form (below 128 entries), both
 * forms' edges (127–129 and two full blocks, 255–257), and the block form up to 24 blocks of 128.
 */
const positionsArb = fc.oneof(
  { weight: 1, arbitrary: sortedPositions(0, 2) },
  { weight: 2, arbitrary: sortedPositions(0, postingsBlockThreshold - 1) },
  { weight: 1, arbitrary: sortedPositions(postingsBlockThreshold - 1, postingsBlockThreshold + 1) },
  { weight: 1, arbitrary: sortedPositions(2 * postingsBlockLength - 1, 2 * postingsBlockLength + 1) },
  { weight: 3, arbitrary: sortedPositions(postingsBlockThreshold, 3000) },
);

/**
 * A short list drawn from a long one: `count` entries spread evenly over it, each either the long
 * list's entry (a match) or one past it (usually no match), so the pair overlaps by design. A
 * value that would not ascend past the previous one is dropped.
 */
function drawFrom(long: Uint32Array, count: number, phase: number, misses: readonly boolean[]): Uint32Array {
  if (long.length === 0 || count === 0) return new Uint32Array(0);
  const out: number[] = [];
  for (let index = 0; index < count; index++) {
    const at = Math.min(
      long.length - 1,
      Math.floor((index * long.length) / count) + (phase % Math.max(1, Math.floor(long.length / count))),
    );
    const value = long[at] + (misses[index % misses.length] && long[at] < u32Max ? 1 : 0);
    if (out.length === 0 || value > out[out.length - 1]) out.push(value);
  }
  return Uint32Array.from(out);
}

interface ListPair {
  readonly a: Uint32Array;
  readonly b: Uint32Array;
}

/**
 * A long list and a short list drawn from it (see `drawFrom`), whose length `shortLength` picks
 * from the long list's, handed over in either order.
 */
const drawnPair = (longArb: fc.Arbitrary<Uint32Array>, shortLength: (longLength: number) => fc.Arbitrary<number>) =>
  longArb
    .chain((long) => fc.tuple(fc.constant(long), shortLength(long.length)))
    .chain(([long, count]) =>
      fc.record({
        long: fc.constant(long),
        count: fc.constant(count),
        phase: fc.nat(),
        misses: fc.array(fc.boolean(), { minLength: 1, maxLength: 64, size: 'max' }),
        swap: fc.boolean(),
      }),
    )
    .map(({ long, count, phase, misses, swap }): ListPair => {
      const short = drawFrom(long, count, phase, misses);
      return swap ? { a: long, b: short } : { a: short, b: long };
    });

/**
 * Pairs of lists for intersection and union, of 0–3,000 positions:
 * - similar sizes (0–600 each, the short one above 1/24 of the long one): merged;
 * - a long list of 600–3,000 and a short one of at most 1/24 of it: galloped;
 * - the edge of the gallop ratio: a short list of 1–60 and a long one of exactly 24 times that
 *   or one less (the first gallops, the second merges); drawn 23 or more entries apart, the
 *   short list keeps all its entries, so the ratio is exact;
 * - two independent lists of 0–600 (dense ones overlap where their ranges meet);
 * - tiny lists of 0–8, around the four-entry width of the native kernels' SIMD merges.
 */
const pairArb: fc.Arbitrary<ListPair> = fc.oneof(
  {
    weight: 3,
    arbitrary: drawnPair(sortedPositions(0, 600), (n) =>
      fc.integer({ min: Math.min(n, Math.floor(n / intersectGallopRatio) + 1), max: n }),
    ),
  },
  {
    weight: 3,
    arbitrary: drawnPair(sortedPositions(600, 3000), (n) =>
      fc.integer({ min: 0, max: Math.floor(n / intersectGallopRatio) }),
    ),
  },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.integer({ min: 1, max: 60 }), fc.boolean()).chain(([count, below]) => {
      const longLength = count * intersectGallopRatio - (below ? 1 : 0);
      return drawnPair(sortedPositions(longLength, longLength), () => fc.constant(count));
    }),
  },
  { weight: 2, arbitrary: fc.record({ a: sortedPositions(0, 600), b: sortedPositions(0, 600) }) },
  { weight: 1, arbitrary: fc.record({ a: sortedPositions(0, 8), b: sortedPositions(0, 8) }) },
);

/** The set model of intersection and union. */
function modelIntersect(a: Uint32Array, b: Uint32Array): Uint32Array {
  const inB = new Set(b);
  return a.filter((x) => inB.has(x));
}

function modelUnion(a: Uint32Array, b: Uint32Array): Uint32Array {
  return Uint32Array.from(new Set([...a, ...b])).sort();
}

function randomSorted(count: number, range: number, seed: number): Uint32Array {
  const chosen = new Set<number>();
  let state = seed;
  while (chosen.size < count) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    chosen.add(state % range);
  }
  return Uint32Array.from([...chosen].sort((a, b) => a - b));
}

/**
 * Ways to damage an encoding: flip bits of a byte (anywhere, or among the first twelve bytes,
 * where the form byte, the count, the directory and the first varints are), zero a byte (which
 * turns a one-byte delta into a repeated position), truncate it (to anything, or to at most
 * twelve bytes), extend it with 1–16 bytes, overwrite 1–6 bytes, or put the other form's byte
 * (or an unknown one) first.
 */
type Damage =
  | { readonly kind: 'flip'; readonly at: number; readonly mask: number; readonly nearStart: boolean }
  | { readonly kind: 'zero'; readonly at: number; readonly nearStart: boolean }
  | { readonly kind: 'truncate'; readonly keep: number; readonly nearStart: boolean }
  | { readonly kind: 'extend'; readonly bytes: Uint8Array }
  | { readonly kind: 'overwrite'; readonly at: number; readonly bytes: Uint8Array; readonly nearStart: boolean }
  | { readonly kind: 'form'; readonly form: number };

const headBytes = 12;

const damageArb: fc.Arbitrary<Damage> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('flip' as const),
      at: fc.nat(),
      mask: fc.integer({ min: 1, max: 255 }),
      nearStart: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('zero' as const), at: fc.nat(), nearStart: fc.boolean() }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('truncate' as const), keep: fc.nat(), nearStart: fc.boolean() }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('extend' as const),
      bytes: fc.uint8Array({ minLength: 1, maxLength: 16, size: 'max' }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('overwrite' as const),
      at: fc.nat(),
      bytes: fc.uint8Array({ minLength: 1, maxLength: 6, size: 'max' }),
      nearStart: fc.boolean(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('form' as const),
      form: fc.constantFrom(plainForm, blockForm, 2, 0x80, 0xff),
    }),
  },
);

function applyDamage(encoded: Uint8Array, damage: Damage): Uint8Array {
  const where = (at: number, nearStart: boolean, length: number) =>
    at % Math.max(1, nearStart ? Math.min(length, headBytes) : length);
  switch (damage.kind) {
    case 'flip': {
      const damaged = encoded.slice();
      if (damaged.length > 0) damaged[where(damage.at, damage.nearStart, damaged.length)] ^= damage.mask;
      return damaged;
    }
    case 'zero': {
      const damaged = encoded.slice();
      if (damaged.length > 0) damaged[where(damage.at, damage.nearStart, damaged.length)] = 0;
      return damaged;
    }
    case 'truncate':
      return encoded.slice(0, where(damage.keep, damage.nearStart, encoded.length));
    case 'extend': {
      const damaged = new Uint8Array(encoded.length + damage.bytes.length);
      damaged.set(encoded);
      damaged.set(damage.bytes, encoded.length);
      return damaged;
    }
    case 'overwrite': {
      const damaged = encoded.slice();
      const at = where(damage.at, damage.nearStart, damaged.length);
      damaged.set(damage.bytes.subarray(0, Math.max(0, damaged.length - at)), at);
      return damaged;
    }
    case 'form': {
      const damaged = encoded.slice();
      if (damaged.length > 0) damaged[0] = damage.form;
      return damaged;
    }
  }
}

/** The ts kernel's reasons for rejecting an encoding (by its messages), as branch names. */
const decodeRejections = [
  ['it is empty', 'empty input'],
  ['a varint runs past the end', 'varint runs past the end'],
  ['a varint exceeds 32 bits', 'varint exceeds 32 bits'],
  ['a varint is longer than 5 bytes', 'varint longer than 5 bytes'],
  ['exceeds the input size', 'count exceeds the input size'],
  ['a long list uses the plain form', 'long list in the plain form'],
  ['a short list uses the block form', 'short list in the block form'],
  ['unknown form byte', 'unknown form byte'],
  ['positions do not ascend strictly', 'zero delta'],
  ['a position exceeds 32 bits', 'position exceeds 32 bits'],
  ['disagrees with the directory', 'block disagrees with the directory'],
  ['has the wrong length', 'block has the wrong length'],
  ['trailing bytes', 'trailing bytes'],
] as const;

type DecodeRejection = (typeof decodeRejections)[number][1];

function rejectionOf(message: string): DecodeRejection {
  const found = decodeRejections.find(([text]) => message.includes(text));
  if (!found) throw new Error(`an unexpected rejection: ${message}`);
  return found[1];
}

describe('posting lists: native and ts agree', () => {
  it('encode to the same bytes, and each decodes what the other wrote', () => {
    const tally = branchTally('encode', [
      'empty list',
      'plain form',
      'block form, one block',
      'block form, several blocks',
      'block form, last block partial',
      'block form, last block full',
      'five-byte varint',
      'largest u32',
    ]);
    // Lists of 0–3,000 positions (see positionsArb): both forms, one block and many.
    fc.assert(
      fc.property(positionsArb, (positions) => {
        const encoded = expectSameOutcome((k) => k.postingsEncode(positions));
        if (!encoded.ok) throw new Error(`encode failed: ${encoded.code}`);
        const form = encoded.value[0];
        expect(form).toBe(positions.length >= postingsBlockThreshold ? blockForm : plainForm);
        const blocks = Math.ceil(positions.length / postingsBlockLength);
        tally.hit('empty list', positions.length === 0);
        tally.hit('plain form', form === plainForm && positions.length > 0);
        tally.hit('block form, one block', form === blockForm && blocks === 1);
        tally.hit('block form, several blocks', form === blockForm && blocks > 1);
        tally.hit('block form, last block partial', form === blockForm && positions.length % postingsBlockLength !== 0);
        tally.hit(
          'block form, last block full',
          form === blockForm && blocks > 1 && positions.length % postingsBlockLength === 0,
        );
        tally.hit('five-byte varint', positions.length > 0 && positions[0] >= 2 ** 28);
        tally.hit('largest u32', positions.length > 0 && positions[positions.length - 1] === u32Max);
        expectSame(native.postingsDecode(encoded.value), positions);
        expectSame(ts.postingsDecode(encoded.value), positions);
      }),
      { numRuns: 400 },
    );
    tally.expectAllReached();
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
    for (const list of [
      [2, 1],
      [5, 5],
      [1, 2, 3, 3],
    ]) {
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

  it('reject generated unsorted lists the same way, in either argument', () => {
    const tally = branchTally('unsorted input', [
      'duplicate',
      'descending pair',
      'first argument',
      'second argument',
      'long list (block form size)',
    ]);
    // A sorted list of 2–3,000 positions with one entry made equal to, or less than, the one
    // before it, anywhere in the list (so the check must scan long lists to the end).
    const unsortedArb = fc
      .tuple(fc.oneof(sortedPositions(2, 127), sortedPositions(128, 3000)), fc.nat(), fc.boolean())
      .filter(([positions]) => positions.length >= 2)
      .map(([positions, at, duplicate]) => {
        const damaged = positions.slice();
        const index = 1 + (at % (damaged.length - 1));
        damaged[index] = duplicate ? damaged[index - 1] : Math.max(0, damaged[index - 1] - 1 - (at % 7));
        return { damaged, duplicate, length: damaged.length };
      });
    fc.assert(
      fc.property(
        unsortedArb,
        sortedPositions(0, 600),
        fc.boolean(),
        ({ damaged, duplicate, length }, other, first) => {
          tally.hit(duplicate ? 'duplicate' : 'descending pair');
          tally.hit(first ? 'first argument' : 'second argument');
          tally.hit('long list (block form size)', length >= postingsBlockThreshold);
          const notSorted = { ok: false, code: 'POSTINGS_NOT_SORTED' };
          const [a, b] = first ? [damaged, other] : [other, damaged];
          expect(expectSameOutcome((k) => k.postingsEncode(damaged))).toEqual(notSorted);
          expect(expectSameOutcome((k) => k.intersect(a, b))).toEqual(notSorted);
          expect(expectSameOutcome((k) => k.union(a, b))).toEqual(notSorted);
        },
      ),
      { numRuns: 300 },
    );
    tally.expectAllReached();
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

  it('decode generated damaged encodings alike: the same positions or the same error', () => {
    // A damaged block-form list practically never decodes (its directory pins every block's last
    // position and byte length), so only plain-form lists are expected to decode anyway.
    const tally = branchTally('damaged decode', [
      'decoded anyway',
      'decoded anyway, through an overlong varint',
      ...decodeRejections.map(([, branch]) => branch),
    ]);
    // Real encodings of 0–3,000 positions (both forms), with one to three damages each.
    const damagedArb = fc
      .tuple(positionsArb, fc.array(damageArb, { minLength: 1, maxLength: 3, size: 'max' }))
      .map(([positions, damages]) => {
        let bytes = native.postingsEncode(positions);
        for (const damage of damages) bytes = applyDamage(bytes, damage);
        return bytes;
      });
    fc.assert(
      fc.property(damagedArb, (damaged) => {
        const { native: fromNative, ts: fromTs } = expectSameOutcomes((k) => k.postingsDecode(damaged));
        if (fromTs.ok) {
          // Whatever decodes is a valid list: it encodes without complaint, and its encoding
          // decodes to it again. The bytes may differ from the damaged ones: both kernels accept
          // a varint with needless continuation bytes (0x81 0x00 for 1), which the format's
          // five-byte bound allows, and read it as the shortest form would.
          expect(fromNative.ok).toBe(true);
          const reencoded = native.postingsEncode(fromTs.value);
          expectSame(ts.postingsDecode(reencoded), fromTs.value);
          tally.hit(sameValue(reencoded, damaged) ? 'decoded anyway' : 'decoded anyway, through an overlong varint');
        } else {
          expect(fromTs.code).toBe('CORRUPT');
          tally.hit(rejectionOf(fromTs.message));
        }
      }),
      { numRuns: 3000 },
    );
    tally.expectAllReached();
  });

  it('intersect and union like a set model', () => {
    const tally = branchTally('intersect and union', [
      'intersect: a list is empty',
      'intersect: merged',
      'intersect: galloped',
      'intersect: galloped at exactly the ratio',
      'intersect: merged one below the ratio',
      'intersect: merged, overlapping',
      'intersect: galloped, overlapping',
      'intersect: disjoint non-empty lists',
      'intersect: the short list is a subset',
      'intersect: the shorter list first',
      'intersect: the longer list first',
      'union: a list is empty',
      'union: merged, both lists of 4 or more',
      'union: merged, a list shorter than 4',
      'union: galloped',
      'block form sizes (128 or more)',
    ]);
    // Pairs of 0–3,000 positions built to overlap and to reach both the merge and the gallop.
    fc.assert(
      fc.property(pairArb, ({ a, b }) => {
        const [short, long] = a.length <= b.length ? [a, b] : [b, a];
        const galloped = short.length > 0 && short.length * intersectGallopRatio <= long.length;
        const expectedIntersection = modelIntersect(a, b);
        const intersection = expectSameOutcome((k) => k.intersect(a, b));
        expectSame(intersection, { ok: true, value: expectedIntersection });
        expectSame(
          expectSameOutcome((k) => k.union(a, b)),
          { ok: true, value: modelUnion(a, b) },
        );

        const overlapping = expectedIntersection.length > 0;
        tally.hit('intersect: a list is empty', short.length === 0);
        tally.hit('intersect: merged', short.length > 0 && !galloped);
        tally.hit('intersect: galloped', galloped);
        tally.hit(
          'intersect: galloped at exactly the ratio',
          short.length > 0 && long.length === short.length * intersectGallopRatio,
        );
        tally.hit(
          'intersect: merged one below the ratio',
          short.length > 0 && long.length === short.length * intersectGallopRatio - 1,
        );
        tally.hit('intersect: merged, overlapping', short.length > 0 && !galloped && overlapping);
        tally.hit('intersect: galloped, overlapping', galloped && overlapping);
        tally.hit('intersect: disjoint non-empty lists', short.length > 0 && !overlapping);
        tally.hit(
          'intersect: the short list is a subset',
          short.length > 0 && expectedIntersection.length === short.length,
        );
        tally.hit('intersect: the shorter list first', short.length > 0 && a.length < b.length);
        tally.hit('intersect: the longer list first', short.length > 0 && a.length > b.length);
        tally.hit('union: a list is empty', short.length === 0 && long.length > 0);
        tally.hit('union: merged, both lists of 4 or more', !galloped && short.length >= 4);
        tally.hit('union: merged, a list shorter than 4', !galloped && short.length > 0 && short.length < 4);
        tally.hit('union: galloped', galloped);
        tally.hit('block form sizes (128 or more)', long.length >= postingsBlockThreshold);
      }),
      { numRuns: 600 },
    );
    tally.expectAllReached();
  });

  it('gallop correctly when the sizes differ a lot (10^3 against 10^6)', () => {
    const small = randomSorted(1000, 4_000_000, 5);
    const large = randomSorted(1_000_000, 4_000_000, 9);
    const inLarge = new Set(large);
    const expected = small.filter((x) => inLarge.has(x));
    // Compared byte for byte: a deep equality over a million entries takes seconds.
    expectSame(native.intersect(small, large), expected);
    expectSame(ts.intersect(large, small), expected);
    const encoded = native.postingsEncode(large);
    expectSame(ts.postingsEncode(large), encoded);
    expectSame(ts.postingsDecode(encoded), large);
  });
});
