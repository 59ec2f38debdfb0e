/**
 * Records as they are stored: in WAL `RECORD` frames while their stream is open, and as
 * manifest entries (with the payload's pack location) once sealed. docs/formats.md has the bytes.
 */
import { ByteReader, type ByteWriter } from './codec.js';

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

/** Where a payload's bytes lie: a history segment (by its base position), an offset, a length. */
export interface PayloadLocation {
  readonly segment: number;
  readonly offset: number;
  readonly length: number;
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

const hasFingerprint = 1;
const hasKey = 2;
const hasVersion = 4;
const isTombstone = 8;
const hasType = 16;
const hasTags = 32;

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

function writeMetadata(
  writer: ByteWriter,
  flags: number,
  record: Omit<RecordData, 'payload' | 'timestamp'>,
): void {
  if (flags & hasFingerprint) writer.bytes(record.fingerprint!);
  if (flags & hasKey) writer.string(record.key!);
  if (flags & hasVersion) writer.varint(record.version!);
  if (flags & hasType) writer.string(record.type!);
  if (flags & hasTags) {
    writer.varint(record.tags.length);
    for (const tag of record.tags) writer.string(tag);
  }
}

interface Metadata {
  fingerprint?: Uint8Array;
  key?: string;
  version?: number;
  tombstone: boolean;
  type?: string;
  tags: string[];
}

function readMetadata(reader: ByteReader, flags: number): Metadata {
  const metadata: Metadata = { tombstone: (flags & isTombstone) !== 0, tags: [] };
  if (flags & hasFingerprint) metadata.fingerprint = reader.bytes();
  if (flags & hasKey) metadata.key = reader.string();
  if (flags & hasVersion) metadata.version = reader.varint();
  if (flags & hasType) metadata.type = reader.string();
  if (flags & hasTags) {
    const count = reader.varint();
    if (count > reader.remaining) throw reader.corrupt(`tag count ${count} exceeds the frame`);
    for (let index = 0; index < count; index++) metadata.tags.push(reader.string());
  }
  return metadata;
}

/** WAL RECORD frame data after the kind byte: flags, timestamp, metadata, then the payload. */
export function writeWalRecord(writer: ByteWriter, record: RecordData): void {
  const flags = flagsOf(record);
  writer.u8(flags).varint(record.timestamp);
  writeMetadata(writer, flags, record);
  writer.raw(record.payload);
}

export function readWalRecord(reader: ByteReader): RecordData {
  const flags = reader.u8();
  const timestamp = reader.varint();
  const metadata = readMetadata(reader, flags);
  return { ...metadata, timestamp, payload: reader.raw(reader.remaining) };
}

/** One manifest entry: the record's metadata, its fingerprint, and where its payload lies. */
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
  writer.varint(payload.segment).varint(payload.offset).varint(payload.length);
}

export function readManifestEntry(reader: ByteReader): ManifestEntry {
  const flags = reader.u8();
  if ((flags & hasFingerprint) === 0) throw reader.corrupt('a manifest entry lacks its fingerprint');
  const seq = reader.varint();
  const timestamp = reader.varint();
  const metadata = readMetadata(reader, flags);
  const payload = { segment: reader.varint(), offset: reader.varint(), length: reader.varint() };
  return { ...metadata, fingerprint: metadata.fingerprint!, seq, timestamp, payload };
}
