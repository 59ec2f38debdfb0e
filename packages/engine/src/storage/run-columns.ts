/**
 * A commit run's manifests decoded into columns: one typed array per field, and byte ranges into
 * the run's bytes for the variable-length ones (fingerprints, keys, types, tags, payloads). No
 * object is made per record and no byte is copied: the scan path of reads works on these, and
 * records are made from them only when a reader asks for objects.
 *
 * The decoder checks what `readPublishedRecord` checks (docs/formats.md has the bytes): every
 * field within its frame, the fingerprint present, a payload of the run within the run. Strings
 * are decoded (and their UTF-8 checked) only when read.
 */
import { StreamStackError } from '../errors.js';
import { utf8DecodeRange } from './codec.js';
import { FrameKind } from './frame-kinds.js';
import type { ScannedFrame } from './framing.js';
import { recordFlags, type PayloadLocation } from './records.js';

/** The columns of one run's records, in seq order. */
export interface RunColumns {
  readonly count: number;
  /** The run's bytes: every start/end below is an offset into them. */
  readonly bytes: Uint8Array;
  readonly seqs: Float64Array;
  readonly timestamps: Float64Array;
  /** 0 where the record has no version (its flags say which). */
  readonly versions: Float64Array;
  /** The record's flags byte (`recordFlags`). */
  readonly flags: Uint8Array;
  /** Index into `types`, or -1 for a record without a type. */
  readonly typeIds: Int32Array;
  /** The run's distinct types, in order of first appearance. */
  readonly types: readonly string[];
  readonly fingerprintStarts: Uint32Array;
  readonly fingerprintEnds: Uint32Array;
  /** Equal where the record has no key. */
  readonly keyStarts: Uint32Array;
  readonly keyEnds: Uint32Array;
  /** Record i's tags are tags `tagRows[i]` to `tagRows[i + 1]` (exclusive) of the two below. */
  readonly tagRows: Uint32Array;
  readonly tagStarts: Uint32Array;
  readonly tagEnds: Uint32Array;
  /** Into `bytes`, except for the rows `external` names (their payloads lie in other runs). */
  readonly payloadStarts: Uint32Array;
  readonly payloadEnds: Uint32Array;
  readonly external: readonly { readonly row: number; readonly location: PayloadLocation }[];
}

/** Distinct types a run's dictionary is searched by their bytes before it falls back to a map. */
const typesScannedMax = 16;

/** A frame's varints, read with the cursor in module state (decoding is synchronous). */
let at = 0;
let end = 0;
let input: Uint8Array = new Uint8Array(0);
let what = '';

function corrupt(reason: string): StreamStackError {
  return new StreamStackError('CORRUPT', `${what} is corrupt at byte ${at}: ${reason}`);
}

function varint(): number {
  let value = 0;
  let scale = 1;
  for (let index = 0; index < 8; index++) {
    if (at >= end) throw corrupt('needs 1 more byte');
    const byte = input[at++];
    value += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) {
      if (value > Number.MAX_SAFE_INTEGER) throw corrupt('a varint exceeds 2^53');
      return value;
    }
    scale *= 0x80;
  }
  throw corrupt('a varint is too long');
}

function u32(): number {
  if (at + 4 > end) throw corrupt('needs 4 more bytes');
  const value = (input[at] | (input[at + 1] << 8) | (input[at + 2] << 16) | (input[at + 3] << 24)) >>> 0;
  at += 4;
  return value;
}

/** Skips a length-prefixed field and returns its length (its bytes start at `at - length`). */
function skipBytes(): number {
  const length = varint();
  if (at + length > end) throw corrupt(`needs ${length} more bytes`);
  at += length;
  return length;
}

function equalRanges(bytes: Uint8Array, aStart: number, aEnd: number, bStart: number, bEnd: number): boolean {
  if (aEnd - aStart !== bEnd - bStart) return false;
  for (let index = 0; index < aEnd - aStart; index++) if (bytes[aStart + index] !== bytes[bStart + index]) return false;
  return true;
}

/**
 * Decodes the manifests among `frames` (already verified by their CRCs) into columns. `count` is
 * the number of records the commit names; `place` names the run for error messages.
 */
