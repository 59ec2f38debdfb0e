/**
 * How far a replicated feed's history is handed to followers: never past a group whose slot is
 * not stored, even when a later group's slot is stored first; all of it once none is pending;
 * nothing more after a slot failed.
 */
import { describe, expect, it } from 'vitest';
import { ReplicatedEnd } from '../../packages/engine/src/coordinator/writing/replicated-end.js';

/** A promise and the functions that settle it. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((yes, no) => {
    resolve = yes;
    reject = no;
  });
  return { promise, resolve, reject };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('ReplicatedEnd', () => {
  it('moves the visible end over stored groups in the order they were written', async () => {
    const end = new ReplicatedEnd();
    expect(end.visibleEnd(1)).toBe(Number.POSITIVE_INFINITY);
    const first = deferred<{ segment: number; offset: number }>();
    const second = deferred<{ segment: number; offset: number }>();
    end.note(1, 100, first.promise, 50);
    end.note(1, 100, second.promise, 30);
    expect(end.visibleEnd(1)).toBe(100);
    // The second group's slot is stored first: nothing moves until the first's is.
    second.resolve({ segment: 1, offset: 150 });
    await settle();
    expect(end.visibleEnd(1)).toBe(100);
    first.resolve({ segment: 1, offset: 100 });
    await settle();
    // Both stored, none pending: the local durable end governs again.
    expect(end.visibleEnd(1)).toBe(Number.POSITIVE_INFINITY);
  });

  it('holds a group that rolled into a new segment back, and everything after a failed slot', async () => {
    const end = new ReplicatedEnd();
    const rolled = deferred<{ segment: number; offset: number }>();
    const later = deferred<{ segment: number; offset: number }>();
    end.note(1, 400, rolled.promise, 64);
    end.note(1, 400, later.promise, 64);
    expect(end.visibleEnd(1)).toBe(400);
    expect(end.visibleEnd(2)).toBe(0);
    rolled.resolve({ segment: 2, offset: 64 });
    await settle();
    expect(end.visibleEnd(1)).toBe(Number.POSITIVE_INFINITY);
    expect(end.visibleEnd(2)).toBe(128);
    later.reject(new Error('fenced'));
    await settle();
    expect(end.visibleEnd(2)).toBe(0);
    expect(end.visibleEnd(3)).toBe(0);
  });
});
