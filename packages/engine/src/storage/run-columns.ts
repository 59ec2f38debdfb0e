/**
 * A commit run's manifests decoded into columns: one typed array per field, and byte ranges into
 * the run's bytes for the variable-length ones (fingerprints, keys, types, tags, payloads). No
 * object is made per record and no byte is copied: the scan path of reads works on these, and
 * records are made from them only when a reader asks for objects.
 *
 * The decoder checks what `readPublishedRecord` checks (docs/formats.md has the bytes): every
 * field within its frame, the fingerprint present, a payload of the run within the run. Strings
 * are decoded (and their UTF-8 checked) only when read.
 *
 * It is longer than 500 lines because the decoder and the row lookups over its columns share the
 * column layout they depend on; the decoder's per-entry loop is kept whole (see `next`).
 */
import { StreamStackError } from '../errors.js';
import { utf8DecodeRange } from './codec.js';
import { FrameKind } from './frame-kinds.js';
import type { ScannedFrame } from './framing.js';
import { type PayloadLocation, recordFlags } from './records.js';

/** The columns of one run's records, in seq order. */
export interface RunColumns {
  readonly count: number;
  /** The run's row (seq order, from 0) of these columns' first. */
  readonly firstRow: number;
  /** The run's bytes: every start/end below is an offset into them. */
  readonly bytes: Uint8Array;
  /** Each record's position in the feed. */
  readonly positions: Float64Array;
  /** Each record's seq in its stream (from 1). */
  readonly seqs: Float64Array;
  /** Milliseconds since the epoch. */
  readonly timestamps: Float64Array;
  /** 0 where the record has no version (its flags say which). */
  readonly versions: Float64Array;
  /** The record's flags byte (`recordFlags`): which optional fields it has, whether it is a tombstone. */
  readonly flags: Uint8Array;
  /** Index into `types`, or -1 for a record without a type. */
  readonly typeIds: Int32Array;
  /** The run's distinct types, in order of first appearance. */
  readonly types: readonly string[];
  /** `bytes[fingerprintStarts[i], fingerprintEnds[i])` is record i's fingerprint. */
  readonly fingerprintStarts: Uint32Array;
  readonly fingerprintEnds: Uint32Array;
  /** The key's UTF-8 bytes; start and end are equal where the record has no key. */
  readonly keyStarts: Uint32Array;
  readonly keyEnds: Uint32Array;
  /** Record i's tags are tags `tagRows[i]` to `tagRows[i + 1]` (exclusive) of the two below: UTF-8 ranges. */
  readonly tagRows: Uint32Array;
  readonly tagStarts: Uint32Array;
  readonly tagEnds: Uint32Array;
  /**
   * Into `bytes`, except for the rows `external` names: their payloads lie in other runs, and
   * once read they are ranges of `externalBytes` (their flags carry `payloadElsewhere`).
   */
  readonly payloadStarts: Uint32Array;
  readonly payloadEnds: Uint32Array;
  readonly external: readonly { readonly row: number; readonly location: PayloadLocation }[];
  readonly externalBytes: Uint8Array | undefined;
  /** Where each record's manifest entry starts in `bytes` (a key dictionary's locator, from the run's start). */
  readonly entryStarts: Uint32Array;
}

/**
 * A flags bit no stored record has: the record's payload is a range of the batch's
 * `externalBytes` (it was stored by an earlier run), not of its `bytes`.
 */
export const payloadElsewhere = 0x80;

/** The tag ranges of a batch without tags: shared, never written. */
const noTagRanges = new Uint32Array(0);

/** The type slot table's size less one: a power of two, far more slots than a run has types. */
const typeSlotMask = 255;

/** Distinct types a run's dictionary is searched by their bytes before it falls back to a map. */
const typesScannedMax = 16;

/**
 * Where the last `varintAt` ended. The decoder keeps its cursor in a local (a module variable in
 * the hot loop costs a context load at every byte); only this slow path hands one back here.
 */
let varintEnd = 0;

function corrupt(place: string, at: number, reason: string): StreamStackError {
  return new StreamStackError('CORRUPT', `${place} is corrupt at byte ${at}: ${reason}`);
}

