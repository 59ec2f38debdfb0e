import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { FstRange } from '../../packages/engine/src/kernels/index.js';
import { type FstRejection, fstRejectionIn, fstRejections, widestNode } from '../support/fst-shapes.js';
import { branchTally, encoder, expectSame, expectSameOutcome, expectSameOutcomes, native, pack, ts } from './both.js';

/** Sorts byte strings lexicographically and drops duplicates, as an FST's keys must be. */
function sortedUnique(keys: Uint8Array[]): Uint8Array[] {
  const compare = (a: Uint8Array, b: Uint8Array) => Buffer.compare(a, b);
  const sorted = [...keys].sort(compare);
  return sorted.filter((key, index) => index === 0 || compare(key, sorted[index - 1]) !== 0);
}

function build(keys: Uint8Array[], values?: number[]) {
  const packed = pack(keys);
  const valueArray = Float64Array.from(values ?? keys.map((_, index) => index * 7 + (index % 3) * 1_000_003));
  const fromNative = native.fstBuild(packed, valueArray);
  const fromTs = ts.fstBuild(packed, valueArray);
  return { packed, valueArray, fromNative, fromTs };
}

function tagKeys(count: number, seed: number): Uint8Array[] {
  let state = seed >>> 0;
  const keys: Uint8Array[] = [];
  for (let index = 0; index < count; index++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    keys.push(encoder.encode(`${['course', 'student', 'order'][state % 3]}:${state.toString(36)}:${index % 97}`));
  }
  return sortedUnique(keys);
}

/** Bytes two byte strings share at their start. */
function sharedPrefix(left: Uint8Array, right: Uint8Array): number {
  let shared = 0;
  while (shared < left.length && shared < right.length && left[shared] === right[shared]) shared++;
  return shared;
}

/**
 * Keys of three kinds, so maps hold both wide nodes and long shared paths:
 * - any bytes, 0–24 of them (first bytes spread over all 256, so the root is wide);
 * - one of a run's 1–8 prefixes (0–40 bytes each) followed by 0–8 more bytes: many keys share
 *   long prefixes and branch near their ends;
 * - now and then a long key, 64–300 bytes.
 */
const keyListArb = (minKeys: number, maxKeys: number) =>
  fc
    .tuple(
      fc.array(fc.uint8Array({ maxLength: 40, size: 'max' }), { minLength: 1, maxLength: 8, size: 'max' }),
      fc.array(
        fc.oneof(
          {
            weight: 8,
            arbitrary: fc.uint8Array({ maxLength: 24, size: 'max' }).map((bytes) => ({ prefix: -1, bytes })),
          },
          {
            weight: 10,
            arbitrary: fc
              .tuple(fc.nat(), fc.uint8Array({ maxLength: 8, size: 'max' }))
              .map(([prefix, bytes]) => ({ prefix, bytes })),
          },
          {
            weight: 1,
            arbitrary: fc
              .uint8Array({ minLength: 64, maxLength: 300, size: 'max' })
              .map((bytes) => ({ prefix: -1, bytes })),
          },
        ),
        { minLength: minKeys, maxLength: maxKeys, size: 'max' },
      ),
    )
    .map(([prefixes, specs]) =>
      sortedUnique(
        specs.map(({ prefix, bytes }) => {
          if (prefix < 0) return bytes;
          const head = prefixes[prefix % prefixes.length];
          const key = new Uint8Array(head.length + bytes.length);
          key.set(head);
          key.set(bytes, head.length);
          return key;
        }),
      ),
    );

/**
 * Maps of up to `maxKeys` keys: none or one key now and then (edges of their own), a few dozen
 * often, and hundreds to `maxKeys` most of the time.
 */
const keysArb = (maxKeys: number) =>
  fc.oneof(
    { weight: 2, arbitrary: keyListArb(0, 0) },
    { weight: 2, arbitrary: keyListArb(1, 1) },
    { weight: 3, arbitrary: keyListArb(2, 100) },
    { weight: 6, arbitrary: keyListArb(100, maxKeys) },
  );

/** Values of every packed width: 0, small, u32, and up to 2^53 - 1. */
const valuesArb = fc.array(
  fc.oneof(fc.constant(0), fc.nat(300), fc.integer({ min: 0, max: 0xffff_ffff }), fc.maxSafeNat()),
  { minLength: 1, maxLength: 64, size: 'max' },
);

