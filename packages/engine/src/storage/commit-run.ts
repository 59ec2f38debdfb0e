/**
 * The commit run: what one commit adds to a feed's history segments. A run is the new payload
 * bytes (`Pack` frames), the ordered record metadata (`Manifest` frames) and the commit record
 * last, which is the run's commit marker. Runs are encoded independently of where they land:
 * offsets inside a run are relative to its start, so a run can be laid out before the group
 * commit that writes it knows its segment.
 *
 * It is longer than 500 lines because laying out a run and reading its frames back are the two
 * halves of one format; the commit record it ends with is in `commit-record.ts`.
 */

import { assert } from '../errors.js';
import { yieldToEventLoop, yieldWhenDue } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { eventLoopSliceRecords } from '../limits.js';
import { ByteReader } from './codec.js';
import { type CommitRecord, commitRecord, writeCommitFields } from './commit-record.js';
import { FrameKind } from './frame-kinds.js';
import type { FrameBuilder, ScannedFrame } from './framing.js';
import {
  checkEntryCrc,
  type ManifestEntry,
  type PayloadLocation,
  type RecordData,
  readManifestEntry,
  writeManifestEntry,
} from './records.js';

/** A payload location whose segment is 0 lies in the same run, at an offset from its start. */
const sameRun = 0;

/** What a new commit run is made of. */
export interface CommitRunInput {
  readonly commit: number;
  readonly stream: string;
  readonly parent: number;
  readonly firstPosition: number;
  readonly openedAt: number;
  readonly sealedAt: number;
  readonly message?: string;
  readonly epoch: number;
  readonly oneShot: boolean;
  /**
   * The records, in seq order: record i gets seq i + 1, unless the run is compacted (`span`
   * given), where each record carries its own seq.
   */
  readonly records: readonly (Omit<RecordData, 'timestamp'> & { readonly timestamp?: number; readonly seq?: number })[];
  /**
   * For a compacted run only: the positions the commit spans (its `records`), of which
   * `records` keep some, and the first occurrences of fingerprints among those dropped.
   */
  readonly span?: number;
  readonly retired?: readonly RetiredFingerprint[];
  /** The timestamp of records that came without one. */
  readonly timestampDefault: number;
}

/** A fingerprint a compacted run no longer holds a record for, at the seq that first had it. */
export interface RetiredFingerprint {
  readonly seq: number;
  readonly fingerprint: Uint8Array;
}

/** Finds a payload already stored in the feed (verified by its bytes), or undefined. */
export type PayloadLookup = (payload: Uint8Array, crc: number) => PayloadLocation | undefined;

/** A payload the run adds to the feed: its CRC-32C, and where it lies from the run's start. */
export interface NewPayload {
  readonly bytes: Uint8Array;
  readonly crc: number;
  readonly offset: number;
  readonly length: number;
}

/**
 * The default fingerprint: the payload's CRC-32C then its CRC-32, 8 bytes little-endian (two
 * different polynomials, so two payloads share it by chance about once in 2^64).
 */
export function defaultFingerprint(crc32c: number, crc32: number, into = new Uint8Array(8)): Uint8Array {
  // Byte by byte: a DataView per record was one allocation more on every commit's path.
  into[0] = crc32c;
  into[1] = crc32c >>> 8;
  into[2] = crc32c >>> 16;
  into[3] = crc32c >>> 24;
  into[4] = crc32;
  into[5] = crc32 >>> 8;
  into[6] = crc32 >>> 16;
  into[7] = crc32 >>> 24;
  return into;
}

/**
 * Ranges handed to the checksum kernels are laid in one buffer made once, outside the V8 heap: a
 * small typed array made fresh lives on the heap, and the native kernels would have it moved
 * off before they could read it, which costs more than the CRCs of a small run.
 */
let rangesBuffer = new Uint32Array(new ArrayBuffer(8 * eventLoopSliceRecords));

