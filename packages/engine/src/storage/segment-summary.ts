/**
 * Segment summaries (docs/formats.md, Segment summaries): one file beside each finished history
 * segment, derived from it, holding what opening the feed needs from the segment — its commit
 * records and where it ends — so that opening reads the summaries and replays only the active
 * segment and the WAL, in time independent of the history behind it. A sealed segment is never
 * rewritten, so its summary is a separate file; a summary that is missing, damaged or disagrees
 * with its segment's header is ignored and rebuilt from the segment.
 *
 * The commit records are kept in pages of `pageCommits`, each with its own CRC, so a feed keeps
 * only the summary's head in memory and reads a page when a commit of it is needed. A table of
 * stream ids (by hash) finds the commit a stream was sealed into without reading the pages.
 *
 * Layout, little-endian: magic "SSSUMRY3" (8) · u32 format version · u64 base · u64 base commit
 * · u64 capacity · u64 end (just past the segment's last group, its `SegmentEnd`) · u32 commit
 * count · u64 last position · u64 highest epoch · u64 highest compacted commit (0: none; a run key
 * compaction thinned) · u64 run bytes (all commits') · u32 source (the segment's fingerprint,
 * `segmentSource`) · u64 offset of the last commit's frame in the segment and the 8 bytes of that
 * frame's header (length word, CRC-32) · u32 commits per page · u32 page count · u32 stream table
 * offset · the page table (per page: u32 offset · u32
 * length · u64 last position · u64 run bytes) · the pages (per page: its commit records, then
 * u32 crc32 of them) · the stream table (per commit, ascending: u32 crc32 of its stream id · u32
 * its index in the segment) · u32 crc32 of every byte before it. A commit record is the fields of
 * its commit frame, as that frame holds them (`writeCommitFields`), then a varint: where its run
 * starts in the segment.
 *
 * A summary from another segment with the same base, base commit and capacity (another feed's, a
 * copy from before a merge or key compaction rewrote the segment) would pass those checks, so
 * opening also reads the last commit frame's header from the segment itself (8 bytes) and
 * compares it with the summary's: its CRC covers the commit's stream id, times and run layout.
 *
 * It is longer than 500 lines because a summary's writer, reader and its checks against its
 * segment are one format, read at open and rebuilt on damage.
 */
import path from 'node:path';
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameControlBit, frameHeaderBytes, summaryPageCommits } from '../limits.js';
import { ByteReader, ByteWriter, utf8Encode } from './codec.js';
import {
  decodeCommitPage,
  type SummaryContent,
  segmentSource,
  sourceOfPages,
  streamHash,
  summaryContentOf,
} from './commit-pages.js';
import { type CommitRecord, writeCommitFields } from './commit-record.js';
import { FrameKind } from './frame-kinds.js';
import { readFileRangeSync, type SegmentHeader, SegmentKind, writeFileDurably } from './segment.js';
import { isMissingFile, type SegmentStore, type SyncSegmentReads } from './segment-store.js';

const magic = 'SSSUMRY3';
/**
 * 3: the head carries the newest compacted commit, the segment's source fingerprint and its last
 * commit frame's header.
 */
export const summaryFormatVersion = 3;
const headBytes = 112;
const pageEntryBytes = 24;
const streamEntryBytes = 8;

export interface SegmentSummary {
  readonly base: number;
  readonly baseCommit: number;
  readonly capacity: number;
  /** Just past the segment's last group. */
  readonly end: number;
  readonly commits: readonly CommitRecord[];
}

/** A summary page as its head describes it. */
export interface SummaryPage {
  readonly offset: number;
  readonly length: number;
  /** The last position of the page's last commit. */
  readonly lastPosition: number;
  /** Bytes of the runs of its commits. */
  readonly runBytes: number;
}

/** What a feed keeps of a summary: everything but the commit records and the stream table. */
export interface SummaryHead {
  readonly file: string;
  readonly base: number;
  readonly baseCommit: number;
  readonly capacity: number;
  readonly end: number;
  readonly commitCount: number;
  /** The last position of the segment's last commit (base − 1 when it holds none). */
  readonly lastPosition: number;
  readonly epochMax: number;
  /** The highest commit whose run key compaction thinned, or 0 (the horizon's floor comes from it). */
  readonly compactedMax: number;
  readonly runBytes: number;
  /** The segment's fingerprint (`segmentSource`): what its derived files say they were built from. */
  readonly source: number;
  /** Where the last commit's frame starts in the segment (0 when there is none). */
  readonly lastFrameOffset: number;
  /** That frame's header as the segment holds it: its length word, then its CRC-32. */
  readonly lastFrameHeader: Uint8Array;
  readonly pageCommits: number;
  readonly pages: readonly SummaryPage[];
  readonly streamTableOffset: number;
}