/**
 * A range over a map, its bounds and prefix taken from the map's own keys (cut short, or one
 * past them) or from 0–4 random bytes, so they land on, between and around real keys.
 */
interface BoundSpec {
  readonly pick: number;
  readonly cut: number;
  readonly bump: boolean;
  readonly random: Uint8Array | undefined;
}

const boundSpecArb: fc.Arbitrary<BoundSpec | undefined> = fc.option(
  fc.record({
    pick: fc.nat(),
    cut: fc.nat(6),
    bump: fc.boolean(),
    random: fc.option(fc.uint8Array({ maxLength: 4, size: 'max' }), { nil: undefined, freq: 3 }),
  }),
  { nil: undefined, freq: 2 },
);

interface RangeSpec {
  readonly gte: BoundSpec | undefined;
  readonly gt: BoundSpec | undefined;
  readonly lte: BoundSpec | undefined;
  readonly lt: BoundSpec | undefined;
  readonly prefix: BoundSpec | undefined;
  readonly limit: number | undefined;
}

const rangeSpecArb: fc.Arbitrary<RangeSpec> = fc.record({
  gte: boundSpecArb,
  gt: boundSpecArb,
  lte: boundSpecArb,
  lt: boundSpecArb,
  prefix: boundSpecArb,
  limit: fc.option(fc.oneof(fc.nat(3), fc.nat(500)), { nil: undefined }),
});

function resolveBound(keys: readonly Uint8Array[], spec: BoundSpec | undefined): Uint8Array | undefined {
  if (spec === undefined) return undefined;
  if (spec.random !== undefined || keys.length === 0) return spec.random ?? new Uint8Array(0);
  const key = keys[spec.pick % keys.length];
  const bound = key.slice(0, Math.max(0, key.length - spec.cut));
  if (spec.bump && bound.length > 0 && bound[bound.length - 1] < 255) bound[bound.length - 1]++;
  return bound;
}

function resolveRange(keys: readonly Uint8Array[], spec: RangeSpec): FstRange {
  const range: { -readonly [K in keyof FstRange]: FstRange[K] } = {};
  for (const name of ['gte', 'gt', 'lte', 'lt', 'prefix'] as const) {
    const bound = resolveBound(keys, spec[name]);
    if (bound !== undefined) range[name] = bound;
  }
  if (spec.limit !== undefined) range.limit = spec.limit;
  return range;
}

/**
 * Damage to an FST: bits flipped in its nodes (which only verify's checksum notices, so the
 * readers walk damaged nodes), its 16-byte header or its 20-byte footer; truncation; extension;
 * 1–16 bytes overwritten among the nodes; another version byte; or a downgrade to version 2,
 * which has no checksum (the last four bytes dropped, the version byte set to 2).
 */
type FstDamage =
  | {
      readonly kind: 'flip';
      readonly region: 'nodes' | 'header' | 'footer';
      readonly at: number;
      readonly mask: number;
    }
  | { readonly kind: 'truncate'; readonly keep: number }
  | { readonly kind: 'extend'; readonly bytes: Uint8Array }
  | { readonly kind: 'overwrite'; readonly at: number; readonly bytes: Uint8Array }
  | { readonly kind: 'version'; readonly version: number }
  | { readonly kind: 'downgrade' };

const fstDamageArb: fc.Arbitrary<FstDamage> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('flip' as const),
      region: fc.constantFrom(
        'nodes' as const,
        'nodes' as const,
        'nodes' as const,
        'header' as const,
        'footer' as const,
      ),
      at: fc.nat(),
      mask: fc.integer({ min: 1, max: 255 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('truncate' as const), keep: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('extend' as const),
      bytes: fc.uint8Array({ minLength: 1, maxLength: 32, size: 'max' }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('overwrite' as const),
      at: fc.nat(),
      bytes: fc.uint8Array({ minLength: 1, maxLength: 16, size: 'max' }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('version' as const), version: fc.constantFrom(0, 1, 2, 4, 255) }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: 'downgrade' as const }) },
);

/** A position among the nodes (between the header and the footer), or anywhere in a small file. */
function nodePosition(length: number, at: number): number {
  const nodes = length - 16 - 20;
  return nodes > 0 ? 16 + (at % nodes) : at % Math.max(1, length);
}

