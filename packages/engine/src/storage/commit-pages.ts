/**
 * Commit pages: a finished segment's commit records as its summary holds them, and as a feed keeps
 * its active segment's commits in memory — each commit's fields and its run's start, 128 to a
 * page with a CRC-32 each (`encodeCommitPage`, `decodeCommitPage`). Also what is derived from a
 * segment's pages: its fingerprint (`segmentSource`), the stream-id hashes its summary's stream
 * table sorts (`streamHash`), and a summary's whole content (`SummaryContent`), made either from
 * commit records or from the pages a feed already holds encoded, so finishing a segment of a
 * quarter of a million commits encodes nothing twice.
 *
 * @example
 * const page = encodeCommitPage(kernels, commits.slice(0, 128));
 * const content = summaryContentOf(kernels, commits); // what `writeSummary` writes
 */
import type { Kernels } from '../kernels/kernels.js';
import { summaryPageCommits } from '../limits.js';
import { ByteReader, ByteWriter, utf8Encode } from './codec.js';
import { type CommitRecord, isCompactedRun, readCommitFields, writeCommitFields } from './commit-record.js';

/** The hash a stream id is found by in the stream table. */
export function streamHash(kernels: Kernels, stream: string): number {
  return kernels.crc32(utf8Encode(stream));
}

/**
 * The fingerprint of a finished segment that its derived files (index file, key and fingerprint
 * dictionaries) carry: the CRC-32 of its commit records as a summary's pages hold them (each
 * commit's fields, then where its run starts), in order, without the pages' own CRCs. It differs
 * between two segments of the same base and record count unless every commit — stream ids,
 * times, epochs, run layout — is the same; it is known at open from the summary's head, or from
 * the commit records when the segment was read whole, without reading the segment again.
 */
export function segmentSource(kernels: Kernels, commits: readonly CommitRecord[]): number {
  let crc = 0;
  // A page at a time: a segment may hold a million commits, and one buffer of all their records
  // would be tens of megabytes.
  for (let first = 0; first < commits.length; first += summaryPageCommits) {
    const writer = new ByteWriter(summaryPageCommits * 64);
    for (const commit of commits.slice(first, first + summaryPageCommits)) {
      writeCommitFields(writer, commit);
      writer.varint(commit.runStart);
    }
    crc = kernels.crc32(writer.finish(), crc);
  }
  return crc;
}

/**
 * A page of commit records, as summaries store them (and as a feed keeps its active segment's
 * commits in memory): each commit's fields (`writeCommitFields`) and its run's start, then a
 * `u32` CRC-32 of those bytes.
 */
export function encodeCommitPage(kernels: Kernels, commits: readonly CommitRecord[]): Uint8Array {
  const writer = new ByteWriter(commits.length * 64 + 4);
  for (const commit of commits) {
    writeCommitFields(writer, commit);
    writer.varint(commit.runStart);
  }
  const records = writer.finish();
  const bytes = new Uint8Array(records.length + 4);
  bytes.set(records);
  new DataView(bytes.buffer).setUint32(records.length, kernels.crc32(records), true);
  return bytes;
}

/** What a page must hold: `count` commits from `firstCommit` at `firstPosition`, ending at `lastPosition`. */
export interface CommitPageShape {
  readonly segment: number;
  readonly firstCommit: number;
  readonly firstPosition: number;
  readonly lastPosition: number;
  readonly count: number;
  /** The segment's end: every run lies before it. */
  readonly end: number;
}

/**
 * Decodes a page of commit records, checked by its CRC and against its shape: the commits
 * follow each other from the page's first, and their runs lie inside the segment.
 */
