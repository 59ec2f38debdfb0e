/**
 * Waiting for the next commit, for long-polls on both routes: the engine's follow loop does the
 * waiting, so a commit published between the caller's read and the wait is not missed.
 */
import type { ServerResponse } from 'node:http';
import type { Feed } from '@streamstack/engine';

/**
 * Waits up to `ms` milliseconds for a commit after `after`, or until one of `signals` aborts
 * (the request or the server going away); true when one came.
 */
export async function waitForCommit(feed: Feed, after: number, ms: number, signals: AbortSignal[]): Promise<boolean> {
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(), ms);
  const signal = AbortSignal.any([timeout.signal, ...signals]);
  try {
    for await (const _ of feed.follow({ after, signal })) return true;
    return false;
  } catch (error) {
    if (signal.aborted) return false;
    throw error;
  } finally {
    clearTimeout(timer);
  }
}

/** An AbortSignal that aborts when the client of `raw` goes away before its response is done. */
export function closedSignal(raw: ServerResponse): AbortSignal {
  const controller = new AbortController();
  raw.once('close', () => controller.abort());
  return controller.signal;
}
