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
import fsp from 'node:fs/promises';
import { assert, ioError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { yieldToEventLoop } from '../event-loop.js';
import { eventLoopSliceRecords, mergeGroupBytesTarget, segmentHeaderBytes } from '../limits.js';
import { buildCommitRun, commitRecord, equalBytes, type CommitRecord, type RetiredFingerprint } from './commit-run.js';
import { FrameKind } from './frame-kinds.js';
import { GroupBuilder, sealGroup } from './groups.js';
import type { History } from './history-log.js';
import type { PayloadLocation, PublishedRecord } from './records.js';
import { encodeSegmentHeader, SegmentKind, type SegmentHeader } from './segment.js';

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
): Promise<MergedSegment> {
  assert(commits.length > 0, 'a merge has commits');
  const base = commits[0].firstPosition;
  const baseCommit = commits[0].commit;
  let fd: number;
  try {
    fd = fs.openSync(file, 'w+');
  } catch (error) {
    throw ioError(error, `cannot create ${file}`);
  }
  try {
    let offset = segmentHeaderBytes;
    const merged: CommitRecord[] = [];
    /** Payloads stored in the merged file so far, by CRC-32C, with their bytes to compare. */
    const stored = new Map<number, { location: PayloadLocation; bytes: Uint8Array }[]>();
    const lookup = (payload: Uint8Array, crc: number): PayloadLocation | undefined =>
      stored.get(crc)?.find((candidate) => equalBytes(candidate.bytes, payload))?.location;
    const builder = new GroupBuilder(frameDataBytesMax);
    /** Runs laid in the builder and not written yet: placed once the group's offset is final. */
    let laid: { commit: CommitRecord; runStart: number }[] = [];
    const flush = async () => {
      if (builder.isEmpty) return;
      const bytes = builder.finish(kernels);
      // Everything before it is on disk when the file is synced: a sealed segment's groups are
      // all confirmed, so damage in any of them is corruption, never a torn tail.
      sealGroup(kernels, bytes, offset, offset);
      await write(fd, bytes, offset, file);
      for (const run of laid) merged.push(commitRecord(run.commit, base, offset + run.runStart));
      offset += bytes.length;
      laid = [];
      builder.clear();
    };
    let sinceYield = 0;
    for (const commit of commits) {
      signal?.throwIfAborted();
      const bytes = await history.readRunBytes(commit);
      const read = await history.decodeRunRecords(commit, feed, bytes);
      // Fingerprints an earlier compaction retired stay retired; the selection may add more.
      const earlier = await history.readRetired(commit, bytes);
      const chosen = select ? await select(commit, read, earlier) : { kept: read, retired: earlier };
      const records = chosen.kept;
      // A run that keeps every record and retires nothing is laid out as it was written.
      const sparse = records.length !== commit.records || chosen.retired.length > 0;
      const run = await buildCommitRun(
        kernels,
        builder,
        {
          commit: commit.commit,
          stream: commit.stream,
          parent: commit.parent,
          firstPosition: commit.firstPosition,
          openedAt: commit.openedAt,
          sealedAt: commit.sealedAt,
          ...(commit.message === undefined ? {} : { message: commit.message }),
          epoch: commit.epoch,
          oneShot: commit.oneShot,
          ...(sparse ? { span: commit.records, retired: chosen.retired } : {}),
          records: records.map((record) => ({
            ...(sparse ? { seq: record.position - commit.firstPosition + 1 } : {}),
            payload: record.payload,
            timestamp: record.timestamp,
            fingerprint: record.fingerprint,
            ...(record.key === undefined ? {} : { key: record.key }),
            ...(record.version === undefined ? {} : { version: record.version }),
            tombstone: record.tombstone,
            ...(record.type === undefined ? {} : { type: record.type }),
            tags: record.tags,
          })),
          timestampDefault: 0,
        },
        lookup,
        frameDataBytesMax,
      );
      // The group's offset is the write offset now: the run's payloads are placed already.
      for (const payload of run.newPayloads) {
        const location = { segment: base, offset: offset + run.runStart + payload.offset, length: payload.length, crc: payload.crc };
        const same = stored.get(payload.crc);
        if (same) same.push({ location, bytes: payload.bytes });
        else stored.set(payload.crc, [{ location, bytes: payload.bytes }]);
      }
      assert(run.commit.commit === commit.commit && run.commit.lastPosition === commit.lastPosition, 'a rewritten run keeps its commit and positions');
      laid.push({ commit: run.commit, runStart: run.runStart });
      if (builder.byteLength >= mergeGroupBytesTarget) await flush();
      sinceYield += records.length;
      if (sinceYield >= eventLoopSliceRecords) {
        sinceYield = 0;
        await yieldToEventLoop();
      }
    }
    await flush();
    builder.logControl(FrameKind.SegmentEnd, (writer) => writer.u64(successor.base).u64(successor.baseCommit));
    await flush();
    let capacity = offset;
    if (capacity === capacityToAvoid) {
      // Zeros after the `SegmentEnd` are what any segment holds after its last group.
      capacity += 4096;
    }
    const header: SegmentHeader = { kind: SegmentKind.History, base, baseCommit, capacity };
    try {
      fs.ftruncateSync(fd, capacity);
    } catch (error) {
      throw ioError(error, `cannot size ${file}`);
    }
    await write(fd, encodeSegmentHeader(kernels, header), 0, file);
    await kernels.writeDurable(fd, 0, []);
    assert(merged.length === commits.length, 'every commit of the merged segments was written');
    return { file, header, end: offset, commits: merged };
  } catch (error) {
    fs.rmSync(file, { force: true });
    throw error;
  } finally {
    fs.closeSync(fd);
  }
}

async function write(fd: number, bytes: Uint8Array, offset: number, file: string): Promise<void> {
  try {
    let written = 0;
    while (written < bytes.length) {
      const { bytesWritten } = await new Promise<{ bytesWritten: number }>((resolve, reject) =>
        fs.write(fd, bytes, written, bytes.length - written, offset + written, (error, bytesWritten) => (error ? reject(error) : resolve({ bytesWritten }))),
      );
      written += bytesWritten;
    }
  } catch (error) {
    throw ioError(error, `cannot write ${file}`);
  }
}

/** Removes a merge's temporary file (after a failure, or when the switch was put off). */
export async function removeMergedFile(file: string): Promise<void> {
  await fsp.rm(file, { force: true });
}
