/**
 * The derived indexes' share of publishing: the tag and type index, the key and fingerprint
 * dictionaries' active segment, and the condition high-water maps take every published record.
 * A seal of 100,000 records would block the event loop for hundreds of milliseconds doing that
 * in the turn that publishes it, so the records are queued when their commit is published and
 * folded in slices of at most `publishIndexSliceRecords` records and `eventLoopSliceMs`, yielding
 * in between, strictly in publish order. Whatever reads those indexes first waits for
 * `caughtUp()`: it then sees every commit published before it asked.
 *
 * The queue is bounded: a writer that publishes faster than the indexes fold records in (a bulk
 * load of one-shot commits) waits for `roomInBacklog()` before it writes more, so the records
 * held for indexing never pass `publishIndexBacklogRecordsMax`. Unbounded, a load of 3 million
 * records held some 230 MB of them in the queue at its end.
 */
import { sliceDue, yieldToEventLoop } from '../../event-loop.js';
import { eventLoopCheckRecords, publishIndexBacklogRecordsMax, publishIndexSliceRecords } from '../../limits.js';
import type { CommitRecord } from '../../storage/commit-record.js';

/** A published commit's records as the indexes take them. */
export interface PublishedRun<R> {
  readonly commit: CommitRecord;
  readonly records: readonly R[];
  /** Where the commit's run starts in its segment. */
  readonly runStart: number;
  /** Where each record's manifest entry starts, from the run's start. */
  readonly entryOffsets: readonly number[];
  /** Each record's fingerprint as a term. */
  readonly fingerprints: readonly string[];
}

export class PublishIndexer<R> {
  private readonly queue: PublishedRun<R>[] = [];
  /** Records of `queue[0]` already folded in. */
  private next = 0;
  private running = false;
  private done: Promise<void> = Promise.resolve();
  /** Records queued and not yet folded in. */
  private backlog = 0;
  /** Writers waiting for the backlog to fall to the bound, first come first served. */
  private waiting: (() => void)[] = [];

  constructor(
    /** Folds one record (at `index` of its run) into the indexes. */
    private readonly apply: (run: PublishedRun<R>, index: number) => void,
    /** Records queued at most before writers wait (`roomInBacklog`). */
    private readonly backlogMax = publishIndexBacklogRecordsMax,
  ) {}

  /** Queues a published commit's records. */
  push(run: PublishedRun<R>): void {
    if (run.records.length === 0) return;
    this.queue.push(run);
    this.backlog += run.records.length;
    if (this.running) return;
    this.running = true;
    this.done = this.drain();
  }

  /**
   * Whether a record queued and not yet folded in passes `test` (given its run and its index in
   * the run); undefined when the queue stopped (a fold failed), whose state no caller should
   * trust. Synchronous: the records it looks at are exactly those the indexes lack in this turn.
   */
  someQueued(test: (run: PublishedRun<R>, index: number) => boolean): boolean | undefined {
    if (this.queue.length > 0 && !this.running) return undefined;
    for (let at = 0; at < this.queue.length; at++) {
      const run = this.queue[at];
      for (let index = at === 0 ? this.next : 0; index < run.records.length; index++) if (test(run, index)) return true;
    }
    return false;
  }

  /** Whether every record queued so far is in the indexes already (nothing is left to fold in). */
  get idle(): boolean {
    return !this.running;
  }

  /**
   * Undefined when the backlog is within its bound and nobody waits; else a promise that
   * resolves, in the order asked, once it is. A writer awaits it before it writes records that
   * will be queued, so it never runs ahead of the indexes by more than the bound. Nothing waits
   * when nothing folds records in (a fold that failed stopped the queue): the wait would not end.
   */
  roomInBacklog(): Promise<void> | undefined {
    if (!this.running || (this.backlog <= this.backlogMax && this.waiting.length === 0)) return undefined;
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Lets the waiting writers go, once the backlog is within its bound or nothing folds any more. */
  private release(): void {
    if (this.running && this.backlog > this.backlogMax) return;
    for (const resolve of this.waiting.splice(0)) resolve();
  }

  /** Resolves once every record queued so far is in the indexes. */
  caughtUp(): Promise<void> {
    return this.running ? this.done : Promise.resolve();
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        // Each slice is a turn of its own: the first does not run on from the turn that
        // published the commit (its writes and finishes are work enough for one turn).
        await yieldToEventLoop();
        // A slice ends at its record bound or its time, whichever comes first: a record costs a
        // few microseconds, more while the collector is busy, and a slice counted alone held the
        // loop for 40 ms now and then during a large ingest.
        let budget = publishIndexSliceRecords;
        while (budget > 0 && this.queue.length > 0) {
          const run = this.queue[0];
          const start = this.next;
          const end = Math.min(run.records.length, start + Math.min(budget, eventLoopCheckRecords));
          budget -= end - start;
          for (; this.next < end; this.next++) this.apply(run, this.next);
          this.backlog -= end - start;
          if (this.next === run.records.length) {
            this.queue.shift();
            this.next = 0;
          }
          if (sliceDue()) break;
        }
        this.release();
      }
    } finally {
      this.running = false;
      this.release();
    }
  }
}
