import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { branchTally } from '../../../test/support/branches.js';
import { type FstRejection, fstRejectionIn, widestNode } from '../../../test/support/fst-shapes.js';
import { isStreamStackError } from '../src/errors.js';
import type { FstEntries, FstRange, PackedBytes } from '../src/kernels/kernels.js';
import { crc32c } from '../src/kernels/ts/crc.js';
import { fstBuild, fstGet, fstGetMany, fstLength, fstRange, fstVerify } from '../src/kernels/ts/fst.js';

// ---------------------------------------------------------------------------------------------
// Helpers.

const encoder = new TextEncoder();

/** Bytes of an FST's header (version, type). */
const headerBytes = 16;

/** Bytes of an FST's footer after the nodes (key count, root address, checksum). */
const footerBytes = 20;

/** Byte strings in lexicographic order, the order the FST keeps. */
function compareBytes(left: Uint8Array, right: Uint8Array): number {
  const shorter = Math.min(left.length, right.length);
  for (let index = 0; index < shorter; index++) {
    if (left[index] !== right[index]) return left[index] - right[index];
  }
  return left.length - right.length;
}

function pack(keys: readonly Uint8Array[]): PackedBytes {
  const bytes = new Uint8Array(keys.reduce((total, key) => total + key.length, 0));
  const ends = new Uint32Array(keys.length);
  let offset = 0;
  keys.forEach((key, index) => {
    bytes.set(key, offset);
    offset += key.length;
    ends[index] = offset;
  });
  return { bytes, ends };
}

