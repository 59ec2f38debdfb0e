/**
 * Export files written on worker threads (`export-worker.ts`), so the event loop's thread reads
 * the next file's batches while earlier ones are converted, hashed, written and synced — up to
 * `exportFilesInFlight()` files at once, each on a worker of its own. The workers serve the
 * process; each holds it open only while a file is in flight on it. Where no worker can run (the
 * engine run from its TypeScript sources, as in tests, or a thread that failed), files are
 * written on the calling thread, one at a time: the bytes are the same either way.
 */
import os from 'node:os';
import { errorFromMessage } from '../../errors.js';
import { exportFilesInFlightMax, exportSpareBuffersKeepMs } from '../../limits.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import { WorkerClient } from '../worker-client.js';
import { type ExportFileWritten, type FileJob, writeExportFile } from './export-file.js';
import { type FileMessage, type FileReply, packBatches } from './export-transfer.js';

/**
 * Shared buffers that files' batches were copied into for the workers, kept for the next files:
 * at most one spare per worker, for `exportSpareBuffersKeepMs` after the last file. They are
 * shared with the worker, not moved to it: a buffer moved there and back was new external
 * memory to this thread's garbage collector every time it came back (a file's worth, about
 * 160 MB), so each file started a full collection here, and a full collection costs as much as
 * the process's heap holds, whatever the export's size.
 */
const spareBuffers: SharedArrayBuffer[] = [];

/** Drops the spare buffers once no file has been written for `exportSpareBuffersKeepMs`. */
let releaseSpares: NodeJS.Timeout | undefined;

/** How many spare buffers are kept now (for tests). */
export function spareExportBuffers(): number {
  return spareBuffers.length;
}

/** A buffer of at least `bytes`: a spare one that fits, or a new one with some room to spare. */
function takeBuffer(bytes: number): SharedArrayBuffer {
  clearTimeout(releaseSpares);
  const fits = spareBuffers.findIndex((buffer) => buffer.byteLength >= bytes);
  if (fits >= 0) return spareBuffers.splice(fits, 1)[0];
  spareBuffers.pop();
  return new SharedArrayBuffer(Math.ceil(bytes * 1.25));
}

/** Keeps `buffer` for a later file once its worker no longer reads it (it answered, or died). */
function giveBack(buffer: SharedArrayBuffer): void {
  if (spareBuffers.length < workers.length) spareBuffers.push(buffer);
  if (workers.some((worker) => worker.inFlight > 0)) return;
  clearTimeout(releaseSpares);
  releaseSpares = setTimeout(() => spareBuffers.splice(0), exportSpareBuffersKeepMs).unref();
}

const settle = (reply: FileReply) => {
  if (reply.error === undefined) return { value: reply.written };
  return { error: errorFromMessage(reply.error) };
};

/** The export workers, each with the files in flight on it. */
const workers = Array.from(
  { length: Math.max(1, Math.min(exportFilesInFlightMax, os.availableParallelism())) },
  () => ({
    client: new WorkerClient<FileReply>(new URL('./export-worker.js', import.meta.url), 'export worker', settle),
    inFlight: 0,
  }),
);

/** How many files an export may have in flight: one per worker, or one when files are written on the calling thread. */
export function exportFilesInFlight(): number {
  return workers[0].client.available ? workers.length : 1;
}

/** A file being written: `written` once it is whole; `released` once its batches are no longer read. */
export interface FileInFlight {
  readonly written: Promise<ExportFileWritten>;
  /** Settles (never rejects) once nothing reads the batches given: at once when they were copied for a worker. */
  readonly released: Promise<void>;
}

const ignore = () => undefined;

/** A file written on the calling thread: its batches are read until it is written. */
function onThisThread(
  job: FileJob,
  batches: readonly ColumnBatch[],
  signal: AbortSignal | undefined,
  onRows: ((rows: number) => void) | undefined,
): FileInFlight {
  const written = writeExportFile(job, batches, signal, onRows);
  return { written, released: written.then(ignore, ignore) };
}

/**
 * Writes one export file, off the event loop on the least busy worker when one can run. A file
 * on a worker is written whole even when `signal` aborts meanwhile; the export stops after it,
 * with no manifest.
 */
export function writeExportFileOffThread(
  job: FileJob,
  batches: readonly ColumnBatch[],
  signal?: AbortSignal,
  /** Called as rows are written, with the rows so far (from a worker, through its messages). */
  onRows?: (rows: number) => void,
): FileInFlight {
  const worker = workers.reduce((least, candidate) => (candidate.inFlight < least.inFlight ? candidate : least));
  if (!worker.client.available) return onThisThread(job, batches, signal, onRows);
  // The batches' buffers are copied into one shared with the worker: caches on this thread may
  // share the buffers themselves, and a moved buffer would be lost to this thread.
  const message: Omit<FileMessage, 'id'> = { job, ...packBatches(batches, takeBuffer) };
  const shared = message.buffers[0] as SharedArrayBuffer;
  const written = worker.client.run(message, [], onRows) as Promise<ExportFileWritten> | undefined;
  if (!written) {
    giveBack(shared);
    return onThisThread(job, batches, signal, onRows);
  }
  worker.inFlight++;
  // The worker answers once the file is written whole, or failed: it reads the buffer no more.
  return {
    written: written.finally(() => {
      worker.inFlight--;
      giveBack(shared);
    }),
    // The worker reads the copies: the batches themselves are free now.
    released: Promise.resolve(),
  };
}