export function decodeCommitPage(
  kernels: Kernels,
  bytes: Uint8Array,
  shape: CommitPageShape,
  what: string,
): CommitRecord[] {
  const reader = new ByteReader(bytes, 0, Math.max(0, bytes.length - 4), what);
  if (
    bytes.length < 4 ||
    kernels.crc32(bytes.subarray(0, bytes.length - 4)) !==
      new DataView(bytes.buffer, bytes.byteOffset).getUint32(bytes.length - 4, true)
  ) {
    throw reader.corrupt('CRC mismatch');
  }
  let expectedCommit = shape.firstCommit;
  let expectedPosition = shape.firstPosition;
  const commits: CommitRecord[] = [];
  for (let index = 0; index < shape.count; index++) {
    // The run's start follows the commit's fields.
    const record = readCommitFields(reader, () => ({ segment: shape.segment, runStart: 0 }));
    const runStart = reader.varint();
    if (
      record.commit !== expectedCommit ||
      record.parent !== record.commit - 1 ||
      record.firstPosition !== expectedPosition ||
      runStart + record.runBytes > shape.end
    ) {
      throw reader.corrupt(`commit ${record.commit} does not follow the one before it`);
    }
    (record as { runStart: number }).runStart = runStart;
    expectedCommit = record.commit + 1;
    expectedPosition = record.firstPosition + record.records;
    commits.push(record);
  }
  reader.expectEnd();
  if (expectedPosition - 1 !== shape.lastPosition) throw reader.corrupt('its commits end elsewhere than its head says');
  return commits;
}

/**
 * The fingerprint of a segment from its encoded pages (`encodeCommitPage`, in order): the same
 * CRC chain as `segmentSource`, whose page bodies these are, each without its own CRC.
 */
export function sourceOfPages(kernels: Kernels, pages: readonly Uint8Array[]): number {
  let crc = 0;
  for (const page of pages) crc = kernels.crc32(page.subarray(0, page.length - 4), crc);
  return crc;
}

/**
 * The stream-id hashes of `streams` (`streamHash` of each), in one kernel call: the ids' UTF-8
 * side by side, each range's CRC-32 taken with its CRC-32C.
 */
export function streamHashesOf(kernels: Kernels, streams: readonly string[]): Uint32Array {
  const encoded = streams.map(utf8Encode);
  let total = 0;
  for (const bytes of encoded) total += bytes.length;
  const joined = new Uint8Array(total);
  const ranges = new Uint32Array(2 * streams.length);
  for (let index = 0, at = 0; index < encoded.length; index++) {
    joined.set(encoded[index], at);
    ranges[2 * index] = at;
    at += encoded[index].length;
    ranges[2 * index + 1] = at;
  }
  const checksums = kernels.payloadChecksums(joined, ranges);
  const hashes = new Uint32Array(streams.length);
  for (let index = 0; index < streams.length; index++) hashes[index] = checksums[2 * index + 1];
  return hashes;
}

/**
 * A finished segment's commits as its summary is written from: its pages encoded, and what the
 * summary's head and stream table need of the commits, so that neither needs the records.
 */
export interface SummaryContent {
  readonly count: number;
  /** Pages of `summaryPageCommits` commits (the last may hold fewer), as `encodeCommitPage` makes them. */
  readonly pages: readonly Uint8Array[];
  /** Each page's last position and the bytes of its commits' runs. */
  readonly pageTable: readonly { readonly lastPosition: number; readonly runBytes: number }[];
  /** Each commit's `streamHash`, by its index in the segment. */
  readonly streamHashes: Uint32Array;
  /** The last commit (its frame is the segment's last), undefined when there is none. */
  readonly last: CommitRecord | undefined;
  readonly epochMax: number;
  /** The highest commit whose run key compaction thinned, or 0. */
  readonly compactedMax: number;
  readonly runBytes: number;
}

/** The summary content of `commits`, a segment's in order, encoded here. */
export function summaryContentOf(kernels: Kernels, commits: readonly CommitRecord[]): SummaryContent {
  const pages: Uint8Array[] = [];
  const pageTable: { lastPosition: number; runBytes: number }[] = [];
  let epochMax = 0;
  let compactedMax = 0;
  let runBytes = 0;
  for (let first = 0; first < commits.length; first += summaryPageCommits) {
    const inPage = commits.slice(first, first + summaryPageCommits);
    pages.push(encodeCommitPage(kernels, inPage));
    let pageRunBytes = 0;
    for (const commit of inPage) {
      pageRunBytes += commit.runBytes;
      epochMax = Math.max(epochMax, commit.epoch);
      if (isCompactedRun(commit)) compactedMax = commit.commit;
    }
    pageTable.push({ lastPosition: inPage[inPage.length - 1].lastPosition, runBytes: pageRunBytes });
    runBytes += pageRunBytes;
  }
  return {
    count: commits.length,
    pages,
    pageTable,
    streamHashes: streamHashesOf(
      kernels,
      commits.map((commit) => commit.stream),
    ),
    last: commits.at(-1),
    epochMax,
    compactedMax,
    runBytes,
  };
}
