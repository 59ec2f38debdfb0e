/**
 * Yielding to the event loop in the middle of long CPU work, shared by every layer (as
 * `errors.ts` and `limits.ts` are): `setImmediate` lets pending I/O callbacks and timers run
 * before the work goes on, where a resolved promise would not.
 *
 * Work that yields is resumed one piece per turn of the event loop. Every callback queued with
 * `setImmediate` runs in the same turn, so three background builds that each yielded after a
 * 40 ms slice used to hold the loop 120 ms between two timers; resumed one per turn, the loop
 * waits for one slice at most.
 */
import { eventLoopCheckRecords, eventLoopSliceMs } from './limits.js';

/** Work waiting to be resumed, oldest first. */
const waiting: (() => void)[] = [];
let resumeScheduled = false;

/** When the piece of work running now was resumed (see `sliceDue`). */
let resumedAt = performance.now();

function resumeOne(): void {
  const next = waiting.shift();
  resumedAt = performance.now();
  // Scheduled now, it runs in the next turn: this one ends with the piece resumed here.
  if (waiting.length > 0) setImmediate(resumeOne);
  else resumeScheduled = false;
  next?.();
}

export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => {
    waiting.push(resolve);
    if (resumeScheduled) return;
    resumeScheduled = true;
    setImmediate(resumeOne);
  });
}

/**
 * True once the work resumed last has run `eventLoopSliceMs`: background loops call it every
 * `eventLoopCheckRecords` records and yield when it says so. Work that did not start from a
 * yield (an I/O callback) finds an older mark and yields at its first look: a small cost.
 */
export function sliceDue(): boolean {
  return performance.now() - resumedAt >= eventLoopSliceMs;
}

/** Yields when the current slice of background work has run its time (see `sliceDue`); `done` counts records so far. */
export function yieldWhenDue(done: number): Promise<void> | undefined {
  return done > 0 && done % eventLoopCheckRecords === 0 && sliceDue() ? yieldToEventLoop() : undefined;
}
