/**
 * Copying a range of one buffer into another: the TypeScript twin of the native kernel, and the
 * argument check both share, so that either refuses the same calls with the same message.
 */
import { StreamStackError } from '../../errors.js';

/** Throws `INVALID_ARGUMENT` unless `source[start, end)` exists and fits in `target` at `targetAt`. */
export function checkCopyRange(
  target: Uint8Array,
  targetAt: number,
  source: Uint8Array,
  start: number,
  end: number,
): void {
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end) || start < 0 || start > end || end > source.length) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `source range ${start}..${end} is not within a buffer of ${source.length} bytes`,
    );
  }
  if (!Number.isSafeInteger(targetAt) || targetAt < 0 || targetAt + (end - start) > target.length) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `${end - start} bytes at ${targetAt} do not fit in a buffer of ${target.length} bytes`,
    );
  }
}

export function copyRange(target: Uint8Array, targetAt: number, source: Uint8Array, start: number, end: number): void {
  checkCopyRange(target, targetAt, source, start, end);
  target.set(source.subarray(start, end), targetAt);
}
