/**
 * Writes the merge of adjacent sealed history segments: one segment file laid out as a writer
 * with a larger segment would have laid it — the same commits, positions and records, each
 * run rebuilt by `buildCommitRun` (so native and TypeScript kernels give the same bytes), payloads
 * stored once across the whole merged range. The file is written under a temporary name (which
 * recovery deletes if a crash leaves it), synced once at the end; the caller switches it in.
 *
 * It is sized to its data: a sealed segment is never appended to, so it needs no preallocated
 * room, and its capacity is exactly where its `SegmentEnd` ends.
 */
import fs from 'node:fs';
import { assert, ioError } from '../errors.js';
import { sliceDue, yieldToEventLoop, yieldWhenDue } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { mergeGroupBytesTarget, segmentHeaderBytes } from '../limits.js';
import { type CommitRecord, commitRecord } from './commit-record.js';
import {
  buildCommitRun,
  type CommitRunInput,
  equalBytes,
  type NewPayload,
  type RetiredFingerprint,
} from './commit-run.js';
import { FrameKind } from './frame-kinds.js';
import { GroupBuilder, sealGroup } from './groups.js';
import type { History } from './history-log.js';
import type { PayloadLocation, PublishedRecord } from './records.js';
import { encodeSegmentHeader, type SegmentHeader, SegmentKind } from './segment.js';

/** What a merge wrote: the temporary file, its header, and its commits as they now lie. */
export interface MergedSegment {
  readonly file: string;
  readonly header: SegmentHeader;
  /** Where its last group (the `SegmentEnd`) ends: its size. */
  readonly end: number;
  readonly commits: CommitRecord[];
}

/**
 * Writes commits `commits` (every commit of the segments being merged, in order, the first
 * starting the first of them) into `file`, ending with a `SegmentEnd` that names `successor`.
 * `capacityToAvoid` is the first source segment's capacity: the merged file's differs from it,
 * so recovery can tell which of the two lies under the shared name.
 */
/**
 * Chooses what a compacted commit keeps: a subset of its records (in order), and the retired
 * fingerprints (ascending seqs, including `retired`, those an earlier compaction retired).
 */
export type RunSelection = (
  commit: CommitRecord,
  records: readonly PublishedRecord[],
  retired: readonly RetiredFingerprint[],
) => Promise<{ kept: readonly PublishedRecord[]; retired: readonly RetiredFingerprint[] }>;

/**
 * What `buildCommitRun` takes to lay out `commit` again with `records` (all of them, or what a key
 * compaction kept, with `retired` then set: the run becomes sparse, each record keeping its seq).
 */
async function rewrittenRunInput(
  commit: CommitRecord,
  records: readonly PublishedRecord[],
  retired: readonly RetiredFingerprint[] | undefined,
): Promise<CommitRunInput> {
  return {
    commit: commit.commit,
    stream: commit.stream,
    parent: commit.parent,
    firstPosition: commit.firstPosition,
    openedAt: commit.openedAt,
    sealedAt: commit.sealedAt,
    ...(commit.message === undefined ? {} : { message: commit.message }),
    epoch: commit.epoch,
    oneShot: commit.oneShot,
    ...(retired ? { span: commit.records, retired } : {}),
    records: await runInputOf(records, retired ? commit.firstPosition : undefined),
    timestampDefault: 0,
  };
}

/** Creates (or empties) the file a merge writes, open for reading and writing. */
function createFile(file: string): number {
  try {
    return fs.openSync(file, 'w+');
  } catch (error) {
    throw ioError(error, `cannot create ${file}`);
  }
}

/**
 * Sizes the merged file to its bytes (`end`, past a capacity it must not have) and writes its
 * header last, durably: until then the file has no valid header and is nobody's segment.
 */
async function finishMergedFile(
  kernels: Kernels,
  fd: number,
  file: string,
  end: number,
  capacityToAvoid: number,
  header: Omit<SegmentHeader, 'capacity'>,
): Promise<SegmentHeader> {
  let capacity = end;
  if (capacity === capacityToAvoid) {
    // Zeros after the `SegmentEnd` are what any segment holds after its last group.
    capacity += 4096;
  }
  const sized: SegmentHeader = { ...header, capacity };
  try {
    fs.ftruncateSync(fd, capacity);
  } catch (error) {
    throw ioError(error, `cannot size ${file}`);
  }
  await write(fd, encodeSegmentHeader(kernels, sized), 0, file);
  await kernels.writeDurable(fd, 0, []);
  return sized;
}

