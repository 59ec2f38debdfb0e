/**
 * `jsonStrings`, native and ts: each range of UTF-8 text becomes exactly the JSON string
 * `JSON.stringify` writes for it, laid end to end, and both kernel sets give the same bytes —
 * also for bytes that are not text (copied as they are) and for ranges they must refuse.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { branchTally, expectSame, expectSameOutcome, native, ts } from './both.js';

const encoder = new TextEncoder();

/** Text with what JSON escapes (quotes, backslashes, every control character) and multi-byte characters. */
const textArb = fc.string({
  unit: fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom('a', 'Z', '0', ' ', '{', '}', ':', ',', 'x') },
    { weight: 2, arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\r', '\b', '\f') },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 0x1f }).map((code) => String.fromCharCode(code)) },
    { weight: 1, arbitrary: fc.constantFrom('\u007f', 'é', '€', '\u{1f600}', '\u2028') },
  ),
  maxLength: 300,
});

describe('jsonStrings: native and ts agree, and match JSON.stringify', () => {
  it('writes each text as JSON.stringify does, end to end', () => {
    // No ranges at all: nothing, from both.
    for (const kernels of [native, ts]) {
      const none = kernels.jsonStrings(new Uint8Array(3), new Uint32Array(0));
      expect([none.bytes.length, none.ends.length]).toEqual([0, 0]);
    }
    const tally = branchTally('jsonStrings of text', [
      'an empty string',
      'a string needing no escape',
      'a quote or backslash',
      'a short escape',
      'a \\u escape',
      'a multi-byte character',
      'over 100 strings',
    ]);
    // Up to 150 texts of up to 300 characters each, in one buffer with a prefix before them, so
    // ranges start anywhere; the ranges name the texts in order.
    fc.assert(
      fc.property(fc.array(textArb, { maxLength: 150, size: 'max' }), fc.string({ maxLength: 8 }), (texts, prefix) => {
        const parts = texts.map((text) => encoder.encode(text));
        const bytes = new Uint8Array(encoder.encode(prefix).length + parts.reduce((sum, part) => sum + part.length, 0));
        const ranges = new Uint32Array(2 * parts.length);
        let at = encoder.encode(prefix).length;
        parts.forEach((part, index) => {
          bytes.set(part, at);
          ranges[2 * index] = at;
          ranges[2 * index + 1] = (at += part.length);
        });
        tally.hit('over 100 strings', texts.length > 100);
        for (const text of texts) {
          tally.hit('an empty string', text.length === 0);
          tally.hit('a string needing no escape', text.length > 0 && JSON.stringify(text) === `"${text}"`);
          tally.hit('a quote or backslash', /["\\]/.test(text));
          tally.hit('a short escape', /[\b\f\n\r\t]/.test(text));
          tally.hit('a \\u escape', /[\u0000-\u0007\u000b\u000e-\u001f]/.test(text));
          tally.hit('a multi-byte character', /[^\u0000-\u007f]/.test(text));
        }
        const fromNative = native.jsonStrings(bytes, ranges);
        expectSame(ts.jsonStrings(bytes, ranges), fromNative);
        const expected = texts.map((text) => encoder.encode(JSON.stringify(text)));
        expect(Buffer.from(fromNative.bytes).equals(Buffer.concat(expected))).toBe(true);
        let end = 0;
        expect(Array.from(fromNative.ends)).toEqual(expected.map((one) => (end += one.length)));
      }),
      { numRuns: 300 },
    );
    tally.expectAllReached();
  });

  it('copy bytes that are not text as they are, over ranges anywhere, and refuse ranges that do not fit', () => {
    const tally = branchTally('jsonStrings of bytes', ['accepted', 'refused: past the end', 'refused: reversed', 'refused: odd count', 'overlapping ranges']);
    // Any bytes (100 to 512) and up to 40 offsets: most within the first 100 bytes (so pairs
    // fit, reversed or not, and overlap), a few up to 530 (past the end of shorter inputs), and
    // an odd count now and then leaves a start without an end.
    const offsetArb = fc.oneof({ weight: 12, arbitrary: fc.nat(100) }, { weight: 1, arbitrary: fc.nat(530) });
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 100, maxLength: 512 }), fc.array(offsetArb, { maxLength: 40 }), (bytes, offsets) => {
        const ranges = Uint32Array.from(offsets);
        const result = expectSameOutcome((kernels) => kernels.jsonStrings(bytes, ranges));
        const pairs = Array.from({ length: Math.floor(offsets.length / 2) }, (_, index) => [offsets[2 * index], offsets[2 * index + 1]]);
        if (offsets.length % 2 === 1) tally.hit('refused: odd count');
        else if (pairs.some(([start, end]) => end > bytes.length || start > bytes.length)) tally.hit('refused: past the end', pairs.every(([start, end]) => start <= end));
        else if (pairs.some(([start, end]) => start > end)) tally.hit('refused: reversed');
        else {
          tally.hit('accepted');
          tally.hit('overlapping ranges', pairs.some(([start, end], index) => index > 0 && start < pairs[index - 1][1] && end > pairs[index - 1][0]));
        }
        expect(result.ok).toBe(offsets.length % 2 === 0 && pairs.every(([start, end]) => start <= end && end <= bytes.length));
        if (!result.ok) expect(result.code).toBe('INVALID_ARGUMENT');
      }),
      { numRuns: 400 },
    );
    tally.expectAllReached();
  });
});
