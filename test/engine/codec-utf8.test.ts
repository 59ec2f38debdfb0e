/**
 * The UTF-8 helpers that lay out FST keys: `utf8Concat` (one encoding pass for a whole term
 * list, with its own encoder below the surrogates) and `sortStringsByUtf8` (the built-in sort
 * where UTF-16 order is UTF-8 order), checked against TextEncoder and a byte comparison.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { sortStringsByUtf8, utf8Concat } from '../../packages/engine/src/storage/codec.js';
import { branchTally } from '../support/branches.js';

const encoder = new TextEncoder();

/** Strings from one of the ranges the helpers treat apart. */
const strings = fc.oneof(
  fc.array(fc.string({ unit: 'binary-ascii', maxLength: 12 }), { maxLength: 60 }),
  fc.array(
    fc.string({ unit: fc.integer({ min: 0, max: 0xff }).map((code) => String.fromCharCode(code)), maxLength: 12 }),
    { maxLength: 60 },
  ),
  fc.array(
    fc.string({ unit: fc.integer({ min: 0, max: 0xd7ff }).map((code) => String.fromCharCode(code)), maxLength: 12 }),
    { maxLength: 60 },
  ),
  fc.array(fc.string({ unit: 'grapheme', maxLength: 12 }), { maxLength: 60 }),
);

describe('UTF-8 term layout', () => {
  it('encodes every string as TextEncoder does and sorts them by their bytes', () => {
    const tally = branchTally('utf8', [
      'ASCII only',
      'two-byte characters',
      'three-byte characters',
      'surrogate pairs',
      'empty list',
    ]);
    // Sizes: up to 60 strings of up to 12 characters, from each of four character ranges.
    fc.assert(
      fc.property(strings, (values) => {
        const { bytes, ends } = utf8Concat(values);
        const expected = values.map((value) => encoder.encode(value));
        expect(ends.length).toBe(values.length);
        expected.forEach((encoded, index) => {
          expect(bytes.subarray(index === 0 ? 0 : ends[index - 1], ends[index])).toEqual(encoded);
        });
        expect(bytes.length).toBe(expected.reduce((sum, encoded) => sum + encoded.length, 0));

        const sorted = [...values];
        sortStringsByUtf8(sorted);
        const byBytes = [...values].sort((a, b) => Buffer.compare(encoder.encode(a), encoder.encode(b)));
        expect(sorted.map((value) => encoder.encode(value))).toEqual(byBytes.map((value) => encoder.encode(value)));

        const units = values.flatMap((value) => Array.from(value, (character) => character.charCodeAt(0)));
        tally.hit('empty list', values.length === 0);
        tally.hit('ASCII only', values.length > 0 && units.every((unit) => unit < 0x80));
        tally.hit(
          'two-byte characters',
          units.some((unit) => unit >= 0x80 && unit < 0x800),
        );
        tally.hit(
          'three-byte characters',
          units.some((unit) => unit >= 0x800 && unit < 0xd800),
        );
        tally.hit(
          'surrogate pairs',
          values.some((value) => /[\ud800-\udfff]/.test(value)),
        );
      }),
      { numRuns: 300 },
    );
    tally.expectAllReached();
  });
});
