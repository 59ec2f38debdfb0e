/**
 * Shared by the differential suites: both kernel sets, an assertion that two calls have the
 * same outcome — equal results, or errors with the same code — and a tally of the branches a
 * property reached.
 */
import { expect } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/errors.js';
import { loadKernels } from '../../packages/engine/src/kernels/index.js';

export { type BranchTally, branchTally } from '../support/branches.js';

export const native = loadKernels('native');
export const ts = loadKernels('ts');

export type Outcome<T> = { ok: true; value: T } | { ok: false; code: string; message: string };

function outcome<T>(call: () => T): Outcome<T> {
  try {
    return { ok: true, value: call() };
  } catch (error) {
    if (!(error instanceof StreamStackError)) throw error;
    return { ok: false, code: error.code, message: error.message };
  }
}

/**
 * Equality of the values the kernels return: typed arrays byte for byte (as the same type), and
 * plain objects and arrays member by member. It answers quickly for the lists of thousands of
 * entries the properties generate, where a deep `toEqual` would cost milliseconds per call;
 * when it says "different", the caller falls back to `toEqual` for a readable diff.
 */
export function sameValue(left: unknown, right: unknown): boolean {
  if (ArrayBuffer.isView(left) || ArrayBuffer.isView(right)) {
    if (!ArrayBuffer.isView(left) || !ArrayBuffer.isView(right)) return false;
    if (left.constructor !== right.constructor || left.byteLength !== right.byteLength) return false;
    const bytes = (view: ArrayBufferView) => Buffer.from(view.buffer, view.byteOffset, view.byteLength);
    return bytes(left).equals(bytes(right));
  }
  if (typeof left !== 'object' || left === null || typeof right !== 'object' || right === null) {
    return Object.is(left, right);
  }
  if (Array.isArray(left) !== Array.isArray(right)) return false;
  const leftKeys = Object.keys(left);
  const rightKeys = Object.keys(right);
  if (leftKeys.length !== rightKeys.length) return false;
  return leftKeys.every(
    (key) =>
      Object.hasOwn(right, key) &&
      sameValue((left as Record<string, unknown>)[key], (right as Record<string, unknown>)[key]),
  );
}

/** Asserts `actual` equals `expected`, quickly when they do (see `sameValue`). */
export function expectSame(actual: unknown, expected: unknown, label?: string): void {
  if (!sameValue(actual, expected)) expect(actual, label).toEqual(expected);
}

/** An outcome without its error message, which the two kernel sets word differently. */
function comparable<T>(result: Outcome<T>): { ok: true; value: T } | { ok: false; code: string } {
  return result.ok ? result : { ok: false, code: result.code };
}

/** Runs `call` on both kernel sets and asserts the same result or the same error code. */
export function expectSameOutcome<T>(
  call: (kernels: typeof native) => T,
): { ok: true; value: T } | { ok: false; code: string } {
  return expectSameOutcomes(call).native;
}

/**
 * `expectSameOutcome`, returning both kernel sets' outcomes: the native one without its message,
 * the ts one with it (the ts messages are the reference wording, so a property may tell
 * rejections apart by them).
 */
export function expectSameOutcomes<T>(call: (kernels: typeof native) => T): {
  native: { ok: true; value: T } | { ok: false; code: string };
  ts: Outcome<T>;
} {
  const fromNative = comparable(outcome(() => call(native)));
  const fromTs = outcome(() => call(ts));
  expectSame(fromNative, comparable(fromTs));
  return { native: fromNative, ts: fromTs };
}

/** Byte strings packed as the kernels take them. */
export function pack(items: readonly Uint8Array[]): { bytes: Uint8Array; ends: Uint32Array } {
  const ends = new Uint32Array(items.length);
  let total = 0;
  items.forEach((item, index) => {
    total += item.length;
    ends[index] = total;
  });
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const item of items) {
    bytes.set(item, at);
    at += item.length;
  }
  return { bytes, ends };
}

export const encoder = new TextEncoder();

/**
 * `length` bytes from a linear congruential generator seeded with `seed`: large inputs made
 * cheaply and the same on every run. `into` gives the buffer (a `SharedArrayBuffer`, say).
 */
export function pseudoRandomBytes(
  length: number,
  seed: number,
  into: ArrayBufferLike = new ArrayBuffer(length),
): Uint8Array {
  const bytes = new Uint8Array(into, 0, length);
  let state = seed >>> 0;
  for (let i = 0; i < length; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    bytes[i] = state >>> 24;
  }
  return bytes;
}
