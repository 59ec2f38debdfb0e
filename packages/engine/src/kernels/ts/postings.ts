/**
 * Posting lists (docs/formats.md): encode, decode, intersect and union of strictly ascending u32
 * positions. The TypeScript twin of the native kernel; both write the same bytes.
 */
import { StreamStackError } from '../../errors.js';
import { intersectGallopRatio, postingsBlockLength, postingsBlockThreshold } from '../../limits.js';

const plainForm = 0x00;
const blockForm = 0x01;
/** A varint carrying a u32 takes at most this many bytes. */
const varintBytesMax = 5;

function assertStrictlyAscending(positions: Uint32Array, name: string): void {
  for (let i = 1; i < positions.length; i++) {
    if (positions[i] <= positions[i - 1]) {
      throw new StreamStackError(
        'POSTINGS_NOT_SORTED',
        `${name} is not strictly ascending at index ${i} (${positions[i - 1]} then ${positions[i]})`,
      );
    }
  }
}

function writeVarint(out: Uint8Array, at: number, value: number): number {
  while (value >= 0x80) {
    out[at++] = (value & 0x7f) | 0x80;
    value >>>= 7;
  }
  out[at++] = value;
  return at;
}

function corrupt(reason: string): StreamStackError {
  return new StreamStackError('CORRUPT', `posting list is corrupt: ${reason}`);
}

/** A cursor over encoded bytes that reads u32 varints and rejects malformed ones. */
class VarintReader {
  offset: number;
  constructor(
    private readonly bytes: Uint8Array,
    offset: number,
  ) {
    this.offset = offset;
  }

  read(): number {
    let value = 0;
    for (let index = 0; index < varintBytesMax; index++) {
      if (this.offset >= this.bytes.length) throw corrupt('a varint runs past the end');
      const byte = this.bytes[this.offset++];
      value += (byte & 0x7f) * 2 ** (7 * index);
      if ((byte & 0x80) === 0) {
        if (value > 0xffff_ffff) throw corrupt('a varint exceeds 32 bits');
        return value;
      }
    }
    throw corrupt('a varint is longer than 5 bytes');
  }
}

export function postingsEncode(positions: Uint32Array): Uint8Array {
  assertStrictlyAscending(positions, 'positions');
  const count = positions.length;
  if (count < postingsBlockThreshold) {
    const out = new Uint8Array(1 + varintBytesMax * (count + 1));
    out[0] = plainForm;
    let at = writeVarint(out, 1, count);
    let previous = 0;
    for (let i = 0; i < count; i++) {
      at = writeVarint(out, at, positions[i] - previous);
      previous = positions[i];
    }
    return out.slice(0, at);
  }
  const blockCount = Math.ceil(count / postingsBlockLength);
  const bodies = new Uint8Array(varintBytesMax * count);
  const directory = new Uint8Array(2 * varintBytesMax * blockCount);
  let bodiesLength = 0;
  let directoryLength = 0;
  let previous = 0;
  for (let block = 0; block < blockCount; block++) {
    const blockStart = block * postingsBlockLength;
    const blockEnd = Math.min(count, blockStart + postingsBlockLength);
    const previousBlockLast = previous;
    const bodyStart = bodiesLength;
    for (let i = blockStart; i < blockEnd; i++) {
      bodiesLength = writeVarint(bodies, bodiesLength, positions[i] - previous);
      previous = positions[i];
    }
    directoryLength = writeVarint(directory, directoryLength, previous - previousBlockLast);
    directoryLength = writeVarint(directory, directoryLength, bodiesLength - bodyStart);
  }
  const header = new Uint8Array(1 + varintBytesMax);
  header[0] = blockForm;
  const headerLength = writeVarint(header, 1, count);
  const out = new Uint8Array(headerLength + directoryLength + bodiesLength);
  out.set(header.subarray(0, headerLength), 0);
  out.set(directory.subarray(0, directoryLength), headerLength);
  out.set(bodies.subarray(0, bodiesLength), headerLength + directoryLength);
  return out;
}

