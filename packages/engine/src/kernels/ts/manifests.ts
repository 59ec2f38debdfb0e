/**
 * The TypeScript twin of the manifest decoding kernel (contract: `../manifest-columns.ts`; the
 * native twin is `native/src/manifests.rs`, held to this one by `test/differential`). It checks
 * what a reader of one entry checks: every field within its frame, the fingerprint present, a
 * payload of the run within the run, a type's UTF-8. It makes no object per record: its outputs
 * are the batch's columns, and byte ranges into the run for every variable-length field.
 */
import { Buffer, isUtf8 } from 'node:buffer';
import { StreamStackError } from '../../errors.js';
import {
  type ManifestDecodeJob,
  manifestColumnsLayout,
  manifestExternalFields,
  manifestRunFields,
  manifestStop,
  recordFlags,
  manifestCursor as slot,
} from '../manifest-columns.js';

function corrupt(what: string, at: number, reason: string): StreamStackError {
  return new StreamStackError('CORRUPT', `${what} is corrupt at byte ${at}: ${reason}`);
}

/**
 * Where the last `varintAt` ended. The decoder keeps its cursor in a local (a module variable in
 * the hot loop costs a context load at every byte); only this slow path hands one back here.
 */
let varintEnd = 0;

/** Where `varintAt` has `varintInto` leave a value it reads in floating point. */
const wideValue = new Float64Array(1);

/** The varint at `bytes[at]` (within `end`); `varintEnd` is set past it. */
function varintAt(bytes: Uint8Array, at: number, end: number, what: string): number {
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
  varintEnd = varintInto(bytes, at, end, what, wideValue, 0);
  return wideValue[0];
}

/**
 * Stores the varint at `bytes[at]` (within `end`) at `column[row]` and returns where it ends:
 * for values that are never small, such as timestamps. A double returned from a call that is not
 * inlined is a new heap object, one per record (160 MB of garbage in a scan of 10^7 records);
 * one stored into a column is not. At most 8 bytes, and at most 2^53 - 1.
 */
function varintInto(
  bytes: Uint8Array,
  at: number,
  end: number,
  what: string,
  column: Float64Array,
  row: number,
): number {
  let value = 0;
  let scale = 1;
  for (let index = 0; index < 8; index++) {
    if (at >= end) throw corrupt(what, at, 'needs 1 more byte');
    const byte = bytes[at++];
    value += (byte & 0x7f) * scale;
    if ((byte & 0x80) === 0) {
      if (value > Number.MAX_SAFE_INTEGER) throw corrupt(what, at, 'a varint exceeds 2^53');
      column[row] = value;
      return at;
    }
    scale *= 0x80;
  }
  throw corrupt(what, at, 'a varint is too long');
}

function u32At(bytes: Uint8Array, at: number, end: number, what: string): number {
  if (at + 4 > end) throw corrupt(what, at, 'needs 4 more bytes');
  return (bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24)) >>> 0;
}

function equalRanges(bytes: Uint8Array, aStart: number, aEnd: number, bStart: number, bEnd: number): boolean {
  if (aEnd - aStart !== bEnd - bStart) return false;
  for (let index = 0; index < aEnd - aStart; index++) if (bytes[aStart + index] !== bytes[bStart + index]) return false;
  return true;
}

/** What names the current frame in error messages. */
function frameWhat(job: ManifestDecodeJob): string {
  return `manifest at ${job.place}+${job.cursor[slot.frameOffset]}`;
}

/** The first and end frame (exclusive) of run `index`: its frames end where the next run's begin. */
function runFrames(job: ManifestDecodeJob, index: number): { first: number; end: number } {
  const { runs } = job;
  const next = manifestRunFields * (index + 1);
  return { first: runs[manifestRunFields * index], end: next < runs.length ? runs[next] : job.frames.length / 3 };
}