function applyFstDamage(fst: Uint8Array, damage: FstDamage): Uint8Array {
  const length = fst.length;
  switch (damage.kind) {
    case 'flip': {
      if (length === 0) return fst;
      const damaged = fst.slice();
      const at =
        damage.region === 'header'
          ? damage.at % Math.min(16, length)
          : damage.region === 'footer'
            ? length - 1 - (damage.at % Math.min(20, length))
            : nodePosition(length, damage.at);
      damaged[at] ^= damage.mask;
      return damaged;
    }
    case 'truncate':
      return fst.slice(0, damage.keep % (length + 1));
    case 'extend': {
      const damaged = new Uint8Array(length + damage.bytes.length);
      damaged.set(fst);
      damaged.set(damage.bytes, length);
      return damaged;
    }
    case 'overwrite': {
      const damaged = fst.slice();
      const at = nodePosition(length, damage.at);
      damaged.set(damage.bytes.subarray(0, Math.max(0, length - at)), at);
      return damaged;
    }
    case 'version': {
      const damaged = fst.slice();
      if (length > 0) damaged[0] = damage.version;
      return damaged;
    }
    case 'downgrade': {
      const damaged = fst.slice(0, Math.max(0, length - 4));
      if (damaged.length > 0) damaged[0] = 2;
      return damaged;
    }
  }
}

/**
 * Rejections that damaged nodes reach too seldom to demand in every run: a value pushed past
 * 2^53 - 1 and a range scan that exhausts its step budget. They are counted and printed.
 */
const rareFstRejections = [
  'value not a safe integer',
  'range scan ran out of steps',
] as const satisfies readonly FstRejection[];
const requiredFstRejections = fstRejections
  .map(([, branch]) => branch)
  .filter(
    (branch): branch is Exclude<FstRejection, (typeof rareFstRejections)[number]> =>
      !(rareFstRejections as readonly string[]).includes(branch),
  );

function fstRejectionOf(message: string): FstRejection {
  const found = fstRejectionIn(message);
  if (!found) throw new Error(`an unexpected rejection: ${message}`);
  return found;
}