function decodeRun(reader: VarintReader, out: Uint32Array, from: number, to: number, previous: number): number {
  for (let i = from; i < to; i++) {
    const delta = reader.read();
    if (delta === 0 && i > 0) throw corrupt('positions do not ascend strictly');
    previous += delta;
    if (previous > 0xffff_ffff) throw corrupt('a position exceeds 32 bits');
    out[i] = previous;
  }
  return previous;
}

export function postingsDecode(encoded: Uint8Array): Uint32Array {
  if (encoded.length === 0) throw corrupt('it is empty');
  const form = encoded[0];
  const reader = new VarintReader(encoded, 1);
  const count = reader.read();
  // Every entry takes at least one byte, so a count beyond the input size is corrupt, and this
  // bound keeps a hostile count from allocating gigabytes.
  if (count > encoded.length) throw corrupt(`count ${count} exceeds the input size`);
  const out = new Uint32Array(count);
  if (form === plainForm) {
    if (count >= postingsBlockThreshold) throw corrupt('a long list uses the plain form');
    decodeRun(reader, out, 0, count, 0);
  } else if (form === blockForm) {
    if (count < postingsBlockThreshold) throw corrupt('a short list uses the block form');
    const blockCount = Math.ceil(count / postingsBlockLength);
    const lasts = new Float64Array(blockCount);
    const bodyLengths = new Uint32Array(blockCount);
    let last = 0;
    for (let block = 0; block < blockCount; block++) {
      last += reader.read();
      lasts[block] = last;
      bodyLengths[block] = reader.read();
    }
    let previous = 0;
    for (let block = 0; block < blockCount; block++) {
      const bodyStart = reader.offset;
      const blockStart = block * postingsBlockLength;
      previous = decodeRun(reader, out, blockStart, Math.min(count, blockStart + postingsBlockLength), previous);
      if (previous !== lasts[block]) throw corrupt(`block ${block} disagrees with the directory`);
      if (reader.offset - bodyStart !== bodyLengths[block]) {
        throw corrupt(`block ${block} has the wrong length`);
      }
    }
  } else {
    throw corrupt(`unknown form byte ${form}`);
  }
  if (reader.offset !== encoded.length) throw corrupt('trailing bytes after the list');
  return out;
}

/** Index of the first element of `list` at or after `from` that is >= `target` (galloping). */
function gallop(list: Uint32Array, from: number, target: number): number {
  let step = 1;
  let low = from;
  let high = from;
  while (high < list.length && list[high] < target) {
    low = high + 1;
    high += step;
    step *= 2;
  }
  if (high > list.length) high = list.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (list[middle] < target) low = middle + 1;
    else high = middle;
  }
  return low;
}

export function intersect(a: Uint32Array, b: Uint32Array): Uint32Array {
  assertStrictlyAscending(a, 'the first list');
  assertStrictlyAscending(b, 'the second list');
  const [short, long] = a.length <= b.length ? [a, b] : [b, a];
  const out = new Uint32Array(short.length);
  let count = 0;
  if (short.length * intersectGallopRatio <= long.length) {
    let at = 0;
    for (let i = 0; i < short.length && at < long.length; i++) {
      at = gallop(long, at, short[i]);
      if (at < long.length && long[at] === short[i]) out[count++] = short[i];
    }
  } else {
    let i = 0;
    let j = 0;
    while (i < short.length && j < long.length) {
      const x = short[i];
      const y = long[j];
      if (x === y) {
        out[count++] = x;
        i++;
        j++;
      } else if (x < y) i++;
      else j++;
    }
  }
  return out.slice(0, count);
}

export function union(a: Uint32Array, b: Uint32Array): Uint32Array {
  assertStrictlyAscending(a, 'the first list');
  assertStrictlyAscending(b, 'the second list');
  const out = new Uint32Array(a.length + b.length);
  let count = 0;
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a[i];
    const y = b[j];
    if (x <= y) {
      out[count++] = x;
      i++;
      if (x === y) j++;
    } else {
      out[count++] = y;
      j++;
    }
  }
  while (i < a.length) out[count++] = a[i++];
  while (j < b.length) out[count++] = b[j++];
  return out.slice(0, count);
}
