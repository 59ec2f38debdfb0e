/**
 * JSON text written straight into a byte buffer, for NDJSON export lines (`ndjson.ts`, the twin
 * of native/src/ndjson.rs and native/src/json.rs): integers, strings from UTF-8 bytes, and
 * base64. Each writer takes the buffer and an offset and returns the offset after what it wrote;
 * the caller has made room (`jsonStringBytesMax`, `base64Bytes`).
 *
 * The output is exactly what `JSON.stringify` of the same value, encoded as UTF-8, would be (and
 * base64 exactly what `Buffer.toString('base64')` gives): an export's bytes must not depend on
 * which of the two made them. Strings are escaped as `JSON.stringify` escapes them (`\"`, `\\`,
 * the short escapes, `\u00XX` for the other control characters), every other byte copied as it is.
 */

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

const base64Digits = new TextEncoder().encode('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/');
const equals = 0x3d;

/** The most bytes a string of `bytes` UTF-8 bytes takes as JSON: six per byte (`\u001f`), and the quotes. */
export function jsonStringBytesMax(bytes: number): number {
  return 6 * bytes + 2;
}

/** The bytes of `count` bytes in base64, padded. */
export function base64Bytes(count: number): number {
  return 4 * Math.ceil(count / 3);
}

/**
 * Below this many bytes a copy is a loop; from it on, one native copy (`set`): a byte loop costs
 * a few nanoseconds a byte, a native call a few dozen nanoseconds in all.
 */
const nativeCopyBytesMin = 16;

/** Copies `bytes` (ASCII JSON text such as `,"key":`) to `out` at `at`. */
export function writeAscii(out: Uint8Array, at: number, bytes: Uint8Array): number {
  if (bytes.length >= nativeCopyBytesMin) {
    out.set(bytes, at);
    return at + bytes.length;
  }
  for (let index = 0; index < bytes.length; index++) out[at++] = bytes[index];
  return at;
}

/**
 * Writes `value`, an integer, in decimal as `JSON.stringify` would. Every number an export
 * writes is a safe integer; anything else takes the slow path and still matches.
 */
export function writeInteger(out: Uint8Array, at: number, value: number): number {
  if (!Number.isSafeInteger(value)) return writeAscii(out, at, new TextEncoder().encode(JSON.stringify(value)));
  if (value < 0) {
    out[at++] = 0x2d;
    value = -value;
  }
  let digits = 1;
  for (let power = 10; power <= value; power *= 10) digits++;
  for (let index = at + digits - 1; index >= at; index--) {
    const rest = Math.floor(value / 10);
    out[index] = 0x30 + (value - rest * 10);
    value = rest;
  }
  return at + digits;
}

/** Writes `source[start, end)` in base64 (the standard alphabet, padded), without quotes. */
export function writeBase64(out: Uint8Array, at: number, source: Uint8Array, start: number, end: number): number {
  let index = start;
  for (; index + 3 <= end; index += 3) {
    const bits = (source[index] << 16) | (source[index + 1] << 8) | source[index + 2];
    out[at++] = base64Digits[bits >> 18];
    out[at++] = base64Digits[(bits >> 12) & 63];
    out[at++] = base64Digits[(bits >> 6) & 63];
    out[at++] = base64Digits[bits & 63];
  }
  if (end - index === 1) {
    const bits = source[index] << 16;
    out[at++] = base64Digits[bits >> 18];
    out[at++] = base64Digits[(bits >> 12) & 63];
    out[at++] = equals;
    out[at++] = equals;
  } else if (end - index === 2) {
    const bits = (source[index] << 16) | (source[index + 1] << 8);
    out[at++] = base64Digits[bits >> 18];
    out[at++] = base64Digits[(bits >> 12) & 63];
    out[at++] = base64Digits[(bits >> 6) & 63];
    out[at++] = equals;
  }
  return at;
}
