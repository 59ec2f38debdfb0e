import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encoder, expectSameOutcome, native, pack, ts } from './both.js';

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

describe('FST term dictionary: native and ts agree byte for byte', () => {
  it('build the same bytes for random keys, and each reads what the other built', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 12 }), { maxLength: 200 }), fc.nat(2 ** 40), (raw, valueSeed) => {
        const keys = sortedUnique(raw);
        const values = keys.map((_, index) => (valueSeed + index * 977) % 2 ** 45);
        const { fromNative, fromTs } = build(keys, values);
        expect(fromTs).toEqual(fromNative);
        for (const [index, key] of keys.entries()) {
          expect(ts.fstGet(fromNative, key)).toBe(values[index]);
          expect(native.fstGet(fromTs, key)).toBe(values[index]);
        }
        expect(ts.fstLength(fromNative)).toBe(keys.length);
      }),
      { numRuns: 300 },
    );
  });

  it('agree on the empty map, a single key, the empty key, long keys and non-UTF-8 bytes', () => {
    const cases: Uint8Array[][] = [
      [],
      [encoder.encode('only')],
      [new Uint8Array(0)],
      [new Uint8Array(0), Uint8Array.of(0), Uint8Array.of(0, 0), Uint8Array.of(255)],
      sortedUnique(Array.from({ length: 50 }, (_, index) => encoder.encode(`${'long-prefix/'.repeat(90)}${index}`))),
      sortedUnique(Array.from({ length: 300 }, (_, index) => Uint8Array.of(0xff, 0xfe, index % 256, (index * 31) % 256, 0x80))),
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
    const probes = pack([...keys.filter((_, index) => index % 101 === 0), encoder.encode('missing:key'), encoder.encode('')]);
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
    for (const keys of [[b, a], [a, a], [a, b, b]]) {
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
});
