/**
 * The columns of a group of column batches (several commits' worth) gathered into the flat
 * buffers Apache Arrow's layouts want: 64-bit integers, validity and boolean bitmaps, and
 * offsets with one data buffer for variable-length values. What `export-arrow.ts` makes its
 * record batches of.
 *
 * Every function here is one tight loop per batch over the batch's typed arrays: an export
 * converts every record it writes, so a call, a closure or a BigInt per row and column was most
 * of an export's time. Byte ranges lying back to back in one buffer (the payloads of one pack)
 * are copied in one piece.
 */
import { isUtf8 } from 'node:buffer';
import type { Kernels } from '../../kernels/index.js';
import { copyRangeKernelBytesMin, exportTextCheckRows } from '../../limits.js';
import { recordFlags } from '../../storage/records.js';
import { payloadElsewhere } from '../../storage/run-columns.js';
import type { ColumnBatch } from '../reading/column-batch.js';

/** Variable-length values as Arrow's offsets and data. */
export interface Gathered {
  readonly valueOffsets: Int32Array;
  readonly data: Uint8Array;
}

/**
 * Where the functions here take the arrays they fill. Their contents are unspecified (an
 * arena's are its last conversion's); every function writes each element it returns, and
 * clears the bitmaps it sets bits in.
 */
export interface ColumnAllocator {
  bytes(length: number): Uint8Array;
  int32(length: number): Int32Array;
  bigInt64(length: number): BigInt64Array;
}

/** New arrays for every column: what a conversion whose result is kept uses. */
export const newArrays: ColumnAllocator = {
  bytes: (length) => new Uint8Array(length),
  int32: (length) => new Int32Array(length),
  bigInt64: (length) => new BigInt64Array(length),
};

/**
 * Arrays carved one after another from a buffer kept from one conversion to the next, for a
 * caller that is done with a conversion's columns before it asks for the next (the Parquet
 * writer copies each group into WebAssembly at once; the Arrow IPC writer's sink copies each
 * piece as it is handed over). A new buffer per column per group made
 * the system fault in and zero a group's size of pages every time, and the garbage collector
 * run a full collection every few groups for the external memory.
 */
export class ColumnArena implements ColumnAllocator {
  private buffer = new ArrayBuffer(0);
  private used = 0;
  /** Bytes the last conversion asked for: the next starts with a buffer that holds them. */
  private asked = 0;

  /** Starts a conversion: the arrays of the previous one are handed out again. */
  reset(): void {
    if (this.asked > this.buffer.byteLength) this.buffer = new ArrayBuffer(Math.ceil(this.asked * 1.25));
    this.used = 0;
    this.asked = 0;
  }

  private take(bytes: number): { buffer: ArrayBuffer; byteOffset: number } {
    // Eight-byte aligned, for the 64-bit columns.
    const size = Math.ceil(bytes / 8) * 8;
    this.asked += size;
    if (this.used + size > this.buffer.byteLength) {
      // Past the buffer: a buffer of its own, and the next conversion's buffer holds it too.
      return { buffer: new ArrayBuffer(size), byteOffset: 0 };
    }
    const byteOffset = this.used;
    this.used += size;
    return { buffer: this.buffer, byteOffset };
  }

  bytes(length: number): Uint8Array {
    const { buffer, byteOffset } = this.take(length);
    return new Uint8Array(buffer, byteOffset, length);
  }

  int32(length: number): Int32Array {
    const { buffer, byteOffset } = this.take(length * 4);
    return new Int32Array(buffer, byteOffset, length);
  }

  bigInt64(length: number): BigInt64Array {
    const { buffer, byteOffset } = this.take(length * 8);
    return new BigInt64Array(buffer, byteOffset, length);
  }
}

const twoTo32 = 2 ** 32;
/** Ranges at most this long are copied byte by byte: cheaper than making a view to copy from. */
const shortCopyBytes = 48;
const encoder = new TextEncoder();

/** The number of rows of the batches together. */
export function rowCount(batches: readonly ColumnBatch[]): number {
  let length = 0;
  for (const batch of batches) length += batch.length;
  return length;
}

/**
 * A column of safe integers (stored as doubles) as little-endian 64-bit integers, written as
 * two 32-bit words each: no BigInt is made per value. Every platform Node runs on is
 * little-endian, as Arrow IPC is.
 */
