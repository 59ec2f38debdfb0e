/**
 * Export files written on a worker thread (`export-worker.ts`), so the event loop's thread reads
 * the next file's batches while the last is converted and written. One worker serves the
 * process; it holds the process open only while a file is in flight. Where the worker cannot
 * run (the engine run from its TypeScript sources, as in tests, or a thread that failed), files
 * are written on the calling thread: the bytes are the same either way.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { StreamStackError, type ErrorCode } from '../errors.js';
import type { ColumnBatch } from './column-batch.js';
import { writeExportFile, type FileJob } from './export-file.js';
import type { WrittenFile } from './export-sink.js';
import { packBatches, type FileMessage, type FileReply } from './export-transfer.js';

class ExportWorker {
  private worker: Worker | undefined;
  private unavailable = false;
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (written: WrittenFile) => void; reject: (error: Error) => void }>();

  /** Writes the file on the worker, or returns undefined when there is none to write it. */
  run(job: FileJob, batches: readonly ColumnBatch[]): Promise<WrittenFile> | undefined {
    const worker = this.start();
    if (!worker) return undefined;
    const id = this.nextId++;
    // The buffers are copied, not transferred: caches on this thread may share them.
    const message: FileMessage = { id, job, ...packBatches(batches) };
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage(message);
    });
  }

  private start(): Worker | undefined {
    if (this.worker || this.unavailable) return this.worker;
    const file = new URL('./export-worker.js', import.meta.url);
    if (!fs.existsSync(fileURLToPath(file))) {
      this.unavailable = true;
      return undefined;
    }
    const worker = new Worker(file);
    worker.unref();
    worker.on('message', (reply: FileReply) => {
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (this.waiting.size === 0) worker.unref();
      if (reply.error === undefined) waiter?.resolve(reply.written);
      else if (reply.error.code !== undefined) waiter?.reject(new StreamStackError(reply.error.code as ErrorCode, reply.error.message, { details: reply.error.details }));
      else waiter?.reject(new Error(reply.error.message));
    });
    const fail = (error: Error) => {
      // Files in flight fail (their export fails, leaving no manifest); later ones are written inline.
      this.unavailable = true;
      this.worker = undefined;
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      if (this.worker === worker) fail(new Error(`the export worker exited with code ${code}`));
    });
    this.worker = worker;
    return worker;
  }
}

const worker = new ExportWorker();

/**
 * Writes one export file, off the event loop when a worker can run. A file on the worker is
 * written whole even when `signal` aborts meanwhile; the export stops after it, with no manifest.
 */
export function writeExportFileOffThread(job: FileJob, batches: readonly ColumnBatch[], signal?: AbortSignal): Promise<WrittenFile> {
  return worker.run(job, batches) ?? writeExportFile(job, batches, signal);
}