export async function writeMergedSegment(
  kernels: Kernels,
  history: History,
  feed: string,
  file: string,
  commits: readonly CommitRecord[],
  successor: { readonly base: number; readonly baseCommit: number },
  frameDataBytesMax: number,
  capacityToAvoid: number,
  signal?: AbortSignal,
  /** Key compaction: which of each commit's records stay, and the fingerprints retired. */
  select?: RunSelection,
  /** Called after each commit with the records (entries) of the commits read so far, for progress. */
  onRecords?: (records: number) => void,
): Promise<MergedSegment> {
  assert(commits.length > 0, 'a merge has commits');
  const base = commits[0].firstPosition;
  const baseCommit = commits[0].commit;
  const fd = createFile(file);
  try {
    let offset = segmentHeaderBytes;
    const merged: CommitRecord[] = [];
    // Payloads stored in the merged file so far: a merge of 2M records keeps 2M of them, so they
    // are columns, not objects (an object each, holding its run's bytes alive, made the
    // collector's pauses grow with the merge).
    const stored = new StoredPayloads(
      fd,
      file,
      base,
      commits.reduce((sum, commit) => sum + commit.entries, 0),
    );
    const lookup = (payload: Uint8Array, crc: number): PayloadLocation | undefined => stored.find(payload, crc);
    const builder = new GroupBuilder(frameDataBytesMax);
    let recordsRead = 0;
    /** Runs laid in the builder and not written yet: placed once the group's offset is final. */
    let laid: { commit: CommitRecord; runStart: number }[] = [];
    const flush = async () => {
      if (builder.isEmpty) return;
      // A view of the builder's buffer: nothing is laid in it until the group is written.
      const bytes = builder.finishInPlace(kernels);
      // Everything before it is on disk when the file is synced: a sealed segment's groups are
      // all confirmed, so damage in any of them is corruption, never a torn tail.
      sealGroup(kernels, bytes, offset, offset);
      await write(fd, bytes, offset, file);
      stored.written();
      for (const run of laid) merged.push(commitRecord(run.commit, base, offset + run.runStart));
      offset += bytes.length;
      laid = [];
      builder.clear();
    };
    for (const commit of commits) {
      signal?.throwIfAborted();
      const bytes = await history.runs.readRunBytes(commit);
      const read = await history.runs.decodeRunRecords(commit, feed, bytes);
      // Fingerprints an earlier compaction retired stay retired; the selection may add more.
      const earlier = await history.runs.readRetired(commit, bytes);
      const chosen = select ? await select(commit, read, earlier) : { kept: read, retired: earlier };
      const records = chosen.kept;
      // A run that keeps every record and retires nothing is laid out as it was written.
      const sparse = records.length !== commit.records || chosen.retired.length > 0;
      const run = await buildCommitRun(
        kernels,
        builder,
        await rewrittenRunInput(commit, records, sparse ? chosen.retired : undefined),
        lookup,
        frameDataBytesMax,
      );
      // The group's offset is the write offset now: the run's payloads are placed already.
      await stored.addAll(run.newPayloads, offset + run.runStart);
      assert(
        run.commit.commit === commit.commit && run.commit.lastPosition === commit.lastPosition,
        'a rewritten run keeps its commit and positions',
      );
      laid.push({ commit: run.commit, runStart: run.runStart });
      recordsRead += commit.entries;
      onRecords?.(recordsRead);
      if (builder.byteLength >= mergeGroupBytesTarget) await flush();
      if (sliceDue()) await yieldToEventLoop();
    }
    await flush();
    builder.logControl(FrameKind.SegmentEnd, (writer) => writer.u64(successor.base).u64(successor.baseCommit));
    await flush();
    // The merged segment is the same feed's as the first it replaces.
    const feedTag = history.segments.segments.find((segment) => segment.header.base === base)?.header.feedTag ?? 0;
    const header = await finishMergedFile(kernels, fd, file, offset, capacityToAvoid, {
      kind: SegmentKind.History,
      base,
      baseCommit,
      feedTag,
    });
    assert(merged.length === commits.length, 'every commit of the merged segments was written');
    return { file, header, end: offset, commits: merged };
  } catch (error) {
    fs.rmSync(file, { force: true });
    throw error;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * A rewritten run's records as `buildCommitRun` takes them, a slice at a time: a commit holds
 * up to 100,000. With `sparseFrom` (the commit's first position) each carries its seq.
 */
async function runInputOf(
  records: readonly PublishedRecord[],
  sparseFrom: number | undefined,
): Promise<CommitRunInput['records'][number][]> {
  const out = new Array<CommitRunInput['records'][number]>(records.length);
  for (let index = 0; index < records.length; index++) {
    const pause = yieldWhenDue(index);
    if (pause) await pause;
    const record = records[index];
    out[index] = {
      seq: sparseFrom === undefined ? undefined : record.position - sparseFrom + 1,
      payload: record.payload,
      timestamp: record.timestamp,
      fingerprint: record.fingerprint,
      key: record.key,
      version: record.version,
      tombstone: record.tombstone,
      type: record.type,
      tags: record.tags,
    };
  }
  return out;
}

/**
 * The payloads a merge has stored, by CRC-32C, to store each distinct payload once: offsets and
 * lengths in typed columns, candidates with the same CRC chained by index. A candidate is
 * compared byte for byte with the bytes it was stored from while its group is not written yet,
 * and read back from the merged file after that.
 */
class StoredPayloads {
  /**
   * An open hash table on the CRC (already a hash): each bucket's newest candidate, or -1. A
   * `Map` keyed by CRCs above 2^30 boxes every key, and rehashing millions of them at once
   * stalled the event loop; this one rehashes typed columns.
   */
  private buckets: Int32Array;
  private offsets: Float64Array;
  private lengths: Uint32Array;
  private crcs: Uint32Array;
  /** The next candidate in the same bucket, or -1. */
  private nextInBucket: Int32Array;
  private count = 0;
  /** Payloads of the group being laid out, not written to the file yet: from `firstUnwritten` on. */
  private unwritten: Uint8Array[] = [];
  private firstUnwritten = 0;
  private scratch = new Uint8Array(4096);

  constructor(
    private readonly fd: number,
    private readonly file: string,
    private readonly segment: number,
    /** Records the merge rewrites: at most this many payloads, so the table never grows. */
    expected: number,
  ) {
    const size = Math.max(1024, expected);
    this.buckets = new Int32Array(2 ** Math.ceil(Math.log2(size))).fill(-1);
    this.offsets = new Float64Array(size);
    this.lengths = new Uint32Array(size);
    this.crcs = new Uint32Array(size);
    this.nextInBucket = new Int32Array(size);
  }

  add(crc: number, offset: number, bytes: Uint8Array): void {
    if (this.count === this.offsets.length) this.grow();
    const at = this.count++;
    this.offsets[at] = offset;
    this.lengths[at] = bytes.length;
    this.crcs[at] = crc;
    this.link(at);
    this.unwritten.push(bytes);
    // At most one candidate per bucket on average keeps lookups short.
    if (this.count > this.buckets.length) this.rehash(this.buckets.length * 2);
  }

  /** Adds a run's new payloads, each at `runStart` plus its offset in the run, yielding now and then. */
  async addAll(payloads: readonly NewPayload[], runStart: number): Promise<void> {
    for (const [index, payload] of payloads.entries()) {
      this.add(payload.crc, runStart + payload.offset, payload.bytes);
      const pause = yieldWhenDue(index);
      if (pause) await pause;
    }
  }

  /** The laid-out group was written: its payloads are compared from the file from now on. */
  written(): void {
    this.unwritten = [];
    this.firstUnwritten = this.count;
  }

  find(payload: Uint8Array, crc: number): PayloadLocation | undefined {
    for (let at = this.buckets[crc & (this.buckets.length - 1)]; at >= 0; at = this.nextInBucket[at]) {
      if (this.crcs[at] !== crc || this.lengths[at] !== payload.length || !equalBytes(this.bytesOf(at), payload))
        continue;
      return { segment: this.segment, offset: this.offsets[at], length: this.lengths[at], crc: this.crcs[at] };
    }
    return undefined;
  }

  private link(at: number): void {
    const bucket = this.crcs[at] & (this.buckets.length - 1);
    this.nextInBucket[at] = this.buckets[bucket];
    this.buckets[bucket] = at;
  }

  private rehash(size: number): void {
    this.buckets = new Int32Array(size).fill(-1);
    for (let at = 0; at < this.count; at++) this.link(at);
  }

  private bytesOf(at: number): Uint8Array {
    if (at >= this.firstUnwritten) return this.unwritten[at - this.firstUnwritten];
    const length = this.lengths[at];
    if (this.scratch.length < length) this.scratch = new Uint8Array(length);
    const into = this.scratch.subarray(0, length);
    let read: number;
    try {
      read = fs.readSync(this.fd, into, 0, length, this.offsets[at]);
    } catch (error) {
      throw ioError(error, `cannot read ${this.file}`);
    }
    assert(read === length, 'a payload the merge wrote reads back whole');
    return into;
  }

  private grow(): void {
    const size = this.offsets.length * 2;
    const grown = <T extends Float64Array | Uint32Array | Int32Array>(from: T, make: (size: number) => T): T => {
      const to = make(size);
      to.set(from);
      return to;
    };
    this.offsets = grown(this.offsets, (n) => new Float64Array(n));
    this.lengths = grown(this.lengths, (n) => new Uint32Array(n));
    this.crcs = grown(this.crcs, (n) => new Uint32Array(n));
    this.nextInBucket = grown(this.nextInBucket, (n) => new Int32Array(n));
  }
}

async function write(fd: number, bytes: Uint8Array, offset: number, file: string): Promise<void> {
  try {
    let written = 0;
    while (written < bytes.length) {
      const { bytesWritten } = await new Promise<{ bytesWritten: number }>((resolve, reject) =>
        fs.write(fd, bytes, written, bytes.length - written, offset + written, (error, bytesWritten) =>
          error ? reject(error) : resolve({ bytesWritten }),
        ),
      );
      written += bytesWritten;
    }
  } catch (error) {
    throw ioError(error, `cannot write ${file}`);
  }
}
