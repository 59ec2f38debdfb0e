/**
 * Buffers that one long read's runs are read into, and read into again once nothing uses them:
 * what an export reads a feed's history through. Read into new buffers, an export of 10^7
 * records allocated 3 GB of them, and every 64 MB of new buffers started a full garbage
 * collection of the reading thread (the collector counts them as external memory), about a
 * tenth of the export's CPU time with its page faults.
 *
 * A buffer goes around in three steps, each said by its user:
 * 1. the reader takes it (`take`) and reads a stretch of runs into it;
 * 2. once the reader has handed out every batch made from it, `readerDone` retires it: the
 *    batches may still be held;
 * 3. the consumer, once it holds none of the batches it was given so far (the export: a file's
 *    batches were copied for its worker, or the file was written), takes the retired buffers
 *    (`retire`, at that moment) and later gives them back (`recycle`): they are free again.
 *
 * Bytes read into a buffer of the pool never enter the payload cache, which would hand them out
 * after the buffer was read into again.
 *
 * @example
 * const pool = new RunBufferPool();
 * const bytes = await history.runs.readRunBytes(commit, pool);
 * // … batches made from `bytes` handed out …
 * pool.readerDone(bytes);
 * const retired = pool.retire(); // the consumer holds none of those batches now
 * pool.recycle(retired);
 */
import { assert } from '../errors.js';
import { runBufferHeadroomFraction, runsReadBytesMax } from '../limits.js';

/** For tests: how many reads went into a buffer read into before, in this process. */
let reusedReads = 0;

export function runBufferReuses(): number {
  return reusedReads;
}

export class RunBufferPool {
  /** Buffers nothing uses, whole. */
  private readonly free: Uint8Array[] = [];
  /** Buffers the reader is done with whose batches may still be held, whole. */
  private retiring: Uint8Array[] = [];
  /** Every buffer of the pool, so that a foreign view is refused. */
  private readonly owned = new Set<ArrayBufferLike>();

  /** `length` bytes to read into: the start of a free buffer that holds them, or of a new one. */
  take(length: number): Uint8Array {
    let best = -1;
    for (let index = 0; index < this.free.length; index++) {
      if (this.free[index].length >= length && (best < 0 || this.free[index].length < this.free[best].length))
        best = index;
    }
    if (best >= 0) {
      reusedReads++;
      return this.free.splice(best, 1)[0].subarray(0, length);
    }
    // A stretch holds at most `runsReadBytesMax`; a single run may hold more, and gets room for
    // a longer one (see `runBufferHeadroomFraction`).
    const whole = new Uint8Array(
      length <= runsReadBytesMax ? runsReadBytesMax : Math.ceil(length * (1 + runBufferHeadroomFraction)),
    );
    this.owned.add(whole.buffer);
    return whole.subarray(0, length);
  }

  /** The reader has handed out every batch made from `bytes` (a view of one of the pool's buffers). */
  readerDone(bytes: Uint8Array): void {
    assert(this.owned.has(bytes.buffer), 'a run buffer given back to the pool is one of its own');
    this.retiring.push(new Uint8Array(bytes.buffer));
  }

  /** The buffers retired so far, which the consumer gives back (`recycle`) once it holds none of their batches. */
  retire(): Uint8Array[] {
    const retired = this.retiring;
    this.retiring = [];
    return retired;
  }

  /** `buffers` (from `retire`) may be read into again. */
  recycle(buffers: readonly Uint8Array[]): void {
    for (const buffer of buffers) this.free.push(buffer);
  }
}
