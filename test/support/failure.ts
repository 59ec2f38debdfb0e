/**
 * The typed error a call fails with, for tests that assert on a failure's `code` and `details`:
 * a call that does not fail, or fails with something other than a `StreamStackError`, fails the
 * test instead.
 */
import { expect } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/index.js';

/** The error a promise rejects with, or a function throws. */
export async function failure(run: () => unknown): Promise<StreamStackError> {
  try {
    await run();
  } catch (error) {
    expect(error).toBeInstanceOf(StreamStackError);
    return error as StreamStackError;
  }
  throw new Error('expected a failure');
}

/**
 * The code a promise fails with, or `'none'` when it succeeds: for tests that poll until a call
 * starts failing, or that list outcomes. A failure other than a `StreamStackError` is thrown.
 */
export async function outcomeCode(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof StreamStackError) return error.code;
    throw error;
  }
  return 'none';
}