describe('FST term dictionary: native and ts agree byte for byte', () => {
  it('build the same bytes for random keys, and each reads what the other built', () => {
    const tally = branchTally('fst build and read', [
      'empty map',
      'one key',
      '2–99 keys',
      '100–999 keys',
      '1,000 keys or more',
      'the empty key',
      'a shared prefix of 8 bytes or more',
      'a node with more than 32 transitions',
      'a key of 64 bytes or more',
      'a value past 2^32',
      'a probe found',
      'a probe absent',
      'a range with entries',
      'a range with none',
      'a range cut by its limit',
      'a prefix range with entries',
    ]);
    // Maps of 0–2,000 keys (see keysArb): wide nodes, long shared prefixes and long keys.
    fc.assert(
      fc.property(
        keysArb(2000),
        valuesArb,
        fc.array(fc.uint8Array({ maxLength: 12, size: 'max' }), { maxLength: 20, size: 'max' }),
        fc.array(rangeSpecArb, { minLength: 1, maxLength: 6, size: 'max' }),
        (keys, valuePool, extraProbes, rangeSpecs) => {
          const values = keys.map((_, index) => valuePool[index % valuePool.length]);
          const { packed, fromNative, fromTs } = build(keys, values);
          expectSame(fromTs, fromNative);
          tally.hit('empty map', keys.length === 0);
          tally.hit('one key', keys.length === 1);
          tally.hit('2–99 keys', keys.length >= 2 && keys.length < 100);
          tally.hit('100–999 keys', keys.length >= 100 && keys.length < 1000);
          tally.hit('1,000 keys or more', keys.length >= 1000);
          tally.hit('the empty key', keys.length > 0 && keys[0].length === 0);
          tally.hit(
            'a shared prefix of 8 bytes or more',
            keys.some((key, index) => index > 0 && sharedPrefix(keys[index - 1], key) >= 8),
          );
          tally.hit('a node with more than 32 transitions', widestNode(keys) > 32);
          tally.hit(
            'a key of 64 bytes or more',
            keys.some((key) => key.length >= 64),
          );
          tally.hit(
            'a value past 2^32',
            values.some((value) => value > 0xffff_ffff),
          );
          // Each kernel reads what the other built: every key in one batched call, a few alone.
          expectSame(ts.fstGetMany(fromNative, packed), Float64Array.from(values));
          expectSame(native.fstGetMany(fromTs, packed), Float64Array.from(values));
          expect(ts.fstLength(fromNative)).toBe(keys.length);
          for (const index of [0, keys.length >> 1, keys.length - 1]) {
            if (index < 0 || index >= keys.length) continue;
            expect(ts.fstGet(fromNative, keys[index])).toBe(values[index]);
            expect(native.fstGet(fromTs, keys[index])).toBe(values[index]);
          }
          const probes = pack(extraProbes);
          const found = expectSameOutcome((k) => k.fstGetMany(fromNative, probes));
          if (found.ok) {
            tally.hit(
              'a probe found',
              found.value.some((value) => value >= 0),
            );
            tally.hit(
              'a probe absent',
              found.value.some((value) => value < 0),
            );
          }
          for (const spec of rangeSpecs) {
            const range = resolveRange(keys, spec);
            const entries = expectSameOutcome((k) => k.fstRange(fromNative, range));
            if (!entries.ok) throw new Error(`range failed: ${entries.code}`);
            const count = entries.value.values.length;
            tally.hit('a range with entries', count > 0);
            tally.hit('a range with none', count === 0);
            tally.hit('a prefix range with entries', range.prefix !== undefined && count > 0);
            if (range.limit !== undefined && count === range.limit) {
              const unlimited = native.fstRange(fromNative, { ...range, limit: undefined });
              tally.hit('a range cut by its limit', unlimited.values.length > count);
            }
          }
        },
      ),
      { numRuns: 120 },
    );
    tally.expectAllReached();
  });

  it('agree on the empty map, a single key, the empty key, long keys and non-UTF-8 bytes', () => {
    const cases: Uint8Array[][] = [
      [],
      [encoder.encode('only')],
      [new Uint8Array(0)],
      [new Uint8Array(0), Uint8Array.of(0), Uint8Array.of(0, 0), Uint8Array.of(255)],
      sortedUnique(Array.from({ length: 50 }, (_, index) => encoder.encode(`${'long-prefix/'.repeat(90)}${index}`))),
      sortedUnique(
        Array.from({ length: 300 }, (_, index) => Uint8Array.of(0xff, 0xfe, index % 256, (index * 31) % 256, 0x80)),
      ),
    ];
    for (const keys of cases) {
      const { fromNative, fromTs } = build(keys);
      expect(fromTs).toEqual(fromNative);
      expect(() => native.fstVerify(fromTs)).not.toThrow();
      expect(() => ts.fstVerify(fromNative)).not.toThrow();
    }
  });

  it('agree at 10^5 keys (registry evictions included), for gets, many-gets, prefixes and ranges', () => {
    const keys = tagKeys(100_000, 9);
    const { packed, valueArray, fromNative, fromTs } = build(keys);
    expect(Buffer.from(fromTs).equals(Buffer.from(fromNative))).toBe(true);
    const probes = pack([
      ...keys.filter((_, index) => index % 101 === 0),
      encoder.encode('missing:key'),
      encoder.encode(''),
    ]);
    expect(ts.fstGetMany(fromNative, probes)).toEqual(native.fstGetMany(fromNative, probes));
    for (const range of [
      { prefix: encoder.encode('course:1') },
      { gte: encoder.encode('order:'), lt: encoder.encode('order:2'), limit: 500 },
      { gt: keys[500], lte: keys[900] },
      { prefix: encoder.encode('student:'), gte: encoder.encode('student:5'), limit: 10 },
    ]) {
      const fromNativeRange = native.fstRange(fromNative, range);
      const fromTsRange = ts.fstRange(fromNative, range);
      expect(fromTsRange.values).toEqual(fromNativeRange.values);
      expect(Buffer.from(fromTsRange.bytes).equals(Buffer.from(fromNativeRange.bytes))).toBe(true);
      expect(fromTsRange.ends).toEqual(fromNativeRange.ends);
    }
    const all = native.fstRange(fromTs, {});
    expect(all.values).toEqual(valueArray);
    expect(Buffer.from(all.bytes).equals(Buffer.from(packed.bytes))).toBe(true);
  });

  it('refuse keys out of order or duplicated, and bad values, with the same code', () => {
    const a = encoder.encode('a');
    const b = encoder.encode('b');
    for (const keys of [
      [b, a],
      [a, a],
      [a, b, b],
    ]) {
      expect(expectSameOutcome((k) => k.fstBuild(pack(keys), new Float64Array(keys.length)))).toEqual({
        ok: false,
        code: 'FST_KEY_ORDER',
      });
    }
    for (const value of [-1, 0.5, 2 ** 53, Number.NaN]) {
      expect(expectSameOutcome((k) => k.fstBuild(pack([a]), Float64Array.of(value)))).toEqual({
        ok: false,
        code: 'INVALID_ARGUMENT',
      });
    }
  });

  it('both detect every flipped byte with verify, and never crash reading damaged bytes', () => {
    const { fromNative } = build(tagKeys(300, 4));
    for (let at = 0; at < fromNative.length; at++) {
      const damaged = fromNative.slice();
      damaged[at] ^= 0x41;
      expect(expectSameOutcome((k) => k.fstVerify(damaged))).toEqual({ ok: false, code: 'CORRUPT' });
      for (const kernels of [native, ts]) {
        try {
          kernels.fstGet(damaged, encoder.encode('course:x'));
          kernels.fstRange(damaged, { limit: 50 });
        } catch (error) {
          expect((error as { code?: string }).code).toBe('CORRUPT');
        }
      }
    }
  });

  it('read generated damaged FSTs alike: the same answers or the same error', () => {
    const tally = branchTally(
      'damaged fst',
      [
        'flip in the header',
        'flip in the footer',
        'flip in the nodes',
        'truncated',
        'extended',
        'overwritten',
        'version changed',
        'downgraded to version 2',
        'longer than the 36-byte guard',
        'opened despite the damage',
        'a reader answered despite the damage',
        ...requiredFstRejections,
      ],
      rareFstRejections,
    );
    // Real maps of 0–400 keys (see keysArb), each damaged one to three times.
    fc.assert(
      fc.property(
        keysArb(400),
        fc.array(fstDamageArb, { minLength: 1, maxLength: 3, size: 'max' }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 4, size: 'max' }),
        rangeSpecArb,
        (keys, damages, picks, rangeSpec) => {
          let damaged = native.fstBuild(
            pack(keys),
            Float64Array.from(keys, (_, index) => index * 1009),
          );
          for (const damage of damages) {
            damaged = applyFstDamage(damaged, damage);
            tally.hit(
              damage.kind === 'flip'
                ? damage.region === 'header'
                  ? 'flip in the header'
                  : damage.region === 'footer'
                    ? 'flip in the footer'
                    : 'flip in the nodes'
                : damage.kind === 'truncate'
                  ? 'truncated'
                  : damage.kind === 'extend'
                    ? 'extended'
                    : damage.kind === 'overwrite'
                      ? 'overwritten'
                      : damage.kind === 'version'
                        ? 'version changed'
                        : 'downgraded to version 2',
            );
          }
          tally.hit('longer than the 36-byte guard', damaged.length > 36);
          // Real keys (some of which the damage may have lost) and a key that was never there:
          // a few alone, and every key in one batch, which walks every path of the damaged nodes.
          const neverAKey = encoder.encode('never a key');
          const probes = [
            ...picks.map((pick) => (keys.length === 0 ? new Uint8Array(0) : keys[pick % keys.length])),
            neverAKey,
          ];
          const outcomes = [
            expectSameOutcomes((k) => k.fstVerify(damaged)).ts,
            expectSameOutcomes((k) => k.fstLength(damaged)).ts,
            ...probes.map((probe) => expectSameOutcomes((k) => k.fstGet(damaged, probe)).ts),
            expectSameOutcomes((k) => k.fstGetMany(damaged, pack([...keys, neverAKey]))).ts,
            expectSameOutcomes((k) => k.fstRange(damaged, { limit: 50 })).ts,
            expectSameOutcomes((k) => k.fstRange(damaged, resolveRange(keys, rangeSpec))).ts,
          ];
          const [, length, ...readers] = outcomes;
          tally.hit('opened despite the damage', length.ok);
          tally.hit(
            'a reader answered despite the damage',
            readers.some((outcome) => outcome.ok),
          );
          for (const outcome of outcomes) {
            if (outcome.ok) continue;
            expect(outcome.code).toBe('CORRUPT');
            tally.hit(fstRejectionOf(outcome.message));
          }
        },
      ),
      { numRuns: 600 },
    );
    tally.expectAllReached();
  });
});
