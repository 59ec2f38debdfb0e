/**
 * Where a read starts and ends: its cursor checked against a snapshot (`after`, `upTo`), for
 * every kind of read, scans and index fetches alike.
 */
import { StreamStackError } from '../../errors.js';
import { corruptionError, type Snapshot } from './snapshot.js';

/**
 * Checks a cursor against a snapshot: `TRIMMED` before the commit just before the low mark,
 * `CURSOR_OUT_OF_RANGE` when it is not a commit number or past the head.
 */
export function checkCursor(snapshot: Snapshot, after: number | undefined, name = 'after'): number {
  // No cursor means the start of what is kept: the commit before the low mark.
  const low = snapshot.commits.low;
  const cursor = after ?? low - 1;
  snapshot.commits.assertCursorKept(cursor, name);
  // Past the last readable commit lies history corruption took: a cursor there is not wrong.
  if (snapshot.headDamage && Number.isSafeInteger(cursor) && cursor > snapshot.watermark.commit) {
    throw corruptionError(snapshot.headDamage, `cursor ${cursor} lies in history that cannot be read`);
  }
  if (!Number.isSafeInteger(cursor) || cursor < 0 || cursor > snapshot.watermark.commit) {
    throw new StreamStackError(
      'CURSOR_OUT_OF_RANGE',
      `${name} ${String(after)} is outside the history: cursors run from 0 (the start) to ${snapshot.watermark.commit} (the head)`,
      { details: { cursor: after, head: snapshot.watermark.commit } },
    );
  }
  return cursor;
}

/**
 * The last commit a read covers: `upTo`, checked like a cursor and refused below `after`, or the
 * snapshot's head.
 */
export function readEnd(snapshot: Snapshot, options: { after?: number; upTo?: number }): number {
  if (options.upTo === undefined) return snapshot.watermark.commit;
  const cursor = checkCursor(snapshot, options.after);
  const upTo = checkCursor(snapshot, options.upTo, 'upTo');
  if (upTo < cursor) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `upTo ${upTo} is before after ${cursor}: a read covers the commits after \`after\` up to \`upTo\``,
      {
        details: { after: cursor, upTo },
      },
    );
  }
  return upTo;
}
