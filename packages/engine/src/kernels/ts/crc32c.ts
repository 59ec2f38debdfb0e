/**
 * CRC-32C (Castagnoli) in pure TypeScript, slicing by 8: eight 256-entry tables let the main loop
 * fold eight input bytes per iteration with independent table loads instead of one dependent load
 * per byte, which is several times faster in a JIT than the byte-at-a-time loop.
 */

/** The Castagnoli polynomial, bit-reflected, as iSCSI, ext4 and the fst format use it. */
export const crc32cReflectedPolynomial = 0x82f63b78;

/** Bytes folded per iteration of the main loop; there is one table per byte. */
const sliceWidthBytes = 8;

/** Entries per table: one per value of a byte. */
const tableEntries = 256;

/**
 * `sliceTables[k * 256 + b]` is the CRC contribution of byte `b` followed by `k` zero bytes, so the
 * eight bytes of a block can be looked up independently and combined with XOR.
 */
const sliceTables = buildSliceTables();

function buildSliceTables(): Int32Array {
  const tables = new Int32Array(sliceWidthBytes * tableEntries);
  for (let byte = 0; byte < tableEntries; byte++) {
    let crc = byte;
    for (let bit = 0; bit < 8; bit++) {
      crc = crc & 1 ? (crc >>> 1) ^ crc32cReflectedPolynomial : crc >>> 1;
    }
    tables[byte] = crc;
  }
  for (let slice = 1; slice < sliceWidthBytes; slice++) {
    for (let byte = 0; byte < tableEntries; byte++) {
      const shorter = tables[(slice - 1) * tableEntries + byte];
      tables[slice * tableEntries + byte] = (shorter >>> 8) ^ tables[shorter & 0xff];
    }
  }
  return tables;
}

/**
 * The CRC-32C of `bytes`, continuing from `seed`, the CRC of the bytes that came before (0 to
 * start), so `crc32c(b, crc32c(a)) === crc32c(a ++ b)`. Returns an unsigned 32-bit integer.
 */
export function crc32c(bytes: Uint8Array, seed = 0): number {
  const tables = sliceTables;
  const end = bytes.length;
  let crc = ~seed;
  let index = 0;
  // The offsets 256 * k below select table k; they are spelled out so the JIT sees constants.
  while (end - index >= sliceWidthBytes) {
    const word =
      crc ^
      (bytes[index] |
        (bytes[index + 1] << 8) |
        (bytes[index + 2] << 16) |
        (bytes[index + 3] << 24));
    crc =
      tables[1792 + (word & 0xff)] ^
      tables[1536 + ((word >>> 8) & 0xff)] ^
      tables[1280 + ((word >>> 16) & 0xff)] ^
      tables[1024 + (word >>> 24)] ^
      tables[768 + bytes[index + 4]] ^
      tables[512 + bytes[index + 5]] ^
      tables[256 + bytes[index + 6]] ^
      tables[bytes[index + 7]];
    index += sliceWidthBytes;
  }
  while (index < end) {
    crc = tables[(crc ^ bytes[index]) & 0xff] ^ (crc >>> 8);
    index++;
  }
  return ~crc >>> 0;
}