function unpack(entries: FstEntries): [number[], number][] {
  const result: [number[], number][] = [];
  let start = 0;
  entries.ends.forEach((end, index) => {
    result.push([[...entries.bytes.subarray(start, end)], entries.values[index]]);
    start = end;
  });
  return result;
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

/** A map as sorted unique entries: the in-memory model the FST must agree with. */
type Model = [Uint8Array, number][];

function modelOf(entries: Iterable<[Uint8Array, number]>): Model {
  const byHex = new Map<string, [Uint8Array, number]>();
  for (const [key, value] of entries) byHex.set(hex(key), [key, value]);
  return [...byHex.values()].sort((left, right) => compareBytes(left[0], right[0]));
}

function buildModel(model: Model): Uint8Array {
  const values = Float64Array.from(model, ([, value]) => value);
  return fstBuild(pack(model.map(([key]) => key)), values);
}

function startsWith(key: Uint8Array, prefix: Uint8Array): boolean {
  return key.length >= prefix.length && compareBytes(key.subarray(0, prefix.length), prefix) === 0;
}

/** What `fstRange` must return, by filtering every entry. */
function modelRange(model: Model, range: FstRange): [number[], number][] {
  const matching = model.filter(
    ([key]) =>
      (range.gte === undefined || compareBytes(key, range.gte) >= 0) &&
      (range.gt === undefined || compareBytes(key, range.gt) > 0) &&
      (range.lte === undefined || compareBytes(key, range.lte) <= 0) &&
      (range.lt === undefined || compareBytes(key, range.lt) < 0) &&
      (range.prefix === undefined || startsWith(key, range.prefix)),
  );
  const limited = matching.slice(0, range.limit ?? matching.length);
  return limited.map(([key, value]) => [[...key], value]);
}

const isValue = (number: number) => Number.isSafeInteger(number) && number >= 0;

/**
 * Runs `action`; it must succeed or throw a StreamStackError with `code`. A success must be sane:
 * out-of-range reads of a typed array give `undefined` rather than throwing, so a reader that
 * strayed would show up as NaN among the numbers it returns.
 */
function succeedsOrThrows(code: string, action: () => unknown): { ok: true } | { ok: false; error: unknown } {
  let result: unknown;
  try {
    result = action();
  } catch (error) {
    if (!isStreamStackError(error) || error.code !== code) throw error;
    return { ok: false, error };
  }
  if (typeof result === 'number') expect(isValue(result)).toBe(true);
  if (result instanceof Float64Array) {
    for (const number of result) expect(number === -1 || isValue(number)).toBe(true);
  }
  // Entries from a corrupt file need not be in order (its transitions need not be), but their
  // values must still be numbers the format can hold.
  if (result !== null && typeof result === 'object' && 'ends' in result) {
    for (const number of (result as FstEntries).values) expect(isValue(number)).toBe(true);
  }
  return { ok: true };
}

/**
 * `bytes` behind a proxy that throws on any indexed read outside them. A typed array answers such
 * a read with `undefined`, which integer arithmetic turns into 0, so a reader that strays past the
 * bounds of a corrupt file would otherwise go unnoticed.
 */
function strictBytes(bytes: Uint8Array): Uint8Array {
  return new Proxy(bytes, {
    get(target, property) {
      if (typeof property === 'string') {
        const index = Number(property);
        if (property === 'NaN' || (property.trim() !== '' && !Number.isNaN(index))) {
          if (!Number.isInteger(index) || index < 0 || index >= target.length) {
            throw new Error(`read at ${property}, outside the ${target.length} bytes`);
          }
          return target[index];
        }
      }
      const member: unknown = Reflect.get(target, property, target);
      if (typeof member !== 'function') return member;
      return (member as (...args: unknown[]) => unknown).bind(target);
    },
  });
}

function expectCode(code: string, action: () => unknown): void {
  let thrown: unknown;
  try {
    action();
  } catch (error) {
    thrown = error;
  }
  expect(isStreamStackError(thrown) ? thrown.code : thrown).toBe(code);
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** xorshift32: a small deterministic generator, so golden inputs are the same on every run. */
function createRandom(seed: number): () => number {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state / 0x1_0000_0000;
  };
}

function sortUnique(keys: Uint8Array[]): Uint8Array[] {
  keys.sort(compareBytes);
  return keys.filter((key, index) => index === 0 || compareBytes(keys[index - 1], key) !== 0);
}

/** 20,000 `course:N:lesson:M` keys (19,993 after removing repeats) with values below 2^48. */
function courseDataset(): { keys: PackedBytes; values: Float64Array } {
  const random = createRandom(42);
  const keys: Uint8Array[] = [];
  for (let index = 0; index < 20_000; index++) {
    const course = Math.floor(random() * 500);
    const lesson = Math.floor(random() * 100_000);
    keys.push(encoder.encode(`course:${course}:lesson:${lesson}`));
  }
  const sorted = sortUnique(keys);
  const values = Float64Array.from(sorted, () => Math.floor(random() * 2 ** 48));
  return { keys: pack(sorted), values };
}

/** 20,000 binary keys (18,611 unique) with zero, small and near-2^53 values. */
function binaryDataset(): { keys: PackedBytes; values: Float64Array } {
  const random = createRandom(7);
  const keys: Uint8Array[] = [];
  for (let index = 0; index < 20_000; index++) {
    const key = new Uint8Array(1 + Math.floor(random() * 12));
    for (let at = 0; at < key.length; at++) key[at] = Math.floor(random() * 256);
    keys.push(key);
  }
  const sorted = sortUnique(keys);
  const values = Float64Array.from(sorted, (_, index) =>
    index % 3 === 0 ? 0 : index % 3 === 1 ? index : Number.MAX_SAFE_INTEGER - index,
  );
  return { keys: pack(sorted), values };
}

const courseSha256 = '02f0dc4386b9fbc2133865e76e173f6b2c0b1646b4a8ebfb64a6044713fc26e2';
const binarySha256 = 'c0958950f51c1883bbb96b03f36c9141126a44e23a745205eb96cf4baebd6a58';

// ---------------------------------------------------------------------------------------------
// Arbitraries.

/** The bytes keys over a small alphabet are made of. */
const smallAlphabet = [0, 1, 0x61, 0x62, 0xfe, 0xff];

/**
 * Keys of 0–6 bytes over a small alphabet (6^6 = 46,656 possible keys), so that keys share
 * prefixes and ranges land between them.
 */
const smallAlphabetKey = fc
  .uint8Array({ maxLength: 6, size: 'max' })
  .map((bytes) => bytes.map((byte) => smallAlphabet[byte % smallAlphabet.length]));

/** Any bytes, 0–24 of them: first bytes spread over all 256, so nodes get wide. */
const anyKey = fc.uint8Array({ maxLength: 24, size: 'max' });

/**
 * Keys that share long prefixes: one of eight fixed prefixes (0–36 bytes, some extending others)
 * followed by 0–6 bytes, so paths run long before they branch.
 */
const sharedPrefixes = ['', 'a', 'course:', 'course:12:', 'student:', 'x'.repeat(36), 'term/0000/', 'term/0001/'].map(
  (text) => encoder.encode(text),
);
const sharedPrefixKey = fc
  .tuple(fc.constantFrom(...sharedPrefixes), fc.uint8Array({ maxLength: 6, size: 'max' }))
  .map(([prefix, rest]) => new Uint8Array([...prefix, ...rest]));

/** Keys of any bytes or with shared prefixes, about half and half. */
const mixedKey = fc.oneof(anyKey, sharedPrefixKey);

/** Values of every packed width, with zero and the largest safe integer often. */
const value = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 0, max: 300 }),
  fc.integer({ min: 0, max: 0xffff_ffff }),
  fc.maxSafeNat(),
  fc.constant(Number.MAX_SAFE_INTEGER),
);

/** Maps of `minLength`–`maxLength` generated entries (fewer after removing repeated keys). */
const entriesArb = (key: fc.Arbitrary<Uint8Array>, minLength: number, maxLength: number) =>
  fc.array(fc.tuple(key, value), { minLength, maxLength, size: 'max' }).map((entries) => modelOf(entries));

