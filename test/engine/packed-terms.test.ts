/**
 * Terms packed as UTF-8 bytes for dictionary builds (`packed-terms.ts`): packing code units must
 * give the bytes `TextEncoder` gives the strings (pairs, lone surrogates, Latin-1 characters),
 * and ordering packed terms must give the order strings sorted by their UTF-8 bytes come in,
 * which is the order a dictionary's FST was always built in, so the files stay the same.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { sortStringsByUtf8, utf8Concat } from '../../packages/engine/src/storage/codec.js';
import {
  firstRepeatIn,
  PackedTermsWriter,
  packedInOrder,
  utf8OrderOf,
} from '../../packages/engine/src/storage/packed-terms.js';
import { branchTally } from '../support/branches.js';

/** Strings that share long prefixes, end in zero characters, and reach every UTF-8 width. */
const termArb = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 12 }),
  fc.string({ unit: fc.constantFrom('a', 'b', '\u0000', 'é', '\uffff', '😀', '\ue000'), maxLength: 10 }),
  fc.nat({ max: 3_000 }).map((n) => `key-${n}`),
);

const decoder = new TextDecoder();

function termsOf(packed: { bytes: Uint8Array; ends: Uint32Array }): string[] {
  return Array.from(packed.ends, (end, at) =>
    decoder.decode(packed.bytes.subarray(at === 0 ? 0 : packed.ends[at - 1], end)),
  );
}

describe('packed terms', () => {
  it('packs code units into the bytes TextEncoder gives their strings', () => {
    fc.assert(
      fc.property(fc.array(termArb, { maxLength: 60 }), fc.nat({ max: 64 }), (terms, bytesExpected) => {
        // A small first guess of the bytes makes the buffer grow within the terms.
        const writer = new PackedTermsWriter(1, bytesExpected);
        for (const term of terms) {
          const units = Uint16Array.from({ length: term.length }, (_, at) => term.charCodeAt(at));
          writer.add(units, 0, units.length);
        }
        const packed = writer.finish();
        const expected = utf8Concat(terms);
        expect(packed.ends).toEqual(expected.ends);
        expect(packed.bytes).toEqual(expected.bytes);
      }),
      { numRuns: 300 },
    );
    // A lone surrogate at the very end of a term, and a pair split across two terms.
    const writer = new PackedTermsWriter(4, 4);
    const units = new Uint16Array([0x61, 0xd83d, 0xde00, 0xd83d]);
    writer.add(units, 0, 2);
    writer.add(units, 2, 4);
    expect(termsOf(writer.finish())).toEqual(['a\ufffd', '\ufffd\ufffd']);
  });

  it('orders distinct terms as strings sorted by their UTF-8 bytes, and finds a repeat', () => {
    const tally = branchTally('packed order', [
      'terms alike in the first six bytes',
      'a term that is a prefix of another',
      'a repeated term',
    ]);
    fc.assert(
      fc.property(fc.array(termArb, { maxLength: 200 }), (drawn) => {
        const encoder = new TextEncoder();
        // Distinct as bytes: lone surrogates all encode as U+FFFD.
        const byBytes = new Map(drawn.map((term) => [encoder.encode(term).join(','), term]));
        const terms = [...byBytes.values()];
        const sorted = [...terms];
        sortStringsByUtf8(sorted);
        const packed = utf8Concat(terms);
        const inOrder = packedInOrder(packed, utf8OrderOf(packed));
        expect(inOrder.bytes).toEqual(utf8Concat(sorted).bytes);
        expect(inOrder.ends).toEqual(utf8Concat(sorted).ends);
        expect(firstRepeatIn(inOrder)).toBe(-1);
        const bytes = sorted.map((term) => encoder.encode(term));
        for (let at = 1; at < bytes.length; at++) {
          const [a, b] = [bytes[at - 1], bytes[at]];
          tally.hit(
            'terms alike in the first six bytes',
            a.length >= 6 && b.length >= 6 && a.subarray(0, 6).join() === b.subarray(0, 6).join(),
          );
          tally.hit(
            'a term that is a prefix of another',
            a.length < b.length && b.subarray(0, a.length).join() === a.join(),
          );
        }
        if (terms.length > 0) {
          const repeated = utf8Concat([...sorted, sorted[sorted.length - 1]]);
          tally.hit('a repeated term');
          expect(firstRepeatIn(repeated)).toBe(sorted.length);
        }
      }),
      { numRuns: 300 },
    );
    tally.expectAllReached();
  });
});
