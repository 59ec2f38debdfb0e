/**
 * Table-driven CRC-32 in pure TypeScript, slicing by 16: sixteen 256-entry tables let the loop
 * fold 16 input bytes per iteration with independent table loads, which is what gets a JIT'd
 * loop past 1 GB/s. One implementation serves both polynomials StreamStack needs.
 */
import { StreamStackError } from '../../errors.js';

/** Bytes folded per iteration of the main loop; the tables are as many. */
const sliceBytes = 16;

/** Reflected polynomial of CRC-32 (IEEE 802.3), as zlib, gzip and PNG use it. */
export const crc32Polynomial = 0xedb88320;

/** Reflected polynomial of CRC-32C (Castagnoli), as iSCSI, ext4 and the fst format use it. */
export const crc32cPolynomial = 0x82f63b78;

export class SlicingCrc32 {
  /** `tables[k * 256 + b]`: the CRC contribution of byte `b` followed by `k` zero bytes. */
  private readonly tables: Int32Array;

  constructor(polynomial: number) {
    const tables = new Int32Array(sliceBytes * 256);
    for (let byte = 0; byte < 256; byte++) {
      let crc = byte;
      for (let bit = 0; bit < 8; bit++) crc = crc & 1 ? (crc >>> 1) ^ polynomial : crc >>> 1;
      tables[byte] = crc;
    }
    for (let slice = 1; slice < sliceBytes; slice++) {
      for (let byte = 0; byte < 256; byte++) {
        const previous = tables[(slice - 1) * 256 + byte];
        tables[slice * 256 + byte] = (previous >>> 8) ^ tables[previous & 0xff];
      }
    }
    this.tables = tables;
  }

  /**
   * The CRC of `bytes[start, end)`, continuing from `seed` (the CRC of whatever came before, 0
   * to start), so `update(b, update(a)) === update(a ++ b)`.
   */
  update(bytes: Uint8Array, seed = 0, start = 0, end = bytes.length): number {
    const t = this.tables;
    let crc = ~seed;
    let i = start;
    while (end - i >= sliceBytes) {
      const word = crc ^ (bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) | (bytes[i + 3] << 24));
      crc =
        t[3840 + (word & 0xff)] ^
        t[3584 + ((word >>> 8) & 0xff)] ^
        t[3328 + ((word >>> 16) & 0xff)] ^
        t[3072 + (word >>> 24)] ^
        t[2816 + bytes[i + 4]] ^
        t[2560 + bytes[i + 5]] ^
        t[2304 + bytes[i + 6]] ^
        t[2048 + bytes[i + 7]] ^
        t[1792 + bytes[i + 8]] ^
        t[1536 + bytes[i + 9]] ^
        t[1280 + bytes[i + 10]] ^
        t[1024 + bytes[i + 11]] ^
        t[768 + bytes[i + 12]] ^
        t[512 + bytes[i + 13]] ^
        t[256 + bytes[i + 14]] ^
        t[bytes[i + 15]];
      i += sliceBytes;
    }
    while (i < end) crc = t[(crc ^ bytes[i++]) & 0xff] ^ (crc >>> 8);
    return ~crc >>> 0;
  }
}

const ieee = new SlicingCrc32(crc32Polynomial);
const castagnoli = new SlicingCrc32(crc32cPolynomial);

/** CRC-32 (IEEE) of `bytes[start, end)`, continuing from `seed`; equals `zlib.crc32`. */
export function crc32(bytes: Uint8Array, seed = 0, start = 0, end = bytes.length): number {
  return ieee.update(bytes, seed, start, end);
}

/** CRC-32C (Castagnoli) of `bytes[start, end)`, continuing from `seed`. */
export function crc32c(bytes: Uint8Array, seed = 0, start = 0, end = bytes.length): number {
  return castagnoli.update(bytes, seed, start, end);
}

/** Checks ranges `[ranges[2i], ranges[2i + 1])` against a buffer of `length` bytes, as the native twin does. */
function checkRanges(ranges: Uint32Array, length: number): void {
  if (ranges.length % 2 !== 0) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `ranges come in start and end pairs, but ${ranges.length} offsets were given`,
    );
  }
  for (let index = 0; index < ranges.length; index += 2) {
    if (ranges[index] > ranges[index + 1] || ranges[index + 1] > length) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `range ${index / 2} [${ranges[index]}, ${ranges[index + 1]}) is reversed or runs past the ${length} bytes`,
        {
          details: { index: index / 2, start: ranges[index], end: ranges[index + 1], bytes: length },
        },
      );
    }
  }
}

/** `out`, when the caller gave one, checked to hold `expected` values; else a new array. */
function outputOf(out: Uint32Array | undefined, expected: number): Uint32Array {
  if (out === undefined) return new Uint32Array(expected);
  if (out.length !== expected) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `the output holds ${out.length} values, not the ${expected} the ranges give`,
    );
  }
  return out;
}

/** CRC-32C of each range of `bytes` (see `Kernels.crc32cRanges`). */
export function crc32cRanges(bytes: Uint8Array, ranges: Uint32Array, given?: Uint32Array): Uint32Array {
  checkRanges(ranges, bytes.length);
  const out = outputOf(given, ranges.length / 2);
  for (let index = 0; index < out.length; index++)
    out[index] = crc32c(bytes, 0, ranges[2 * index], ranges[2 * index + 1]);
  return out;
}

/** CRC-32C and CRC-32 of each range of `bytes`, interleaved (see `Kernels.payloadChecksums`). */
export function payloadChecksums(bytes: Uint8Array, ranges: Uint32Array, given?: Uint32Array): Uint32Array {
  checkRanges(ranges, bytes.length);
  const out = outputOf(given, ranges.length);
  for (let index = 0; index < ranges.length; index += 2) {
    out[index] = crc32c(bytes, 0, ranges[index], ranges[index + 1]);
    out[index + 1] = crc32(bytes, 0, ranges[index], ranges[index + 1]);
  }
  return out;
}