export function int64Column(
  batches: readonly ColumnBatch[],
  length: number,
  column: (batch: ColumnBatch) => Float64Array,
  alloc: ColumnAllocator = newArrays,
): BigInt64Array {
  const out = alloc.bigInt64(length);
  const words = new Int32Array(out.buffer, out.byteOffset, length * 2);
  let word = 0;
  for (const batch of batches) {
    const values = column(batch);
    for (let row = 0; row < batch.length; row++, word += 2) {
      const value = values[row];
      const high = Math.floor(value / twoTo32);
      // Stored into an Int32Array, both halves wrap modulo 2^32: the two's complement words.
      words[word] = value - high * twoTo32;
      words[word + 1] = high;
    }
  }
  return out;
}

/** Each row's commit: one value per batch, or per row of a batch that spans commits. */
export function commitColumn(
  batches: readonly ColumnBatch[],
  length: number,
  alloc: ColumnAllocator = newArrays,
): BigInt64Array {
  const out = alloc.bigInt64(length);
  let at = 0;
  for (const batch of batches) {
    if (batch.spansCommits) for (let row = 0; row < batch.length; row++) out[at + row] = BigInt(batch.commitOf(row));
    else out.fill(BigInt(batch.commit), at, at + batch.length);
    at += batch.length;
  }
  return out;
}

/** A bitmap of the rows whose flags carry `bit`, and how many do not. */
function flagBits(
  batches: readonly ColumnBatch[],
  length: number,
  bit: number,
  alloc: ColumnAllocator,
): { bits: Uint8Array; unset: number } {
  const bits = alloc.bytes((length + 7) >> 3).fill(0);
  let unset = 0;
  let at = 0;
  for (const batch of batches) {
    const flags = batch.flags;
    for (let row = 0; row < batch.length; row++, at++) {
      if ((flags[row] & bit) !== 0) bits[at >> 3] |= 1 << (at & 7);
      else unset++;
    }
  }
  return { bits, unset };
}

/** The tombstone column: Arrow's booleans are a bitmap. */
export function tombstoneBits(
  batches: readonly ColumnBatch[],
  length: number,
  alloc: ColumnAllocator = newArrays,
): Uint8Array {
  return flagBits(batches, length, recordFlags.isTombstone, alloc).bits;
}

/** The validity bitmap of rows whose flags carry `bit`, or undefined when every row does. */
export function validityOfFlag(
  batches: readonly ColumnBatch[],
  length: number,
  bit: number,
  alloc: ColumnAllocator = newArrays,
): Uint8Array | undefined {
  const { bits, unset } = flagBits(batches, length, bit, alloc);
  return unset === 0 ? undefined : bits;
}

/** The validity bitmap of rows with a type, or undefined when every row has one. */
export function typeValidity(
  batches: readonly ColumnBatch[],
  length: number,
  alloc: ColumnAllocator = newArrays,
): Uint8Array | undefined {
  const bits = alloc.bytes((length + 7) >> 3).fill(0);
  let absent = 0;
  let at = 0;
  for (const batch of batches) {
    const typeIds = batch.typeIds;
    for (let row = 0; row < batch.length; row++, at++) {
      if (typeIds[row] >= 0) bits[at >> 3] |= 1 << (at & 7);
      else absent++;
    }
  }
  return absent === 0 ? undefined : bits;
}

/** How a long range is copied: a kernel set's `copyRange` (the native one is `memcpy`). */
export type RangeCopy = Kernels['copyRange'];

/** Copies `from[start, end)` to `to` at `at`, a long range by `copyLong` when given. */
function copy(from: Uint8Array, start: number, end: number, to: Uint8Array, at: number, copyLong?: RangeCopy): void {
  const length = end - start;
  if (length <= shortCopyBytes) {
    for (let index = start; index < end; index++) to[at++] = from[index];
  } else if (copyLong !== undefined && length >= copyRangeKernelBytesMin) {
    copyLong(to, at, from, start, end);
  } else {
    to.set(from.subarray(start, end), at);
  }
}

/** One batch's byte ranges of a column: values `starts[i]`…`ends[i]`. */
export interface BatchRanges {
  readonly starts: Uint32Array;
  readonly ends: Uint32Array;
  readonly bytes: Uint8Array;
  /** Where given, the rows whose flags carry `payloadElsewhere` index this buffer instead. */
  readonly external?: Uint8Array;
}

/**
 * A variable-length column gathered from every batch's ranges into one buffer. Ranges that
 * follow each other in the same buffer are copied as one, by `copyLong` when long: the worker
 * thread's batches lie in a shared buffer, which V8 copies from at a third of `memcpy`'s speed.
 */