/**
 * Maps of up to `maxLength` entries: none or one now and then (edges of their own), a few dozen
 * often, hundreds most of the time, and (where `maxLength` allows) over a thousand.
 */
const modelArbitrary = (key: fc.Arbitrary<Uint8Array>, maxLength: number) =>
  fc.oneof(
    { weight: 1, arbitrary: entriesArb(key, 0, 0) },
    { weight: 1, arbitrary: entriesArb(key, 1, 1) },
    { weight: 2, arbitrary: entriesArb(key, 2, 100) },
    { weight: 3, arbitrary: entriesArb(key, 100, Math.min(maxLength, 1000)) },
    // Repeated keys are dropped (short shared-prefix keys repeat often), so this class starts
    // at 1,200 generated entries to hold over a thousand distinct keys.
    { weight: 1, arbitrary: entriesArb(key, Math.min(maxLength, 1200), maxLength) },
  );

const bound = fc.option(smallAlphabetKey, { nil: undefined });

/** Ranges with any mix of bounds and prefix, and a limit of 0–3 (cuts often) or 0–300. */
const rangeArbitrary: fc.Arbitrary<FstRange> = fc.record({
  gte: bound,
  gt: bound,
  lte: bound,
  lt: bound,
  prefix: bound,
  limit: fc.option(fc.oneof(fc.nat(3), fc.nat(300)), { nil: undefined }),
});

/** The rejection a CORRUPT error's message names. */
function fstRejectionOf(error: unknown): FstRejection {
  const message = error instanceof Error ? error.message : String(error);
  const found = fstRejectionIn(message);
  if (!found || !isStreamStackError(error) || error.code !== 'CORRUPT') throw error;
  return found;
}

// ---------------------------------------------------------------------------------------------

