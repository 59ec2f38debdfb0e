import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isStreamStackError } from '../src/errors.js';
import type { FstEntries, FstRange, PackedBytes } from '../src/kernels/kernels.js';
import { crc32c } from '../src/kernels/ts/crc.js';
import {
  fstBuild,
  fstGet,
  fstGetMany,
  fstLength,
  fstRange,
  fstVerify,
} from '../src/kernels/ts/fst.js';

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
function succeedsOrThrows(code: string, action: () => unknown): void {
  let result: unknown;
  try {
    result = action();
  } catch (error) {
    if (!isStreamStackError(error) || error.code !== code) throw error;
    return;
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

/** Keys over a small alphabet, so that keys share prefixes and ranges land between them. */
const smallAlphabetKey = fc
  .uint8Array({ maxLength: 6 })
  .map((bytes) => bytes.map((byte) => smallAlphabet[byte % smallAlphabet.length]));

/** Any bytes, of any length up to 24, including none. */
const anyKey = fc.uint8Array({ maxLength: 24 });

/** Values of every packed width, with zero and the largest safe integer often. */
const value = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 0, max: 300 }),
  fc.integer({ min: 0, max: 0xffff_ffff }),
  fc.maxSafeNat(),
  fc.constant(Number.MAX_SAFE_INTEGER),
);

const modelArbitrary = (key: fc.Arbitrary<Uint8Array>, maxLength: number) =>
  fc.array(fc.tuple(key, value), { maxLength }).map((entries) => modelOf(entries));

const bound = fc.option(smallAlphabetKey, { nil: undefined });

const rangeArbitrary: fc.Arbitrary<FstRange> = fc.record({
  gte: bound,
  gt: bound,
  lte: bound,
  lt: bound,
  prefix: bound,
  limit: fc.option(fc.nat(12), { nil: undefined }),
});

// ---------------------------------------------------------------------------------------------

describe('crc32c', () => {
  it('matches the standard check values', () => {
    expect(crc32c(encoder.encode('123456789'))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(0))).toBe(0);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
  });

  it('continues from a seed: crc(b, crc(a)) = crc(a ++ b)', () => {
    const part = fc.uint8Array({ maxLength: 100 });
    fc.assert(
      fc.property(part, part, (first, second) => {
        expect(crc32c(second, crc32c(first))).toBe(crc32c(new Uint8Array([...first, ...second])));
      }),
    );
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
      const keys = [...ends].map((end, index) =>
        bytes.subarray(index === 0 ? 0 : ends[index - 1], end),
      );
      keys.push(...keys.splice(-2).reverse());
      fstBuild(pack(keys), binary.values);
    });
    expect(sha256(fstBuild(course.keys, course.values))).toBe(courseSha256);
    expect(sha256(fstBuild(binary.keys, binary.values))).toBe(binarySha256);
  });
});

describe('FST round trip against an in-memory model', () => {
  it('finds every key with its value, and nothing else', () => {
    const probeKeys = fc.array(anyKey, { maxLength: 20 });
    fc.assert(
      fc.property(modelArbitrary(anyKey, 60), probeKeys, (model, probes) => {
        const fst = buildModel(model);
        fstVerify(fst);
        expect(fstLength(fst)).toBe(model.length);
        const present = new Map(model.map(([key, expected]) => [hex(key), expected]));
        for (const [key, expected] of model) expect(fstGet(fst, key)).toBe(expected);
        for (const probe of probes) expect(fstGet(fst, probe)).toBe(present.get(hex(probe)));
        const queries = [...model.map(([key]) => key), ...probes];
        const expected = queries.map((key) => present.get(hex(key)) ?? -1);
        expect([...fstGetMany(fst, pack(queries))]).toEqual(expected);
        expect(unpack(fstRange(fst, {}))).toEqual(modelRange(model, {}));
      }),
    );
  });

  it('answers range and prefix queries as filtering the model does', () => {
    const ranges = fc.array(rangeArbitrary, { minLength: 1, maxLength: 10 });
    fc.assert(
      fc.property(modelArbitrary(smallAlphabetKey, 80), ranges, (model, queries) => {
        const fst = buildModel(model);
        for (const range of queries) {
          expect(unpack(fstRange(fst, range))).toEqual(modelRange(model, range));
        }
      }),
      { numRuns: 200 },
    );
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
  const probes = pack([term(7), term(499), encoder.encode('nope')]);

  /**
   * Every reader on `bytes`: each must succeed or fail with CORRUPT, and none may hang. Readers
   * other than verify (which hands the bytes to the CRC) see them through `strictBytes`, so a read
   * outside the file fails the test instead of quietly yielding `undefined`.
   */
  function readEverything(bytes: Uint8Array): void {
    succeedsOrThrows('CORRUPT', () => fstVerify(bytes));
    const strict = strictBytes(bytes);
    succeedsOrThrows('CORRUPT', () => fstLength(strict));
    succeedsOrThrows('CORRUPT', () => fstGet(strict, term(250)));
    succeedsOrThrows('CORRUPT', () => fstGet(strict, new Uint8Array(0)));
    succeedsOrThrows('CORRUPT', () => fstGetMany(strict, probes));
    succeedsOrThrows('CORRUPT', () => fstRange(strict, {}));
    const range = { gte: encoder.encode('term002'), lt: encoder.encode('term003') };
    succeedsOrThrows('CORRUPT', () => fstRange(strict, range));
    succeedsOrThrows('CORRUPT', () => fstRange(strict, { prefix: encoder.encode('term0049') }));
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

  it('fails cleanly on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => readEverything(bytes)),
      { numRuns: 500 },
    );
  });

  it('fails cleanly on random nodes behind a well-formed header and footer', () => {
    const nodes = fc.uint8Array({ minLength: 1, maxLength: 400 });
    fc.assert(
      fc.property(nodes, fc.nat(1000), (nodeBytes, keyCount) => {
        const bytes = new Uint8Array(headerBytes + nodeBytes.length + footerBytes);
        const view = new DataView(bytes.buffer);
        view.setUint32(0, 3, true);
        bytes.set(nodeBytes, headerBytes);
        const footer = headerBytes + nodeBytes.length;
        view.setUint32(footer, keyCount, true);
        view.setUint32(footer + 8, footer - 1, true);
        readEverything(bytes);
      }),
      { numRuns: 2000 },
    );
  });
});