export function gatherRanges(
  batches: readonly ColumnBatch[],
  rangesOf: (batch: ColumnBatch) => BatchRanges,
  alloc: ColumnAllocator = newArrays,
  copyLong?: RangeCopy,
): Gathered {
  const all = batches.map(rangesOf);
  let values = 0;
  let total = 0;
  for (const { starts, ends } of all) {
    values += starts.length;
    for (let index = 0; index < starts.length; index++) total += ends[index] - starts[index];
  }
  const valueOffsets = alloc.int32(values + 1);
  const data = alloc.bytes(total);
  let value = 0;
  let at = 0;
  for (const [index, { starts, ends, bytes, external }] of all.entries()) {
    const flags = batches[index].flags;
    // The run being gathered: [runStart, runEnd) of runSource, to be copied in one piece.
    let runSource = bytes;
    let runStart = 0;
    let runEnd = 0;
    let runAt = at;
    for (let row = 0; row < starts.length; row++) {
      const start = starts[row];
      const end = ends[row];
      const source = external !== undefined && (flags[row] & payloadElsewhere) !== 0 ? external : bytes;
      if (start !== runEnd || source !== runSource) {
        copy(runSource, runStart, runEnd, data, runAt, copyLong);
        runSource = source;
        runStart = start;
        runAt = at;
      }
      runEnd = end;
      valueOffsets[value++] = at;
      at += end - start;
    }
    copy(runSource, runStart, runEnd, data, runAt, copyLong);
  }
  valueOffsets[value] = at;
  return { valueOffsets, data };
}

/**
 * The validity bitmap of the gathered values that are valid UTF-8, or undefined when every one
 * is, and how many are not. Values are checked `exportTextCheckRows` at a time as one range:
 * joined valid texts are valid, and a valid range splits into valid texts wherever no value
 * starts inside a character (with a continuation byte, 0b10xxxxxx). Only a chunk that fails is
 * checked value by value.
 */
export function utf8Validity(
  { valueOffsets, data }: Gathered,
  alloc: ColumnAllocator = newArrays,
): { bits: Uint8Array | undefined; invalid: number } {
  const length = valueOffsets.length - 1;
  const bits = alloc.bytes((length + 7) >> 3).fill(0);
  let invalid = 0;
  for (let first = 0; first < length; first += exportTextCheckRows) {
    const last = Math.min(length, first + exportTextCheckRows);
    const end = valueOffsets[last];
    let whole = isUtf8(data.subarray(valueOffsets[first], end));
    for (let row = first + 1; whole && row < last; row++) {
      const start = valueOffsets[row];
      if (start < end && (data[start] & 0xc0) === 0x80) whole = false;
    }
    for (let row = first; row < last; row++) {
      if (whole || isUtf8(data.subarray(valueOffsets[row], valueOffsets[row + 1]))) bits[row >> 3] |= 1 << (row & 7);
      else invalid++;
    }
  }
  return { bits: invalid === 0 ? undefined : bits, invalid };
}

/**
 * The text column of gathered values whose valid UTF-8 ones `valid` marks: the values
 * themselves (the same buffers) when every one is valid, else the valid ones copied into a
 * buffer of their own, the others empty (their rows are null). The others' bytes may not stay
 * under the nulls, though Arrow leaves what a null slot holds unspecified: the Arrow library the
 * Parquet writer is built on (Rust's `arrow`) checks that a string column's whole data buffer is
 * UTF-8, and so would refuse the column, as would readers built on it. Runs of valid values lie
 * back to back, and are copied as one, by `copyLong` when long.
 */
export function textValues(
  values: Gathered,
  valid: Uint8Array | undefined,
  alloc: ColumnAllocator = newArrays,
  copyLong?: RangeCopy,
): Gathered {
  if (valid === undefined) return values;
  const { valueOffsets: from, data: source } = values;
  const length = from.length - 1;
  let total = 0;
  for (let row = 0; row < length; row++)
    if ((valid[row >> 3] & (1 << (row & 7))) !== 0) total += from[row + 1] - from[row];
  const valueOffsets = alloc.int32(length + 1);
  const data = alloc.bytes(total);
  // The run being gathered: source[runStart, runEnd), copied to data at runAt in one piece.
  let runStart = 0;
  let runEnd = 0;
  let runAt = 0;
  let at = 0;
  for (let row = 0; row < length; row++) {
    valueOffsets[row] = at;
    if ((valid[row >> 3] & (1 << (row & 7))) === 0) continue;
    const start = from[row];
    const end = from[row + 1];
    if (start !== runEnd) {
      copy(source, runStart, runEnd, data, runAt, copyLong);
      runStart = start;
      runAt = at;
    }
    runEnd = end;
    at += end - start;
  }
  copy(source, runStart, runEnd, data, runAt, copyLong);
  valueOffsets[length] = at;
  return { valueOffsets, data };
}