/** Checks what the native twin refuses before it decodes: runs and frames that do not fit. */
function checkRuns(job: ManifestDecodeJob): void {
  const { runs, frames, cursor } = job;
  if (runs.length === 0 || runs.length % manifestRunFields !== 0)
    throw new StreamStackError('INVALID_ARGUMENT', 'runs come in fours, at least one');
  const runCount = runs.length / manifestRunFields;
  const frameCount = Math.floor(frames.length / 3);
  for (let index = 0; index < runCount; index++) {
    const { first, end } = runFrames(job, index);
    const start = runs[manifestRunFields * index + 2];
    const runEnd = runs[manifestRunFields * index + 3];
    if (first > end || end > frameCount)
      throw new StreamStackError('INVALID_ARGUMENT', "a run's frames are not in order");
    if (start > runEnd || runEnd > job.bytes.length)
      throw new StreamStackError('INVALID_ARGUMENT', 'a run lies outside the bytes');
    for (let frame = first; frame < end; frame++) {
      if (frames[3 * frame + 1] < start || frames[3 * frame + 2] > runEnd)
        throw new StreamStackError('INVALID_ARGUMENT', "a frame's data lies outside its run");
    }
  }
  const current = cursor[slot.run];
  if (current > runCount) throw new StreamStackError('INVALID_ARGUMENT', "the cursor's frame is not one of its run's");
  if (current < runCount) {
    const { first, end } = runFrames(job, current);
    if (cursor[slot.frame] < first || cursor[slot.frame] > end)
      throw new StreamStackError('INVALID_ARGUMENT', "the cursor's frame is not one of its run's");
  }
}

/**
 * Opens the next manifest frame of the current run that has entries, moving on to the next run
 * once this one's records are all decoded. `CORRUPT` when the manifests end before the commit's
 * records do, or a frame holds more entries than the commit has left; returns the run's index.
 */
function nextManifest(job: ManifestDecodeJob): number {
  const { bytes, frames, runs, cursor } = job;
  const runCount = runs.length / manifestRunFields;
  let index = cursor[slot.run];
  while (index < runCount && cursor[slot.runRow] === runs[manifestRunFields * index + 1]) {
    index++;
    cursor[slot.run] = index;
    cursor[slot.runRow] = 0;
    if (index < runCount) cursor[slot.frame] = runs[manifestRunFields * index];
  }
  if (index === runCount)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `the batch has ${job.rows} rows but its runs hold ${cursor[slot.row]}`,
    );
  const count = runs[manifestRunFields * index + 1];
  const runRow = cursor[slot.runRow];
  const { end: endFrame } = runFrames(job, index);
  for (let frame = cursor[slot.frame]; frame < endFrame; ) {
    const offset = frames[3 * frame];
    const dataStart = frames[3 * frame + 1];
    const end = frames[3 * frame + 2];
    frame++;
    cursor[slot.frame] = frame;
    cursor[slot.frameOffset] = offset;
    const what = frameWhat(job);
    u32At(bytes, dataStart + 1, end, what);
    const entries = u32At(bytes, dataStart + 5, end, what);
    const at = dataStart + 9;
    if (runRow + entries > count) break;
    if (entries === 0) {
      if (at !== end) throw corrupt(what, at, `${end - at} trailing bytes`);
      continue;
    }
    cursor[slot.at] = at;
    cursor[slot.end] = end;
    cursor[slot.left] = entries;
    return index;
  }
  const named = runCount > 1 ? `run ${index}: ` : '';
  throw new StreamStackError(
    'CORRUPT',
    `${job.place}: ${named}the commit names ${count} records but its manifests hold ${runRow}`,
  );
}

/** Distinct types a run's table is searched by their bytes before a map is used. */
const typesScannedMax = 16;

/**
 * The last id seen for a hash of a type's bytes: a hint only, checked against the job's table
 * before it is taken, so one left by another run is harmless. Most runs hold a few types, and
 * most records find theirs here without a search.
 */
const typeHints = new Int32Array(256);

/** Per decode (by its cursor), its types by their bytes (as Latin-1 text), once it has many. */
const typeMaps = new WeakMap<Uint32Array, { bytes: Uint8Array; map: Map<string, number> }>();

function bytesKey(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('latin1');
}

