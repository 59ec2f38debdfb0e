/**
 * Builds sealed segments' derived files — index data and key dictionaries — on a worker thread,
 * so that the CPU work of a segment's hundreds of thousands of terms never blocks appends and
 * reads on the event loop. One worker serves the process; it holds the process open only while
 * a build is in flight. When the worker cannot run (the engine is run from its TypeScript
 * sources, as in tests, or the thread fails), builds run on the calling thread: the bytes are
 * the same either way.
 */

import { type ErrorMessage, errorFromMessage } from '../../errors.js';
import type { Kernels, PackedBytes } from '../../kernels/kernels.js';
import { buildIndexData, flattenIndexSource, type IndexData, type IndexSource } from '../../storage/index-segment.js';
import type { TermOrder } from '../../storage/key-file.js';
import { WorkerClient } from '../worker-client.js';
import type { BuildJob, SegmentToRead } from './index-build-worker.js';
import type { DictionaryFile, WinnerColumns } from './key-merge.js';

type Reply = { id: number; result?: unknown; error?: ErrorMessage };
/** A job as the caller gives it: the worker's message without its id (kept per kind of job). */
type JobInput = BuildJob extends infer Job ? (Job extends BuildJob ? Omit<Job, 'id'> : never) : never;

/** Runs a build job on the worker (or undefined: no worker to run it). */
const runJob = (job: JobInput, transfer: ArrayBuffer[] = []) => worker.run(job, transfer);

const worker = new WorkerClient<Reply>(
  new URL('./index-build-worker.js', import.meta.url),
  'index build worker',
  (reply) => (reply.error !== undefined ? { error: errorFromMessage(reply.error) } : { value: reply.result }),
);

/** A sealed segment's index data, built off the event loop when a worker can run. */
export async function buildIndexDataOffThread(kernels: Kernels, source: IndexSource): Promise<IndexData> {
  const flat = await flattenIndexSource(source);
  const pending = runJob({ kernels: kernels.name, kind: 'index', source: flat }, [
    flat.typeColumn.buffer as ArrayBuffer,
    flat.locators.buffer as ArrayBuffer,
    flat.ends.buffer as ArrayBuffer,
    flat.positions.buffer as ArrayBuffer,
  ]);
  return pending ? ((await pending) as IndexData) : buildIndexData(kernels, source);
}

/**
 * The index data of a sealed segment, built on the worker from the segment file itself (read
 * there, its commits from its summary): a rebuild that reads nothing on the event loop.
 * Undefined when there is no worker, or the worker could not (no summary, a damaged run): the
 * caller then builds from its own history, which reports any damage where it lies.
 */
export async function indexDataOfSegmentOffThread(
  kernels: Kernels,
  segment: SegmentToRead,
): Promise<IndexData | undefined> {
  const pending = runJob({ kernels: kernels.name, kind: 'index-of-segment', segment });
  return pending ? ((await pending.catch(() => undefined)) as IndexData | undefined) : undefined;
}

/**
 * A key or fingerprint dictionary's bytes, built on the worker from the segment file itself and
 * merged with `earlier` (see `indexDataOfSegmentOffThread`); undefined when it could not be.
 */
export async function keyFileOfSegmentOffThread(
  kernels: Kernels,
  order: TermOrder,
  segment: SegmentToRead,
  earlier: readonly DictionaryFile[],
): Promise<Uint8Array | undefined> {
  const pending = runJob({ kernels: kernels.name, kind: 'keys-of-segment', order, segment, earlier: [...earlier] });
  return pending ? ((await pending.catch(() => undefined)) as Uint8Array | undefined) : undefined;
}

/**
 * A key or fingerprint dictionary's bytes, built on the worker: `terms` (UTF-8) with their
 * winners in the segment (`own`) merged with the dictionaries before it (`earlier`, newest
 * first), then encoded. Undefined when there is no worker: the caller builds it on its own
 * thread. Rejects when an earlier dictionary fails a check (the caller's own build rebuilds it).
 */
export async function buildKeyFileOffThread(
  kernels: Kernels,
  order: TermOrder,
  base: number,
  count: number,
  source: number,
  terms: PackedBytes,
  own: WinnerColumns,
  earlier: readonly DictionaryFile[],
): Promise<Uint8Array | undefined> {
  // Winners go as columns, moved rather than copied: a segment has hundreds of thousands. The
  // caller keeps copies, for a build of its own if this one fails.
  const positions = own.positions.slice();
  const versions = own.versions.slice();
  const locators = own.locators.slice();
  const tombstones = own.tombstones.slice();
  // Terms go as their UTF-8 bytes (cloning a million strings into the worker's message held
  // the event loop for a seventh of a second), copied to be moved like the winners.
  const termBytes = terms.bytes.slice();
  const termEnds = terms.ends.slice();
  const pending = runJob(
    {
      kernels: kernels.name,
      kind: 'keys',
      order,
      base,
      count,
      source,
      termBytes,
      termEnds,
      positions,
      versions,
      locators,
      tombstones,
      earlier: [...earlier],
    },
    [
      termBytes.buffer as ArrayBuffer,
      termEnds.buffer as ArrayBuffer,
      positions.buffer,
      versions.buffer,
      locators.buffer,
      tombstones.buffer,
    ],
  );
  return pending ? ((await pending) as Uint8Array) : undefined;
}
