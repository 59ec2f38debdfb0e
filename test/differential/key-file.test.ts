/**
 * A key dictionary file is encoded through the kernels (its winners' CRCs in one call): both
 * kernel sets must write the same bytes, and each winner's stored CRC must be the CRC-32 of its
 * 24 bytes, which `winnerAt` checks on its own when a lookup reads one winner.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32 } from '../../packages/engine/src/kernels/ts/crc.js';
import { encodeKeyFile, parseKeyFileHead, winnerAt } from '../../packages/engine/src/storage/key-file.js';
import { native, ts } from './both.js';

const winnerBytes = 28;

const entries = fc.uniqueArray(
  fc.record({
    key: fc.string({ minLength: 1, maxLength: 12, unit: 'grapheme' }),
    winner: fc.record({
      position: fc.nat({ max: 2 ** 40 }),
      version: fc.nat({ max: 2 ** 40 }),
      locator: fc.nat({ max: 2 ** 32 - 1 }),
      tombstone: fc.boolean(),
    }),
  }),
  { selector: (entry) => entry.key, maxLength: 200 },
);

describe('key dictionary files: native and ts agree', () => {
  it('encode generated entries to the same bytes, every winner checked by the CRC-32 of its fields', () => {
    fc.assert(
      fc.property(entries, fc.nat({ max: 2 ** 40 }), (given, base) => {
        const fromTs = encodeKeyFile(ts, base, given.length, 7, given);
        const fromNative = encodeKeyFile(native, base, given.length, 7, given);
        expect(Buffer.from(fromNative).equals(Buffer.from(fromTs))).toBe(true);
        const head = parseKeyFileHead(fromTs, fromTs.length, 'generated');
        const { offset, length } = head.sections[2];
        const table = fromTs.subarray(offset, offset + length);
        const view = new DataView(table.buffer, table.byteOffset, table.byteLength);
        const winners = new Map(given.map((entry) => [entry.key, entry.winner]));
        for (let ordinal = 0; ordinal < given.length; ordinal++) {
          const start = ordinal * winnerBytes;
          expect(view.getUint32(start + 24, true)).toBe(crc32(table, 0, start, start + 24));
          expect([...winners.values()]).toContainEqual(winnerAt(table, ordinal));
        }
      }),
      { numRuns: 100 },
    );
  });
});