/**
 * The id of the type whose name is `bytes[start, end)`: its index in the job's type table, where
 * a new one is added (its UTF-8 checked). -1 when it is new and the table is full.
 */
function typeIdOf(job: ManifestDecodeJob, start: number, end: number, what: string): number {
  const { bytes, typeRanges, cursor } = job;
  const types = cursor[slot.types];
  const hint = ((end - start) * 31 + (bytes[start] | 0) * 7 + (bytes[end - 1] | 0)) & 255;
  let id = typeHints[hint] - 1;
  if (id >= 0 && id < types && equalRanges(bytes, start, end, typeRanges[2 * id], typeRanges[2 * id + 1])) return id;
  id = -1;
  if (types <= typesScannedMax) {
    for (let type = 0; type < types; type++) {
      if (equalRanges(bytes, start, end, typeRanges[2 * type], typeRanges[2 * type + 1])) {
        id = type;
        break;
      }
    }
  } else {
    let known = typeMaps.get(cursor);
    // The map holds the table's first entries, in order, and catches up with the rest here. A
    // cursor used for another run's bytes since gets a new one.
    if (known?.bytes !== bytes || known.map.size > types) typeMaps.set(cursor, (known = { bytes, map: new Map() }));
    const { map } = known;
    for (let type = map.size; type < types; type++) {
      map.set(bytesKey(bytes, typeRanges[2 * type], typeRanges[2 * type + 1]), type);
    }
    id = map.get(bytesKey(bytes, start, end)) ?? -1;
  }
  if (id < 0) {
    if (!isUtf8(bytes.subarray(start, end))) throw corrupt(what, start, 'a type is not valid UTF-8');
    if (2 * types + 2 > typeRanges.length) return -1;
    typeRanges[2 * types] = start;
    typeRanges[2 * types + 1] = end;
    cursor[slot.types] = types + 1;
    id = types;
  }
  typeHints[hint] = id + 1;
  return id;
}

/**
 * Decodes the job's batch from its cursor on, until the batch is done or an entry needs more
 * room than the job gives (`manifestStop`); the cursor then points at that entry.
 *
 * It is longer than 100 lines because its per-entry loop is one body on purpose: its one-byte
 * varint reads are inlined by hand and its cursor stays in locals, where a call per field made
 * every scan measurably slower.
 */
