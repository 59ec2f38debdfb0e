/**
 * Segment summaries (docs/formats.md, Segment summaries): one file beside each finished history
 * segment, derived from it, holding what opening the feed needs from the segment — its commit
 * records and where it ends — so that opening reads the summaries and replays only the active
 * segment and the WAL, in time independent of the history behind it. A sealed segment is never
 * rewritten, so its summary is a separate file; a summary that is missing, damaged or disagrees
 * with its segment's header is ignored and rebuilt from the segment.
 *
 * Layout, little-endian: magic "SSSUMRY1" (8) · u32 format version · u64 base · u64 base commit ·
 * u64 capacity · u64 end (just past the segment's last group, its `SegmentEnd`) · u32 commit
 * count · the commit records · u32 crc32 of every byte before it. A commit record is the fields of
 * its commit frame, as that frame holds them (`writeCommitFields`), then a varint: where its run
 * starts in the segment.
 */
import fs from 'node:fs';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { ByteReader, ByteWriter, utf8Encode } from './codec.js';
import { readCommitFields, writeCommitFields, type CommitRecord } from './history.js';
import { writeFileDurably, type SegmentHeader } from './segment.js';

const magic = 'SSSUMRY1';
export const summaryFormatVersion = 1;
/** Summary files end with this, beside their segment. */
export const summaryExtension = '.sum';

export interface SegmentSummary {
  readonly base: number;
  readonly baseCommit: number;
  readonly capacity: number;
  /** Just past the segment's last group. */
  readonly end: number;
  readonly commits: readonly CommitRecord[];
}

export function encodeSummary(kernels: Kernels, summary: SegmentSummary): Uint8Array {
  const writer = new ByteWriter(64 + summary.commits.length * 48)
    .raw(utf8Encode(magic))
    .u32(summaryFormatVersion)
    .u64(summary.base)
    .u64(summary.baseCommit)
    .u64(summary.capacity)
    .u64(summary.end)
    .u32(summary.commits.length);
  for (const commit of summary.commits) {
    writeCommitFields(writer, commit);
    writer.varint(commit.runStart);
  }
  const body = writer.finish();
  const out = new Uint8Array(body.length + 4);
  out.set(body);
  new DataView(out.buffer).setUint32(body.length, kernels.crc32(body), true);
  return out;
}

/**
 * Decodes and checks a summary: its CRC, and that it describes the segment `header` names —
 * the same base, base commit and capacity, commits that follow each other from the base on.
 */
export function decodeSummary(kernels: Kernels, bytes: Uint8Array, header: SegmentHeader, file: string): SegmentSummary {
  const what = `summary ${file}`;
  if (bytes.length < 4) throw new ByteReader(bytes, 0, 0, what).corrupt('shorter than its checksum');
  const stored = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(bytes.length - 4, true);
  const reader = new ByteReader(bytes, 0, bytes.length - 4, what);
  if (kernels.crc32(bytes.subarray(0, bytes.length - 4)) !== stored) throw reader.corrupt('CRC mismatch');
  if (new TextDecoder().decode(reader.raw(magic.length)) !== magic) throw reader.corrupt('bad magic');
  const version = reader.u32();
  if (version !== summaryFormatVersion) throw reader.corrupt(`unknown format version ${version}`);
  const base = reader.u64();
  const baseCommit = reader.u64();
  const capacity = reader.u64();
  const end = reader.u64();
  if (base !== header.base || baseCommit !== header.baseCommit || capacity !== header.capacity) {
    throw reader.corrupt('it describes another segment');
  }
  if (end > capacity) throw reader.corrupt('it ends past the capacity');
  const count = reader.u32();
  if (count > reader.remaining) throw reader.corrupt(`commit count ${count} exceeds the file`);
  const commits: CommitRecord[] = [];
  let expectedCommit = baseCommit;
  let expectedPosition = base;
  for (let index = 0; index < count; index++) {
    // The run's start follows the commit's fields.
    const record = readCommitFields(reader, () => ({ segment: base, runStart: 0 }));
    const runStart = reader.varint();
    if (record.commit !== expectedCommit || record.parent !== record.commit - 1 || record.firstPosition !== expectedPosition || runStart + record.runBytes > end) {
      throw reader.corrupt(`commit ${record.commit} does not follow the one before it`);
    }
    (record as { runStart: number }).runStart = runStart;
    expectedCommit = record.commit + 1;
    expectedPosition = record.firstPosition + record.records;
    commits.push(record);
  }
  reader.expectEnd();
  return { base, baseCommit, capacity, end, commits };
}

/** The summary file of the segment file `segmentFile`. */
export function summaryFileOf(segmentFile: string): string {
  return segmentFile.replace(/\.[a-z]+$/, summaryExtension);
}

/** Reads and checks a summary; undefined when it is missing, `CORRUPT` when it is bad. */
export function readSummary(kernels: Kernels, file: string, header: SegmentHeader): SegmentSummary | undefined {
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(fs.readFileSync(file));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new StreamStackError('CORRUPT', `summary ${file} cannot be read: ${(error as Error).message}`, { cause: error, details: { file, offset: 0 } });
  }
  return decodeSummary(kernels, bytes, header, file);
}

/** Writes a summary durably (see `writeFileDurably`). */
export async function writeSummary(kernels: Kernels, file: string, summary: SegmentSummary): Promise<void> {
  await writeFileDurably(kernels, file, encodeSummary(kernels, summary));
}
