import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { appendRecordLine, parseRecordLine, recordFromLine, recordLine, storedRecordFromLine, type StoredRecord } from '../../packages/engine/src/index.js';

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
      fc.property(bytes, bytes, fc.option(fc.string({ minLength: 1 }), { nil: undefined }), fc.array(fc.string({ minLength: 1 }), { maxLength: 3 }), (payload, fingerprint, key, tags) => {
        const record: StoredRecord = { feed: 'f', commit: 3, stream: 's', seq: 2, position: 9, timestamp: 17, fingerprint, payload, key, version: key === undefined ? undefined : 1, tombstone: false, type: undefined, tags };
        const line = JSON.parse(JSON.stringify(recordLine(record)));
        expect(storedRecordFromLine(line)).toEqual(record);
      }),
    );
  });

  it('read an open stream record (no commit yet) without a position', () => {
    const line = recordLine({ feed: 'f', stream: 's', seq: 1, timestamp: 5, payload: new Uint8Array([104, 105]), key: undefined, version: undefined, tombstone: false, type: undefined, tags: [] });
    expect(line).toMatchObject({ commit: null, position: null, payload: 'hi' });
    const record = recordFromLine(JSON.parse(JSON.stringify(line)));
    expect(record.commit).toBeUndefined();
    expect(record.position).toBeUndefined();
    expect(() => storedRecordFromLine(line)).toThrow(/commit/);
  });
});