/** A view of the ranges buffer for `count` ranges (start, end pairs), zeroed. */
function rangesScratch(count: number): Uint32Array {
  if (rangesBuffer.length < 2 * count) rangesBuffer = new Uint32Array(new ArrayBuffer(8 * count));
  const ranges = rangesBuffer.subarray(0, 2 * count);
  ranges.fill(0);
  return ranges;
}

/**
 * Where the checksum kernels write for small calls, for the same reason: a view of it is valid
 * only until the next call, so it is read before anything awaits.
 */
const checksumsScratch = new Uint32Array(new ArrayBuffer(8 * 1024));

/** The CRC-32C and CRC-32 of one payload, synchronously and without a copy of it. */
function onePayloadChecksums(kernels: Kernels, payload: Uint8Array): Uint32Array {
  const ranges = rangesScratch(1);
  ranges[1] = payload.length;
  const out = kernels.payloadChecksums(payload, ranges, checksumsScratch.subarray(0, 2));
  return Uint32Array.of(out[0], out[1]);
}

/**
 * The CRC-32C and CRC-32 of every record's payload, in one kernel call per slice of
 * `eventLoopSliceRecords` (the payloads copied side by side first): a seal of 100,000 records
 * crosses into the native module a dozen times instead of 200,000. Yields between slices.
 */
async function payloadChecksumsOf(kernels: Kernels, records: readonly { payload: Uint8Array }[]): Promise<Uint32Array> {
  const out = new Uint32Array(records.length * 2);
  for (let first = 0; first < records.length; first += eventLoopSliceRecords) {
    if (first > 0) await yieldToEventLoop();
    const last = Math.min(records.length, first + eventLoopSliceRecords);
    let bytes = 0;
    for (let index = first; index < last; index++) bytes += records[index].payload.length;
    const joined = new Uint8Array(bytes);
    const ranges = rangesScratch(last - first);
    for (let index = first, at = 0; index < last; index++) {
      const payload = records[index].payload;
      joined.set(payload, at);
      ranges[2 * (index - first)] = at;
      at += payload.length;
      ranges[2 * (index - first) + 1] = at;
    }
    out.set(kernels.payloadChecksums(joined, ranges), first * 2);
  }
  return out;
}

/**
 * A fingerprint as a Map key and dictionary term: its bytes as a Latin-1 string (one character
 * per byte), made in one piece (fingerprints are at most `fingerprintBytesMax`, 64 bytes). The
 * default fingerprint's 8 bytes are passed one by one: spreading a typed array into
 * `String.fromCharCode` cost about 200 ns a record (seals, key builds, dedup reads), five times as
 * much.
 */
export function fingerprintKey(fingerprint: Uint8Array): string {
  if (fingerprint.length === 8) {
    return String.fromCharCode(
      fingerprint[0],
      fingerprint[1],
      fingerprint[2],
      fingerprint[3],
      fingerprint[4],
      fingerprint[5],
      fingerprint[6],
      fingerprint[7],
    );
  }
  return String.fromCharCode.apply(null, fingerprint as unknown as number[]);
}

/** Bytes a pack frame's directory spends per payload at most: a u32 CRC and a varint length. */
const packDirectoryEntryBytesMax = 9;

/**
 * Lays out one commit run at the end of `builder`. Returns the payloads it stores anew (for the
 * caller's dedup map, once the run is durable) and the commit record as it will read back.
 */
