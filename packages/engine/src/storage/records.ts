/**
 * Records as they are stored: in WAL `RECORD` frames while their stream is open, and as
 * manifest entries (with the payload's pack location) once sealed. docs/formats.md has the bytes.
 */

import type { StoredRecord } from '@streamstack/protocol';
import { StreamStackError } from '../errors.js';
import { recordFlags } from '../kernels/manifest-columns.js';
import { walSharedStringsMax } from '../limits.js';
import type { ByteReader, ByteWriter } from './codec.js';

/** A published record, as reads return it: the protocol's `StoredRecord`, which the client shares. */
export type PublishedRecord = StoredRecord;

/** A record as the coordinator stores it: validated and normalised by the API layer. */
export interface RecordData {
  readonly payload: Uint8Array;
  readonly timestamp: number;
  /** Given by the producer; when absent, seal fills in the default (a hash of the payload). */
  readonly fingerprint?: Uint8Array;
  readonly key?: string;
  readonly version?: number;
  readonly tombstone: boolean;
  readonly type?: string;
  readonly tags: readonly string[];
}

/**
 * Where a payload's bytes lie — a history segment (by its base position), an offset, a length —
 * and their CRC-32C, so a payload read on its own (a point lookup, an index hit, a payload
 * stored by an earlier run) is checked like one read with its whole run.
 */
export interface PayloadLocation {
  readonly segment: number;
  readonly offset: number;
  readonly length: number;
  readonly crc: number;
}

/** A sealed record's metadata, as a manifest holds it. */
export interface ManifestEntry {
  readonly seq: number;
  readonly timestamp: number;
  readonly fingerprint: Uint8Array;
  readonly key?: string;
  readonly version?: number;
  readonly tombstone: boolean;
  readonly type?: string;
  readonly tags: readonly string[];
  readonly payload: PayloadLocation;
}

const noPayload: Uint8Array = new Uint8Array(0);

/**
 * The fields of a manifest entry as one decoder reads them. The two readers below share it,
 * through one scratch object (decoding is synchronous), so neither allocates an intermediate.
 */
const entry = {
  flags: 0,
  seq: 0,
  timestamp: 0,
  fingerprint: noPayload,
  key: undefined as string | undefined,
  version: undefined as number | undefined,
  type: undefined as string | undefined,
  tags: [] as readonly string[],
  payloadSegment: 0,
  offset: 0,
  length: 0,
  payloadCrc: 0,
};

/**
 * The scratch forgets the fingerprint it last read, a view of the run's bytes: a module-level
 * object holding it kept the last run decoded (megabytes, after a replay) alive for good.
 */
function letGoOfRun(): void {
  entry.fingerprint = noPayload;
}

function readEntryFields(reader: ByteReader): typeof entry {
  const flags = reader.u8();
  if ((flags & hasFingerprint) === 0) throw reader.corrupt('a manifest entry lacks its fingerprint');
  entry.flags = flags;
  entry.seq = reader.varint();
  entry.timestamp = reader.varint();
  entry.fingerprint = reader.bytes();
  entry.key = flags & hasKey ? reader.string() : undefined;
  entry.version = flags & hasVersion ? reader.varint() : undefined;
  entry.type = flags & hasType ? reader.string() : undefined;
  entry.tags = readTags(reader, flags);
  entry.payloadSegment = reader.varint();
  entry.offset = reader.varint();
  entry.length = reader.varint();
  entry.payloadCrc = reader.u32();
  // The entry's own CRC: checked where an entry is read alone (`readManifestEntryAt`); a run
  // read whole is covered by its frames' CRCs.
  reader.u32();
  return entry;
}

/**
 * Reads one manifest entry straight into a published record (the scan path of reads: one
 * object per record, the payload a view of the run's bytes). A payload stored in another run
 * (deduplicated) is left empty and its location handed to `external`, for the caller to read.
 */
export function readPublishedRecord(
  reader: ByteReader,
  run: {
    readonly feed: string;
    readonly commit: number;
    readonly stream: string;
    readonly segment: number;
    readonly runStart: number;
  },
  /** The record's position; undefined in a compacted run, where its seq places it. */
  position: number | undefined,
  runBytes: Uint8Array,
  external: (location: PayloadLocation) => void,
  firstPosition = 0,
): PublishedRecord {
  const { flags, seq, timestamp, fingerprint, key, version, type, tags, payloadSegment, offset, length, payloadCrc } =
    readEntryFields(reader);
  letGoOfRun();
  let payload = noPayload;
  if (payloadSegment === 0 && offset + length <= runBytes.length) payload = runBytes.subarray(offset, offset + length);
  else if (payloadSegment === 0) throw reader.corrupt('a payload lies past its run');
  else external({ segment: payloadSegment, offset, length, crc: payloadCrc });
  return {
    feed: run.feed,
    commit: run.commit,
    stream: run.stream,
    seq,
    position: position ?? firstPosition + seq - 1,
    timestamp,
    fingerprint,
    payload,
    key,
    version,
    tombstone: (flags & isTombstone) !== 0,
    type,
    tags,
  };
}

// The bits of a record's flags byte are part of the manifest decoding kernel's contract.
const { hasFingerprint, hasKey, hasVersion, isTombstone, hasType, hasTags } = recordFlags;

export { recordFlags };

