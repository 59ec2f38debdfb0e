/**
 * Yielding to the event loop in the middle of long CPU work, shared by every layer (as
 * `errors.ts` and `limits.ts` are): `setImmediate` lets pending I/O callbacks and timers run
 * before the work goes on, where a resolved promise would not.
 */
import { eventLoopSliceRecords } from './limits.js';

export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Yields after every `eventLoopSliceRecords` records of a loop; `done` counts them so far. */
export function yieldEverySlice(done: number): Promise<void> | undefined {
  return done > 0 && done % eventLoopSliceRecords === 0 ? yieldToEventLoop() : undefined;
}