/** The varint at `bytes[at]` (within `end`); `varintEnd` is set past it. */
function varintAt(bytes: Uint8Array, at: number, end: number, place: string): number {
  // Up to four bytes (28 bits) in integer arithmetic: lengths, offsets, seqs. Timestamps and
  // other large values go on in floating point below.
  if (at + 4 <= end) {
    const b0 = bytes[at];
    if (b0 < 0x80) return ((varintEnd = at + 1), b0);
    const b1 = bytes[at + 1];
    if (b1 < 0x80) return ((varintEnd = at + 2), (b0 & 0x7f) | (b1 << 7));
    const b2 = bytes[at + 2];
    if (b2 < 0x80) return ((varintEnd = at + 3), (b0 & 0x7f) | ((b1 & 0x7f) << 7) | (b2 << 14));
    const b3 = bytes[at + 3];
    if (b3 < 0x80) return ((varintEnd = at + 4), (b0 & 0x7f) | ((b1 & 0x7f) << 7) | ((b2 & 0x7f) << 14) | (b3 << 21));
  }
  varintEnd = varintInto(bytes, at, end, place, wideValue, 0);
  return wideValue[0];
}

/** Where `varintAt` has `varintInto` leave a value it reads in floating point. */
const wideValue = new Float64Array(1);

/**
 * Stores the varint at `bytes[at]` (within `end`) at `column[row]` and returns where it ends:
 * for values that are never small, such as timestamps. A double returned from a call that is not
 * inlined is a new heap object, one per record (160 MB of garbage in a scan of 10^7 records);
 * one stored into a column is not.
 */
function varintInto(
  bytes: Uint8Array,
  at: number,
  end: number,
  place: string,
  column: Float64Array,
  row: number,
): number {
  let value = 0;
  let scale = 1;
  for (let index = 0; index < 8; index++) {
    if (at >= end) throw corrupt(place, at, 'needs 1 more byte');
    const byte = bytes[at++];
    value += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) {
      if (value > Number.MAX_SAFE_INTEGER) throw corrupt(place, at, 'a varint exceeds 2^53');
      column[row] = value;
      return at;
    }
    scale *= 0x80;
  }
  throw corrupt(place, at, 'a varint is too long');
}

