/**
 * Terms kept as UTF-8 bytes laid end to end (`PackedBytes`), and the two things a dictionary
 * build does with a segment's hundreds of thousands of them: gathering them from UTF-16 code
 * units (`PackedTermsWriter`) and ordering them by their bytes (`utf8OrderOf`), with no string
 * or object per term. A build over strings held about 500 bytes a term at its peak (each term a
 * string several times over, each winner an object, the maps and arrays between them): a
 * 64 MiB segment's 900,000 keys took 450 MB. Packed, a term costs its bytes and a few numbers.
 */
import type { PackedBytes } from '../kernels/kernels.js';
import { grown } from '../typed-arrays.js';

/**
 * Bytes of a term's start compared as one number when terms are sorted: six bytes fit a
 * double exactly, and most terms differ within them, so most comparisons touch no bytes.
 */
const sortPrefixBytes = 6;

/**
 * The indices of `terms` in the order of their bytes (shorter first where one is a prefix of
 * the other): the order an FST takes its keys in, and the order strings sorted by their UTF-8
 * bytes (`sortStringsByUtf8`) come in, so a dictionary built from either is the same file.
 */
export function utf8OrderOf(terms: PackedBytes): Uint32Array {
  const { bytes, ends } = terms;
  const count = ends.length;
  const starts = new Uint32Array(count);
  const prefixes = new Float64Array(count);
  for (let index = 0; index < count; index++) {
    const start = index === 0 ? 0 : ends[index - 1];
    starts[index] = start;
    let prefix = 0;
    for (let at = 0; at < sortPrefixBytes; at++) {
      prefix = prefix * 256 + (start + at < ends[index] ? bytes[start + at] : 0);
    }
    prefixes[index] = prefix;
  }
  const order = new Uint32Array(count);
  for (let index = 0; index < count; index++) order[index] = index;
  order.sort((a, b) => {
    const byPrefix = prefixes[a] - prefixes[b];
    if (byPrefix !== 0) return byPrefix;
    // The same first bytes (a shorter term's missing ones count as zero): the rest decides,
    // then the length (a term that is a prefix of the other, or ends in zero bytes, first).
    const aStart = starts[a];
    const bStart = starts[b];
    const aLength = ends[a] - aStart;
    const bLength = ends[b] - bStart;
    const shorter = Math.min(aLength, bLength);
    for (let at = sortPrefixBytes; at < shorter; at++) {
      const difference = bytes[aStart + at] - bytes[bStart + at];
      if (difference !== 0) return difference;
    }
    return aLength - bLength;
  });
  return order;
}

/** `terms` rearranged into `order` (each index once): a new buffer, `terms` left as it was. */
export function packedInOrder(terms: PackedBytes, order: Uint32Array): { bytes: Uint8Array; ends: Uint32Array } {
  const { bytes, ends } = terms;
  const sorted = new Uint8Array(bytes.length);
  const sortedEnds = new Uint32Array(order.length);
  let at = 0;
  for (let index = 0; index < order.length; index++) {
    const term = order[index];
    const start = term === 0 ? 0 : ends[term - 1];
    sorted.set(bytes.subarray(start, ends[term]), at);
    at += ends[term] - start;
    sortedEnds[index] = at;
  }
  return { bytes: sorted, ends: sortedEnds };
}

/** The index of the first term that is the same as the one before it, or -1 when none is. */
export function firstRepeatIn(terms: PackedBytes): number {
  const { bytes, ends } = terms;
  for (let index = 1; index < ends.length; index++) {
    const start = index === 1 ? 0 : ends[index - 2];
    const length = ends[index - 1] - start;
    if (ends[index] - ends[index - 1] !== length) continue;
    let same = true;
    for (let at = 0; at < length && same; at++) same = bytes[start + at] === bytes[ends[index - 1] + at];
    if (same) return index;
  }
  return -1;
}

/**
 * Packs terms given as UTF-16 code units (what a string key table keeps) into UTF-8 bytes, as
 * `TextEncoder` encodes the strings they are: a surrogate pair as four bytes, a lone surrogate
 * as U+FFFD.
 */
export class PackedTermsWriter {
  private bytes: Uint8Array;
  private ends: Uint32Array;
  private used = 0;
  private count = 0;

  constructor(termsExpected: number, bytesExpected: number) {
    this.bytes = new Uint8Array(Math.max(16, bytesExpected));
    this.ends = new Uint32Array(Math.max(1, termsExpected));
  }

  /** Appends the term whose code units are `units[start, end)`. */
  add(units: Uint8Array | Uint16Array, start: number, end: number): void {
    // Three bytes a code unit at most (a pair's four bytes are two units').
    if (this.used + (end - start) * 3 > this.bytes.length)
      this.bytes = grown(this.bytes, Math.max(this.bytes.length * 2, this.used + (end - start) * 3));
    if (this.count === this.ends.length) this.ends = grown(this.ends, this.ends.length * 2);
    const bytes = this.bytes;
    let out = this.used;
    for (let at = start; at < end; at++) {
      let unit = units[at];
      if (unit < 0x80) {
        bytes[out++] = unit;
        continue;
      }
      if (unit < 0x800) {
        bytes[out++] = 0xc0 | (unit >> 6);
        bytes[out++] = 0x80 | (unit & 0x3f);
        continue;
      }
      if (unit >= 0xd800 && unit <= 0xdfff) {
        const next = at + 1 < end ? units[at + 1] : 0;
        if (unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          const point = 0x10000 + ((unit - 0xd800) << 10) + (next - 0xdc00);
          bytes[out++] = 0xf0 | (point >> 18);
          bytes[out++] = 0x80 | ((point >> 12) & 0x3f);
          bytes[out++] = 0x80 | ((point >> 6) & 0x3f);
          bytes[out++] = 0x80 | (point & 0x3f);
          at++;
          continue;
        }
        unit = 0xfffd;
      }
      bytes[out++] = 0xe0 | (unit >> 12);
      bytes[out++] = 0x80 | ((unit >> 6) & 0x3f);
      bytes[out++] = 0x80 | (unit & 0x3f);
    }
    this.used = out;
    this.ends[this.count++] = out;
  }

  /** The terms added, in their own buffers of exactly their size. */
  finish(): { bytes: Uint8Array; ends: Uint32Array } {
    return { bytes: this.bytes.slice(0, this.used), ends: this.ends.slice(0, this.count) };
  }
}
