/**
 * Builds sealed segments' derived files — index data and key dictionaries — on a worker thread,
 * so that the CPU work of a segment's hundreds of thousands of terms never blocks appends and
 * reads on the event loop. One worker serves the process; it holds the process open only while
 * a build is in flight. When the worker cannot run (the engine is run from its TypeScript
 * sources, as in tests, or the thread fails), builds run on the calling thread: the bytes are
 * the same either way.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Kernels } from '../kernels/kernels.js';
import { encodeKeyFile, type KeyWinner } from '../storage/key-file.js';
import { buildIndexData, flattenIndexSource, type IndexData, type IndexSource } from '../storage/index-segment.js';
import type { BuildJob } from './index-build-worker.js';

type Reply = { id: number; result?: unknown; error?: string };
/** A job as the caller gives it: the worker's message without its id (kept per kind of job). */
type JobInput = BuildJob extends infer Job ? (Job extends BuildJob ? Omit<Job, 'id'> : never) : never;

class BuildWorker {
  private worker: Worker | undefined;
  private unavailable = false;
  private nextId = 1;
  private readonly waiting = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();

  /** Runs `job` on the worker, or undefined when there is no worker to run it. */
  run(job: JobInput, transfer: ArrayBuffer[] = []): Promise<unknown> | undefined {
    const worker = this.start();
    if (!worker) return undefined;
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage({ ...job, id }, transfer);
    });
  }

  private start(): Worker | undefined {
    if (this.worker || this.unavailable) return this.worker;
    const file = new URL('./index-build-worker.js', import.meta.url);
    if (!fs.existsSync(fileURLToPath(file))) {
      this.unavailable = true;
      return undefined;
    }
    const worker = new Worker(file);
    worker.unref();
    worker.on('message', (reply: Reply) => {
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (this.waiting.size === 0) worker.unref();
      if (reply.error !== undefined) waiter?.reject(new Error(reply.error));
      else waiter?.resolve(reply.result);
    });
    const fail = (error: Error) => {
      // Builds in flight fail (their callers rebuild later); later builds run inline.
      this.unavailable = true;
      this.worker = undefined;
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      if (this.worker === worker) fail(new Error(`the index build worker exited with code ${code}`));
    });
    this.worker = worker;
    return worker;
  }
}

const worker = new BuildWorker();

/** A sealed segment's index data, built off the event loop when a worker can run. */
export async function buildIndexDataOffThread(kernels: Kernels, source: IndexSource): Promise<IndexData> {
  const flat = flattenIndexSource(source);
  const pending = worker.run({ kernels: kernels.name, kind: 'index', source: flat }, [
    flat.typeColumn.buffer as ArrayBuffer,
    flat.locators.buffer as ArrayBuffer,
    flat.ends.buffer as ArrayBuffer,
    flat.positions.buffer as ArrayBuffer,
  ]);
  return pending ? ((await pending) as IndexData) : buildIndexData(kernels, source);
}

/** A key dictionary's bytes, encoded off the event loop when a worker can run. */
export async function encodeKeyFileOffThread(
  kernels: Kernels,
  base: number,
  count: number,
  entries: { readonly key: string; readonly winner: KeyWinner }[],
): Promise<Uint8Array> {
  const pending = worker.run({
    kernels: kernels.name,
    kind: 'keys',
    base,
    count,
    keys: entries.map((entry) => entry.key),
    winners: entries.map((entry) => entry.winner),
  });
  return pending ? ((await pending) as Uint8Array) : encodeKeyFile(kernels, base, count, entries);
}