export async function buildCommitRun(
  kernels: Kernels,
  builder: FrameBuilder,
  input: CommitRunInput,
  lookup: PayloadLookup,
  frameDataBytesMax: number,
): Promise<{
  newPayloads: NewPayload[];
  runStart: number;
  /** Each record's fingerprint as a term (`fingerprintKey`), for the fingerprint dictionary. */
  fingerprintTerms: string[];
  /** Where each record's manifest entry starts, from the run's start. */
  entryOffsets: number[];
  /** The distinct types of the run's records. */
  types: Set<string>;
  /** The commit record, not yet placed (its segment and run start are 0). */
  commit: CommitRecord;
}> {
  const runStart = builder.byteLength;
  const compacted = input.span !== undefined;
  if (compacted) checkCompactedInput(input);
  // A seal of many records yields now and then: nothing else touches the builder meanwhile.
  const checksums =
    input.records.length === 1
      ? onePayloadChecksums(kernels, input.records[0].payload)
      : await payloadChecksumsOf(kernels, input.records);
  const { sources, fresh } = await payloadSources(input.records, checksums, lookup);
  // Room for the whole run at once: grown by doubling, a run of hundreds of megabytes would
  // hold its old and new buffer side by side at each step, and end in one up to twice its size.
  if (input.records.length > 1) builder.writer.reserve(await runBytesBound(input.records, fresh, frameDataBytesMax));
  const { newPayloads, packs } = await writePackFrames(builder, runStart, fresh, frameDataBytesMax);
  const { manifests, entryOffsets, fingerprintTerms, types } = await writeManifestFrames(
    kernels,
    builder,
    runStart,
    input,
    checksums,
    sources,
    newPayloads,
    frameDataBytesMax,
  );

  const retired = compacted
    ? (await writeRetiredFrames(builder, input.retired ?? [], frameDataBytesMax)).map((offset) => offset - runStart)
    : [];
  const span = input.span ?? input.records.length;
  // Where the run lands is not known yet: the caller makes the placed record once it is.
  const commit = commitRecord(
    {
      commit: input.commit,
      stream: input.stream,
      parent: input.parent,
      records: span,
      firstPosition: input.firstPosition,
      lastPosition: input.firstPosition + span - 1,
      openedAt: input.openedAt,
      sealedAt: input.sealedAt,
      message: input.message,
      epoch: input.epoch,
      oneShot: input.oneShot,
      // The commit frame records its own distance from the run's start, so a reader that finds
      // the commit record also finds the run.
      runBytes: builder.byteLength - runStart,
      manifests,
      packs,
      entries: input.records.length,
      retired,
    },
    0,
    0,
  );
  writeCommitFields(builder.begin(FrameKind.Commit, true), commit);
  builder.end();
  return { newPayloads, runStart, fingerprintTerms, entryOffsets, types, commit };
}

/** Bytes a manifest entry spends at most besides its strings and fingerprint (flags, varints, CRCs). */
const entryFixedBytesMax = 96;
/** Bytes a frame spends at most besides its entries or payloads (header, kind, counts). */
const frameFixedBytesMax = 32;

/**
 * About the bytes `buildCommitRun` lays for a run (pack and manifest frames and the commit
 * frame), erring high: every string at three UTF-8 bytes a UTF-16 unit. Pages of the reservation
 * that are never written cost no memory.
 */
async function runBytesBound(
  records: CommitRunInput['records'],
  fresh: readonly FreshPayload[],
  frameDataBytesMax: number,
): Promise<number> {
  let bytes = 64 * 1024;
  let packed = 0;
  for (const { payload } of fresh) packed += payload.length + packDirectoryEntryBytesMax;
  let entries = 0;
  // A run of 100,000 records with tags takes tens of milliseconds to size: it yields too. A
  // small one does not: a yield that a small append takes waits behind a slice of other work.
  const yields = records.length > eventLoopSliceRecords;
  for (let index = 0; index < records.length; index++) {
    const pause = yields ? yieldWhenDue(index) : undefined;
    if (pause) await pause;
    const record = records[index];
    let units = (record.key?.length ?? 0) + (record.type?.length ?? 0);
    for (const tag of record.tags ?? []) units += tag.length + 2;
    entries += entryFixedBytesMax + (record.fingerprint?.length ?? 8) + 3 * units;
  }
  // Pack frames are filled to the frame limit, manifest frames to half of it.
  const frames = Math.ceil(packed / frameDataBytesMax) + Math.ceil(entries / Math.floor(frameDataBytesMax / 2)) + 2;
  bytes += packed + entries + frames * frameFixedBytesMax;
  return bytes;
}

