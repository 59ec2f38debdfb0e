import { describe, expect, it } from 'vitest';
import { sliceDue, yieldToEventLoop, yieldWhenDue } from '../../packages/engine/src/event-loop.js';
import { eventLoopCheckRecords, eventLoopSliceMs } from '../../packages/engine/src/limits.js';

describe('yielding to the event loop', () => {
  it('resumes one piece of yielded work per turn, so pieces never add up between two turns', async () => {
    // A turn counter that moves once per turn of the loop (its own immediate, queued again each turn).
    let turn = 0;
    let counting = true;
    const count = () => {
      turn++;
      if (counting) setImmediate(count);
    };
    setImmediate(count);
    const resumedIn: number[] = [];
    const work = async () => {
      for (let piece = 0; piece < 5; piece++) {
        await yieldToEventLoop();
        resumedIn.push(turn);
      }
    };
    await Promise.all([work(), work(), work()]);
    counting = false;
    expect(resumedIn).toHaveLength(15);
    // Queued together, three pieces would all resume in one turn; here each has its own.
    expect(new Set(resumedIn).size).toBe(15);
  });

  it('yields a loop once its slice has run its time, and only at a look at the clock', async () => {
    await yieldToEventLoop();
    // No look at the clock before the first check, nor between two.
    expect(yieldWhenDue(0)).toBeUndefined();
    const started = performance.now();
    while (performance.now() - started < eventLoopSliceMs + 1) {
      // Busy: the slice runs out.
    }
    expect(sliceDue()).toBe(true);
    expect(yieldWhenDue(eventLoopCheckRecords + 1)).toBeUndefined();
    const pause = yieldWhenDue(eventLoopCheckRecords);
    expect(pause).toBeInstanceOf(Promise);
    await pause;
  });
});
