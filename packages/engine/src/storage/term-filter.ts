/**
 * The Bloom filter a derived file keeps over its terms, so a lookup passes a segment that lacks
 * a term without touching its FST: key dictionaries filter their keys, index files their tags.
 * Both use the one scheme (docs/formats.md): a fixed number of probes per term (each file's
 * own), at `(h1 + i·h2) mod bits`, where h1 is the term's CRC-32C and h2 its CRC-32 with the low bit set;
 * bit `b` is bit `b % 8` of byte `b / 8`.
 */
import type { Kernels } from '../kernels/kernels.js';
import { crc32, crc32c } from '../kernels/ts/crc.js';

/** Bytes of the smallest filter: a segment with no terms still has one, of eight bytes. */
const filterBytesMin = 8;

/**
 * The two hashes a term's filter probes are made from. They are computed by the TypeScript CRC
 * functions whatever kernel set is in use: terms are short, so a call into the native module
 * would cost a few times what the hash of a 16-byte term does, and the native CRCs give the same
 * values anyway. Many terms at once go through the kernels: `termHashesOf`.
 */
export function termHashes(term: Uint8Array, start = 0, end = term.length): [number, number] {
  return [crc32c(term, 0, start, end), (crc32(term, 0, start, end) | 1) >>> 0];
}

/**
 * The filter hashes of every term laid end to end in `bytes` (ending at `ends`), in one kernel
 * call: `out[2i]` is term i's first hash, `out[2i + 1]` its second (the same values `termHashes`
 * gives one term at a time).
 */
export function termHashesOf(kernels: Kernels, bytes: Uint8Array, ends: Uint32Array): Uint32Array {
  const ranges = new Uint32Array(ends.length * 2);
  for (let index = 0; index < ends.length; index++) {
    ranges[2 * index] = index === 0 ? 0 : ends[index - 1];
    ranges[2 * index + 1] = ends[index];
  }
  const hashes = kernels.payloadChecksums(bytes, ranges);
  for (let index = 1; index < hashes.length; index += 2) hashes[index] = (hashes[index] | 1) >>> 0;
  return hashes;
}

/** True when the filter may hold the term (false: it surely does not). */
export function filterMayHold(filter: Uint8Array, [h1, h2]: [number, number], probes: number): boolean {
  return filterMayHoldHashes(filter, h1, h2, probes);
}

/** `filterMayHold` with the two hashes apart (no pair to allocate in a merge's inner loop). */
export function filterMayHoldHashes(filter: Uint8Array, h1: number, h2: number, probes: number): boolean {
  const bits = filter.length * 8;
  // `(h1 + i·h2) mod bits`, stepped in integers below `bits`: the products would leave the
  // 32-bit range, and a modulo of doubles on every probe costs more than the probe.
  const step = h2 % bits;
  let bit = h1 % bits;
  for (let probe = 0; probe < probes; probe++) {
    if ((filter[bit >>> 3] & (1 << (bit & 7))) === 0) return false;
    bit += step;
    if (bit >= bits) bit -= bits;
  }
  return true;
}

/** A Bloom filter's size and probes per term. */
export interface FilterShape {
  readonly bytes: number;
  readonly probes: number;
}

/**
 * The shape of a filter of `terms` terms at `bitsPerTerm` bits and `probesMax` probes a term,
 * at least eight bytes and at most `bytesMax`. Past `bytesMax` the terms share fewer bits each,
 * and the probes fall with them (to about `ln 2` times the bits a term has, the count that
 * passes the fewest absent terms): many probes into a crowded filter would pass nearly every
 * term. A lookup then passes a segment more often, never wrongly.
 */
export function filterShapeOf(
  terms: number,
  bitsPerTerm: number,
  probesMax: number,
  bytesMax = Number.POSITIVE_INFINITY,
): FilterShape {
  const bytes = Math.max(filterBytesMin, Math.min(bytesMax, Math.ceil((terms * bitsPerTerm) / 8)));
  const bitsEach = (bytes * 8) / Math.max(1, terms);
  return { bytes, probes: Math.max(1, Math.min(probesMax, Math.round(bitsEach * Math.LN2))) };
}

/** The Bloom filter, of `shape`, of the terms laid end to end in `bytes` (ending at `ends`). */
export function termFilterOf(kernels: Kernels, bytes: Uint8Array, ends: Uint32Array, shape: FilterShape): Uint8Array {
  const hashes = termHashesOf(kernels, bytes, ends);
  const filter = new Uint8Array(shape.bytes);
  const bits = filter.length * 8;
  for (let term = 0; term < ends.length; term++) {
    const step = hashes[2 * term + 1] % bits;
    let bit = hashes[2 * term] % bits;
    for (let probe = 0; probe < shape.probes; probe++) {
      filter[bit >>> 3] |= 1 << (bit & 7);
      bit += step;
      if (bit >= bits) bit -= bits;
    }
  }
  return filter;
}
