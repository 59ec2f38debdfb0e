/**
 * Reads the commit runs of one feed's history: a run's manifest entries (`readRun`, what an index
 * replays and a verify checks), its published records with their payloads (`readRunRecords`,
 * what a scan and a merge read), its records as columns (`runColumns`, `stretchColumns`), and its
 * bytes alone, a stretch of consecutive runs at a time, with a key-compacted run's retired
 * fingerprints. Payloads that other runs stored are read through `HistoryBytes`
 * (`history-bytes.ts`), most from its cache. A derived file's rebuild reads a segment's runs
 * through this object too (`SegmentRunSource`).
 */
import { assert, StreamStackError } from '../errors.js';
import { yieldWhenDue } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { externalReadsInFlightMax } from '../limits.js';
import { ByteReader } from './codec.js';
import type { CommitRecord } from './commit-record.js';
import { type RetiredFingerprint, readManifest } from './commit-run.js';
import { FrameKind } from './frame-kinds.js';
import { scanFrames } from './framing.js';
import type { HistoryBytes } from './history-bytes.js';
import { type ManifestEntry, type PayloadLocation, type PublishedRecord, readPublishedRecord } from './records.js';
import type { RunBufferPool } from './run-buffers.js';
import { payloadElsewhere, type RunColumns } from './run-columns.js';
import {
  assertReadable,
  nextColumns,
  retiredOfRun,
  runColumnsDecoder,
  runsOfStretch,
  type SegmentRunSource,
  stretchColumnsDecoder,
  stretchesOf,
  withPlace,
} from './run-reads.js';
import type { SegmentFile } from './segment.js';
import type { SegmentSet } from './segment-set.js';

/** The records of one commit read back: their entries and the run's bytes they point into. */
export interface CommitRun {
  readonly commit: CommitRecord;
  readonly entries: ManifestEntry[];
  /** Where each entry starts in its segment (for the index's locator column). */
  readonly entryOffsets: readonly number[];
  /** The run's bytes (packs and manifests), starting at `commit.runStart`. */
  readonly bytes: Uint8Array;
}

export class HistoryRuns implements SegmentRunSource {
  constructor(
    private readonly kernels: Kernels,
    private readonly segments: SegmentSet,
    private readonly bytes: HistoryBytes,
  ) {}

  /** Reads a commit's run, verifies its frames, and decodes its manifests. */
  async readRun(commit: CommitRecord): Promise<CommitRun> {
    assertReadable(commit);
    try {
      return await this.readRunUnplaced(commit);
    } catch (error) {
      throw withPlace(error, this.segments.fileFor(commit.segment), commit.runStart);
    }
  }

  private async readRunUnplaced(commit: CommitRecord): Promise<CommitRun> {
    const segment = this.segments.byBase(commit.segment);
    return this.decodeRun(commit, segment, await this.bytes.read(segment, commit.runStart, commit.runBytes));
  }

  /**
   * Reads the runs of `commits` (in order, all readable) with one read per stretch of up to
   * `runsReadBytesMax` bytes of a segment: replaying a segment's many small commits costs a few
   * large reads instead of one read each.
   */
  async *readRuns(commits: readonly CommitRecord[]): AsyncGenerator<CommitRun> {
    for (const stretch of stretchesOf(commits)) {
      for (const commit of stretch) assertReadable(commit);
      const first = stretch[0];
      const last = stretch[stretch.length - 1];
      const segment = this.segments.byBase(first.segment);
      let bytes: Uint8Array;
      try {
        bytes = await this.bytes.read(segment, first.runStart, last.runStart + last.runBytes - first.runStart);
      } catch (error) {
        throw withPlace(error, segment.file, first.runStart);
      }
      for (const commit of stretch) {
        const from = commit.runStart - first.runStart;
        try {
          yield this.decodeRun(commit, segment, bytes.subarray(from, from + commit.runBytes));
        } catch (error) {
          throw withPlace(error, segment.file, commit.runStart);
        }
      }
    }
  }

