/**
 * The worker thread that builds sealed segments' derived files off the event loop: an index
 * segment's data (FST and posting lists) and a key or fingerprint dictionary's bytes (merged
 * with the dictionaries before it), from what the caller gathered or — a rebuild after a trim or
 * of a missing file — read from the segment itself (its commits from its summary). It runs the
 * same functions, with the same kernel set, as a build on the main thread would, so the bytes are
 * the same wherever they were built.
 */

import os from 'node:os';
import path from 'node:path';
import { parentPort } from 'node:worker_threads';
import { errorMessageOf, StreamStackError } from '../../errors.js';
import { loadKernels } from '../../kernels/index.js';
import type { Kernels } from '../../kernels/kernels.js';
import { buildWorkerNiceness, keyCacheBytesMax } from '../../limits.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { buildIndexData, type FlatIndexSource, unflattenIndexSource } from '../../storage/index-segment.js';
import type { TermOrder } from '../../storage/key-file.js';
import { SegmentRuns } from '../../storage/run-reads.js';
import { SegmentFile } from '../../storage/segment.js';
import { LocalSegmentStore } from '../../storage/segment-store.js';
import { checkSummaryAgainstSegment, readSummary, readSummaryHead } from '../../storage/segment-summary.js';
import { buildKeyFileBytes, type DictionaryFile, DictionarySections } from './key-merge.js';
import { indexTailOf } from './segment-index.js';
import { segmentKeysOf, winnerColumnsOf } from './segment-keys.js';

/**
 * A sealed history segment a build reads itself: its file, its summary's, first position,
 * positions covered, and the source fingerprint the feed knows it by (its summary must carry the
 * same). The files are the store's local ones (`History.localPathOf`): a worker opens by path.
 */
export interface SegmentToRead {
  readonly file: string;
  readonly summary: string;
  readonly base: number;
  readonly count: number;
  readonly source: number;
}

export type BuildJob =
  | { readonly id: number; readonly kernels: 'native' | 'ts'; readonly kind: 'index'; readonly source: FlatIndexSource }
  | {
      readonly id: number;
      readonly kernels: 'native' | 'ts';
      readonly kind: 'keys';
      readonly order: TermOrder;
      readonly base: number;
      readonly count: number;
      /** The fingerprint of the segment the dictionary is built from. */
      readonly source: number;
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
    }
  | {
      readonly id: number;
      readonly kernels: 'native' | 'ts';
      readonly kind: 'index-of-segment';
      readonly segment: SegmentToRead;
    }
  | {
      readonly id: number;
      readonly kernels: 'native' | 'ts';
      readonly kind: 'keys-of-segment';
      readonly order: TermOrder;
      readonly segment: SegmentToRead;
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

/** Earlier dictionaries' filters and FSTs, kept between builds (each build reads them all). */
const sections = new Map<string, DictionarySections>();

function sectionsOf(kernels: Kernels): DictionarySections {
  let held = sections.get(kernels.name);
  if (!held) sections.set(kernels.name, (held = new DictionarySections(kernels, keyCacheBytesMax)));
  return held;
}

/**
 * Runs `use` over the runs of `source`, its commits read from its summary: what the feed's
 * history holds for a summarized segment. A segment without a sound summary is not built here
 * (the caller builds it from its own history).
 */
async function withSegment<T>(
  kernels: Kernels,
  source: SegmentToRead,
  use: (runs: SegmentRuns, commits: readonly CommitRecord[]) => Promise<T>,
): Promise<T> {
  const segment = SegmentFile.open(kernels, source.file, true);
  try {
    // The summary is read as the feed reads it, through a store: here a local one over the
    // folder of the file the feed's store named.
    const store = new LocalSegmentStore(kernels, path.dirname(source.summary));
    const name = path.basename(source.summary);
    const head = await readSummaryHead(kernels, store, name, segment.header);
    // A summary of another segment would build another segment's files.
    if (head) checkSummaryAgainstSegment(head, source.file);
    const summary = head && (await readSummary(kernels, store, name, segment.header));
    const commits = summary?.commits ?? [];
    if (summary && head!.source !== source.source)
      throw new StreamStackError(
        'CORRUPT',
        `${source.file} is not the segment its feed knows (its summary's source fingerprint differs)`,
        { details: { file: source.file, offset: 0 } },
      );
    if (
      commits.length === 0 ||
      commits[0].firstPosition !== source.base ||
      commits[commits.length - 1].lastPosition !== source.base + source.count - 1
    ) {
      throw new StreamStackError(
        'CORRUPT',
        `${source.file} has no summary of its ${source.count} records to read them by`,
        { details: { file: source.file, offset: 0 } },
      );
    }
    return await use(new SegmentRuns(kernels, segment), commits);
  } finally {
    segment.close();
  }
}

async function run(job: BuildJob): Promise<{ result: unknown; transfer: ArrayBuffer[] }> {
  const kernels = loadKernels(job.kernels);
  switch (job.kind) {
    case 'index':
      return { result: buildIndexData(kernels, unflattenIndexSource(job.source)), transfer: [] };
    case 'keys': {
      const bytes = buildKeyFileBytes(
        kernels,
        job.order,
        job.base,
        job.count,
        job.source,
        { bytes: job.termBytes, ends: job.termEnds },
        job,
        job.earlier,
        sectionsOf(kernels),
      );
      return { result: bytes, transfer: [bytes.buffer as ArrayBuffer] };
    }
    case 'index-of-segment': {
      const tail = await withSegment(kernels, job.segment, (runs, commits) =>
        indexTailOf(runs, job.segment.base, commits),
      );
      return { result: buildIndexData(kernels, tail.source()), transfer: [] };
    }
    case 'keys-of-segment': {
      const { base, count, source } = job.segment;
      const { terms, own } = await withSegment(kernels, job.segment, async (runs, commits) =>
        winnerColumnsOf(await segmentKeysOf(runs, base, job.order, commits)),
      );
      const bytes = buildKeyFileBytes(
        kernels,
        job.order,
        base,
        count,
        source,
        terms,
        own,
        job.earlier,
        sectionsOf(kernels),
      );
      return { result: bytes, transfer: [bytes.buffer as ArrayBuffer] };
    }
  }
}

/**
 * The job under way, and those queued behind it. One job at a time: a sealed segment's key,
 * fingerprint and tag builds arrive together, and run interleaved (each awaits its reads) each
 * held its segment's occurrences, terms and columns at once, a few hundred megabytes for a
 * full-size segment on top of the event loop's thread. The thread is one CPU either way.
 */
let running: Promise<void> = Promise.resolve();

parentPort?.on('message', (job: BuildJob) => {
  running = running.then(() =>
    run(job).then(
      ({ result, transfer }) => parentPort!.postMessage({ id: job.id, result }, transfer),
      (error: unknown) =>
        parentPort!.postMessage({ id: job.id, error: errorMessageOf(error, 'an index build failed') }),
    ),
  );
});
