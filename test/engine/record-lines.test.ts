import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  appendRecordLine,
  bytesField,
  parseRecordLine,
  recordFromLine,
  recordLine,
  type StoredRecord,
  storedRecordFromLine,
} from '../../packages/engine/src/index.js';

const bytes = fc.uint8Array({ maxLength: 64 });
const text = fc.string({ unit: 'grapheme', maxLength: 32 });

describe('record lines', () => {
  it('carry an append record through JSON text and back exactly, bytes and strings alike', () => {
    fc.assert(
      fc.property(
        fc.record(
          {
            payload: fc.oneof(text, bytes),
            key: fc.string({ minLength: 1, maxLength: 8 }),
            version: fc.nat(),
            tombstone: fc.boolean(),
            type: fc.string({ minLength: 1, maxLength: 8 }),
            tags: fc.array(fc.string({ minLength: 1, maxLength: 8 }), { maxLength: 3 }),
            fingerprint: fc.oneof(fc.string({ minLength: 1, maxLength: 8 }), bytes),
            timestamp: fc.nat(),
          },
          { requiredKeys: ['payload'] },
        ),
        (record) => {
          const line = JSON.parse(JSON.stringify(appendRecordLine(record)));
          expect(parseRecordLine(line, 1)).toEqual(record);
        },
      ),
    );
  });

  it('carry a stored record through an output line and back exactly', () => {
    fc.assert(
      fc.property(
        bytes,
        bytes,
        fc.option(fc.string({ minLength: 1 }), { nil: undefined }),
        fc.array(fc.string({ minLength: 1 }), { maxLength: 3 }),
        (payload, fingerprint, key, tags) => {
          const record: StoredRecord = {
            feed: 'f',
            commit: 3,
            stream: 's',
            seq: 2,
            position: 9,
            timestamp: 17,
            fingerprint,
            payload,
            key,
            version: key === undefined ? undefined : 1,
            tombstone: false,
            type: undefined,
            tags,
          };
          const line = JSON.parse(JSON.stringify(recordLine(record)));
          expect(storedRecordFromLine(line)).toEqual(record);
        },
      ),
    );
  });

  it('read an open stream record (no commit yet) without a position', () => {
    const line = recordLine({
      feed: 'f',
      stream: 's',
      seq: 1,
      timestamp: 5,
      payload: new Uint8Array([104, 105]),
      key: undefined,
      version: undefined,
      tombstone: false,
      type: undefined,
      tags: [],
    });
    expect(line).toMatchObject({ commit: null, position: null, payload: 'hi' });
    const record = recordFromLine(JSON.parse(JSON.stringify(line)));
    expect(record.commit).toBeUndefined();
    expect(record.position).toBeUndefined();
    expect(() => storedRecordFromLine(line)).toThrow(/commit/);
  });

  it('give bytes as text exactly when a fatal UTF-8 decode accepts them, else as base64', () => {
    const fatal = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
    const reached = { text: 0, textWithReplacement: 0, base64: 0 };
    const encoder = new TextEncoder();
    // Up to 300 bytes: random bytes, valid text (with U+FFFD and a BOM among its characters), and
    // valid text with one byte changed, so that every branch of the check is reached.
    const candidates = fc.oneof(
      fc.uint8Array({ maxLength: 300 }),
      fc
        .string({ unit: fc.constantFrom('a', 'é', '\uFFFD', '\uFEFF', '😀', '\u0000'), maxLength: 100 })
        .map((value) => encoder.encode(value)),
      fc
        .tuple(
          fc.string({ unit: 'grapheme', minLength: 1, maxLength: 100 }),
          fc.nat(),
          fc.integer({ min: 0x80, max: 0xff }),
        )
        .map(([value, at, byte]) => {
          const encoded = encoder.encode(value);
          encoded[at % encoded.length] = byte;
          return encoded;
        }),
    );
    fc.assert(
      fc.property(candidates, (candidate) => {
        let expected: Record<string, string>;
        try {
          expected = { payload: fatal.decode(candidate) };
          reached[expected.payload.includes('\uFFFD') ? 'textWithReplacement' : 'text']++;
        } catch {
          expected = { payloadBase64: Buffer.from(candidate).toString('base64') };
          reached.base64++;
        }
        expect(bytesField('payload', candidate)).toEqual(expected);
      }),
      { numRuns: 3000 },
    );
    expect(Math.min(reached.text, reached.textWithReplacement, reached.base64)).toBeGreaterThan(50);
  });
});