  /** Verifies a run's frames (its bytes read from `segment`) and decodes its manifests. */
  private decodeRun(commit: CommitRecord, segment: SegmentFile, bytes: Uint8Array): CommitRun {
    const frames = scanFrames(this.kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${segment.file} is damaged`, {
        details: { file: segment.file, offset: commit.runStart + frameEnd },
      });
    }
    const entries: ManifestEntry[] = [];
    const entryOffsets: number[] = [];
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      const what = `manifest at ${segment.file}:${commit.runStart + frame.offset}`;
      readManifest(bytes, frame.dataStart, frame.dataEnd, commit.segment, commit.runStart, what, (entry, offset) => {
        entries.push(entry);
        entryOffsets.push(commit.runStart + offset);
      });
    }
    if (entries.length !== commit.entries) {
      throw new StreamStackError(
        'CORRUPT',
        `commit ${commit.commit} names ${commit.entries} records but its manifests hold ${entries.length}`,
        {
          details: { file: segment.file, offset: commit.runStart },
        },
      );
    }
    return { commit, entries, entryOffsets, bytes };
  }

  /**
   * Reads a commit's run straight into published records, payloads included: what a scan
   * reads, with one object per record and payloads as views of the run's bytes.
   */
  async readRunRecords(commit: CommitRecord, feed: string): Promise<PublishedRecord[]> {
    return this.decodeRunRecords(commit, feed, await this.readRunBytes(commit));
  }

  /**
   * The fingerprints a key-compacted run retired (its `retired` frames, see `commit-run.ts`),
   * from the run's bytes when the caller read them already. Empty for every other run.
   */
  async readRetired(commit: CommitRecord, runBytes?: Uint8Array): Promise<RetiredFingerprint[]> {
    if (commit.retired.length === 0) return [];
    assertReadable(commit);
    const segment = this.segments.byBase(commit.segment);
    return retiredOfRun(
      this.kernels,
      segment.file,
      commit,
      runBytes ?? (await this.bytes.read(segment, commit.runStart, commit.runBytes)),
    );
  }

  /**
   * A commit's run as bytes (packs and manifests), for `decodeRunRecords`. The bytes are also
   * held in the payload cache: later records of the segment that repeat a payload stored in
   * this run find it there. Read into a buffer of `pool` when given, and then not cached: the
   * buffer is read into again once its reader and consumer are done with it.
   */
  async readRunBytes(commit: CommitRecord, pool?: RunBufferPool): Promise<Uint8Array> {
    assertReadable(commit);
    const segment = this.segments.byBase(commit.segment);
    if (pool) return this.bytes.readInto(segment, pool.take(commit.runBytes), commit.runStart);
    const bytes = await this.bytes.read(segment, commit.runStart, commit.runBytes);
    if (commit.packs.length > 0) this.bytes.cache.add(segment, commit.runStart, bytes);
    return bytes;
  }

  /**
   * The runs of `commits` (consecutive, readable, of one segment, spanning at most
   * `runsReadBytesMax`) with one read: a scan of many small commits costs one read per stretch,
   * not one (a trip through the thread pool) per commit. The bytes run from the first run's
   * start to the last run's end, and are read into a buffer of `pool` when given (see
   * `readRunBytes`).
   */
  async readStretchBytes(commits: readonly CommitRecord[], pool?: RunBufferPool): Promise<Uint8Array> {
    for (const commit of commits) assertReadable(commit);
    const first = commits[0];
    const last = commits[commits.length - 1];
    assert(
      commits.every((commit) => commit.segment === first.segment),
      'a stretch of runs lies in one segment',
    );
    if (commits.length === 1) return this.readRunBytes(first, pool);
    const segment = this.segments.byBase(first.segment);
    const length = last.runStart + last.runBytes - first.runStart;
    const bytes = pool
      ? await this.bytes.readInto(segment, pool.take(length), first.runStart)
      : await this.bytes.read(segment, first.runStart, length);
    if (!pool) this.bytes.cache.add(segment, first.runStart, bytes);
    return bytes;
  }

  /** The runs of `commits` as `readStretchBytes` reads them, each a view of the stretch. */
  async readRunsBytes(commits: readonly CommitRecord[], pool?: RunBufferPool): Promise<Uint8Array[]> {
    return runsOfStretch(commits, await this.readStretchBytes(commits, pool));
  }

  /**
   * Each of `commits` (consecutive, readable) with its run's bytes, read a stretch at a time
   * (`readRunsBytes`): how a derived file's rebuild walks a segment.
   */
  async *runsInStretches(
    commits: readonly CommitRecord[],
  ): AsyncGenerator<{ commit: CommitRecord; bytes: Uint8Array }> {
    for (const stretch of stretchesOf(commits)) {
      const runs = await this.readRunsBytes(stretch);
      for (const [index, commit] of stretch.entries()) yield { commit, bytes: runs[index] };
    }
  }

  /** The file of the segment at `base`. */
  fileFor(base: number): string {
    return this.segments.fileFor(base);
  }

  /** Verifies a run's frames and decodes its records (see `readRunRecords`). */
  async decodeRunRecords(commit: CommitRecord, feed: string, bytes: Uint8Array): Promise<PublishedRecord[]> {
    assertReadable(commit);
    try {
      return await this.decodeRunRecordsUnplaced(commit, feed, bytes);
    } catch (error) {
      throw withPlace(error, this.segments.fileFor(commit.segment), commit.runStart);
    }
  }

  private async decodeRunRecordsUnplaced(
    commit: CommitRecord,
    feed: string,
    bytes: Uint8Array,
  ): Promise<PublishedRecord[]> {
    const segment = this.segments.byBase(commit.segment);
    const frames = scanFrames(this.kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${segment.file} is damaged`, {
        details: { file: segment.file, offset: commit.runStart + frameEnd },
      });
    }
    const records = new Array<PublishedRecord>(commit.entries);
    const sparse = commit.entries !== commit.records;
    const external: { index: number; location: PayloadLocation }[] = [];
    const run = {
      feed,
      commit: commit.commit,
      stream: commit.stream,
      segment: commit.segment,
      runStart: commit.runStart,
    };
    let count = 0;
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      const reader = new ByteReader(
        bytes,
        frame.dataStart + 1,
        frame.dataEnd,
        `manifest at ${segment.file}:${commit.runStart + frame.offset}`,
      );
      reader.u32();
      const entries = reader.u32();
      if (count + entries > commit.entries) break;
      for (let index = 0; index < entries; index++) {
        // A run of 100,000 records is decoded a slice at a time: reads and appends go on.
        const pause = yieldWhenDue(count);
        if (pause) await pause;
        records[count] = readPublishedRecord(
          reader,
          run,
          sparse ? undefined : commit.firstPosition + count,
          bytes,
          (location) => external.push({ index: count, location }),
          commit.firstPosition,
        );
        if (sparse)
          checkSparsePosition(
            commit,
            records[count].position,
            count === 0 ? commit.firstPosition - 1 : records[count - 1].position,
            segment.file,
          );
        count++;
      }
      reader.expectEnd();
    }
    if (count !== commit.entries) {
      throw new StreamStackError(
        'CORRUPT',
        `commit ${commit.commit} names ${commit.entries} records but its manifests hold ${count}`,
        {
          details: { file: segment.file, offset: commit.runStart },
        },
      );
    }
    for (const { index, location } of external) {
      // Most repeats find their payload in the cache: the await is only for the rest.
      const cached = this.bytes.cachedPayload(segment, location);
      records[index].payload = cached ?? (await this.bytes.readPayload(location));
    }
    return records;
  }

  /**
   * Verifies a run's frames and decodes its records into columns, at most `rowsMax` rows at a
   * time (see `RunColumns`). Payloads stored by other runs are read (most from the cache) and
   * gathered into each batch's `externalBytes`; the run's own bytes are never copied.
   */
  async *runColumns(
    commit: CommitRecord,
    bytes: Uint8Array,
    rowsMax: number,
    /** False when the payloads are not wanted (a key dictionary's build): stored elsewhere, they are not read. */
    payloads = true,
  ): AsyncGenerator<RunColumns> {
    assertReadable(commit);
    const segment = this.segments.byBase(commit.segment);
    const decoder = runColumnsDecoder(this.kernels, segment.file, commit, bytes);
    while (!decoder.done) {
      let columns = nextColumns(decoder, segment.file, commit.runStart, rowsMax);
      if (payloads && columns.external.length > 0) {
        try {
          columns = await this.gatherExternal(segment, columns);
        } catch (error) {
          throw withPlace(error, segment.file, commit.runStart);
        }
      }
      yield columns;
    }
  }

  /**
   * The runs of `commits` (a stretch: consecutive, readable, of one segment, read as `bytes`
   * from the first run's start) as columns of at most `rowsMax` rows each, whose batches span
   * commits (`RunColumns.rowRuns` names each row's). What a scan of many small commits reads:
   * one kernel call per batch, not one per commit.
   */
  async *stretchColumns(
    commits: readonly CommitRecord[],
    bytes: Uint8Array,
    /** Asked before each batch: a read with a limit takes no more rows than it still wants. */
    rowsMax: () => number,
  ): AsyncGenerator<RunColumns> {
    const segment = this.segments.byBase(commits[0].segment);
    const offset = commits[0].runStart;
    const decoder = stretchColumnsDecoder(this.kernels, segment.file, commits, bytes);
    while (!decoder.done) {
      let columns = nextColumns(decoder, segment.file, offset, rowsMax());
      if (columns.external.length > 0) {
        try {
          columns = await this.gatherExternal(segment, columns);
        } catch (error) {
          throw withPlace(error, segment.file, offset);
        }
      }
      yield columns;
    }
  }

  /** Reads the payloads other runs stored for `columns` into one buffer of their own. */
  private async gatherExternal(segment: SegmentFile, columns: RunColumns): Promise<RunColumns> {
    const payloads = new Array<Uint8Array>(columns.external.length);
    const missing: number[] = [];
    for (const [index, { location }] of columns.external.entries()) {
      const cached = this.bytes.cachedPayload(segment, location);
      if (cached) payloads[index] = cached;
      else missing.push(index);
    }
    // The payloads not cached are read side by side, a few at a time: each waits for a read (of
    // evicted history, a request), and a run's repeats lie all over its segment.
    for (let first = 0; first < missing.length; first += externalReadsInFlightMax) {
      const slice = missing.slice(first, first + externalReadsInFlightMax);
      const read = await Promise.all(slice.map((index) => this.bytes.readPayload(columns.external[index].location)));
      for (const [at, index] of slice.entries()) payloads[index] = read[at];
    }
    let total = 0;
    for (const payload of payloads) total += payload.length;
    const externalBytes = new Uint8Array(total);
    let at = 0;
    for (const [index, { row }] of columns.external.entries()) {
      externalBytes.set(payloads[index], at);
      columns.payloadStarts[row] = at;
      at += payloads[index].length;
      columns.payloadEnds[row] = at;
      columns.flags[row] |= payloadElsewhere;
    }
    return { ...columns, externalBytes };
  }
}

/**
 * A compacted run's entry is placed by its seq: positions ascend within the commit's span, or
 * the run is corrupt (checked after reading, as every place a read trusts).
 */
export function checkSparsePosition(commit: CommitRecord, position: number, previous: number, file: string): void {
  if (position > previous && position <= commit.lastPosition) return;
  throw new StreamStackError(
    'CORRUPT',
    `commit ${commit.commit} places a record at position ${position}, outside ${previous + 1}..${commit.lastPosition}`,
    {
      details: { file, offset: commit.runStart },
    },
  );
}
