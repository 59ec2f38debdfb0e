/**
 * Export (docs/history.md, Export): a range of a feed's history, read as column batches in RAW,
 * dedup or latest mode, written to a directory as NDJSON, Arrow IPC or Parquet files, then a
 * manifest naming them. Files are cut at batch boundaries once they pass
 * `exportFileBytesTarget`; every file is synced, then the directory, and only then is the
 * manifest written (temporary name, sync, rename), so a manifest never names a file that is not
 * whole. Nothing in the files or the manifest depends on the clock or the machine: the same
 * range and options give the same bytes.
 */
import type fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import { type ExportOptions, type ExportProgress, isReadMode, readModesInWords } from '@streamstack/protocol';
import { ioError, StreamStackError } from '../../errors.js';
import { exportFileBytesTarget } from '../../limits.js';
import { checkOnProgress, ProgressReporter } from '../../progress.js';
import type { RunBufferPool } from '../../storage/run-buffers.js';
import { syncDirectory, writeFileDurably } from '../../storage/segment.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import type { ReadMode } from '../reading/read.js';
import type { Snapshot } from '../reading/snapshot.js';
import { batchBytes } from './export-file.js';
import {
  type ExportedFile,
  type ExportFormat,
  type ExportManifest,
  manifestBytes,
  manifestName,
  manifestVersion,
  streamstackVersion,
} from './export-manifest.js';
import { exportFilesInFlight, writeExportFileOffThread } from './export-offthread.js';

export type { ExportOptions, ExportProgress };

const formats: readonly ExportFormat[] = ['ndjson', 'arrow', 'parquet'];
const extensions: Record<ExportFormat, string> = { ndjson: 'ndjson', arrow: 'arrow', parquet: 'parquet' };
/** The files an unfinished export may have left: they are replaced by the next one. */
const ownFile = /^part-\d{6}\.(ndjson|arrow|parquet)$|^manifest\.json\.tmp$/;

/** Checks the options that need no snapshot: `INVALID_ARGUMENT` before any I/O. */
export function checkExportOptions(options: ExportOptions): { format: ExportFormat; mode: ReadMode; to: string } {
  const { format, to } = options;
  const mode = options.mode ?? 'raw';
  if (!formats.includes(format)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `format must be ndjson, arrow or parquet, not ${JSON.stringify(format)}`,
      { details: { format } },
    );
  }
  if (!isReadMode(mode)) {
    throw new StreamStackError('INVALID_ARGUMENT', `mode must be ${readModesInWords}, not ${JSON.stringify(mode)}`, {
      details: { mode },
    });
  }
  if (typeof to !== 'string' || to.length === 0) {
    throw new StreamStackError('INVALID_ARGUMENT', 'to must name the directory the export is written to');
  }
  checkOnProgress(options.onProgress);
  return { format, mode, to };
}

/**
 * Makes `to` ready for an export: created when missing, refused when it is not a directory or
 * already holds a finished export (its manifest), and cleared of files an unfinished one left.
 */
async function prepareDirectory(to: string): Promise<void> {
  let stat: fs.Stats | undefined;
  try {
    stat = await fsp.stat(to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError(error, `checking export directory ${to}`);
  }
  if (stat && !stat.isDirectory()) {
    throw new StreamStackError('INVALID_ARGUMENT', `to ${to} is not a directory`, { details: { to } });
  }
  if (stat) {
    const names = await fsp.readdir(to);
    if (names.includes(manifestName)) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `${to} already holds an export (${manifestName}); export to a new directory`,
        { details: { to } },
      );
    }
    for (const name of names.filter((candidate) => ownFile.test(candidate))) await fsp.rm(path.join(to, name));
    return;
  }
  try {
    await fsp.mkdir(to, { recursive: true });
  } catch (error) {
    throw ioError(error, `creating export directory ${to}`);
  }
  // The new directory's entry in its parent is made durable like any file's.
  await syncDirectory(path.dirname(path.resolve(to)));
}

/**
 * Writes the batches of the range `(after, upTo]` of `snapshot`'s feed to `options.to`, then the
 * manifest, and returns it. `batches` is the read of that range in the export's mode, already
 * checked (a bad cursor failed before this was called, with nothing written).
 */
