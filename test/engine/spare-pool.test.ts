/**
 * The spares an export file's conversion leaves on its thread (`SparePool`): the next file takes
 * the last one's instead of making its own, at most as many are kept as files are written on a
 * thread at once, and none outlive `exportSpareBuffersKeepMs` after the last was given back.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { SparePool } from '../../packages/engine/src/query/export/spare-pool.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('SparePool', () => {
  it('hands a spare to the next taker, keeps at most its bound, and drops them once idle', () => {
    vi.useFakeTimers();
    const pool = new SparePool<{ id: number }>(2);
    let made = 0;
    const make = () => ({ id: ++made });
    const first = pool.take(make);
    pool.give(first);
    expect(pool.take(make)).toBe(first);
    expect(made).toBe(1);

    // Three files at once: the third's spare is not kept.
    const held = [first, pool.take(make), pool.take(make)];
    expect(made).toBe(3);
    for (const spare of held) pool.give(spare);
    expect(pool.size).toBe(2);

    // Taken again just before the keeping time ends, they live on: taking stops the clock.
    vi.advanceTimersByTime(limits.exportSpareBuffersKeepMs - 1);
    const again = pool.take(make);
    vi.advanceTimersByTime(limits.exportSpareBuffersKeepMs * 2);
    expect(pool.size).toBe(1);
    pool.give(again);
    vi.advanceTimersByTime(limits.exportSpareBuffersKeepMs - 1);
    expect(pool.size).toBe(2);
    vi.advanceTimersByTime(1);
    expect(pool.size).toBe(0);
    expect(pool.take(make).id).toBe(4);
  });
});