/** A payload new in the run being laid out, and its CRC-32C. */
interface FreshPayload {
  readonly payload: Uint8Array;
  readonly crc: number;
}

/**
 * Where each record's payload comes from: a location stored already (in an earlier run, found by
 * `lookup`), or an index into `fresh`, the payloads new in this run, each once.
 */
async function payloadSources(
  records: CommitRunInput['records'],
  checksums: Uint32Array,
  lookup: PayloadLookup,
): Promise<{ sources: (PayloadLocation | number)[]; fresh: FreshPayload[] }> {
  const sources: (PayloadLocation | number)[] = [];
  const fresh: FreshPayload[] = [];
  // Repeats inside the run are looked up by 30 bits of their CRC, which V8 keeps as small
  // integers (a full 32-bit key is a heap number, hashed and collected like an object: twice the
  // cost a record). Two payloads that share a key cost a failed byte comparison, and the second
  // is stored anew. A run of one record has no repeats.
  const freshByCrc = records.length > 1 ? new Map<number, number>() : undefined;
  for (let index = 0; index < records.length; index++) {
    const record = records[index];
    const pause = yieldWhenDue(index);
    if (pause) await pause;
    const crc = checksums[2 * index];
    const inRun = freshByCrc?.get(crc & 0x3fff_ffff);
    if (inRun !== undefined && equalBytes(fresh[inRun].payload, record.payload)) {
      sources.push(inRun);
      continue;
    }
    const stored = lookup(record.payload, crc);
    if (stored) {
      sources.push(stored);
      continue;
    }
    freshByCrc?.set(crc & 0x3fff_ffff, fresh.length);
    sources.push(fresh.length);
    fresh.push({ payload: record.payload, crc });
  }
  return { sources, fresh };
}

/**
 * Lays out the run's new payloads in pack frames; returns where each landed and each frame's
 * offset. A large run yields between payloads when its slice is due: copying the payloads of a
 * seal of 100,000 records held the event loop for 50 to 100 ms. The frame being filled is open in the
 * builder, and nothing else touches the builder meanwhile.
 */
async function writePackFrames(
  builder: FrameBuilder,
  runStart: number,
  fresh: readonly FreshPayload[],
  frameDataBytesMax: number,
): Promise<{ newPayloads: NewPayload[]; packs: number[] }> {
  // As `runBytesBound`: only a large run yields.
  const yields = fresh.length > eventLoopSliceRecords;
  const newPayloads: NewPayload[] = [];
  const packs: number[] = [];
  for (let start = 0; start < fresh.length; ) {
    // Fill a pack frame up to the frame limit; a single payload always fits, because the API
    // refuses records larger than the limit.
    let end = start;
    let bytes = 16;
    while (end < fresh.length) {
      const added = fresh[end].payload.length + packDirectoryEntryBytesMax;
      if (end > start && bytes + added > frameDataBytesMax) break;
      bytes += added;
      end++;
    }
    const writer = builder.begin(FrameKind.Pack, false).varint(end - start);
    for (let index = start; index < end; index++) writer.u32(fresh[index].crc).varint(fresh[index].payload.length);
    for (let index = start; index < end; index++) {
      const pause = yields ? yieldWhenDue(index) : undefined;
      if (pause) await pause;
      newPayloads.push({
        bytes: fresh[index].payload,
        crc: fresh[index].crc,
        offset: writer.length - runStart,
        length: fresh[index].payload.length,
      });
      writer.raw(fresh[index].payload);
    }
    packs.push(builder.end() - runStart);
    start = end;
  }
  return { newPayloads, packs };
}

/**
 * Lays out the run's manifest frames, one entry per record (its payload found through
 * `sources`), each entry ending with its own CRC-32C; returns each frame's offset, each entry's,
 * each record's fingerprint term and the run's distinct types.
 */
