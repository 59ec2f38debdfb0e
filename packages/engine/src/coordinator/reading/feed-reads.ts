/**
 * The read side of one feed, as the API sees it: every read takes a fresh snapshot from the
 * writer's published state and runs in the query layer, without waiting for the writer. A read
 * that fails because the feed was deleted under it (a read-only reader beside the writer) fails
 * with `FEED_NOT_FOUND`.
 */
import { StreamStackError } from '../../errors.js';
import { checkExportOptions, type ExportOptions, writeExport } from '../../query/export/export.js';
import type { ExportManifest } from '../../query/export/export-manifest.js';
import { notHeld } from '../../query/indexes/key-index.js';
import type { ColumnBatch } from '../../query/reading/column-batch.js';
import { type CommitBatch, type FollowSource, follow, pollCommits } from '../../query/reading/follow.js';
import { getByKey, getByKeyNow } from '../../query/reading/get-by-key.js';
import {
  checkCursor,
  checkReadOptions,
  type ReadOptions,
  readBatches,
  readColumns,
  readEnd,
  readFilteredRecords,
  readRecords,
} from '../../query/reading/read.js';
import { readLineChunks, readsThroughPool, recordLineChunks } from '../../query/reading/read-lines.js';
import { corruptionError, readCommitRecords, type StoredRecord } from '../../query/reading/snapshot.js';
import { compactedError, trimmedError } from '../../storage/commit-list.js';
import { RunBufferPool } from '../../storage/run-buffers.js';
import type { FeedWriter } from '../writing/feed-writer.js';

export class FeedReads {
  constructor(private readonly writer: FeedWriter) {}

  /** The batch form of a feed read: one array per commit. */
  batches(options: ReadOptions): AsyncGenerator<StoredRecord[]> {
    // Options are checked now; the indexes are waited for when the read begins.
    return this.guarded(this.afterIndexing(readBatches(this.writer.snapshot(), options, this.writer.fingerprints)));
  }

  /** A feed read for `feed.read`: batches of columns, or arrays of records (`readRecords`). */
  records(options: ReadOptions): AsyncGenerator<ColumnBatch | StoredRecord[]> {
    return this.guarded(this.afterIndexing(readRecords(this.writer.snapshot(), options, this.writer.fingerprints)));
  }

  /** The columnar form of a feed read: batches of columns, spanning small commits. */
  columns(options: ReadOptions): AsyncGenerator<ColumnBatch> {
    return this.guarded(
      this.afterIndexing(readColumns(this.writer.snapshot(), options, this.writer.fingerprints, undefined, true)),
    );
  }

  /**
   * A read as NDJSON record lines, in chunks. A long read's runs are read into buffers used
   * again, for a batch's lines are written (copied) before the next batch is read.
   */
  lines(options: ReadOptions): AsyncGenerator<Uint8Array> {
    const snapshot = this.writer.snapshot();
    const { mode, query } = checkReadOptions(snapshot, options);
    // A filtered RAW read fetches its records one by one as objects, as `read` does.
    if (mode === 'raw' && query)
      return this.guarded(recordLineChunks(this.afterIndexing(readFilteredRecords(snapshot, options))));
    const runBuffers = readsThroughPool(snapshot, options) ? new RunBufferPool() : undefined;
    // Small commits' lines come from batches that span them (one kernel call each).
    const batches = readColumns(snapshot, options, this.writer.fingerprints, runBuffers, true);
    return this.guarded(readLineChunks(snapshot.kernels, this.afterIndexing(batches), runBuffers));
  }

  /**
   * Exports the range `(after, upTo]` of one snapshot: every option and cursor is checked
   * before anything is written, so a bad one leaves the disk as it was.
   */
  async export(options: ExportOptions): Promise<ExportManifest> {
    const { mode } = checkExportOptions(options);
    const snapshot = this.writer.snapshot();
    const after = checkCursor(snapshot, options.after);
    // The range is fixed now, so the manifest names the head the export read up to.
    const upTo = readEnd(snapshot, { after, upTo: options.upTo ?? snapshot.watermark.commit });
    // The export copies or writes each file's batches before it lets their run buffers go, so
    // the runs are read into buffers used again rather than new ones (see `RunBufferPool`).
    const runBuffers = new RunBufferPool();
    // Small commits' records come in batches that span them, as a scan reads them.
    const batches = readColumns(
      snapshot,
      { after, upTo, mode, ...(options.signal ? { signal: options.signal } : {}) },
      this.writer.fingerprints,
      runBuffers,
      true,
    );
    return this.settled(writeExport(snapshot, { after, upTo }, options, this.afterIndexing(batches), runBuffers));
  }