export async function writeExport(
  snapshot: Snapshot,
  range: { after: number; upTo: number },
  options: ExportOptions,
  batches: AsyncIterable<ColumnBatch>,
  /** The buffers `batches` were read into, if any: given back as each file's batches are released. */
  runBuffers?: RunBufferPool,
): Promise<ExportManifest> {
  const { format, mode, to } = checkExportOptions(options);
  await prepareDirectory(to);
  const createdBy = `streamstack ${streamstackVersion()}`;
  const files: ExportedFile[] = [];
  const progress = exportProgress(snapshot, range, options);
  let records = 0;
  let part: ColumnBatch[] = [];
  let partBytes = 0;
  let started = 0;
  // Files being written (on export workers) while the next one's batches are read, oldest
  // first, each listed in order once it is done.
  const filesInFlightMax = exportFilesInFlight();
  const writing: Promise<ExportedFile>[] = [];
  const finishOldest = async () => files.push(await writing.shift()!);
  const flush = async () => {
    if (part.length === 0) return;
    const batchesOfFile = part;
    part = [];
    partBytes = 0;
    let count = 0;
    for (const batch of batchesOfFile) count += batch.length;
    const number = started++;
    const name = `part-${String(number).padStart(6, '0')}.${extensions[format]}`;
    const entry = {
      name,
      records: count,
      firstCommit: batchesOfFile[0].commit,
      lastCommit: lastCommitOf(batchesOfFile.at(-1)!),
    };
    // At most `filesInFlightMax` files are written at once, so at most one more file's records
    // are held: the one being read.
    while (writing.length >= filesInFlightMax) await finishOldest();
    progress.fileStarted(number, count, entry.lastCommit);
    const job = { kernels: snapshot.kernels.name, file: path.join(to, name), format, createdBy };
    const onRows = (rows: number) => progress.fileRows(number, rows);
    const { written: writtenFile, released } = writeExportFileOffThread(job, batchesOfFile, options.signal, onRows);
    if (runBuffers) {
      // Every batch read so far is this file's or an earlier one's, so the run buffers the reader
      // is done with are free once this file's batches are released (earlier files' are by then).
      const retired = runBuffers.retire();
      void released.then(() => runBuffers.recycle(retired));
    }
    const written = writtenFile.then((file) => {
      progress.fileWritten(number);
      return {
        name: entry.name,
        records: entry.records,
        bytes: file.bytes,
        sha256: file.sha256,
        firstCommit: entry.firstCommit,
        lastCommit: entry.lastCommit,
        payloadText: file.payloadText,
      };
    });
    // A failure is seen where a later file, or the end, waits for this one.
    written.catch(() => undefined);
    writing.push(written);
  };
  try {
    for await (const batch of batches) {
      part.push(batch);
      partBytes += batchBytes(batch);
      records += batch.length;
      progress.read(lastCommitOf(batch), records);
      if (partBytes >= exportFileBytesTarget) await flush();
    }
    await flush();
    while (writing.length > 0) await finishOldest();
  } finally {
    // Whatever failed, no file is still being written when the export returns.
    await Promise.allSettled(writing);
  }
  options.signal?.throwIfAborted();
  await syncDirectory(to);
  const manifest = await writeManifest(snapshot, to, range, { mode, format, records, files });
  progress.finish(records);
  return manifest;
}

/** Writes the manifest of a finished export, durably, once every file is on disk. */
async function writeManifest(
  snapshot: Snapshot,
  to: string,
  range: { after: number; upTo: number },
  written: Pick<ExportManifest, 'mode' | 'format' | 'records' | 'files'>,
): Promise<ExportManifest> {
  // Loaded here, not at the top: `export-arrow.ts` imports `apache-arrow`, whose load costs a
  // quarter of a second, and every process that imports the engine would pay it.
  const { describeSchema } = await import('./export-arrow.js');
  const manifest: ExportManifest = {
    manifestVersion,
    streamstackVersion: streamstackVersion(),
    feed: snapshot.feed,
    mode: written.mode,
    format: written.format,
    after: range.after,
    upTo: range.upTo,
    records: written.records,
    // The same columns for every file of the format, whatever its payloads.
    columns: describeSchema(written.format),
    files: written.files,
  };
  await writeFileDurably(snapshot.kernels, path.join(to, manifestName), manifestBytes(manifest));
  return manifest;
}

/**
 * The progress of one export (see `ExportProgress`): positions read, and positions written —
 * every file's up to the first not written yet (files may finish out of order), and of that
 * one, the share of its rows its writer reported.
 */
function exportProgress(snapshot: Snapshot, range: { after: number; upTo: number }, options: ExportOptions) {
  const { commits } = snapshot;
  /** The last position of commit `commit` (of the one before the range's first, for `after`). */
  const lastPosition = (commit: number, fallback: number): number => {
    if (commit < commits.low) return commits.lowPosition - 1;
    try {
      return commits.at(commit).lastPosition;
    } catch {
      // A commit corruption made unreadable: progress stays where it was.
      return fallback;
    }
  };
  const start = lastPosition(range.after, 0);
  const positions = Math.max(0, lastPosition(range.upTo, start) - start);
  const reporter = new ProgressReporter(
    checkOnProgress<ExportProgress>(options.onProgress),
    'records',
    positions,
    { after: range.after, upTo: range.upTo, commit: range.after, records: 0 },
    0,
  );
  let read = 0;
  /** Each file by number: where its positions end (from the range's start), its rows, and how many are written. */
  const files: { end: number; count: number; rows: number; whole: boolean }[] = [];
  const written = () => {
    let whole = 0;
    for (const file of files) {
      if (!file.whole) return whole + (file.count > 0 ? Math.floor(((file.end - whole) * file.rows) / file.count) : 0);
      whole = file.end;
    }
    return whole;
  };
  const report = () => reporter.advance(Math.floor((read + written()) / 2));
  return {
    read(commit: number, records: number) {
      read = Math.max(read, lastPosition(commit, start + read) - start);
      reporter.advance(Math.floor((read + written()) / 2), { commit, records });
    },
    fileStarted(file: number, count: number, lastCommit: number) {
      files[file] = {
        end: Math.max(files[file - 1]?.end ?? 0, lastPosition(lastCommit, start) - start),
        count,
        rows: 0,
        whole: false,
      };
    },
    fileRows(file: number, rows: number) {
      files[file].rows = Math.min(files[file].count, Math.max(files[file].rows, rows));
      report();
    },
    fileWritten(file: number) {
      files[file].whole = true;
      files[file].rows = files[file].count;
      report();
    },
    finish(records: number) {
      reporter.finish({ commit: range.upTo, records });
    },
  };
}

/** The commit of a batch's last record (batches may span commits). */
function lastCommitOf(batch: ColumnBatch): number {
  return batch.length === 0 ? batch.commit : batch.commitOf(batch.length - 1);
}
