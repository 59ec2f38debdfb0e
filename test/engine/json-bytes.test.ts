/**
 * The JSON byte writers behind NDJSON export: strings, integers and base64 written straight into
 * a buffer must be exactly the bytes of `JSON.stringify` (UTF-8) and `Buffer.toString('base64')`,
 * so an export's files do not depend on which path made a line.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  base64Bytes,
  jsonStringBytesMax,
  writeBase64,
  writeInteger,
  writeJsonString,
} from '../../packages/engine/src/kernels/ts/json.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Well-formed strings: any code point, so control characters, quotes, surrogate pairs, U+2028. */
const texts = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: fc.integer({ min: 0, max: 0x7f }).map((code) => String.fromCharCode(code)), maxLength: 40 }),
  fc.constantFrom(
    '',
    '"',
    '\\',
    '\u0000\u001f\u007f',
    '\b\f\n\r\t',
    '\u2028\u2029',
    '\ufeffbom',
    '{"id":1,"v":"x"}',
    'ünïcödé 🎉',
  ),
);

describe('JSON bytes', () => {
  it('writes strings as JSON.stringify does, and says when they had bytes above 0x7f', () => {
    fc.assert(
      fc.property(texts, fc.integer({ min: 0, max: 5 }), (text, offset) => {
        const source = encoder.encode(`${'.'.repeat(offset)}${text}`);
        const out = new Uint8Array(jsonStringBytesMax(source.length) + 3);
        const end = writeJsonString(out, 3, source, offset, source.length);
        expect(decoder.decode(out.subarray(3, Math.abs(end)))).toBe(JSON.stringify(text));
        expect(end < 0).toBe(source.subarray(offset).some((byte) => byte > 0x7f));
      }),
      { numRuns: 2000 },
    );
  });

  it('writes integers as JSON.stringify does', () => {
    const cases = [
      0,
      -0,
      1,
      9,
      10,
      99,
      100,
      -1,
      -10,
      2 ** 31,
      2 ** 32,
      2 ** 32 + 1,
      Number.MAX_SAFE_INTEGER,
      -Number.MAX_SAFE_INTEGER,
      1733000000000,
      1.5,
      2 ** 60,
    ];
    fc.assert(
      fc.property(fc.oneof(fc.constantFrom(...cases), fc.maxSafeInteger(), fc.integer()), (value) => {
        const out = new Uint8Array(40);
        const end = writeInteger(out, 1, value);
        expect(decoder.decode(out.subarray(1, end))).toBe(JSON.stringify(value));
      }),
      { numRuns: 2000 },
    );
  });

  it('writes base64 as Buffer does', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 70 }), fc.integer({ min: 0, max: 3 }), (bytes, offset) => {
        const source = new Uint8Array([...new Uint8Array(offset), ...bytes]);
        const out = new Uint8Array(base64Bytes(bytes.length) + 2);
        const end = writeBase64(out, 2, source, offset, source.length);
        expect(end).toBe(out.length);
        expect(decoder.decode(out.subarray(2, end))).toBe(Buffer.from(bytes).toString('base64'));
      }),
      { numRuns: 2000 },
    );
  });
});
