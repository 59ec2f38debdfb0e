/**
 * Byte-level encoding for everything StreamStack writes: unsigned varints (LEB128) up to 2^53,
 * length-prefixed byte strings and UTF-8 strings, fixed little-endian integers. A reader never
 * reads past its input and never allocates more than its input could describe: malformed bytes
 * become `CORRUPT`, not a RangeError or an allocation of gigabytes.
 */
import { assert, StreamStackError } from '../errors.js';
import { writerRetainedBytesMax } from '../limits.js';

const textEncoder = new TextEncoder();
/**
 * Fatal, because a replacement character would silently change a stored string, and keeping a
 * leading byte-order mark, because it is the string's first character (a key `\uFEFFk` is not
 * the key `k`); by default a decoder drops one.
 */
const textDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Strings up to this many bytes take the ASCII fast path when they are ASCII. */
const shortStringBytesMax = 64;

/** A varint carrying a value below 2^53 takes at most this many bytes. */
const varintBytesMax = 8;
/** Initial capacity of a writer's buffer; it doubles as needed. */
const writerBytesInitial = 256;

export function utf8Encode(text: string): Uint8Array {
  return textEncoder.encode(text);
}

/** Decodes UTF-8, or returns undefined when the bytes are not valid UTF-8. */
export function utf8DecodeOrUndefined(bytes: Uint8Array): string | undefined {
  try {
    return textDecoder.decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * Decodes the UTF-8 in `bytes[start, end)`, or returns undefined when it is not valid UTF-8.
 * Short ASCII strings (keys, types, tags, stream ids) are the common case, and making them from
 * their char codes is several times faster than a TextDecoder call. They are made in one piece:
 * appending a character at a time would leave a tree of one-character strings, about 30 bytes a
 * character, in every string a feed keeps (its commits' stream ids).
 */
export function utf8DecodeRange(bytes: Uint8Array, start: number, end: number): string | undefined {
  const length = end - start;
  if (length <= shortStringBytesMax) {
    // The char codes go through a scratch array kept per length, not a view of `bytes`: a
    // view is an allocation, and a scan decodes a key or tag for every record.
    const codes = (asciiScratch[length] ??= new Array<number>(length).fill(0));
    let index = 0;
    for (; index < length; index++) {
      const byte = bytes[start + index];
      if (byte >= 0x80) break;
      codes[index] = byte;
    }
    if (index === length) return String.fromCharCode.apply(null, codes);
  }
  return utf8DecodeOrUndefined(bytes.subarray(start, end));
}

/** Scratch arrays of char codes for `utf8DecodeRange`, one per length. */
const asciiScratch: number[][] = [];

/** A growable buffer that encodes values at its end. */
export class ByteWriter {
  private buffer: Uint8Array;
  private view: DataView;
  /** True from a `finish` that gave its buffer away until the next `clear`. */
  private handedOver = false;
  length = 0;

  constructor(capacity = writerBytesInitial) {
    this.buffer = new Uint8Array(capacity);
    this.view = new DataView(this.buffer.buffer);
  }

  /** Makes room for `bytes` more bytes. */
  reserve(bytes: number): void {
    const needed = this.length + bytes;
    if (needed <= this.buffer.length) return;
    assert(!this.handedOver, 'a writer whose bytes were handed over is cleared before it is written again');
    let capacity = this.buffer.length * 2;
    while (capacity < needed) capacity *= 2;
    const grown = new Uint8Array(capacity);
    grown.set(this.buffer.subarray(0, this.length));
    this.buffer = grown;
    this.view = new DataView(grown.buffer);
  }

  u8(value: number): this {
    this.reserve(1);
    this.buffer[this.length++] = value;
    return this;
  }

  u32(value: number): this {
    this.reserve(4);
    this.view.setUint32(this.length, value, true);
    this.length += 4;
    return this;
  }

  u64(value: number): this {
    this.reserve(8);
    this.view.setUint32(this.length, value % 0x1_0000_0000, true);
    this.view.setUint32(this.length + 4, Math.floor(value / 0x1_0000_0000), true);
    this.length += 8;
    return this;
  }

  /** An unsigned varint of a safe integer. */
  varint(value: number): this {
    this.reserve(varintBytesMax);
    const buffer = this.buffer;
    let at = this.length;
    while (value >= 0x80) {
      buffer[at++] = (value % 0x80) | 0x80;
      value = Math.floor(value / 0x80);
    }
    buffer[at++] = value;
    this.length = at;
    return this;
  }

  raw(bytes: Uint8Array): this {
    this.reserve(bytes.length);
    this.buffer.set(bytes, this.length);
    this.length += bytes.length;
    return this;
  }

  /** A varint length, then the bytes. */
  bytes(bytes: Uint8Array): this {
    return this.varint(bytes.length).raw(bytes);
  }

  /** A varint byte length, then the UTF-8 bytes, encoded straight into the buffer. */
  string(text: string): this {
    if (text.length <= shortStringBytesMax) {
      // Short ASCII (ids, keys, types, tags) is copied code unit by code unit: cheaper than a
      // call into the encoder. Anything else falls through to it.
      this.reserve(1 + text.length);
      const buffer = this.buffer;
      const start = this.length + 1;
      let index = 0;
      for (; index < text.length; index++) {
        const unit = text.charCodeAt(index);
        if (unit >= 0x80) break;
        buffer[start + index] = unit;
      }
      if (index === text.length) {
        buffer[this.length] = text.length;
        this.length = start + text.length;
        return this;
      }
    }
    if (text.length < 0x80 / 3) {
      // The length fits one varint byte whatever the text is, so encode first, then fill it in.
      this.reserve(1 + text.length * 3);
      const lengthAt = this.length;
      const { written } = textEncoder.encodeInto(text, this.buffer.subarray(lengthAt + 1));
      this.buffer[lengthAt] = written;
      this.length = lengthAt + 1 + written;
      return this;
    }
    return this.bytes(utf8Encode(text));
  }

  /** Overwrites a u32 written earlier (for lengths known only after the content). */
  patchU32(at: number, value: number): void {
    this.view.setUint32(at, value, true);
  }

  /** The bytes written so far (a view, valid until the next write). */
  peek(): Uint8Array {
    assert(!this.handedOver, 'a writer whose bytes were handed over is cleared before it is read again');
    return this.buffer.subarray(0, this.length);
  }

  /**
   * The bytes written so far, for the caller to keep: a copy when they are few, else the bytes
   * themselves, the writer starting again on a small buffer. Either way the writer keeps at most
   * `writerRetainedBytesMax` of capacity: one seal of a million records grows it to hundreds of
   * megabytes, which a long-lived writer would otherwise hold for good, and copying them would
   * double them at the worst moment. Write again only after `clear`.
   */
  finish(): Uint8Array {
    if (this.length <= writerRetainedBytesMax) {
      const copy = this.buffer.slice(0, this.length);
      if (this.buffer.length > writerRetainedBytesMax) this.replaceBuffer(writerBytesInitial);
      return copy;
    }
    const bytes = this.buffer.subarray(0, this.length);
    this.replaceBuffer(writerBytesInitial);
    this.handedOver = true;
    return bytes;
  }

  /** Bytes the writer can hold before it grows. */
  get capacity(): number {
    return this.buffer.length;
  }

  clear(): void {
    this.length = 0;
    this.handedOver = false;
  }

  private replaceBuffer(capacity: number): void {
    this.buffer = new Uint8Array(capacity);
    this.view = new DataView(this.buffer.buffer);
  }
}

/** Reads values in the order a ByteWriter wrote them; anything malformed is `CORRUPT`. */
export class ByteReader {
  offset: number;
  private readonly view: DataView;

  constructor(
    readonly input: Uint8Array,
    offset = 0,
    readonly end = input.length,
    /** Names what is being read, for error messages. */
    readonly what = 'record',
  ) {
    this.offset = offset;
    this.view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  }

  corrupt(reason: string): StreamStackError {
    return new StreamStackError('CORRUPT', `${this.what} is corrupt at byte ${this.offset}: ${reason}`);
  }

  private need(count: number): void {
    if (this.offset + count > this.end) throw this.corrupt(`needs ${count} more bytes`);
  }

  get remaining(): number {
    return this.end - this.offset;
  }

  u8(): number {
    this.need(1);
    return this.input[this.offset++];
  }

  u32(): number {
    this.need(4);
    const value = this.view.getUint32(this.offset, true);
    this.offset += 4;
    return value;
  }

  u64(): number {
    this.need(8);
    const low = this.view.getUint32(this.offset, true);
    const high = this.view.getUint32(this.offset + 4, true);
    if (high >= 0x20_0000) throw this.corrupt('a 64-bit value exceeds 2^53');
    this.offset += 8;
    return high * 0x1_0000_0000 + low;
  }

  varint(): number {
    let value = 0;
    let scale = 1;
    for (let index = 0; index < varintBytesMax; index++) {
      this.need(1);
      const byte = this.input[this.offset++];
      value += (byte & 0x7f) * scale;
      if ((byte & 0x80) === 0) {
        if (value > Number.MAX_SAFE_INTEGER) throw this.corrupt('a varint exceeds 2^53');
        return value;
      }
      scale *= 0x80;
    }
    throw this.corrupt('a varint is too long');
  }

  raw(count: number): Uint8Array {
    this.need(count);
    const bytes = this.input.subarray(this.offset, this.offset + count);
    this.offset += count;
    return bytes;
  }

  bytes(): Uint8Array {
    return this.raw(this.varint());
  }

  string(): string {
    const length = this.varint();
    this.need(length);
    const start = this.offset;
    const text = utf8DecodeRange(this.input, start, start + length);
    if (text === undefined) throw this.corrupt('a string is not valid UTF-8');
    this.offset = start + length;
    return text;
  }

  expectEnd(): void {
    if (this.offset !== this.end) throw this.corrupt(`${this.end - this.offset} trailing bytes`);
  }
}

/**
 * Strings whose UTF-16 order can differ from their UTF-8 byte order: only code units from the
 * surrogates up (a supplementary character sorts before U+E000–U+FFFF in UTF-16, after in UTF-8).
 */
const orderBreaking = /[\ud800-\uffff]/;

/**
 * Sorts `items` by the UTF-8 bytes of `text(item)` — the order FSTs need — comparing strings
 * natively whenever that gives the same order, and bytes only when it might not.
 */
export function sortByUtf8<T>(items: T[], text: (item: T) => string): void {
  if (!items.some((item) => orderBreaking.test(text(item)))) {
    items.sort((a, b) => {
      const x = text(a);
      const y = text(b);
      return x < y ? -1 : x > y ? 1 : 0;
    });
    return;
  }
  const bytes = new Map(items.map((item) => [item, textEncoder.encode(text(item))]));
  items.sort((a, b) => Buffer.compare(bytes.get(a)!, bytes.get(b)!));
}

/** The highest UTF-16 code unit in any of `strings` (0 for none). */
function highestCodeUnit(strings: readonly string[]): number {
  let highest = 0;
  for (const value of strings) {
    for (let at = 0; at < value.length; at++) {
      const unit = value.charCodeAt(at);
      if (unit > highest) highest = unit;
    }
  }
  return highest;
}

/**
 * Sorts strings by their UTF-8 bytes. Below the surrogates UTF-16 order is UTF-8 order, and then
 * the built-in sort (no comparator called from JavaScript) is several times faster.
 */
export function sortStringsByUtf8(strings: string[]): void {
  if (highestCodeUnit(strings) < 0xd800) strings.sort();
  else sortByUtf8(strings, (value) => value);
}

/**
 * Byte strings laid end to end in one buffer, with where each ends: the packed form a kernel takes
 * a batch in, so the batch crosses into native code once rather than once per string.
 */
export function concatBytes(parts: readonly Uint8Array[]): { bytes: Uint8Array; ends: Uint32Array } {
  const ends = new Uint32Array(parts.length);
  let total = 0;
  for (let index = 0; index < parts.length; index++) ends[index] = total += parts[index].length;
  const bytes = new Uint8Array(total);
  for (let index = 0; index < parts.length; index++) bytes.set(parts[index], index === 0 ? 0 : ends[index - 1]);
  return { bytes, ends };
}

/** The UTF-8 bytes of `strings` laid end to end, and where each ends (an FST's key input). */
export function utf8Concat(strings: readonly string[]): { bytes: Uint8Array; ends: Uint32Array } {
  const ends = new Uint32Array(strings.length);
  const highest = highestCodeUnit(strings);
  if (highest < 0x80) {
    let total = 0;
    strings.forEach((value, index) => {
      ends[index] = total += value.length;
    });
    return { bytes: new Uint8Array(Buffer.from(strings.join(''), 'latin1')), ends };
  }
  if (highest < 0xd800) {
    // No surrogates: each code unit is one character of one to three bytes, encoded here in one
    // pass rather than one TextEncoder call per string (fingerprint terms are Latin-1 strings).
    let total = 0;
    strings.forEach((value, index) => {
      for (let at = 0; at < value.length; at++) {
        const unit = value.charCodeAt(at);
        total += unit < 0x80 ? 1 : unit < 0x800 ? 2 : 3;
      }
      ends[index] = total;
    });
    const bytes = new Uint8Array(total);
    let out = 0;
    for (const value of strings) {
      for (let at = 0; at < value.length; at++) {
        const unit = value.charCodeAt(at);
        if (unit < 0x80) bytes[out++] = unit;
        else if (unit < 0x800) {
          bytes[out++] = 0xc0 | (unit >> 6);
          bytes[out++] = 0x80 | (unit & 0x3f);
        } else {
          bytes[out++] = 0xe0 | (unit >> 12);
          bytes[out++] = 0x80 | ((unit >> 6) & 0x3f);
          bytes[out++] = 0x80 | (unit & 0x3f);
        }
      }
    }
    return { bytes, ends };
  }
  const encoded = strings.map((value) => textEncoder.encode(value));
  let total = 0;
  encoded.forEach((value, index) => {
    ends[index] = total += value.length;
  });
  const bytes = new Uint8Array(total);
  encoded.forEach((value, index) => {
    bytes.set(value, index === 0 ? 0 : ends[index - 1]);
  });
  return { bytes, ends };
}