/**
 * The header of `commit`'s frame as its segment holds it — the length word (control bit set) and
 * the CRC-32 of the frame's data (its kind, then its fields) — and where the frame starts: right
 * after the run's other frames.
 */
export function commitFrameHeader(kernels: Kernels, commit: CommitRecord): { offset: number; header: Uint8Array } {
  const data = new ByteWriter(64).u8(FrameKind.Commit);
  writeCommitFields(data, commit);
  const bytes = data.finish();
  const header = new Uint8Array(frameHeaderBytes);
  const view = new DataView(header.buffer);
  view.setUint32(0, (bytes.length | frameControlBit) >>> 0, true);
  view.setUint32(4, kernels.crc32(bytes), true);
  return { offset: commit.runStart + commit.runBytes, header };
}

/** What a summary is written from: the segment's place, and its commits as `SummaryContent`. */
export interface SummaryToWrite {
  readonly base: number;
  readonly baseCommit: number;
  readonly capacity: number;
  /** Just past the segment's last group. */
  readonly end: number;
  readonly content: SummaryContent;
}

/**
 * The order of the stream table: commit indexes by their hashes, ties by index. Sorted as one
 * number each (hash × 2^21 + index, exact below 2^53) with the engine's numeric sort, which takes
 * a quarter of a million commits in milliseconds where a comparator took tens.
 */
function streamTableOrder(hashes: Uint32Array, count: number): Uint32Array {
  const order = new Uint32Array(count);
  const indexSpan = 2 ** 21;
  if (count > indexSpan) {
    for (let index = 0; index < count; index++) order[index] = index;
    return order.sort((a, b) => hashes[a] - hashes[b] || a - b);
  }
  const keys = new Float64Array(count);
  for (let index = 0; index < count; index++) keys[index] = hashes[index] * indexSpan + index;
  keys.sort();
  for (let at = 0; at < count; at++) order[at] = keys[at] % indexSpan;
  return order;
}

export function encodeSummary(kernels: Kernels, summary: SummaryToWrite): Uint8Array {
  const { content } = summary;
  const { pages, last } = content;
  let offset = headBytes + pages.length * pageEntryBytes;
  const table: SummaryPage[] = [];
  for (let page = 0; page < pages.length; page++) {
    table.push({ offset, length: pages[page].length, ...content.pageTable[page] });
    offset += pages[page].length;
  }
  const hashes = content.streamHashes;
  const order = streamTableOrder(hashes, content.count);
  const lastFrame = last ? commitFrameHeader(kernels, last) : { offset: 0, header: new Uint8Array(frameHeaderBytes) };
  const writer = new ByteWriter(offset + content.count * streamEntryBytes + 4)
    .raw(utf8Encode(magic))
    .u32(summaryFormatVersion)
    .u64(summary.base)
    .u64(summary.baseCommit)
    .u64(summary.capacity)
    .u64(summary.end)
    .u32(content.count)
    .u64(last ? last.lastPosition : summary.base - 1)
    .u64(content.epochMax)
    .u64(content.compactedMax)
    .u64(content.runBytes)
    .u32(sourceOfPages(kernels, pages))
    .u64(lastFrame.offset)
    .raw(lastFrame.header)
    .u32(summaryPageCommits)
    .u32(pages.length)
    .u32(offset);
  for (const page of table) writer.u32(page.offset).u32(page.length).u64(page.lastPosition).u64(page.runBytes);
  for (const page of pages) writer.raw(page);
  for (const index of order) writer.u32(hashes[index]).u32(index);
  const body = writer.finish();
  const out = new Uint8Array(body.length + 4);
  out.set(body);
  new DataView(out.buffer).setUint32(body.length, kernels.crc32(body), true);
  return out;
}

/**
 * Checks a whole summary (its CRC) and decodes its head: that it describes the segment `header`
 * names — the same base, base commit and capacity — and that its pages and stream table lie
 * where the head says, one after another, to the end of the file.
 */
