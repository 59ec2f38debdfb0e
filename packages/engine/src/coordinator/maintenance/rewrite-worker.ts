/**
 * The worker thread of one rewrite (a merge, or a key compaction's group of segments): it opens
 * a read-only snapshot of the feed — its history, and for a key compaction its key and
 * fingerprint dictionaries with the active segment replayed — runs the rewrite over it
 * (`segment-rewrite.ts`), posts what it wrote and exits. The feed's own thread only switches the
 * files in. A snapshot sees the sealed segments a rewrite reads exactly as the feed does: they
 * never change, and the feed runs one rewrite or trim at a time, waiting for this one.
 */
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { errorMessageOf } from '../../errors.js';
import { loadKernels } from '../../kernels/index.js';
import { buildWorkerNiceness, progressIntervalMs } from '../../limits.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { History } from '../../storage/history-log.js';
import { DerivedIndexes } from '../opening/derived-indexes.js';
import type { KeyIndexes } from './compaction-selection.js';
import { type RewriteJob, rewriteSegments } from './segment-rewrite.js';

// Background work: the event loop's thread must win the CPU whenever the two compete (on Linux
// a priority set for pid 0 applies to the calling thread only).
if (process.platform === 'linux') {
  try {
    os.setPriority(0, buildWorkerNiceness);
  } catch {
    // Not permitted here: the rewrite competes at the process's priority.
  }
}

async function run(job: RewriteJob): Promise<void> {
  const kernels = loadKernels(job.kernels);
  const history = await History.open(kernels, new FeedLayout(job.feedDirectory).history, {}, true, true, job.floor);
  let indexes: KeyIndexes | undefined;
  try {
    if (job.keep) indexes = await DerivedIndexes.openKeyIndexes(kernels, job.feedDirectory, history);
    // Progress crosses to the feed's thread as messages, no more often than a display redraws.
    let posted = Number.NEGATIVE_INFINITY;
    const onRecords = (records: number) => {
      const now = performance.now();
      if (now - posted < progressIntervalMs) return;
      posted = now;
      parentPort!.postMessage({ progress: records });
    };
    const result = await rewriteSegments(
      kernels,
      job,
      { history, ...(indexes ? { indexes } : {}) },
      false,
      undefined,
      onRecords,
    );
    parentPort!.postMessage({ result });
  } finally {
    indexes?.keys.close();
    indexes?.fingerprints.close();
    history.close();
  }
}

run(workerData as RewriteJob).catch((error: unknown) =>
  parentPort!.postMessage({ error: errorMessageOf(error, 'a rewrite failed') }),
);