export function decodeManifests(job: ManifestDecodeJob): void {
  const { bytes, cursor, rows, tagStarts, tagEnds, external } = job;
  const layout = manifestColumnsLayout(rows);
  const buffer = job.columns.buffer;
  const base = job.columns.byteOffset;
  const seqs = new Float64Array(buffer, base + layout.seqs, rows);
  const timestamps = new Float64Array(buffer, base + layout.timestamps, rows);
  const versions = new Float64Array(buffer, base + layout.versions, rows);
  const typeIds = new Int32Array(buffer, base + layout.typeIds, rows);
  const fingerprintStarts = new Uint32Array(buffer, base + layout.fingerprintStarts, rows);
  const fingerprintEnds = new Uint32Array(buffer, base + layout.fingerprintEnds, rows);
  const keyStarts = new Uint32Array(buffer, base + layout.keyStarts, rows);
  const keyEnds = new Uint32Array(buffer, base + layout.keyEnds, rows);
  const payloadStarts = new Uint32Array(buffer, base + layout.payloadStarts, rows);
  const payloadEnds = new Uint32Array(buffer, base + layout.payloadEnds, rows);
  const entryStarts = new Uint32Array(buffer, base + layout.entryStarts, rows);
  const tagRows = new Uint32Array(buffer, base + layout.tagRows, rows + 1);
  const flagsColumn = new Uint8Array(buffer, base + layout.flags, rows);
  checkRuns(job);
  let row = cursor[slot.row];
  let tags = cursor[slot.tags];
  let externals = cursor[slot.externals];
  cursor[slot.stop] = manifestStop.done;
  // Where the current run lies: its payloads' offsets count from its start.
  let run = Math.min(cursor[slot.run], job.runs.length / manifestRunFields - 1);
  while (row < rows) {
    if (cursor[slot.left] === 0) {
      cursor[slot.row] = row;
      run = nextManifest(job);
    }
    const runStart = job.runs[manifestRunFields * run + 2];
    const runBytes = job.runs[manifestRunFields * run + 3] - runStart;
    const rowBefore = row;
    const end = cursor[slot.end];
    const what = frameWhat(job);
    let at = cursor[slot.at];
    let left = cursor[slot.left];
    // Varints of one byte (seqs, lengths, most versions) are read inline; the rest by `varintAt`.
    let value = 0;
    for (; row < rows && left > 0; row++, left--) {
      const entryStart = at;
      if (at >= end) throw corrupt(what, at, 'needs 1 more byte');
      entryStarts[row] = at;
      const flags = bytes[at++];
      if ((flags & recordFlags.hasFingerprint) === 0) throw corrupt(what, at, 'a manifest entry lacks its fingerprint');
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
      versions[row] = 0;
      if (flags & recordFlags.hasVersion) {
        if (at < end && bytes[at] < 0x80) value = bytes[at++];
        else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
        versions[row] = value;
      }
      typeIds[row] = -1;
      if (flags & recordFlags.hasType) {
        if (at < end && bytes[at] < 0x80) value = bytes[at++];
        else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
        if (at + value > end) throw corrupt(what, at, `needs ${value} more bytes`);
        const id = typeIdOf(job, at, at + value, what);
        if (id < 0) {
          cursor[slot.stop] = manifestStop.typesFull;
          at = entryStart;
          break;
        }
        typeIds[row] = id;
        at += value;
      }
      tagRows[row] = tags;
      if (flags & recordFlags.hasTags) {
        const count = varintAt(bytes, at, end, what);
        at = varintEnd;
        if (count > end - at) throw corrupt(what, at, `tag count ${count} exceeds the frame`);
        if (tags + count > tagStarts.length) {
          cursor[slot.stop] = manifestStop.tagsFull;
          cursor[slot.tagsNeeded] = tags + count;
          at = entryStart;
          break;
        }
        for (let tag = 0; tag < count; tag++, tags++) {
          if (at < end && bytes[at] < 0x80) value = bytes[at++];
          else (value = varintAt(bytes, at, end, what)), (at = varintEnd);
          if (at + value > end) throw corrupt(what, at, `needs ${value} more bytes`);
          tagStarts[tags] = at;
          at += value;
          tagEnds[tags] = at;
        }
      }
      // The payload's location, then the entry's own CRC: a run read whole is covered by its
      // frames' CRCs.
      let segment: number;
      if (at < end && bytes[at] < 0x80) segment = bytes[at++];
      else (segment = varintAt(bytes, at, end, what)), (at = varintEnd);
      const offset = varintAt(bytes, at, end, what);
      const length = varintAt(bytes, varintEnd, end, what);
      at = varintEnd;
      const crc = u32At(bytes, at, end, what);
      u32At(bytes, at + 4, end, what);
      at += 8;
      if (segment === 0) {
        if (offset + length > runBytes) throw corrupt(what, at, 'a payload lies past its run');
        payloadStarts[row] = runStart + offset;
        payloadEnds[row] = runStart + offset + length;
      } else {
        const field = manifestExternalFields * externals++;
        external[field] = row;
        external[field + 1] = segment;
        external[field + 2] = offset;
        external[field + 3] = length;
        external[field + 4] = crc;
        payloadStarts[row] = 0;
        payloadEnds[row] = 0;
      }
    }
    cursor[slot.at] = at;
    cursor[slot.left] = left;
    cursor[slot.runRow] += row - rowBefore;
    cursor[slot.row] = row;
    cursor[slot.tags] = tags;
    cursor[slot.externals] = externals;
    if (cursor[slot.stop] !== manifestStop.done) return;
    if (left === 0 && at !== end) throw corrupt(what, at, `${end - at} trailing bytes`);
  }
  tagRows[rows] = tags;
}