function flagsOf(record: {
  fingerprint?: Uint8Array;
  key?: string;
  version?: number;
  tombstone: boolean;
  type?: string;
  tags: readonly string[];
}): number {
  return (
    (record.fingerprint !== undefined ? hasFingerprint : 0) |
    (record.key !== undefined ? hasKey : 0) |
    (record.version !== undefined ? hasVersion : 0) |
    (record.tombstone ? isTombstone : 0) |
    (record.type !== undefined ? hasType : 0) |
    (record.tags.length > 0 ? hasTags : 0)
  );
}

function writeMetadata(writer: ByteWriter, flags: number, record: Omit<RecordData, 'payload' | 'timestamp'>): void {
  if (flags & hasFingerprint) writer.bytes(record.fingerprint!);
  if (flags & hasKey) writer.string(record.key!);
  if (flags & hasVersion) writer.varint(record.version!);
  if (flags & hasType) writer.string(record.type!);
  if (flags & hasTags) {
    writer.varint(record.tags.length);
    for (const tag of record.tags) writer.string(tag);
  }
}

const noTags: readonly string[] = Object.freeze([]);

function readTags(reader: ByteReader, flags: number, share?: (text: string) => string): readonly string[] {
  if ((flags & hasTags) === 0) return noTags;
  const count = reader.varint();
  if (count > reader.remaining) throw reader.corrupt(`tag count ${count} exceeds the frame`);
  const tags = new Array<string>(count);
  for (let index = 0; index < count; index++) tags[index] = share ? share(reader.string()) : reader.string();
  return tags;
}

/**
 * Types and tags read back from the WAL, one copy of each: a seal holds every record of its
 * stream at once, and a million records may carry a few thousand distinct tags between them,
 * each decoded into a string of its own per record. Bounded: cleared when full.
 */
const walStrings = new Map<string, string>();

/** The copy of `text` the WAL's records share. */
function shareWalString(text: string): string {
  const known = walStrings.get(text);
  if (known !== undefined) return known;
  if (walStrings.size >= walSharedStringsMax) walStrings.clear();
  walStrings.set(text, text);
  return text;
}

/** WAL RECORD frame data after the kind byte: flags, timestamp, metadata, then the payload. */
export function writeWalRecord(
  writer: ByteWriter,
  record: Omit<RecordData, 'timestamp'> & { readonly timestamp?: number },
  timestampDefault: number,
): void {
  const flags = flagsOf(record);
  writer.u8(flags).varint(record.timestamp ?? timestampDefault);
  writeMetadata(writer, flags, record);
  writer.raw(record.payload);
}

export function readWalRecord(reader: ByteReader): RecordData {
  const flags = reader.u8();
  const timestamp = reader.varint();
  // One object literal with every field, in one order: every record has the same shape.
  const fingerprint = flags & hasFingerprint ? reader.bytes() : undefined;
  const key = flags & hasKey ? reader.string() : undefined;
  const version = flags & hasVersion ? reader.varint() : undefined;
  const type = flags & hasType ? shareWalString(reader.string()) : undefined;
  const tags = readTags(reader, flags, shareWalString);
  return {
    payload: reader.raw(reader.remaining),
    timestamp,
    fingerprint,
    key,
    version,
    tombstone: (flags & isTombstone) !== 0,
    type,
    tags,
  };
}

/** One manifest entry: the record's metadata, its fingerprint, and where its payload lies; its CRC is left 0 for the caller to fill in. */
export function writeManifestEntry(
  writer: ByteWriter,
  record: Omit<RecordData, 'payload' | 'timestamp'>,
  seq: number,
  timestamp: number,
  fingerprint: Uint8Array,
  payload: PayloadLocation,
): void {
  const flags = flagsOf(record) | hasFingerprint;
  writer.u8(flags).varint(seq).varint(timestamp).bytes(fingerprint);
  writeMetadata(writer, flags & ~hasFingerprint, record);
  writer.varint(payload.segment).varint(payload.offset).varint(payload.length).u32(payload.crc);
  // The entry's CRC-32C, filled in by the caller for a whole frame of entries at once.
  writer.u32(0);
}

/**
 * Checks the CRC that ends the manifest entry in `bytes[start, end)` (`end` just past it), for
 * an entry read alone; `CORRUPT` when it fails.
 */
export function checkEntryCrc(
  crc32c: (bytes: Uint8Array) => number,
  bytes: Uint8Array,
  start: number,
  end: number,
  what: string,
): void {
  const stored = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(end - 4, true);
  if (crc32c(bytes.subarray(start, end - 4)) !== stored) {
    throw new StreamStackError('CORRUPT', `${what} fails its CRC`, { details: { offset: start } });
  }
}

/**
 * Reads one manifest entry. A payload location relative to its run (segment 0) is made
 * absolute with `segment` and `runStart`, the segment and start of the run being read.
 */
export function readManifestEntry(reader: ByteReader, segment: number, runStart: number): ManifestEntry {
  const { flags, seq, timestamp, fingerprint, key, version, type, tags, payloadSegment, offset, length, payloadCrc } =
    readEntryFields(reader);
  letGoOfRun();
  const payload =
    payloadSegment === 0
      ? { segment, offset: runStart + offset, length, crc: payloadCrc }
      : { segment: payloadSegment, offset, length, crc: payloadCrc };
  return { seq, timestamp, fingerprint, key, version, tombstone: (flags & isTombstone) !== 0, type, tags, payload };
}