export function decodeSummaryHead(
  kernels: Kernels,
  bytes: Uint8Array,
  header: SegmentHeader,
  file: string,
): SummaryHead {
  const what = `summary ${file}`;
  if (bytes.length < headBytes + 4) throw new ByteReader(bytes, 0, 0, what).corrupt('shorter than its head');
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
  const commitCount = reader.u32();
  const lastPosition = reader.u64();
  const epochMax = reader.u64();
  const compactedMax = reader.u64();
  if (compactedMax !== 0 && (compactedMax < baseCommit || compactedMax >= baseCommit + commitCount))
    throw reader.corrupt(`compacted commit ${compactedMax} is not one of its commits`);
  const runBytes = reader.u64();
  const source = reader.u32();
  const lastFrameOffset = reader.u64();
  const lastFrameHeader = reader.raw(frameHeaderBytes).slice();
  if ((commitCount === 0) !== (lastFrameOffset === 0) || lastFrameOffset + frameHeaderBytes > end)
    throw reader.corrupt(`the last commit frame at ${lastFrameOffset} does not fit the segment`);
  const pageCommits = reader.u32();
  const pageCount = reader.u32();
  const streamTableOffset = reader.u32();
  if (pageCommits === 0 || pageCount !== Math.ceil(commitCount / pageCommits))
    throw reader.corrupt(`${pageCount} pages cannot hold ${commitCount} commits`);
  if (lastPosition < base - 1 || (commitCount === 0) !== (lastPosition === base - 1))
    throw reader.corrupt(`last position ${lastPosition} does not fit the commits`);
  const pages: SummaryPage[] = [];
  let expected = headBytes + pageCount * pageEntryBytes;
  let previousLast = base - 1;
  let bytesSum = 0;
  for (let page = 0; page < pageCount; page++) {
    const entry = { offset: reader.u32(), length: reader.u32(), lastPosition: reader.u64(), runBytes: reader.u64() };
    if (entry.offset !== expected || entry.length < 4 || entry.lastPosition < previousLast)
      throw reader.corrupt(`page ${page} is misplaced`);
    expected += entry.length;
    previousLast = entry.lastPosition;
    bytesSum += entry.runBytes;
    pages.push(entry);
  }
  if (previousLast !== lastPosition || bytesSum !== runBytes) throw reader.corrupt('the pages disagree with the head');
  if (streamTableOffset !== expected || expected + commitCount * streamEntryBytes !== bytes.length - 4) {
    throw reader.corrupt('the stream table is misplaced');
  }
  return {
    file,
    base,
    baseCommit,
    capacity,
    end,
    commitCount,
    lastPosition,
    epochMax,
    compactedMax,
    runBytes,
    source,
    lastFrameOffset,
    lastFrameHeader,
    pageCommits,
    pages,
    streamTableOffset,
  };
}

/**
 * Decodes page `page` of a summary from its bytes, checked by its CRC and against its head: the
 * commits follow each other from the page's first, their runs lie inside the segment.
 */
export function decodeSummaryPage(
  kernels: Kernels,
  head: SummaryHead,
  page: number,
  bytes: Uint8Array,
): CommitRecord[] {
  const entry = head.pages[page];
  const what = `summary ${head.file}, page ${page}`;
  if (bytes.length !== entry.length)
    throw new ByteReader(bytes, 0, 0, what).corrupt(`the page is ${bytes.length} bytes, its head says ${entry.length}`);
  const first = page * head.pageCommits;
  return decodeCommitPage(
    kernels,
    bytes,
    {
      segment: head.base,
      firstCommit: head.baseCommit + first,
      firstPosition: page === 0 ? head.base : head.pages[page - 1].lastPosition + 1,
      lastPosition: entry.lastPosition,
      count: Math.min(head.pageCommits, head.commitCount - first),
      end: head.end,
    },
    what,
  );
}

/** Decodes and checks a whole summary, every page (what `verify` compares with the segment). */
export function decodeSummary(
  kernels: Kernels,
  bytes: Uint8Array,
  header: SegmentHeader,
  file: string,
): SegmentSummary {
  const head = decodeSummaryHead(kernels, bytes, header, file);
  const commits = head.pages.flatMap((page, index) =>
    decodeSummaryPage(kernels, head, index, bytes.subarray(page.offset, page.offset + page.length)),
  );
  const what = new ByteReader(bytes, 0, 0, `summary ${file}`);
  if (segmentSource(kernels, commits) !== head.source)
    throw what.corrupt('its source fingerprint disagrees with its commits');
  const last = commits[commits.length - 1];
  if (last) {
    const frame = commitFrameHeader(kernels, last);
    if (frame.offset !== head.lastFrameOffset || !sameBytes(frame.header, head.lastFrameHeader))
      throw what.corrupt('its last commit frame disagrees with its commits');
  }
  return { base: head.base, baseCommit: head.baseCommit, capacity: head.capacity, end: head.end, commits };
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, index) => byte === b[index]);
}