async function writeManifestFrames(
  kernels: Kernels,
  builder: FrameBuilder,
  runStart: number,
  input: CommitRunInput,
  checksums: Uint32Array,
  sources: readonly (PayloadLocation | number)[],
  newPayloads: readonly NewPayload[],
  frameDataBytesMax: number,
): Promise<{ manifests: number[]; entryOffsets: number[]; fingerprintTerms: string[]; types: Set<string> }> {
  const compacted = input.span !== undefined;
  const manifestFrameBytesTarget = Math.floor(frameDataBytesMax / 2);
  // Default fingerprints are computed into one scratch buffer and copied into the manifest.
  const fingerprintScratch = new Uint8Array(8);
  const manifests: number[] = [];
  const entryOffsets: number[] = [];
  const fingerprintTerms: string[] = [];
  const types = new Set<string>();
  for (let start = 0; start < input.records.length; ) {
    const writer = builder.begin(FrameKind.Manifest, false);
    const countAt = writer.length;
    writer.u32(start).u32(0);
    let end = start;
    // Each entry ends with the CRC-32C of its bytes: a placeholder here, then the frame's
    // entries' CRCs in one kernel call, patched in before the frame is closed.
    const entryRanges: number[] = [];
    while (end < input.records.length && (end === start || writer.length - countAt < manifestFrameBytesTarget)) {
      // The manifest frame is open in the builder; nothing else touches it meanwhile.
      const pause = end > start ? yieldWhenDue(end) : undefined;
      if (pause) await pause;
      const record = input.records[end];
      if (record.type !== undefined) types.add(record.type);
      const source = sources[end];
      entryOffsets.push(writer.length - runStart);
      entryRanges.push(writer.length);
      const fingerprint =
        record.fingerprint ?? defaultFingerprint(checksums[2 * end], checksums[2 * end + 1], fingerprintScratch);
      fingerprintTerms.push(fingerprintKey(fingerprint));
      writeManifestEntry(
        writer,
        record,
        compacted ? record.seq! : end + 1,
        record.timestamp ?? input.timestampDefault,
        fingerprint,
        typeof source === 'number'
          ? {
              segment: sameRun,
              offset: newPayloads[source].offset,
              length: newPayloads[source].length,
              crc: newPayloads[source].crc,
            }
          : source,
      );
      entryRanges.push(writer.length - 4);
      end++;
    }
    const entries = entryRanges.length / 2;
    const ranges = rangesScratch(entries);
    ranges.set(entryRanges);
    // Patched in at once, before anything awaits: the output is the shared scratch when small.
    const entryCrcs = kernels.crc32cRanges(
      writer.peek(),
      ranges,
      entries <= checksumsScratch.length ? checksumsScratch.subarray(0, entries) : undefined,
    );
    for (let entry = 0; entry < entryCrcs.length; entry++)
      writer.patchU32(entryRanges[2 * entry + 1], entryCrcs[entry]);
    writer.patchU32(countAt + 4, end - start);
    manifests.push(builder.end() - runStart);
    start = end;
  }
  return { manifests, entryOffsets, fingerprintTerms, types };
}

/** A compacted run's records keep their seqs, ascending within the span; so do retired ones. */
function checkCompactedInput(input: CommitRunInput): void {
  const span = input.span!;
  assert(
    Number.isSafeInteger(span) && span >= input.records.length,
    'a compacted run spans at least the records it keeps',
  );
  for (const list of [input.records, input.retired ?? []]) {
    let previous = 0;
    for (const item of list) {
      assert(
        item.seq !== undefined && Number.isSafeInteger(item.seq) && item.seq > previous && item.seq <= span,
        'a compacted run names ascending seqs within its span',
      );
      previous = item.seq;
    }
  }
}

/** Bytes a retired-fingerprint frame is filled to before the next one starts. */
function retiredFrameBytesTarget(frameDataBytesMax: number): number {
  return Math.floor(frameDataBytesMax / 2);
}

/**
 * Lays out retired fingerprints as frames (`varint count`, then per fingerprint `varint seq`,
 * `varint length` and its bytes); returns each frame's offset in the builder.
 */