export function decodeRunColumns(bytes: Uint8Array, frames: readonly ScannedFrame[], count: number, place: string): RunColumns {
  const seqs = new Float64Array(count);
  const timestamps = new Float64Array(count);
  const versions = new Float64Array(count);
  const flagsColumn = new Uint8Array(count);
  const typeIds = new Int32Array(count);
  const fingerprintStarts = new Uint32Array(count);
  const fingerprintEnds = new Uint32Array(count);
  const keyStarts = new Uint32Array(count);
  const keyEnds = new Uint32Array(count);
  const tagRows = new Uint32Array(count + 1);
  let tagStarts = new Uint32Array(Math.max(16, count));
  let tagEnds = new Uint32Array(tagStarts.length);
  const payloadStarts = new Uint32Array(count);
  const payloadEnds = new Uint32Array(count);
  const external: { row: number; location: PayloadLocation }[] = [];
  const types: string[] = [];
  const typeRanges: number[] = [];
  const typeMap = new Map<string, number>();
  let lastType = -1;
  let tagCount = 0;
  let row = 0;
  input = bytes;
  for (const frame of frames) {
    if (frame.kind !== FrameKind.Manifest) continue;
    at = frame.dataStart + 1;
    end = frame.dataEnd;
    what = `manifest at ${place}+${frame.offset}`;
    u32();
    const entries = u32();
    if (row + entries > count) break;
    for (let index = 0; index < entries; index++, row++) {
      if (at >= end) throw corrupt('needs 1 more byte');
      const flags = input[at++];
      if ((flags & recordFlags.hasFingerprint) === 0) throw corrupt('a manifest entry lacks its fingerprint');
      flagsColumn[row] = flags;
      seqs[row] = varint();
      timestamps[row] = varint();
      const fingerprintLength = skipBytes();
      fingerprintStarts[row] = at - fingerprintLength;
      fingerprintEnds[row] = at;
      if (flags & recordFlags.hasKey) {
        const length = skipBytes();
        keyStarts[row] = at - length;
        keyEnds[row] = at;
      } else {
        keyStarts[row] = at;
        keyEnds[row] = at;
      }
      versions[row] = flags & recordFlags.hasVersion ? varint() : 0;
      if (flags & recordFlags.hasType) {
        const length = skipBytes();
        const start = at - length;
        let id = -1;
        if (lastType >= 0 && equalRanges(input, start, at, typeRanges[2 * lastType], typeRanges[2 * lastType + 1])) id = lastType;
        else if (types.length <= typesScannedMax) {
          for (let type = 0; type < types.length; type++) {
            if (equalRanges(input, start, at, typeRanges[2 * type], typeRanges[2 * type + 1])) {
              id = type;
              break;
            }
          }
        }
        if (id < 0) {
          const name = utf8DecodeRange(input, start, at);
          if (name === undefined) throw corrupt('a type is not valid UTF-8');
          id = typeMap.get(name) ?? -1;
          if (id < 0) {
            id = types.length;
            types.push(name);
            typeRanges.push(start, at);
            typeMap.set(name, id);
          }
        }
        typeIds[row] = id;
        lastType = id;
      } else {
        typeIds[row] = -1;
      }
      tagRows[row] = tagCount;
      if (flags & recordFlags.hasTags) {
        const tags = varint();
        if (tags > end - at) throw corrupt(`tag count ${tags} exceeds the frame`);
        if (tagCount + tags > tagStarts.length) {
          const grown = Math.max(tagStarts.length * 2, tagCount + tags);
          const starts = new Uint32Array(grown);
          starts.set(tagStarts);
          const ends = new Uint32Array(grown);
          ends.set(tagEnds);
          tagStarts = starts;
          tagEnds = ends;
        }
        for (let tag = 0; tag < tags; tag++, tagCount++) {
          const length = skipBytes();
          tagStarts[tagCount] = at - length;
          tagEnds[tagCount] = at;
        }
      }
      const payloadSegment = varint();
      const offset = varint();
      const length = varint();
      const crc = u32();
      // The entry's own CRC: a run read whole is covered by its frames' CRCs.
      u32();
      if (payloadSegment === 0) {
        if (offset + length > bytes.length) throw corrupt('a payload lies past its run');
        payloadStarts[row] = offset;
        payloadEnds[row] = offset + length;
      } else {
        external.push({ row, location: { segment: payloadSegment, offset, length, crc } });
      }
    }
    if (at !== end) throw corrupt(`${end - at} trailing bytes`);
  }
  tagRows[row] = tagCount;
  input = new Uint8Array(0);
  if (row !== count) {
    throw new StreamStackError('CORRUPT', `${place}: the commit names ${count} records but its manifests hold ${row}`);
  }
  return {
    count,
    bytes,
    seqs,
    timestamps,
    versions,
    flags: flagsColumn,
    typeIds,
    types,
    fingerprintStarts,
    fingerprintEnds,
    keyStarts,
    keyEnds,
    tagRows,
    tagStarts: tagStarts.subarray(0, tagCount),
    tagEnds: tagEnds.subarray(0, tagCount),
    payloadStarts,
    payloadEnds,
    external,
  };
}
