/**
 * JSON strings from UTF-8 bytes, the TypeScript twin of the native `jsonStrings`
 * (native/src/json.rs): each range becomes a JSON string, quotes included, escaped exactly as
 * `JSON.stringify` escapes it (`\"`, `\\`, the short escapes, `\u00XX` for the other control
 * characters), every other byte copied as it is. NDJSON export writes keys and tags one at a time
 * with `writeJsonString`, and text payloads a batch at a time with `jsonStrings`.
 */
import { checkRanges } from './crc.js';

const quote = 0x22;
const backslash = 0x5c;
const hexDigits = new TextEncoder().encode('0123456789abcdef');

/** The escapes `JSON.stringify` writes for the control characters that have a short one. */
const shortEscapes = new Uint8Array(0x20);
shortEscapes[0x08] = 0x62; // \b
shortEscapes[0x09] = 0x74; // \t
shortEscapes[0x0a] = 0x6e; // \n
shortEscapes[0x0c] = 0x66; // \f
shortEscapes[0x0d] = 0x72; // \r

/**
 * Writes `source[start, end)`, UTF-8 text, as a JSON string (quotes included). Bytes of
 * multi-byte characters are copied as they are, as `JSON.stringify` leaves those characters;
 * `"`, `\` and control characters are escaped as it escapes them. Returns the offset after the
 * string, negated when the text had a byte above 0x7f: the caller checks such text is valid
 * UTF-8 where it has not already.
 */
export function writeJsonString(out: Uint8Array, at: number, source: Uint8Array, start: number, end: number): number {
  let high = 0;
  out[at++] = quote;
  for (let index = start; index < end; index++) {
    const byte = source[index];
    if (byte >= 0x20 && byte !== quote && byte !== backslash) {
      out[at++] = byte;
      high |= byte;
      continue;
    }
    out[at++] = backslash;
    if (byte === quote || byte === backslash) {
      out[at++] = byte;
    } else if (shortEscapes[byte] !== 0) {
      out[at++] = shortEscapes[byte];
    } else {
      out[at++] = 0x75; // u
      out[at++] = 0x30;
      out[at++] = 0x30;
      out[at++] = hexDigits[byte >> 4];
      out[at++] = hexDigits[byte & 15];
    }
  }
  out[at++] = quote;
  return high >= 0x80 ? -at : at;
}

/** The JSON string of each range of `bytes`, laid end to end, and where each ends (see `Kernels.jsonStrings`). */
export function jsonStrings(bytes: Uint8Array, ranges: Uint32Array): { bytes: Uint8Array; ends: Uint32Array } {
  checkRanges(ranges, bytes.length);
  let text = 0;
  for (let index = 0; index < ranges.length; index += 2) text += ranges[index + 1] - ranges[index] + 2;
  // Most text needs few escapes: room for it and its quotes, grown when a string might not fit.
  let out = new Uint8Array(text + (text >>> 4));
  const ends = new Uint32Array(ranges.length / 2);
  let at = 0;
  for (let index = 0; index < ends.length; index++) {
    const start = ranges[2 * index];
    const end = ranges[2 * index + 1];
    const most = 6 * (end - start) + 2;
    if (at + most > out.length) {
      const grown = new Uint8Array(Math.max(2 * out.length, at + most));
      grown.set(out.subarray(0, at));
      out = grown;
    }
    at = Math.abs(writeJsonString(out, at, bytes, start, end));
    ends[index] = at;
  }
  return { bytes: out.subarray(0, at), ends };
}
