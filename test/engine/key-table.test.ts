/**
 * The byte-keyed table latest-mode reads keep their winners in: it must give every distinct key
 * its own dense slot, and the same slot every time — as a Map of the decoded strings does —
 * through growth of its slots, its arena and its probe table, and through hash collisions.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { ByteKeyTable, StringKeyTable } from '../../packages/engine/src/query/indexes/key-table.js';
import { branchTally } from '../support/branches.js';

const encoder = new TextEncoder();

/**
 * Checks a table's answer for `key` against a Map from each key to its slot: a key seen before
 * keeps its slot, a new one gets the next, and the table holds as many keys as the Map.
 */
function expectSlotAsModel(model: Map<string, number>, key: string, slot: number, size: number): void {
  const known = model.get(key);
  if (known === undefined) {
    expect(slot).toBe(model.size);
    model.set(key, slot);
  } else {
    expect(slot).toBe(known);
  }
  expect(size).toBe(model.size);
}

describe('ByteKeyTable', () => {
  it('agrees with a Map of strings on every key, across growth', () => {
    const tally = branchTally('key table', [
      'grew past its first slots',
      'a repeated key',
      'an empty key',
      'a key of 100 bytes or more',
      'a hash shared by two keys',
    ]);
    fc.assert(
      fc.property(
        // 1,500 to 3,000 keys (fast-check's default would stay near 10), many from a small
        // alphabet (so repeats are common), some long, in one buffer as run bytes hold them.
        fc.array(
          fc.oneof(
            fc.stringMatching(/^[ab]{0,6}$/),
            fc.string({ minLength: 0, maxLength: 8 }),
            fc.string({ minLength: 100, maxLength: 120 }),
            fc.integer({ min: 0, max: 5000 }).map((n) => `k${n}`),
          ),
          { minLength: 1_500, maxLength: 3_000 },
        ),
        (keys) => {
          const table = new ByteKeyTable();
          const model = new Map<string, number>();
          const hashes = new Map<number, string>();
          const encoded = keys.map((key) => encoder.encode(key));
          const bytes = new Uint8Array(encoded.reduce((sum, key) => sum + key.length + 3, 0));
          let at = 0;
          const ranges: [number, number][] = [];
          for (const key of encoded) {
            // Junk between keys: a range must be compared on its own bytes only.
            bytes.set([0xff, 0x00, 0x7f], at);
            at += 3;
            bytes.set(key, at);
            ranges.push([at, at + key.length]);
            at += key.length;
          }
          for (const [index, key] of keys.entries()) {
            const [start, end] = ranges[index];
            tally.hit('a repeated key', model.has(key));
            tally.hit('an empty key', key.length === 0);
            tally.hit('a key of 100 bytes or more', end - start >= 100);
            const hash = ByteKeyTable.hash(bytes, start, end);
            const other = hashes.get(hash);
            tally.hit('a hash shared by two keys', other !== undefined && other !== key);
            hashes.set(hash, key);
            expectSlotAsModel(model, key, table.slotOf(bytes, start, end), table.size);
          }
          tally.hit('grew past its first slots', model.size > limits.keyTableSlotsInitial);
        },
      ),
      { numRuns: 30 },
    );
    // Collisions of a 32-bit hash are too rare for random keys: these two share one.
    const table = new ByteKeyTable();
    const colliding = findCollision();
    tally.hit('a hash shared by two keys');
    const slots = colliding.map((key) => {
      const bytes = encoder.encode(key);
      return table.slotOf(bytes, 0, bytes.length);
    });
    expect(slots).toEqual([0, 1]);
    expect(colliding.map((key) => table.slotOf(encoder.encode(key), 0, encoder.encode(key).length))).toEqual([0, 1]);
    tally.expectAllReached();
  });
});