/**
 * Checks a summary's head against its segment's own bytes: the last commit frame's header at the
 * place the summary names must be the one it holds. One read of 8 bytes, so a summary of another
 * segment with the same header fields (another feed's, a copy from before a rewrite) is not
 * trusted. `CORRUPT` (naming the summary) when it differs.
 */
export function checkSummaryAgainstSegment(head: SummaryHead, segmentFile: string): void {
  if (head.commitCount === 0) return;
  let held: Uint8Array;
  try {
    held = readFileRangeSync(segmentFile, head.lastFrameOffset, frameHeaderBytes);
  } catch (error) {
    throw readFailure(head.file, 0, error);
  }
  assert(head.lastFrameHeader.length === frameHeaderBytes, 'a summary head holds a whole frame header');
  if (!sameBytes(held, head.lastFrameHeader)) {
    throw new StreamStackError(
      'CORRUPT',
      `summary ${head.file} describes another segment: its last commit frame is not at ${head.lastFrameOffset} of ${segmentFile}`,
      {
        details: { file: head.file, offset: 0 },
      },
    );
  }
}

/** A summary that cannot be read as its head says: `CORRUPT`, naming the file. */
function unreadable(file: string, offset: number, error: unknown): StreamStackError {
  return error instanceof StreamStackError ? error : readFailure(file, offset, error);
}

/**
 * A read of a range that the summary `file` names, failed or short: the summary's fault, even
 * when the error names the file read (a segment's bytes are read where the summary says).
 */
function readFailure(file: string, offset: number, error: unknown): StreamStackError {
  return new StreamStackError('CORRUPT', `summary ${file} cannot be read: ${(error as Error).message}`, {
    cause: error,
    details: { file, offset },
  });
}

/** What a summary's messages call the file `store` holds as `name`: its path, when it has one. */
function fileLabel(store: SegmentStore, name: string): string {
  return store.localPath(name) ?? name;
}

/**
 * The store's name of the summary a head was read from (its `file` is the path the store gave
 * it, or the name itself: see `fileLabel`).
 */
function storeNameOf(head: SummaryHead): string {
  return path.basename(head.file);
}

/** A summary file's bytes, read whole through `store`; undefined when it is missing. */
async function readSummaryFile(store: SegmentStore, name: string): Promise<Uint8Array | undefined> {
  try {
    return (await store.readStart(name, Number.POSITIVE_INFINITY)).bytes;
  } catch (error) {
    if (isMissingFile(error)) return undefined;
    // Any other failure is the summary's damage, as a failed read of it always was.
    throw readFailure(fileLabel(store, name), 0, error);
  }
}

/** Reads and checks a summary's head; undefined when it is missing, `CORRUPT` when it is bad. */
export async function readSummaryHead(
  kernels: Kernels,
  store: SegmentStore,
  name: string,
  header: SegmentHeader,
): Promise<SummaryHead | undefined> {
  const bytes = await readSummaryFile(store, name);
  return bytes && decodeSummaryHead(kernels, bytes, header, fileLabel(store, name));
}

/** Reads and checks a whole summary, every page; undefined when it is missing (for `verify`). */
export async function readSummary(
  kernels: Kernels,
  store: SegmentStore,
  name: string,
  header: SegmentHeader,
): Promise<SegmentSummary | undefined> {
  const bytes = await readSummaryFile(store, name);
  return bytes && decodeSummary(kernels, bytes, header, fileLabel(store, name));
}

/** Where a summary's capacity lies: after the magic, the version, the base and the base commit. */
const capacityOffset = 28;

/**
 * The whole of `name`, through synchronous reads (which say how much they read: a read at the
 * end comes back short), into a buffer doubled until one comes back short. A store need not say
 * a file's size for it, and at most twice the file is held.
 */
function readWholeSync(reads: SyncSegmentReads, name: string): Uint8Array {
  let bytes = new Uint8Array(headBytes + 4);
  let size = reads.readSyncInto(name, bytes, 0);
  while (size === bytes.length) {
    const larger = new Uint8Array(bytes.length * 2);
    larger.set(bytes);
    bytes = larger;
    size += reads.readSyncInto(name, bytes.subarray(size), size);
  }
  return bytes.subarray(0, size);
}

/**
 * The commits named by the summary a lost segment left behind (its segment file is gone, its
 * summary is not), so that each lost commit keeps its own positions. Undefined when there is no
 * such summary, when it is damaged, or when it does not start at `base` and `baseCommit`.
 */
