/**
 * Export files written on a worker thread (`export-worker.ts`), so the event loop's thread reads
 * the next file's batches while the last is converted and written. One worker serves the
 * process; it holds the process open only while a file is in flight. Where the worker cannot
 * run (the engine run from its TypeScript sources, as in tests, or a thread that failed), files
 * are written on the calling thread: the bytes are the same either way.
 */
import { StreamStackError, type ErrorCode } from '../errors.js';
import type { ColumnBatch } from './column-batch.js';
import { writeExportFile, type FileJob } from './export-file.js';
import type { WrittenFile } from './export-sink.js';
import { packBatches, type FileMessage, type FileReply } from './export-transfer.js';
import { WorkerClient } from './worker-client.js';

const worker = new WorkerClient<FileReply>(new URL('./export-worker.js', import.meta.url), 'export worker', (reply) => {
  if (reply.error === undefined) return { value: reply.written };
  if (reply.error.code !== undefined) return { error: new StreamStackError(reply.error.code as ErrorCode, reply.error.message, { details: reply.error.details }) };
  return { error: new Error(reply.error.message) };
});

/**
 * Writes one export file, off the event loop when a worker can run. A file on the worker is
 * written whole even when `signal` aborts meanwhile; the export stops after it, with no manifest.
 */
export function writeExportFileOffThread(job: FileJob, batches: readonly ColumnBatch[], signal?: AbortSignal): Promise<WrittenFile> {
  // The buffers are copied, not transferred: caches on this thread may share them.
  const message: Omit<FileMessage, 'id'> = { job, ...packBatches(batches) };
  return (worker.run(message) as Promise<WrittenFile> | undefined) ?? writeExportFile(job, batches, signal);
}