function u32At(bytes: Uint8Array, at: number, end: number, place: string): number {
  if (at + 4 > end) throw corrupt(place, at, 'needs 4 more bytes');
  return (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>> 0;
}

function equalRanges(bytes: Uint8Array, aStart: number, aEnd: number, bStart: number, bEnd: number): boolean {
  if (aEnd - aStart !== bEnd - bStart) return false;
  for (let index = 0; index < aEnd - aStart; index++) if (bytes[aStart + index] !== bytes[bStart + index]) return false;
  return true;
}

/**
 * Decodes the manifests among `frames` (already verified by their CRCs) into columns, a bounded
 * number of rows at a time: a commit of a million records is read as batches that fit in the
 * CPU's caches, not as one set of columns megabytes long. `count` is the number of records the
 * commit names; `place` names the run for error messages.
 */
export class RunColumnsDecoder {
  /** Rows decoded so far. */
  private row = 0;
  /** The next frame to look at, and the cursor and entries left in the current manifest. */
  private frame = 0;
  private at = 0;
  private end = 0;
  private left = 0;
  private what = '';
  private readonly types: string[] = [];
  private readonly typeRanges: number[] = [];
  /** Made when a run has more types than the slot table and the scan settle (rarely). */
  private typeMap: Map<string, number> | undefined;
  private readonly typeSlots = new Int32Array(typeSlotMask + 1);

  constructor(
    private readonly bytes: Uint8Array,
    private readonly frames: readonly ScannedFrame[],
    private readonly count: number,
    private readonly place: string,
    /**
     * Set for a compacted run (fewer entries than positions): its last position. Positions are
     * then each entry's seq from the first, checked to ascend within the span.
     */
    private readonly sparseLast?: number,
  ) {}

  /** The last position placed so far, in a compacted run. */
  private lastPlaced = -1;

  get done(): boolean {
    return this.row === this.count;
  }

  /** Moves to the next manifest frame with entries; `CORRUPT` when the manifests end too soon. */
  private nextManifest(): void {
    const { bytes } = this;
    for (; this.frame < this.frames.length; ) {
      const frame = this.frames[this.frame++];
      if (frame.kind !== FrameKind.Manifest) continue;
      this.end = frame.dataEnd;
      this.what = `manifest at ${this.place}+${frame.offset}`;
      u32At(bytes, frame.dataStart + 1, this.end, this.what);
      const entries = u32At(bytes, frame.dataStart + 5, this.end, this.what);
      this.at = frame.dataStart + 9;
      if (this.row + entries > this.count) break;
      if (entries === 0) {
        if (this.at !== this.end) throw corrupt(this.what, this.at, `${this.end - this.at} trailing bytes`);
        continue;
      }
      this.left = entries;
      return;
    }
    throw new StreamStackError(
      'CORRUPT',
      `${this.place}: the commit names ${this.count} records but its manifests hold ${this.row}`,
    );
  }

  private placeBySeq(positions: Float64Array, seqs: Float64Array, firstPosition: number): void {
    let previous = this.lastPlaced < 0 ? firstPosition - 1 : this.lastPlaced;
    for (let row = 0; row < positions.length; row++) {
      const position = firstPosition + seqs[row] - 1;
      if (position <= previous || position > this.sparseLast!) {
        throw new StreamStackError(
          'CORRUPT',
          `${this.place}: a compacted run places a record at position ${position}, outside ${previous + 1}..${this.sparseLast}`,
        );
      }
      positions[row] = position;
      previous = position;
    }
    this.lastPlaced = previous;
  }

  /**
   * The id of the type whose name is `bytes[start, end)`, adding it on its first sight. Most
   * batches hold a few types: a small table keyed by the name's length and end bytes finds one
   * (checked against its bytes) without decoding it.
   */
  private typeIdOf(bytes: Uint8Array, start: number, end: number, what: string): number {
    const { types, typeRanges, typeSlots } = this;
    const slot = ((end - start) * 31 + bytes[start] * 7 + bytes[end - 1]) & typeSlotMask;
    let id = typeSlots[slot] - 1;
    if (id >= 0 && !equalRanges(bytes, start, end, typeRanges[2 * id], typeRanges[2 * id + 1])) id = -1;
    if (id < 0 && types.length <= typesScannedMax) {
      for (let type = 0; type < types.length; type++) {
        if (equalRanges(bytes, start, end, typeRanges[2 * type], typeRanges[2 * type + 1])) {
          id = type;
          break;
        }
      }
    }
    if (id < 0) {
      const name = utf8DecodeRange(bytes, start, end);
      if (name === undefined) throw corrupt(what, start, 'a type is not valid UTF-8');
      const typeMap = (this.typeMap ??= new Map());
      id = typeMap.get(name) ?? -1;
      if (id < 0) {
        id = types.length;
        types.push(name);
        typeRanges.push(start, end);
        typeMap.set(name, id);
      }
    }
    typeSlots[slot] = id + 1;
    return id;
  }

  /**
   * The next (at most) `rowsMax` rows; `firstRow` says where they start in the run, and
   * `firstPosition` is the position of the run's first record.
   *
   * It is longer than 100 lines because its per-entry loop is one body on purpose: its one-byte
   * varint reads are inlined by hand and its cursor stays in locals, where a call per field made
   * every scan measurably slower. Typed and tagged entries' rarer work is in functions.
   */
  next(rowsMax: number, firstPosition: number): RunColumns {
    const firstRow = this.row;
    const count = Math.min(rowsMax, this.count - firstRow);
    const bytes = this.bytes;
    const {
      seqs,
      timestamps,
      versions,
      positions,
      typeIds,
      fingerprintStarts,
      fingerprintEnds,
      keyStarts,
      keyEnds,
      payloadStarts,
      payloadEnds,
      entryStarts,
      tagRows,
      flags: flagsColumn,
    } = allocateRowColumns(count);
    if (this.sparseLast === undefined)
      for (let row = 0; row < count; row++) positions[row] = firstPosition + firstRow + row;
    // Grown on the first tag: most batches of small commits have none.
    const tagRanges: TagRanges = { starts: noTagRanges, ends: noTagRanges, count: 0 };
    const external: { row: number; location: PayloadLocation }[] = [];
    const types = this.types;
    let row = 0;
    while (row < count) {
      if (this.left === 0) this.nextManifest();
      const end = this.end;
      const what = this.what;
      let at = this.at;
      const stop = Math.min(count, row + this.left);
      this.left -= stop - row;
      // Varints of one byte (seqs, lengths, most versions) are read inline; the rest by `varintAt`.
      let value = 0;
      for (; row < stop; row++) {
        if (at >= end) throw corrupt(what, at, 'needs 1 more byte');
        entryStarts[row] = at;
        const flags = bytes[at++];
        if ((flags & recordFlags.hasFingerprint) === 0)
          throw corrupt(what, at, 'a manifest entry lacks its fingerprint');
        flagsColumn[row] = flags;
        if (at < end && bytes[at] < 0x80) value = bytes[at++];
        else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
        seqs[row] = value;
        at = varintInto(bytes, at, end, what, timestamps, row);
        // The fingerprint: a length, then its bytes.
        if (at < end && bytes[at] < 0x80) value = bytes[at++];
        else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
        if (at + value > end) throw corrupt(what, at, `needs ${value} more bytes`);
        fingerprintStarts[row] = at;
        at += value;
        fingerprintEnds[row] = at;
        keyStarts[row] = at;
        if (flags & recordFlags.hasKey) {
          if (at < end && bytes[at] < 0x80) value = bytes[at++];
          else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
          if (at + value > end) throw corrupt(what, at, `needs ${value} more bytes`);
          keyStarts[row] = at;
          at += value;
        }
        keyEnds[row] = at;
        if (flags & recordFlags.hasVersion) {
          if (at < end && bytes[at] < 0x80) value = bytes[at++];
          else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
          versions[row] = value;
        }
        if (flags & recordFlags.hasType) {
          if (at < end && bytes[at] < 0x80) value = bytes[at++];
          else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
          if (at + value > end) throw corrupt(what, at, `needs ${value} more bytes`);
          typeIds[row] = this.typeIdOf(bytes, at, at + value, what);
          at += value;
        } else {
          typeIds[row] = -1;
        }
        tagRows[row] = tagRanges.count;
        if (flags & recordFlags.hasTags) at = readTagRanges(bytes, at, end, what, tagRanges, count);
        at = readPayloadLocation(bytes, at, end, what, row, payloadStarts, payloadEnds, external);
      }
      this.at = at;
      if (this.left === 0 && at !== end) throw corrupt(what, at, `${end - at} trailing bytes`);
    }
    const tagCount = tagRanges.count;
    tagRows[row] = tagCount;
    if (this.sparseLast !== undefined) this.placeBySeq(positions, seqs, firstPosition);
    this.row += count;
    return {
      count,
      firstRow,
      bytes,
      positions,
      seqs,
      timestamps,
      versions,
      flags: flagsColumn,
      typeIds,
      types: types.slice(),
      fingerprintStarts,
      fingerprintEnds,
      keyStarts,
      keyEnds,
      tagRows,
      tagStarts: tagCount === 0 ? noTagRanges : tagRanges.starts.subarray(0, tagCount),
      tagEnds: tagCount === 0 ? noTagRanges : tagRanges.ends.subarray(0, tagCount),
      payloadStarts,
      payloadEnds,
      external,
      externalBytes: undefined,
      entryStarts,
    };
  }
}

/** The byte ranges of a batch's tags so far: grown as tags come, `count` of them filled. */
interface TagRanges {
  starts: Uint32Array;
  ends: Uint32Array;
  count: number;
}

/**
 * Reads an entry's tags (a count, then each one's length and bytes) at `at` into `ranges`,
 * growing them when full (`rows` sizes the first growth); returns where the tags end.
 */
function readTagRanges(
  bytes: Uint8Array,
  at: number,
  end: number,
  what: string,
  ranges: TagRanges,
  rows: number,
): number {
  const tags = varintAt(bytes, at, end, what);
  at = varintEnd;
  if (tags > end - at) throw corrupt(what, at, `tag count ${tags} exceeds the frame`);
  if (ranges.count + tags > ranges.starts.length) {
    const grown = Math.max(ranges.starts.length * 2, ranges.count + tags, Math.min(rows, 1024));
    const starts = new Uint32Array(grown);
    starts.set(ranges.starts);
    const ends = new Uint32Array(grown);
    ends.set(ranges.ends);
    ranges.starts = starts;
    ranges.ends = ends;
  }
  const { starts, ends } = ranges;
  let count = ranges.count;
  let value = 0;
  for (let tag = 0; tag < tags; tag++, count++) {
    if (at < end && bytes[at] < 0x80) value = bytes[at++];
    else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
    if (at + value > end) throw corrupt(what, at, `needs ${value} more bytes`);
    starts[count] = at;
    at += value;
    ends[count] = at;
  }
  ranges.count = count;
  return at;
}

/**
 * Reads an entry's payload location and its own CRC at `at`: a payload in this run fills the
 * row's payload range, one elsewhere is listed in `external` for the caller to gather. Returns
 * where the entry ends.
 */
function readPayloadLocation(
  bytes: Uint8Array,
  at: number,
  end: number,
  what: string,
  row: number,
  payloadStarts: Uint32Array,
  payloadEnds: Uint32Array,
  external: { row: number; location: PayloadLocation }[],
): number {
  let payloadSegment: number;
  if (at < end && bytes[at] < 0x80) payloadSegment = bytes[at++];
  else (payloadSegment = varintAt(bytes, at, end, what)), (at = varintEnd);
  const offset = varintAt(bytes, at, end, what);
  const length = varintAt(bytes, varintEnd, end, what);
  at = varintEnd;
  const crc = u32At(bytes, at, end, what);
  // Then the entry's own CRC: a run read whole is covered by its frames' CRCs.
  u32At(bytes, at + 4, end, what);
  at += 8;
  if (payloadSegment === 0) {
    if (offset + length > bytes.length) throw corrupt(what, at, 'a payload lies past its run');
    payloadStarts[row] = offset;
    payloadEnds[row] = offset + length;
  } else {
    external.push({ row, location: { segment: payloadSegment, offset, length, crc } });
  }
  return at;
}

/**
 * Every fixed-width column of `count` rows in one buffer: one allocation (and one object for the
 * collector to track) per batch instead of one per column. 8-byte columns first, for alignment.
 */
function allocateRowColumns(count: number) {
  const wide = 4 * count * 8;
  const narrow = (8 * count + count + 1) * 4;
  const buffer = new ArrayBuffer(wide + narrow + count);
  return {
    seqs: new Float64Array(buffer, 0, count),
    timestamps: new Float64Array(buffer, count * 8, count),
    versions: new Float64Array(buffer, 2 * count * 8, count),
    positions: new Float64Array(buffer, 3 * count * 8, count),
    typeIds: new Int32Array(buffer, wide, count),
    fingerprintStarts: new Uint32Array(buffer, wide + count * 4, count),
    fingerprintEnds: new Uint32Array(buffer, wide + 2 * count * 4, count),
    keyStarts: new Uint32Array(buffer, wide + 3 * count * 4, count),
    keyEnds: new Uint32Array(buffer, wide + 4 * count * 4, count),
    payloadStarts: new Uint32Array(buffer, wide + 5 * count * 4, count),
    payloadEnds: new Uint32Array(buffer, wide + 6 * count * 4, count),
    entryStarts: new Uint32Array(buffer, wide + 7 * count * 4, count),
    tagRows: new Uint32Array(buffer, wide + 8 * count * 4, count + 1),
    flags: new Uint8Array(buffer, wide + narrow, count),
  };
}

/**
 * The rows of `columns` holding `wanted[from…]` (ascending positions), as far as the batch
 * reaches: each wanted position must be a row of it (the caller found it in the index or the
 * run). Returns the rows and where in `wanted` the batch's rows ended. Dense runs map a
 * position to its row by subtraction; a compacted run's sparse rows are walked in step.
 */
export function rowsOfPositions(
  columns: RunColumns,
  wanted: ArrayLike<number>,
  from: number,
): { rows: Uint32Array; next: number } {
  const { positions, count } = columns;
  let next = from;
  const last = count === 0 ? -1 : positions[count - 1];
  while (next < wanted.length && wanted[next] <= last) next++;
  const rows = new Uint32Array(next - from);
  let row = 0;
  for (let at = from; at < next; at++) {
    const position = wanted[at];
    // Dense rows are a subtraction away; otherwise walk forward (both lists ascend).
    const guess = position - positions[0];
    if (guess < count && positions[guess] === position) row = guess;
    else while (row < count && positions[row] < position) row++;
    if (row >= count || positions[row] !== position) {
      throw new StreamStackError(
        'INTERNAL',
        `position ${position} is not a record of the run at row ${columns.firstRow}`,
      );
    }
    rows[at - from] = row;
  }
  return { rows, next };
}
