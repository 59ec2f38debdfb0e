/**
 * A feed's published state: the commit list and the watermark, moved only after the disk
 * confirmed a commit, and the listeners that wait on it (live tails). Reads take their snapshot
 * from here; the commit list is append-only, so a snapshot keeps the length it saw.
 */
import { assert, type StreamStackError } from '../errors.js';
import type { CommitRecord } from '../storage/history.js';

/** The published head: reads see commits up to here and no further. */
export interface Watermark {
  readonly commit: number;
  readonly position: number;
}

export class PublishedState {
  /** `commits[c - 1]` is commit c, for every published c (stand-ins for lost ones included). */
  readonly commits: CommitRecord[] = [];
  /** Stand-ins for the commits corruption made unreadable. */
  readonly lost: CommitRecord[] = [];
  /** The commit each sealed stream became. */
  private readonly streamCommits = new Map<string, number>();
  private watermarkNow: Watermark = { commit: 0, position: 0 };
  private readonly listeners = new Set<(watermark: Watermark) => void>();
  /** Live readers waiting for a commit, ended with `CLOSED` when the feed closes. */
  private readonly closeListeners = new Set<(error: StreamStackError) => void>();

  get watermark(): Watermark {
    return this.watermarkNow;
  }

  /** The commit stream `id` was sealed into, if it was. */
  commitOfStream(id: string): number | undefined {
    return this.streamCommits.get(id);
  }

  /** Adds a durable commit and moves the watermark past it. */
  publish(commit: CommitRecord): void {
    assert(commit.commit === this.commits.length + 1 && commit.parent === this.commits.length, 'commits are published in chain order');
    this.commits.push(commit);
    if (commit.damage) this.lost.push(commit);
    else this.streamCommits.set(commit.stream, commit.commit);
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
