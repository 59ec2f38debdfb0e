/**
 * A feed's published state: the commit list and the watermark, moved only after the disk
 * confirmed a commit, and the listeners that wait on it (live tails). Reads take their snapshot
 * from here; the commit list is append-only, so a snapshot keeps the length it saw.
 */
import { assert, type StreamStackError } from '../../errors.js';
import type { CommitList } from '../../storage/commit-list.js';
import type { CommitRecord } from '../../storage/commit-record.js';

/** The published head: reads see commits up to here and no further. */
export interface Watermark {
  readonly commit: number;
  readonly position: number;
}

export class PublishedState {
  private watermarkNow: Watermark;
  private readonly listeners = new Set<(watermark: Watermark) => void>();
  /** Live readers waiting for a commit, ended with `CLOSED` when the feed closes. */
  private readonly closeListeners = new Set<(error: StreamStackError) => void>();

  /**
   * Starts from the commits recovered on open. `commits` is the history's list, which the
   * history extends as it writes commits; this moves the watermark past them once published.
   */
  constructor(readonly commits: CommitList) {
    const head = commits.length;
    this.watermarkNow = { commit: head, position: commits.positionAfter(head) };
  }

  get watermark(): Watermark {
    return this.watermarkNow;
  }

  /** Stand-ins for the commits corruption made unreadable. */
  get lost(): readonly CommitRecord[] {
    return this.commits.lost;
  }

  /** The commit stream `id` was sealed into, if it was. */
  commitOfStream(id: string): number | undefined {
    return this.commits.commitOfStream(id);
  }

  /** Moves the watermark past a durable commit, which the history has added to the list. */
  publish(commit: CommitRecord): void {
    assert(
      commit.commit === this.watermarkNow.commit + 1 && commit.commit === this.commits.length,
      'commits are published in chain order',
    );
    this.watermarkNow = { commit: commit.commit, position: commit.lastPosition };
    for (const listener of this.listeners) listener(this.watermarkNow);
  }

  /** Calls `listener` with each new watermark; returns the function that stops it. */
  onPublish(listener: (watermark: Watermark) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Resolves once the watermark passes commit `after` (at once if it already has), or rejects
   * when `signal` aborts, or with the close error when the feed closes. This is what a live tail
   * waits on.
   */
  waitForCommitAfter(after: number, signal?: AbortSignal): Promise<void> {
    if (this.watermarkNow.commit > after) return Promise.resolve();
    signal?.throwIfAborted();
    return new Promise((resolve, reject) => {
      const stop = this.onPublish((watermark) => {
        if (watermark.commit > after) finish();
      });
      const onClose = (error: StreamStackError) => {
        stop();
        signal?.removeEventListener('abort', onAbort);
        reject(error);
      };
      this.closeListeners.add(onClose);
      const onAbort = () => {
        stop();
        this.closeListeners.delete(onClose);
        reject(signal!.reason);
      };
      const finish = () => {
        stop();
        this.closeListeners.delete(onClose);
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Ends every waiting reader with `error` (the feed is closing). */
  close(error: StreamStackError): void {
    for (const listener of this.closeListeners) listener(error);
    this.closeListeners.clear();
  }
}
