/**
 * The worker thread that builds sealed segments' derived files off the event loop: an index
 * segment's data (FST and posting lists) and a key dictionary's bytes. It runs the same
 * functions, with the same kernel set, as a build on the main thread would, so the bytes are
 * the same wherever they were built.
 */
import { parentPort } from 'node:worker_threads';
import { loadKernels } from '../kernels/index.js';
import { encodeKeyFile, type KeyWinner } from '../storage/key-file.js';
import { buildIndexData, unflattenIndexSource, type FlatIndexSource } from '../storage/index-segment.js';

export type BuildJob =
  | { readonly id: number; readonly kernels: 'native' | 'ts'; readonly kind: 'index'; readonly source: FlatIndexSource }
  | {
      readonly id: number;
      readonly kernels: 'native' | 'ts';
      readonly kind: 'keys';
      readonly base: number;
      readonly count: number;
      readonly keys: string[];
      readonly winners: KeyWinner[];
    };

parentPort?.on('message', (job: BuildJob) => {
  try {
    const kernels = loadKernels(job.kernels);
    if (job.kind === 'index') {
      const data = buildIndexData(kernels, unflattenIndexSource(job.source));
      parentPort!.postMessage({ id: job.id, result: data });
    } else {
      const bytes = encodeKeyFile(kernels, job.base, job.count, job.keys.map((key, at) => ({ key, winner: job.winners[at] })));
      parentPort!.postMessage({ id: job.id, result: bytes }, [bytes.buffer as ArrayBuffer]);
    }
  } catch (error) {
    parentPort!.postMessage({ id: job.id, error: error instanceof Error ? error.message : String(error) });
  }
});
