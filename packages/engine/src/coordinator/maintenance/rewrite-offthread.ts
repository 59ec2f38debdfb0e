/**
 * Runs a rewrite (`segment-rewrite.ts`) on a worker thread of its own, started for the job and
 * gone when it is done: a rewrite decodes, selects and lays out millions of records, and its
 * garbage and its pauses stay on that thread's heap, off the event loop. Aborting the job
 * terminates the thread. Where the worker cannot run — the engine run from its TypeScript
 * sources, as in tests — the rewrite runs on the calling thread over the feed's own history: the
 * bytes are the same either way.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { type ErrorMessage, errorFromMessage, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import {
  type RewriteJob,
  type RewriteResult,
  type RewriteSource,
  removeRewriteFiles,
  rewriteFiles,
  rewriteSegments,
} from './segment-rewrite.js';

const workerFile = new URL('./rewrite-worker.js', import.meta.url);

/** Whether rewrites run on a worker thread here (the engine runs from its build). */
export function rewritesOffThread(): boolean {
  return fs.existsSync(fileURLToPath(workerFile));
}

/**
 * Runs `job` on a worker thread, or on this one over `inline()` when no worker can run. Rejects
 * with the rewrite's own error (its files removed), or with `signal`'s reason once it aborts.
 */
export async function runRewrite(
  kernels: Kernels,
  job: RewriteJob,
  inline: () => RewriteSource,
  signal?: AbortSignal,
  /** Called as commits are rewritten, with their records so far (on a worker, through its messages). */
  onRecords?: (records: number) => void,
  /**
   * Runs the rewrite on this thread even where a worker could: a history with segments evicted
   * to object storage is read through the feed's own store, which a worker opening the folder by
   * path would not have (it would find the evicted segments' files cut to their headers).
   */
  inlineOnly = false,
): Promise<RewriteResult> {
  signal?.throwIfAborted();
  if (inlineOnly || !rewritesOffThread()) return rewriteSegments(kernels, job, inline(), true, signal, onRecords);
  try {
    return await new Promise<RewriteResult>((resolve, reject) => {
      const worker = new Worker(workerFile, { workerData: job });
      let settled = false;
      const settle = (outcome: () => void) => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', abort);
        outcome();
      };
      const abort = () => {
        settle(() => reject(signal!.reason));
        void worker.terminate();
      };
      signal?.addEventListener('abort', abort, { once: true });
      worker.on('message', (reply: { result?: RewriteResult; error?: ErrorMessage; progress?: number }) => {
        // A progress message is not an answer: the worker goes on.
        if (reply.progress !== undefined) {
          if (!settled) onRecords?.(reply.progress);
          return;
        }
        settle(() => (reply.error ? reject(errorFromMessage(reply.error)) : resolve(reply.result!)));
      });
      worker.on('error', (error) =>
        settle(() =>
          reject(new StreamStackError('INTERNAL', `the rewrite worker failed: ${error.message}`, { cause: error })),
        ),
      );
      worker.on('exit', (code) =>
        settle(() =>
          reject(new StreamStackError('INTERNAL', `the rewrite worker exited with code ${code} before it answered`)),
        ),
      );
    });
  } catch (error) {
    // A worker that was terminated or died may have left its files half-written.
    await removeRewriteFiles(rewriteFiles(job.feedDirectory, job.replaced[0]));
    throw error;
  }
}