/** Each row's stream: the same for every row of a batch, unless the batch spans commits. */
export function streamStrings(
  batches: readonly ColumnBatch[],
  length: number,
  alloc: ColumnAllocator = newArrays,
): Gathered {
  if (!batches.some((batch) => batch.spansCommits))
    return repeatedStrings(batches, length, (batch) => batch.stream, alloc);
  // Each commit's stream encoded once; rows copy theirs.
  const encoded = batches.map((batch) => batch.commitList().commits.map(({ stream }) => encoder.encode(stream)));
  let total = 0;
  for (const [index, batch] of batches.entries()) {
    const { rows } = batch.commitList();
    for (let row = 0; row < batch.length; row++) total += encoded[index][rows[row]].length;
  }
  const valueOffsets = alloc.int32(length + 1);
  const data = alloc.bytes(total);
  let value = 0;
  let at = 0;
  for (const [index, batch] of batches.entries()) {
    const { rows } = batch.commitList();
    for (let row = 0; row < batch.length; row++) {
      const text = encoded[index][rows[row]];
      valueOffsets[value++] = at;
      data.set(text, at);
      at += text.length;
    }
  }
  valueOffsets[value] = at;
  return { valueOffsets, data };
}

/** A string that is the same for every row of a batch (its feed, its stream), per row. */
export function repeatedStrings(
  batches: readonly ColumnBatch[],
  length: number,
  textOf: (batch: ColumnBatch) => string,
  alloc: ColumnAllocator = newArrays,
): Gathered {
  const encoded = batches.map((batch) => encoder.encode(textOf(batch)));
  let total = 0;
  for (const [index, batch] of batches.entries()) total += encoded[index].length * batch.length;
  const valueOffsets = alloc.int32(length + 1);
  const data = alloc.bytes(total);
  let value = 0;
  let at = 0;
  for (const [index, batch] of batches.entries()) {
    const text = encoded[index];
    const from = at;
    for (let row = 0; row < batch.length; row++, at += text.length) valueOffsets[value++] = at;
    // The text once, then the copies made so far doubled until the batch's rows are filled.
    if (text.length === 0 || batch.length === 0) continue;
    data.set(text, from);
    for (let filled = text.length; filled < at - from; filled *= 2)
      data.copyWithin(from + filled, from, from + Math.min(filled, at - from - filled));
  }
  valueOffsets[value] = at;
  return { valueOffsets, data };
}

/** Each row's type (one of its batch's few), empty where it has none (a null). */
export function typeStrings(
  batches: readonly ColumnBatch[],
  length: number,
  alloc: ColumnAllocator = newArrays,
): Gathered {
  const encoded = batches.map((batch) => batch.types.map((type) => encoder.encode(type)));
  let total = 0;
  for (const [index, batch] of batches.entries()) {
    const typeIds = batch.typeIds;
    for (let row = 0; row < batch.length; row++) if (typeIds[row] >= 0) total += encoded[index][typeIds[row]].length;
  }
  const valueOffsets = alloc.int32(length + 1);
  const data = alloc.bytes(total);
  let value = 0;
  let at = 0;
  for (const [index, batch] of batches.entries()) {
    const typeIds = batch.typeIds;
    const types = encoded[index];
    for (let row = 0; row < batch.length; row++) {
      valueOffsets[value++] = at;
      const id = typeIds[row];
      if (id < 0) continue;
      const text = types[id];
      copy(text, 0, text.length, data, at);
      at += text.length;
    }
  }
  valueOffsets[value] = at;
  return { valueOffsets, data };
}

/** The tag list's offsets: each row's first tag among the group's. */
export function tagListOffsets(
  batches: readonly ColumnBatch[],
  length: number,
  alloc: ColumnAllocator = newArrays,
): { valueOffsets: Int32Array; tags: number } {
  const valueOffsets = alloc.int32(length + 1);
  let value = 0;
  let base = 0;
  for (const batch of batches) {
    const tagRows = batch.tagRows;
    const first = tagRows[0];
    for (let row = 0; row < batch.length; row++) valueOffsets[value++] = base + tagRows[row] - first;
    base += tagRows[batch.length] - first;
  }
  valueOffsets[value] = base;
  return { valueOffsets, tags: base };
}
