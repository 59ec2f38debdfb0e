/**
 * A fingerprint's term is its bytes as a Latin-1 string, one character per byte: the 8-byte
 * default fingerprint takes a path of its own, and both paths must give the same terms, for the
 * dictionaries and the dedup maps are keyed by them.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { defaultFingerprint, fingerprintKey } from '../../packages/engine/src/storage/commit-run.js';

/** Fingerprints are 1 to 64 bytes (`fingerprintBytesMax`); runs of properties below. */
const fingerprintBytesMax = 64;
const runs = 2000;

function charByChar(bytes: Uint8Array): string {
  let term = '';
  for (const byte of bytes) term += String.fromCharCode(byte);
  return term;
}

describe('fingerprintKey', () => {
  it('gives one character per byte, for default 8-byte fingerprints and every other length', () => {
    const lengths = new Set<number>();
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ minLength: 8, maxLength: 8 }),
          fc.uint8Array({ minLength: 1, maxLength: fingerprintBytesMax }),
        ),
        (bytes) => {
          lengths.add(bytes.length);
          const term = fingerprintKey(bytes);
          expect(term).toBe(charByChar(bytes));
          expect(term.length).toBe(bytes.length);
        },
      ),
      { numRuns: runs },
    );
    // Both paths were taken: the 8-byte one, and lengths on either side of it.
    expect(lengths.has(8)).toBe(true);
    expect([...lengths].some((length) => length < 8)).toBe(true);
    expect([...lengths].some((length) => length > 8)).toBe(true);
  });

  it('of a default fingerprint holds its CRC-32C then its CRC-32, little-endian', () => {
    fc.assert(
      fc.property(fc.nat({ max: 0xffff_ffff }), fc.nat({ max: 0xffff_ffff }), (crc32c, crc32) => {
        const term = fingerprintKey(defaultFingerprint(crc32c, crc32));
        const expected = new Uint8Array(8);
        new DataView(expected.buffer).setUint32(0, crc32c, true);
        new DataView(expected.buffer).setUint32(4, crc32, true);
        expect(term).toBe(charByChar(expected));
      }),
      { numRuns: runs },
    );
  });
});
