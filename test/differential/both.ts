/**
 * Shared by the differential suites: both kernel sets, and an assertion that two calls have the
 * same outcome — equal results, or errors with the same code.
 */
import { expect } from 'vitest';
import { loadKernels } from '../../packages/engine/src/kernels/index.js';
import { StreamStackError } from '../../packages/engine/src/errors.js';

export const native = loadKernels('native');
export const ts = loadKernels('ts');

type Outcome<T> = { ok: true; value: T } | { ok: false; code: string };

function outcome<T>(call: () => T): Outcome<T> {
  try {
    return { ok: true, value: call() };
  } catch (error) {
    if (!(error instanceof StreamStackError)) throw error;
    return { ok: false, code: error.code };
  }
}

/** Runs `call` on both kernel sets and asserts the same result or the same error code. */
export function expectSameOutcome<T>(call: (kernels: typeof native) => T): Outcome<T> {
  const fromNative = outcome(() => call(native));
  const fromTs = outcome(() => call(ts));
  expect(fromNative).toEqual(fromTs);
  return fromNative;
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
