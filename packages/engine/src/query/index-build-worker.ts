/**
 * The worker thread that builds sealed segments' derived files off the event loop: an index
 * segment's data (FST and posting lists) and a key or fingerprint dictionary's bytes (merged
 * with the dictionaries before it). It runs the same
 * functions, with the same kernel set, as a build on the main thread would, so the bytes are
 * the same wherever they were built.
 */
import { parentPort } from 'node:worker_threads';
import { loadKernels } from '../kernels/index.js';
import os from 'node:os';
import { buildWorkerNiceness, keyCacheBytesMax } from '../limits.js';
import type { TermOrder } from '../storage/key-file.js';
import { utf8DecodeRange } from '../storage/codec.js';
import { buildIndexData, unflattenIndexSource, type FlatIndexSource } from '../storage/index-segment.js';
import { buildKeyFileBytes, DictionarySections, type DictionaryFile } from './key-merge.js';

export type BuildJob =
  | { readonly id: number; readonly kernels: 'native' | 'ts'; readonly kind: 'index'; readonly source: FlatIndexSource }
  | {
      readonly id: number;
      readonly kernels: 'native' | 'ts';
      readonly kind: 'keys';
      readonly order: TermOrder;
      readonly base: number;
      readonly count: number;
      /** The terms, UTF-8: term i is `termBytes[termEnds[i - 1], termEnds[i])`. */
      readonly termBytes: Uint8Array;
      readonly termEnds: Uint32Array;
      /** Each term's winner in the segment, as columns. */
      readonly positions: Float64Array;
      readonly versions: Float64Array;
      readonly locators: Uint32Array;
      readonly tombstones: Uint8Array;
      /** The dictionaries of the segments before, newest first. */
      readonly earlier: DictionaryFile[];
    };

// Builds are background work: the event loop's thread must win the CPU whenever the two
// compete, or appends wait behind a build on a machine of few cores. On Linux a priority set for
// pid 0 applies to the calling thread only, so this lowers the worker, not the process.
if (process.platform === 'linux') {
  try {
    os.setPriority(0, buildWorkerNiceness);
  } catch {
    // Not permitted here: builds then compete at the process's priority.
  }
}

function termsOf(bytes: Uint8Array, ends: Uint32Array): string[] {
  const terms = new Array<string>(ends.length);
  for (let index = 0; index < ends.length; index++) {
    const term = utf8DecodeRange(bytes, index === 0 ? 0 : ends[index - 1], ends[index]);
    if (term === undefined) throw new Error(`term ${index} of a dictionary build is not UTF-8`);
    terms[index] = term;
  }
  return terms;
}

/** Earlier dictionaries' filters and FSTs, kept between builds (each build reads them all). */
const sections = new Map<string, DictionarySections>();

parentPort?.on('message', (job: BuildJob) => {
  try {
    const kernels = loadKernels(job.kernels);
    if (job.kind === 'index') {
      const data = buildIndexData(kernels, unflattenIndexSource(job.source));
      parentPort!.postMessage({ id: job.id, result: data });
    } else {
      const terms = termsOf(job.termBytes, job.termEnds);
      let held = sections.get(job.kernels);
      if (!held) sections.set(job.kernels, (held = new DictionarySections(kernels, keyCacheBytesMax)));
      const bytes = buildKeyFileBytes(kernels, job.order, job.base, job.count, terms, job, job.earlier, held);
      parentPort!.postMessage({ id: job.id, result: bytes }, [bytes.buffer as ArrayBuffer]);
    }
  } catch (error) {
    parentPort!.postMessage({ id: job.id, error: error instanceof Error ? error.message : String(error) });
  }
});