describe('crc32c', () => {
  it('matches the standard check values', () => {
    expect(crc32c(encoder.encode('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(0))).toBe(0);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
  });

  it('continues from a seed: crc(b, crc(a)) = crc(a ++ b)', () => {
    const tally = branchTally('crc32c continuation', [
      'first piece empty',
      'first piece shorter than 16 bytes',
      'first piece not a multiple of 16',
      'second piece of 16 bytes or more',
      'whole over 4 KiB',
    ]);
    // Pieces of 0 to 4 KiB: empty, below the 16 bytes the slicing loop folds at once, and long
    // enough to run that loop many times with a tail after it.
    const part = fc.oneof(
      { weight: 1, arbitrary: fc.constant(new Uint8Array(0)) },
      { weight: 2, arbitrary: fc.uint8Array({ maxLength: 20, size: 'max' }) },
      { weight: 3, arbitrary: fc.uint8Array({ maxLength: 4096, size: 'max' }) },
    );
    fc.assert(
      fc.property(part, part, (first, second) => {
        tally.hit('first piece empty', first.length === 0);
        tally.hit('first piece shorter than 16 bytes', first.length > 0 && first.length < 16);
        tally.hit('first piece not a multiple of 16', first.length > 16 && first.length % 16 !== 0);
        tally.hit('second piece of 16 bytes or more', second.length >= 16);
        tally.hit('whole over 4 KiB', first.length + second.length > 4096);
        const whole = new Uint8Array(first.length + second.length);
        whole.set(first);
        whole.set(second, first.length);
        expect(crc32c(second, crc32c(first))).toBe(crc32c(whole));
      }),
      { numRuns: 300 },
    );
    tally.expectAllReached();
  });
});

describe('fstBuild writes the fst crate’s bytes', () => {
  // Expected outputs were produced by fst 0.4.7 (`MapBuilder::memory()`, `insert`, `into_inner`)
  // from the same inputs. Small ones are spelled out; large ones are pinned by length and SHA-256.
  // The large inputs hold tens of thousands of nodes, enough to evict from the crate's node
  // registry, so they also pin its hash, table size and eviction order.

  it('writes the empty map', () => {
    expect(hex(fstBuild(pack([]), new Float64Array(0)))).toBe(
      '0300000000000000000000000000000000000000000000000000001200000000000000546b2d0f',
    );
  });

  it('writes a one-key map with value 0', () => {
    expect(hex(buildModel([[encoder.encode('a'), 0]]))).toBe(
      '0300000000000000000000000000000000108501000000000000001200000000000000571bef2a',
    );
  });

  it('writes a map holding only the empty key', () => {
    expect(hex(buildModel([[new Uint8Array(0), 7]]))).toBe(
      '03000000000000000000000000000000070100400100000000000000130000000000000069ec4f5a',
    );
  });

  it('writes small maps with outputs and shared prefixes', () => {
    const words = ['', 'a', 'ab', 'abc', 'b', 'course:1', 'course:12', 'course:2'];
    const values = [5, 0, 9, 1, 2 ** 40, 3, 3, 0];
    const fst = buildModel(words.map((word, index) => [encoder.encode(word), values[index]]));
    expect(fst.length).toBe(98);
    expect(sha256(fst)).toBe('c40c967bf0efc6a14728ab5a10f8c85e4fd6c09affd994e5418ab8451a193985');
  });

  it('writes a node with all 256 transitions and its index table', () => {
    const entries = Array.from({ length: 256 }, (_, index): [Uint8Array, number] => [
      Uint8Array.of(index, 1),
      index * 1000,
    ]);
    const fst = buildModel(entries);
    expect(fst.length).toBe(1579);
    expect(sha256(fst)).toBe('df3b495283635f229e6855fd55c14cc7eee61b5466aa73246a685ad5ba987bae');
  });

  it('writes 20,000 shared-prefix keys with large values', () => {
    const { keys, values } = courseDataset();
    const fst = fstBuild(keys, values);
    expect([keys.ends.length, fst.length]).toEqual([19_993, 296_987]);
    expect(sha256(fst)).toBe(courseSha256);
  });

  it('writes 20,000 binary keys with zero, small and near-2^53 values', () => {
    const { keys, values } = binaryDataset();
    const fst = fstBuild(keys, values);
    expect([keys.ends.length, fst.length]).toEqual([18_611, 461_234]);
    expect(sha256(fst)).toBe(binarySha256);
  });

  it('writes the same bytes whatever was built before, even a build that failed', () => {
    // The registry's table is shared between builds; nothing of one may leak into the next.
    const course = courseDataset();
    const binary = binaryDataset();
    expect(sha256(fstBuild(binary.keys, binary.values))).toBe(binarySha256);
    expectCode('FST_KEY_ORDER', () => {
      // The same keys with the last two swapped: the build fails only at the very end.
      const { bytes, ends } = binary.keys;
      const keys = [...ends].map((end, index) => bytes.subarray(index === 0 ? 0 : ends[index - 1], end));
      keys.push(...keys.splice(-2).reverse());
      fstBuild(pack(keys), binary.values);
    });
    expect(sha256(fstBuild(course.keys, course.values))).toBe(courseSha256);
    expect(sha256(fstBuild(binary.keys, binary.values))).toBe(binarySha256);
  });
});

describe('FST round trip against an in-memory model', () => {
  it('finds every key with its value, and nothing else', () => {
    const tally = branchTally('fst round trip', [
      'empty map',
      'one key',
      '100 keys or more',
      '1,000 keys or more',
      'the empty key',
      'a shared prefix of 8 bytes or more',
      'a node with more than 32 transitions',
      'value 0',
      'the largest safe integer',
      'probe found',
      'probe absent',
      'probe a proper prefix of a key',
      'probe extends a key',
    ]);
    // Probes: 0–40 random keys, and keys of the map cut short or extended by a byte, which walk
    // real paths and then leave them.
    const probeSpecs = fc.array(
      fc.tuple(mixedKey, fc.nat(), fc.constantFrom('random' as const, 'cut' as const, 'extended' as const)),
      {
        maxLength: 40,
        size: 'max',
      },
    );
    // Maps of 0–1,500 entries (see modelArbitrary) over keys of any bytes or shared prefixes.
    fc.assert(
      fc.property(modelArbitrary(mixedKey, 1500), probeSpecs, (model, specs) => {
        const keys = model.map(([key]) => key);
        const probes = specs.map(([random, pick, how]) => {
          if (how === 'random' || keys.length === 0) return random;
          const key = keys[pick % keys.length];
          return how === 'cut' ? key.subarray(0, pick % (key.length + 1)) : Uint8Array.from([...key, pick % 256]);
        });
        const fst = buildModel(model);
        fstVerify(fst);
        expect(fstLength(fst)).toBe(model.length);
        const present = new Map(model.map(([key, expected]) => [hex(key), expected]));
        tally.hit('empty map', model.length === 0);
        tally.hit('one key', model.length === 1);
        tally.hit('100 keys or more', model.length >= 100);
        tally.hit('1,000 keys or more', model.length >= 1000);
        tally.hit('the empty key', model.length > 0 && model[0][0].length === 0);
        tally.hit(
          'a shared prefix of 8 bytes or more',
          keys.some(
            (key, index) => index > 0 && startsWith(key, keys[index - 1].subarray(0, 8)) && keys[index - 1].length >= 8,
          ),
        );
        tally.hit('a node with more than 32 transitions', widestNode(keys) > 32);
        tally.hit(
          'value 0',
          model.some(([, stored]) => stored === 0),
        );
        tally.hit(
          'the largest safe integer',
          model.some(([, stored]) => stored === Number.MAX_SAFE_INTEGER),
        );
        for (const [key, expected] of model) expect(fstGet(fst, key)).toBe(expected);
        for (const probe of probes) {
          const expected = present.get(hex(probe));
          tally.hit(expected === undefined ? 'probe absent' : 'probe found');
          tally.hit(
            'probe a proper prefix of a key',
            expected === undefined && keys.some((key) => key.length > probe.length && startsWith(key, probe)),
          );
          tally.hit(
            'probe extends a key',
            expected === undefined && keys.some((key) => key.length < probe.length && startsWith(probe, key)),
          );
          expect(fstGet(fst, probe)).toBe(expected);
        }
        const queries = [...keys, ...probes];
        const expected = queries.map((key) => present.get(hex(key)) ?? -1);
        expect([...fstGetMany(fst, pack(queries))]).toEqual(expected);
        expect(unpack(fstRange(fst, {}))).toEqual(modelRange(model, {}));
      }),
      { numRuns: 150 },
    );
    tally.expectAllReached();
  });

  it('answers range and prefix queries as filtering the model does', () => {
    const tally = branchTally('fst ranges', [
      'entries found',
      'nothing found',
      'cut by the limit',
      'limit 0',
      'prefix with entries',
      'lower bound only',
      'upper bound only',
      'both bounds with entries',
      'bounds that cross (empty by construction)',
      'both gt and gte',
      '100 keys or more',
    ]);
    // Maps of 0–1,000 entries over the small alphabet (see modelArbitrary), 1–10 ranges each.
    const ranges = fc.array(rangeArbitrary, { minLength: 1, maxLength: 10, size: 'max' });
    fc.assert(
      fc.property(modelArbitrary(smallAlphabetKey, 1000), ranges, (model, queries) => {
        const fst = buildModel(model);
        tally.hit('100 keys or more', model.length >= 100);
        for (const range of queries) {
          const expected = modelRange(model, range);
          expect(unpack(fstRange(fst, range))).toEqual(expected);
          const lower = range.gte ?? range.gt;
          const upper = range.lte ?? range.lt;
          tally.hit('entries found', expected.length > 0);
          tally.hit('nothing found', expected.length === 0);
          tally.hit(
            'cut by the limit',
            range.limit !== undefined && modelRange(model, { ...range, limit: undefined }).length > range.limit,
          );
          tally.hit('limit 0', range.limit === 0);
          tally.hit('prefix with entries', range.prefix !== undefined && expected.length > 0);
          tally.hit('lower bound only', lower !== undefined && upper === undefined);
          tally.hit('upper bound only', lower === undefined && upper !== undefined);
          tally.hit('both bounds with entries', lower !== undefined && upper !== undefined && expected.length > 0);
          tally.hit(
            'bounds that cross (empty by construction)',
            lower !== undefined && upper !== undefined && compareBytes(lower, upper) > 0,
          );
          tally.hit('both gt and gte', range.gt !== undefined && range.gte !== undefined);
        }
      }),
      { numRuns: 200 },
    );
    tally.expectAllReached();
  });

  it('handles the edges of range queries', () => {
    const keys = [[], [0], [0x61], [0x61, 0], [0x61, 0xff], [0x61, 0xff, 0xff], [0x62], [0xff]];
    const model = modelOf(keys.map((key, index) => [Uint8Array.from(key), index * 10]));
    const fst = buildModel(model);
    const at = (...bytes: number[]) => Uint8Array.from(bytes);
    const cases: FstRange[] = [
      {},
      { limit: 0 },
      { limit: 1 },
      { prefix: at() },
      { prefix: at(0x61) },
      { prefix: at(0x61, 0xff) },
      { prefix: at(0xff) },
      { prefix: at(0xff, 0xff, 0xff) },
      { gte: at() },
      { gt: at() },
      { lt: at() },
      { lte: at() },
      { gte: at(0x61), gt: at(0x61) },
      { gte: at(0x61), lt: at(0x61) },
      { gt: at(0x61, 0xff), lte: at(0xff) },
      { gte: at(0x62), lte: at(0x61) },
      { gte: at(0x60), lt: at(0x61, 0xff, 0xff), prefix: at(0x61) },
      { gt: at(0x61, 0x80) },
      { gte: at(0xff, 0xff, 0xff) },
    ];
    for (const range of cases) {
      expect(unpack(fstRange(fst, range))).toEqual(modelRange(model, range));
    }
  });

  it('reads maps with long keys, non-UTF-8 bytes and 256-way nodes', () => {
    const random = createRandom(99);
    const base = Uint8Array.from({ length: 1100 }, () => Math.floor(random() * 256));
    const entries: [Uint8Array, number][] = [];
    for (let index = 0; index < 300; index++) {
      const key = base.slice(0, 900 + Math.floor(random() * 200));
      key[key.length - 1 - Math.floor(random() * 40)] = Math.floor(random() * 256);
      entries.push([key, Math.floor(random() * Number.MAX_SAFE_INTEGER)]);
    }
    for (let byte = 0; byte < 256; byte++) entries.push([Uint8Array.of(byte), byte]);
    const model = modelOf(entries);
    const fst = buildModel(model);
    for (const [key, expected] of model) expect(fstGet(fst, key)).toBe(expected);
    expect(unpack(fstRange(fst, {}))).toEqual(modelRange(model, {}));
    const range = { prefix: base.subarray(0, 950), limit: 5 };
    expect(unpack(fstRange(fst, range))).toEqual(modelRange(model, range));
  });
});

describe('FST argument errors', () => {
  const keys = (...words: string[]) => pack(words.map((word) => encoder.encode(word)));
  const values = (...numbers: number[]) => Float64Array.from(numbers);

  it('rejects keys out of order or repeated with FST_KEY_ORDER', () => {
    expectCode('FST_KEY_ORDER', () => fstBuild(keys('b', 'a'), values(1, 2)));
    expectCode('FST_KEY_ORDER', () => fstBuild(keys('a', 'a'), values(1, 2)));
    expectCode('FST_KEY_ORDER', () => fstBuild(keys('ab', 'a'), values(1, 2)));
    expectCode('FST_KEY_ORDER', () => fstBuild(keys('a', ''), values(1, 2)));
    expectCode('FST_KEY_ORDER', () => fstBuild(keys('', ''), values(1, 2)));
  });

  it('rejects values that are not non-negative safe integers with INVALID_ARGUMENT', () => {
    const bad = [-1, 0.5, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 2 ** 53];
    for (const number of bad) {
      expectCode('INVALID_ARGUMENT', () => fstBuild(keys('a', 'b'), values(1, number)));
    }
    // Arguments are checked before key order.
    expectCode('INVALID_ARGUMENT', () => fstBuild(keys('b', 'a'), values(1, -2)));
  });

  it('rejects malformed packed keys, counts and limits with INVALID_ARGUMENT', () => {
    const packed = keys('a', 'b');
    const withEnds = (...ends: number[]) => ({ bytes: packed.bytes, ends: Uint32Array.from(ends) });
    expectCode('INVALID_ARGUMENT', () => fstBuild(packed, values(1)));
    expectCode('INVALID_ARGUMENT', () => fstBuild(withEnds(1, 5), values(1, 2)));
    expectCode('INVALID_ARGUMENT', () => fstBuild(withEnds(2, 1), values(1, 2)));
    const fst = fstBuild(packed, values(1, 2));
    expectCode('INVALID_ARGUMENT', () => fstGetMany(fst, withEnds(3)));
    for (const limit of [-1, 1.5, Number.NaN]) {
      expectCode('INVALID_ARGUMENT', () => fstRange(fst, { limit }));
    }
    expect(unpack(fstRange(fst, { limit: Number.POSITIVE_INFINITY }))).toHaveLength(2);
  });
});

describe('FST corruption', () => {
  const term = (index: number) => encoder.encode(`term${String(index).padStart(5, '0')}`);
  const model = modelOf(Array.from({ length: 500 }, (_, index) => [term(index), index * 3]));
  const fst = buildModel(model);

  /**
   * Every reader on `bytes`: each must succeed or fail with CORRUPT, and none may hang. Readers
   * other than verify (which hands the bytes to the CRC) see them through `strictBytes`, so a read
   * outside the file fails the test instead of quietly yielding `undefined`. `keys` are looked up
   * one by one and in a batch (by default, a few of the 500 terms and a key never written).
   * Returns what each reader did: verify's outcome, fstLength's (whether the file opens), and the
   * lookups' and range scans'.
   */
  function readEverything(
    bytes: Uint8Array,
    keys: readonly Uint8Array[] = [term(7), term(250), term(499), encoder.encode('nope')],
  ) {
    const verified = succeedsOrThrows('CORRUPT', () => fstVerify(bytes));
    const strict = strictBytes(bytes);
    const opened = succeedsOrThrows('CORRUPT', () => fstLength(strict));
    const readers = [
      ...keys.slice(0, 3).map((key) => succeedsOrThrows('CORRUPT', () => fstGet(strict, key))),
      succeedsOrThrows('CORRUPT', () => fstGet(strict, new Uint8Array(0))),
      succeedsOrThrows('CORRUPT', () => fstGetMany(strict, pack(keys))),
      succeedsOrThrows('CORRUPT', () => fstRange(strict, {})),
      succeedsOrThrows('CORRUPT', () =>
        fstRange(strict, { gte: encoder.encode('term002'), lt: encoder.encode('term003') }),
      ),
      succeedsOrThrows('CORRUPT', () => fstRange(strict, { prefix: encoder.encode('term0049') })),
      ...keys.slice(0, 2).map((key) => succeedsOrThrows('CORRUPT', () => fstRange(strict, { gte: key, limit: 20 }))),
    ];
    return { verified, opened, readers };
  }

  /** Counts what `readEverything` saw: whether the file opened, a reader answered, and why each refused. */
  function tallyReads(
    tally: { hit(branch: FstRejection | 'opened' | 'a reader answered'): void },
    { verified, opened, readers }: ReturnType<typeof readEverything>,
  ): void {
    if (opened.ok) tally.hit('opened');
    if (readers.some((reader) => reader.ok)) tally.hit('a reader answered');
    for (const outcome of [verified, opened, ...readers]) if (!outcome.ok) tally.hit(fstRejectionOf(outcome.error));
  }

  it('verify catches every flipped byte, and readers fail cleanly on them', () => {
    fstVerify(fst);
    for (let position = 0; position < fst.length; position++) {
      for (const flip of [0x01, 0x80, 0xff]) {
        const damaged = fst.slice();
        damaged[position] ^= flip;
        expectCode('CORRUPT', () => fstVerify(damaged));
        readEverything(damaged);
      }
    }
  });

  it('rejects truncated files, unknown versions and impossible footers', () => {
    for (const length of [0, 10, 35, fst.length - 1]) {
      expectCode('CORRUPT', () => fstGet(fst.subarray(0, length), term(1)));
    }
    for (const version of [0, 4, 255]) {
      const damaged = fst.slice();
      damaged[0] = version;
      expectCode('CORRUPT', () => fstLength(damaged));
    }
    const hugeCount = fst.slice();
    hugeCount[fst.length - footerBytes + 7] = 0x01;
    expectCode('CORRUPT', () => fstLength(hugeCount));
    expectCode('CORRUPT', () => fstGet(hugeCount, term(1)));
    const wrongRoot = fst.slice();
    wrongRoot[fst.length - 12] ^= 0x10;
    expectCode('CORRUPT', () => fstGet(wrongRoot, term(1)));
  });

  it('reads a version 2 file (no checksum), which verify rejects', () => {
    const version2 = fst.slice(0, fst.length - 4);
    version2[0] = 2;
    expect(fstGet(version2, term(123))).toBe(369);
    const range = { prefix: encoder.encode('term0049') };
    expect(unpack(fstRange(version2, range))).toEqual(modelRange(model, range));
    expectCode('CORRUPT', () => fstVerify(version2));
  });

  it('fails cleanly on random bytes, short and long, with and without a plausible header and footer', () => {
    const tally = branchTally(
      'random bytes',
      [
        'shorter than the 36-byte guard',
        'longer than the 36-byte guard',
        'unknown format version',
        'root does not end the node region',
        'key count not a safe integer',
        'opened',
        'a reader answered',
        'malformed node',
        'transition not to a lower address',
        'checksum mismatch',
        'version without a checksum',
      ],
      // Random nodes this small seldom point outside the file or add up past 2^53 on a path a
      // reader takes; the random-nodes property below reaches them more often.
      ['transition outside the file', 'value not a safe integer', 'range scan ran out of steps'],
    );
    // Files of 0–600 random bytes: up to the 36-byte guard, past it with random headers (which
    // the version check refuses), and past it with a version of 1–3 and a footer that is random,
    // has a small (or past 2^53) key count but a random root, or also a root address that ends
    // the node region, so that the readers walk random nodes.
    const patched = fc
      .record({
        bytes: fc.uint8Array({ minLength: 37, maxLength: 600, size: 'max' }),
        version: fc.constantFrom(1, 2, 3),
        footer: fc.constantFrom(
          'random' as const,
          'count' as const,
          'count and root' as const,
          'count and root' as const,
        ),
        keyCount: fc.oneof(fc.nat(1000), fc.constant(2 ** 53)),
      })
      .map(({ bytes, version, footer, keyCount }) => {
        const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        view.setBigUint64(0, BigInt(version), true);
        const nodesEnd = bytes.length - (version >= 3 ? 4 : 0) - 16;
        if (footer !== 'random') view.setBigUint64(nodesEnd, BigInt(keyCount), true);
        if (footer === 'count and root')
          view.setBigUint64(nodesEnd + 8, BigInt(nodesEnd === headerBytes ? 0 : nodesEnd - 1), true);
        return bytes;
      });
    const randomFile = fc.oneof(
      { weight: 1, arbitrary: fc.uint8Array({ maxLength: 36, size: 'max' }) },
      { weight: 1, arbitrary: fc.uint8Array({ minLength: 37, maxLength: 600, size: 'max' }) },
      { weight: 3, arbitrary: patched },
    );
    fc.assert(
      fc.property(randomFile, (bytes) => {
        tally.hit(
          bytes.length < 36 ? 'shorter than the 36-byte guard' : 'longer than the 36-byte guard',
          bytes.length !== 36,
        );
        tallyReads(tally, readEverything(bytes));
      }),
      { numRuns: 1000 },
    );
    tally.expectAllReached();
  });

  it('fails cleanly on damaged real FSTs', () => {
    const tally = branchTally(
      'damaged real fst',
      [
        'flip in the header',
        'flip in the footer',
        'flip in the nodes',
        'truncated',
        'extended',
        'overwritten',
        'opened',
        'a reader answered',
        'shorter than the 36-byte guard',
        'unknown format version',
        'root does not end the node region',
        'key count not a safe integer',
        'checksum mismatch',
        'malformed node',
      ],
      // A damaged real file seldom sends a walk outside itself or backwards: most damage breaks a
      // node's layout first (malformed node). The random-nodes property reaches these often.
      [
        'transition outside the file',
        'transition not to a lower address',
        'version without a checksum',
        'value not a safe integer',
        'range scan ran out of steps',
      ],
    );
    // Real maps of 0–300 entries (see modelArbitrary), damaged one to three times: bits flipped
    // among the nodes (which only verify's checksum notices, so the readers walk damaged nodes),
    // in the 16-byte header or the 20-byte footer; truncated; extended by 1–32 bytes; or 1–16
    // bytes overwritten among the nodes.
    const damageArb = fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          kind: fc.constantFrom('nodes' as const, 'nodes' as const, 'header' as const, 'footer' as const),
          at: fc.nat(),
          mask: fc.integer({ min: 1, max: 255 }),
        }),
      },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('truncated' as const), at: fc.nat() }) },
      {
        weight: 1,
        arbitrary: fc.record({
          kind: fc.constant('extended' as const),
          bytes: fc.uint8Array({ minLength: 1, maxLength: 32, size: 'max' }),
        }),
      },
      {
        weight: 2,
        arbitrary: fc.record({
          kind: fc.constant('overwritten' as const),
          at: fc.nat(),
          bytes: fc.uint8Array({ minLength: 1, maxLength: 16, size: 'max' }),
        }),
      },
    );
    fc.assert(
      fc.property(
        modelArbitrary(mixedKey, 300),
        fc.array(damageArb, { minLength: 1, maxLength: 3, size: 'max' }),
        (model, damages) => {
          let bytes = buildModel(model);
          for (const damage of damages) {
            const nodes = bytes.length - headerBytes - footerBytes;
            const inNodes = (at: number) => (nodes > 0 ? headerBytes + (at % nodes) : at % Math.max(1, bytes.length));
            if (damage.kind === 'truncated') {
              bytes = bytes.slice(0, damage.at % (bytes.length + 1));
              tally.hit('truncated');
            } else if (damage.kind === 'extended') {
              bytes = new Uint8Array([...bytes, ...damage.bytes]);
              tally.hit('extended');
            } else if (damage.kind === 'overwritten') {
              bytes = bytes.slice();
              const at = inNodes(damage.at);
              bytes.set(damage.bytes.subarray(0, Math.max(0, bytes.length - at)), at);
              tally.hit('overwritten');
            } else if (bytes.length > 0) {
              bytes = bytes.slice();
              const at =
                damage.kind === 'header'
                  ? damage.at % Math.min(headerBytes, bytes.length)
                  : damage.kind === 'footer'
                    ? bytes.length - 1 - (damage.at % Math.min(footerBytes, bytes.length))
                    : inNodes(damage.at);
              bytes[at] ^= damage.mask;
              tally.hit(
                damage.kind === 'header'
                  ? 'flip in the header'
                  : damage.kind === 'footer'
                    ? 'flip in the footer'
                    : 'flip in the nodes',
              );
            }
          }
          const keys = model.map(([key]) => key);
          tallyReads(
            tally,
            readEverything(bytes, [...keys.slice(0, 2), ...keys.slice(-30), encoder.encode('never a key')]),
          );
        },
      ),
      { numRuns: 300 },
    );
    tally.expectAllReached();
  });

  it('fails cleanly on random nodes behind a well-formed header and footer', () => {
    const tally = branchTally(
      'random nodes',
      [
        'opened',
        'a reader answered',
        'malformed node',
        'transition outside the file',
        'transition not to a lower address',
        'checksum mismatch',
      ],
      ['value not a safe integer', 'range scan ran out of steps'],
    );
    // 1–400 bytes of random nodes: the header and footer always pass the guard, so every reader
    // walks them.
    const nodes = fc.uint8Array({ minLength: 1, maxLength: 400, size: 'max' });
    fc.assert(
      fc.property(nodes, fc.nat(1000), (nodeBytes, keyCount) => {
        const bytes = new Uint8Array(headerBytes + nodeBytes.length + footerBytes);
        const view = new DataView(bytes.buffer);
        view.setUint32(0, 3, true);
        bytes.set(nodeBytes, headerBytes);
        const footer = headerBytes + nodeBytes.length;
        view.setUint32(footer, keyCount, true);
        view.setUint32(footer + 8, footer - 1, true);
        tallyReads(tally, readEverything(bytes));
      }),
      { numRuns: 2000 },
    );
    tally.expectAllReached();
  });
});