  /** `reads`, failing with `FEED_NOT_FOUND` instead once the feed was deleted. */
  private async *guarded<T>(reads: AsyncGenerator<T>): AsyncGenerator<T> {
    try {
      yield* reads;
    } catch (error) {
      throw this.writer.orDeleted(error);
    }
  }

  /** `read`, failing with `FEED_NOT_FOUND` instead once the feed was deleted. */
  private async settled<T>(read: Promise<T>): Promise<T> {
    try {
      return await read;
    } catch (error) {
      throw this.writer.orDeleted(error);
    }
  }

  /**
   * Runs `reads` once the indexes hold every commit its snapshot holds, inside the read gate:
   * no merge switches files under it (see `read-gate.ts`).
   */
  private async *afterIndexing<T>(reads: AsyncGenerator<T>): AsyncGenerator<T> {
    await this.writer.indexed();
    yield* this.writer.readGate.holdAll(reads);
  }

  /** The live winner of `key` as of commit `asOf` (default: the head), through the key index. */
  get(key: string, asOf?: number): Promise<StoredRecord | undefined> {
    const snapshot = this.writer.snapshot();
    const at = checkCursor(snapshot, asOf ?? snapshot.watermark.commit, 'asOf');
    // A warm lookup of local history answers in this turn (see `getByKeyNow`); the rest wait
    // for the indexes and hold the read gate.
    if (this.writer.isIndexed && this.writer.readGate.open) {
      const found = getByKeyNow(snapshot, this.writer.keys, key, at);
      if (found !== notHeld) return Promise.resolve(found);
    }
    return this.settled(
      this.writer.indexed().then(() => this.writer.readGate.hold(() => getByKey(snapshot, this.writer.keys, key, at))),
    );
  }

  /** The records of one published commit. */
  commit(commit: number): Promise<StoredRecord[]> {
    const snapshot = this.writer.snapshot();
    if (snapshot.headDamage && Number.isSafeInteger(commit) && commit > snapshot.watermark.commit) {
      throw corruptionError(snapshot.headDamage, `commit ${commit} lies in history that cannot be read`);
    }
    if (Number.isSafeInteger(commit) && commit >= 1 && commit < snapshot.commits.low)
      throw trimmedError(commit, snapshot.commits.low);
    // A commit at or before the horizon may have lost records to key compaction.
    if (Number.isSafeInteger(commit) && commit >= snapshot.commits.low && commit <= snapshot.commits.horizon) {
      throw compactedError('commit', commit, snapshot.commits.horizon);
    }
    if (!Number.isSafeInteger(commit) || commit < 1 || commit > snapshot.watermark.commit) {
      throw new StreamStackError(
        'CURSOR_OUT_OF_RANGE',
        `commit ${commit} does not exist (the head is ${snapshot.watermark.commit})`,
        {
          details: { commit, head: snapshot.watermark.commit },
        },
      );
    }
    return this.settled(
      this.writer.readGate.hold(async () => readCommitRecords(snapshot, snapshot.commits.at(commit))),
    );
  }

  /** Catch-up then live tail from `after`, until `signal` aborts. */
  follow(
    after: number | undefined,
    signal?: AbortSignal,
    source: FollowSource = this.writer,
  ): AsyncGenerator<CommitBatch> {
    return this.guarded(follow(source, after, signal));
  }

  /** Whole commits after `after` up to the head, at most `maxRecords` (but at least one commit). */
  poll(after: number, maxRecords: number): Promise<{ batches: CommitBatch[]; cursor: number }> {
    const snapshot = this.writer.snapshot();
    return this.settled(this.writer.readGate.hold(() => pollCommits(snapshot, after, maxRecords)));
  }

  /** How far `cursor` is behind the head: commits, records, and bytes of their runs. */
  lag(cursor: number): { commits: number; records: number; bytes: number } {
    const snapshot = this.writer.snapshot();
    // A cursor a forced trim left behind counts from the low mark: what it missed is gone.
    const at = checkCursor(snapshot, Math.max(cursor, snapshot.commits.low - 1), 'cursor');
    const cursorPosition = snapshot.commits.positionAfter(at);
    return {
      commits: snapshot.watermark.commit - at,
      records: snapshot.watermark.position - cursorPosition,
      bytes: snapshot.commits.runBytes(at + 1, snapshot.watermark.commit),
    };
  }
}
