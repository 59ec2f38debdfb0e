/**
 * Filtered RAW reads: the planner finds the positions of the records a filter matches (through
 * the index or a scan, `planner.ts`), then they are fetched by position (`fetch.ts`), as records
 * or as columns.
 */
import type { ReadOptions } from '@streamstack/protocol';
import type { ColumnBatch } from './column-batch.js';
import { fetchByPosition, fetchColumnsByPosition } from './fetch.js';
import { findPositions, type Query } from './planner.js';
import { checkCursor, readEnd } from './read-cursor.js';
import { assertCommitsIntact, type Snapshot, type StoredRecord } from './snapshot.js';

/** A filtered RAW read: the planner finds the positions, then the records are fetched. */
async function plannedPositions(snapshot: Snapshot, query: Query, options: ReadOptions): Promise<number[]> {
  const cursor = checkCursor(snapshot, options.after);
  const end = readEnd(snapshot, options);
  // The commits the read covers must all be there: the index answers by position, and a cursor
  // inside a run of lost commits lies past their positions (see `assertCommitsIntact`).
  assertCommitsIntact(snapshot, cursor, end);
  const afterPosition = snapshot.commits.positionAfter(cursor);
  const until = end === snapshot.watermark.commit ? snapshot.watermark.position : snapshot.commits.positionAfter(end);
  return findPositions(snapshot.kernels, snapshot, snapshot.index, query, afterPosition, {
    plan: options.plan ?? 'auto',
    until,
    ...(options.limit === undefined ? {} : { limit: options.limit }),
  });
}

/**
 * A filtered RAW read's records: one array per commit when `byCommit` (`readBatches`), else one
 * per group of records fetched together, for a consumer that flattens them anyway.
 */
export async function* plannedRead(
  snapshot: Snapshot,
  query: Query,
  options: ReadOptions,
  byCommit: boolean,
): AsyncGenerator<StoredRecord[]> {
  for await (const batch of fetchByPosition(
    snapshot,
    snapshot.index,
    await plannedPositions(snapshot, query, options),
    { byCommit },
  )) {
    options.signal?.throwIfAborted();
    yield batch;
  }
}

export async function* plannedColumns(
  snapshot: Snapshot,
  query: Query,
  options: ReadOptions,
): AsyncGenerator<ColumnBatch> {
  for await (const batch of fetchColumnsByPosition(
    snapshot,
    snapshot.index,
    await plannedPositions(snapshot, query, options),
  )) {
    options.signal?.throwIfAborted();
    yield batch;
  }
}
