/**
 * One worker thread serving the process for one kind of job (index builds, export files): it is
 * started on first use, holds the process open only while a job is in flight, and answers each
 * job by id. When it cannot run — the engine run from its TypeScript sources, as in tests, or a
 * thread that failed — `run` returns undefined and the caller does the work on its own thread
 * (the bytes are the same either way); jobs in flight when the thread fails are rejected.
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { StreamStackError } from '../errors.js';

/** A worker's answer to job `id`: what the job made, or why it failed. */
export type Settled = { readonly value: unknown } | { readonly error: Error };

export class WorkerClient<Reply extends { readonly id: number }> {
  private worker: Worker | undefined;
  private unavailable = false;
  private nextId = 1;
  private readonly waiting = new Map<
    number,
    {
      resolve: (value: unknown) => void;
      reject: (error: Error) => void;
      onProgress?: ((progress: number) => void) | undefined;
    }
  >();

  constructor(
    /** The worker's compiled script, beside the module that makes this client. */
    private readonly file: URL,
    /** What the worker is called in the error when it exits. */
    private readonly name: string,
    /** Reads a reply into the job's value or its error. */
    private readonly settle: (reply: Reply) => Settled,
  ) {}

  /** Whether jobs run on the worker (false once it could not start or failed: they run inline). */
  get available(): boolean {
    return !this.unavailable && fs.existsSync(fileURLToPath(this.file));
  }

  /**
   * Runs `message` (given its id here) on the worker, or undefined when there is none. A reply
   * with a `progress` number is not the answer: it goes to `onProgress`, and the job goes on.
   */
  run(
    message: object,
    transfer: ArrayBuffer[] = [],
    onProgress?: (progress: number) => void,
  ): Promise<unknown> | undefined {
    const worker = this.start();
    if (!worker) return undefined;
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject, onProgress });
      worker.ref();
      worker.postMessage({ ...message, id }, transfer);
    });
  }

  private start(): Worker | undefined {
    if (this.worker || this.unavailable) return this.worker;
    if (!fs.existsSync(fileURLToPath(this.file))) {
      this.unavailable = true;
      return undefined;
    }
    const worker = new Worker(this.file);
    worker.unref();
    worker.on('message', (reply: Reply) => {
      const progress = (reply as { readonly progress?: unknown }).progress;
      if (typeof progress === 'number') {
        this.waiting.get(reply.id)?.onProgress?.(progress);
        return;
      }
      const waiter = this.waiting.get(reply.id);
      this.waiting.delete(reply.id);
      if (this.waiting.size === 0) worker.unref();
      const settled = this.settle(reply);
      if ('error' in settled) waiter?.reject(settled.error);
      else waiter?.resolve(settled.value);
    });
    const fail = (error: Error) => {
      // Jobs in flight fail (their callers fall back or retry); later ones run inline.
      this.unavailable = true;
      this.worker = undefined;
      for (const waiter of this.waiting.values()) waiter.reject(error);
      this.waiting.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      if (this.worker === worker) fail(new StreamStackError('INTERNAL', `the ${this.name} exited with code ${code}`));
    });
    this.worker = worker;
    return worker;
  }
}