describe('StringKeyTable', () => {
  it('agrees with a Map of strings on every key, gives each back exactly, and finds no key it was not given', () => {
    const tally = branchTally('string key table', [
      'grew past its first slots',
      'a repeated key',
      'an empty key',
      'a key with a lone surrogate',
      'a key longer than one fromCharCode chunk',
      'a key never given',
      'a hash shared by two keys',
      'a wide key after narrow ones',
      'narrow keys only',
    ]);
    fc.assert(
      fc.property(
        // 100 to 400 keys (fast-check's default would stay near 10) in a table of 16 first
        // slots, so it grows several times; many from a small alphabet (repeats are common),
        // some with lone surrogates, a few of 9,000 code units or more.
        fc.array(
          fc.oneof(
            { weight: 6, arbitrary: fc.stringMatching(/^[ab]{0,6}$/) },
            { weight: 6, arbitrary: fc.string({ unit: 'binary', minLength: 0, maxLength: 8 }) },
            { weight: 6, arbitrary: fc.integer({ min: 0, max: 300 }).map((n) => `account-${n}`) },
            { weight: 4, arbitrary: fc.constantFrom('\uD800', 'x\uDFFFy', '\uDBFF\uDBFF') },
            { weight: 1, arbitrary: fc.integer({ min: 9_000, max: 17_000 }).map((length) => 'L'.repeat(length)) },
          ),
          { minLength: 100, maxLength: 400 },
        ),
        // A third of the runs keep every key's units below 256, so the table never widens.
        fc.integer({ min: 0, max: 2 }),
        fc.array(fc.string({ unit: 'binary', minLength: 0, maxLength: 9 }), { minLength: 5, maxLength: 20 }),
        (drawn, narrowing, probes) => {
          const keys =
            narrowing === 0
              ? drawn.map((key) => Array.from(key, (unit) => (unit.charCodeAt(0) > 0xff ? 'n' : unit)).join(''))
              : drawn;
          const table = new StringKeyTable(16);
          const model = new Map<string, number>();
          for (const key of keys) {
            tally.hit('a repeated key', model.has(key));
            tally.hit('an empty key', key.length === 0);
            tally.hit('a key with a lone surrogate', !key.isWellFormed());
            tally.hit('a key longer than one fromCharCode chunk', key.length > limits.keyTableDecodeChunkUnits);
            expectSlotAsModel(model, key, table.slotOf(key), table.size);
          }
          tally.hit('grew past its first slots', model.size > 16);
          // Keys are kept a byte a unit until one needs two: then all of them move, and each
          // must still come back exactly.
          const firstWide = keys.findIndex((key) => [...key].some((character) => character.charCodeAt(0) > 0xff));
          expect(table.wide).toBe(firstWide >= 0);
          tally.hit('a wide key after narrow ones', firstWide > 0);
          tally.hit('narrow keys only', firstWide < 0);
          for (const [key, slot] of model) {
            expect(table.find(key)).toBe(slot);
            expect(table.keyAt(slot)).toBe(key);
          }
          for (const probe of probes) {
            tally.hit('a key never given', !model.has(probe));
            expect(table.find(probe)).toBe(model.get(probe) ?? -1);
          }
          // Finding changes nothing: a key never given is still not there.
          expect(table.size).toBe(model.size);
        },
      ),
      { numRuns: 60 },
    );
    // Over ASCII keys the table hashes code units as the byte table hashes bytes, so the byte
    // table's colliding pair collides here too.
    const colliding = findCollision();
    expect(StringKeyTable.hash(colliding[0])).toBe(StringKeyTable.hash(colliding[1]));
    tally.hit('a hash shared by two keys');
    const table = new StringKeyTable(16);
    expect(colliding.map((key) => table.slotOf(key))).toEqual([0, 1]);
    expect(colliding.map((key) => table.find(key))).toEqual([0, 1]);
    expect(colliding.map((key, slot) => table.keyAt(slot) === key)).toEqual([true, true]);
    tally.expectAllReached();
  });
});

/** Two different short keys whose FNV-1a hashes are equal (a birthday search over 2^17 keys… or more). */
function findCollision(): [string, string] {
  const seen = new Map<number, string>();
  for (let n = 0; ; n++) {
    const key = `c${n.toString(36)}`;
    const bytes = encoder.encode(key);
    const hash = ByteKeyTable.hash(bytes, 0, bytes.length);
    const other = seen.get(hash);
    if (other !== undefined) return [other, key];
    seen.set(hash, key);
  }
}