export function orphanSummaryCommits(
  kernels: Kernels,
  /**
   * Read synchronously: recovery meets a lost segment while it follows the commit chain, commit by
   * commit, in the segment set's synchronous events, where an await per commit would slow every
   * open that reads a segment whole, for a file that exists only after damage.
   */
  reads: SyncSegmentReads,
  name: string,
  base: number,
  baseCommit: number,
): readonly CommitRecord[] | undefined {
  let bytes: Uint8Array;
  try {
    bytes = readWholeSync(reads, name);
  } catch {
    return undefined;
  }
  if (bytes.length < headBytes + 4) return undefined;
  // The segment's header is lost with it: the summary's own capacity stands in for the header's,
  // and the base and first commit, which the chain expects, are what must match.
  const capacity = Number(
    new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(capacityOffset, true),
  );
  try {
    return decodeSummary(kernels, bytes, { kind: SegmentKind.History, base, baseCommit, capacity }, name).commits;
  } catch {
    return undefined;
  }
}

/**
 * Reads one page of commit records through `reads`, checked as `decodeSummaryPage` checks it.
 * Synchronously: the commit list reads a page when a read or an append asks it for a commit it
 * let go of, in lookups that cannot await (`CommitList.at`).
 */
export function readSummaryPage(
  kernels: Kernels,
  reads: SyncSegmentReads,
  head: SummaryHead,
  page: number,
): CommitRecord[] {
  const { offset, length } = head.pages[page];
  let bytes: Uint8Array;
  try {
    bytes = reads.readSync(storeNameOf(head), offset, length);
  } catch (error) {
    throw readFailure(head.file, offset, error);
  }
  try {
    return decodeSummaryPage(kernels, head, page, bytes);
  } catch (error) {
    throw unreadable(head.file, offset, error);
  }
}

/**
 * The indexes (within the segment) of the commits whose stream id hashes as `stream` does: a
 * binary search of the stream table, a few small reads through `reads` (synchronous, as the
 * commit list's lookup of a stream's commit is). The caller compares the stream ids.
 */
export function summaryStreamCandidates(
  kernels: Kernels,
  reads: SyncSegmentReads,
  head: SummaryHead,
  stream: string,
): number[] {
  const hash = streamHash(kernels, stream);
  const name = storeNameOf(head);
  const entryAt = (index: number): { hash: number; index: number } => {
    const offset = head.streamTableOffset + index * streamEntryBytes;
    try {
      const bytes = reads.readSync(name, offset, streamEntryBytes);
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      return { hash: view.getUint32(0, true), index: view.getUint32(4, true) };
    } catch (error) {
      throw readFailure(head.file, offset, error);
    }
  };
  let low = 0;
  let high = head.commitCount;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (entryAt(middle).hash < hash) low = middle + 1;
    else high = middle;
  }
  const found: number[] = [];
  for (let at = low; at < head.commitCount; at++) {
    const entry = entryAt(at);
    if (entry.hash !== hash) break;
    if (entry.index >= head.commitCount)
      throw unreadable(
        head.file,
        head.streamTableOffset + at * streamEntryBytes,
        new Error(`stream table entry ${at} names commit ${entry.index}`),
      );
    found.push(entry.index);
  }
  return found;
}

/** Writes a summary durably (see `writeFileDurably`) through `put`; returns its head. */
export async function writeSummary(
  kernels: Kernels,
  file: string,
  summary: SegmentSummary | SummaryToWrite,
  header: SegmentHeader,
  /**
   * Stores the finished bytes durably (`SegmentStore.put`, whose write is `writeFileDurably`);
   * written to `file` directly when not given (a rewrite writes its summary beside a new segment).
   */
  put: (bytes: Uint8Array) => Promise<void> = (bytes) => writeFileDurably(kernels, file, bytes),
): Promise<SummaryHead> {
  const toWrite = 'content' in summary ? summary : { ...summary, content: summaryContentOf(kernels, summary.commits) };
  const last = toWrite.content.last;
  // Checked before writing as opening checks it after reading: the last commit frame the summary
  // names lies inside the segment's written part.
  assert(
    !last || last.runStart + last.runBytes + frameHeaderBytes <= summary.end,
    'a summary names a last commit frame inside its segment',
  );
  const bytes = encodeSummary(kernels, toWrite);
  await put(bytes);
  return decodeSummaryHead(kernels, bytes, header, file);
}