async function writeRetiredFrames(
  builder: FrameBuilder,
  retired: readonly RetiredFingerprint[],
  frameDataBytesMax: number,
): Promise<number[]> {
  const offsets: number[] = [];
  const target = retiredFrameBytesTarget(frameDataBytesMax);
  for (let start = 0; start < retired.length; ) {
    let end = start;
    let bytes = 6;
    while (end < retired.length && (end === start || bytes + retired[end].fingerprint.length + 11 <= target)) {
      bytes += retired[end].fingerprint.length + 11;
      end++;
    }
    const writer = builder.begin(FrameKind.Retired, false).varint(end - start);
    for (let index = start; index < end; index++) {
      // A compacted run may retire a hundred thousand in one frame: the frame is open in the
      // builder, and nothing else touches it meanwhile.
      const pause = index > start ? yieldWhenDue(index - start) : undefined;
      if (pause) await pause;
      writer.varint(retired[index].seq).bytes(retired[index].fingerprint);
    }
    offsets.push(builder.end());
    start = end;
  }
  return offsets;
}

/** Decodes one retired-fingerprint frame into its seqs and fingerprints. */
export function readRetiredFrame(bytes: Uint8Array, frame: ScannedFrame, what: string): RetiredFingerprint[] {
  const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, what);
  const count = reader.varint();
  if (count > reader.remaining) throw reader.corrupt(`retired count ${count} exceeds the frame`);
  const out: RetiredFingerprint[] = [];
  for (let index = 0; index < count; index++) out.push({ seq: reader.varint(), fingerprint: reader.bytes() });
  reader.expectEnd();
  return out;
}

/** Decodes a manifest frame into entries with absolute payload locations. */
export function readManifest(
  bytes: Uint8Array,
  dataStart: number,
  dataEnd: number,
  segment: number,
  runStart: number,
  what: string,
  /** Receives each entry with its offset in `bytes`. */
  onEntry: (entry: ManifestEntry, offset: number) => void,
): number {
  const reader = new ByteReader(bytes, dataStart + 1, dataEnd, what);
  reader.u32();
  const count = reader.u32();
  if (count > reader.remaining) throw reader.corrupt(`entry count ${count} exceeds the frame`);
  for (let index = 0; index < count; index++) {
    const offset = reader.offset;
    onEntry(readManifestEntry(reader, segment, runStart), offset);
  }
  reader.expectEnd();
  return count;
}

/** Decodes one manifest entry that starts at `offset` of `bytes` (a point lookup by position). */
/** Reads one manifest entry on its own (a point lookup), checking the entry's own CRC. */
export function readManifestEntryAt(
  crc32c: (bytes: Uint8Array) => number,
  bytes: Uint8Array,
  offset: number,
  segment: number,
  runStart: number,
  what: string,
): ManifestEntry {
  const reader = new ByteReader(bytes, offset, bytes.length, what);
  const entry = readManifestEntry(reader, segment, runStart);
  checkEntryCrc(crc32c, bytes, offset, reader.offset, what);
  return entry;
}

/** Decodes a pack frame's directory: each payload's CRC-32C and absolute location. */
export function readPackDirectory(
  bytes: Uint8Array,
  frame: ScannedFrame,
  segment: number,
  what: string,
): { crc: number; location: PayloadLocation }[] {
  const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, what);
  const count = reader.varint();
  if (count > reader.remaining) throw reader.corrupt(`payload count ${count} exceeds the frame`);
  const directory: { crc: number; length: number }[] = [];
  for (let index = 0; index < count; index++) directory.push({ crc: reader.u32(), length: reader.varint() });
  let offset = reader.offset;
  const out = directory.map(({ crc, length }) => {
    const location = { segment, offset, length, crc };
    offset += length;
    return { crc, location };
  });
  if (offset !== frame.dataEnd) throw reader.corrupt('payload lengths disagree with the frame');
  return out;
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let index = 0; index < a.length; index++) if (a[index] !== b[index]) return false;
  return true;
}
