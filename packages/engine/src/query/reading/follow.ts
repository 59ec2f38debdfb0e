/**
 * The live loop shared by subscriptions and tails (docs/architecture.md, Reading): read (cursor, watermark], move
 * the cursor to that watermark, wait for the watermark to move, repeat. Catch-up and live tail
 * are the same loop, so nothing is skipped and nothing is delivered twice.
 */

import type { CommitRecord } from '../../storage/commit-record.js';
import { checkCursor } from './read.js';
import { assertIntact, readCommitRecords, type Snapshot, type StoredRecord } from './snapshot.js';

/** One commit's worth of a live read: the commit and its records. */
export interface CommitBatch {
  readonly commit: CommitRecord;
  readonly records: StoredRecord[];
}

export interface FollowSource {
  snapshot(): Snapshot;
  waitForCommitAfter(after: number, signal?: AbortSignal): Promise<void>;
  /** Runs a read of sealed history so that no file is switched under it (the read gate). */
  holdReads<T>(read: () => Promise<T>): Promise<T>;
}

/** Every commit after `after`, then each new one as it is published, until `signal` aborts. */
export async function* follow(
  source: FollowSource,
  after: number | undefined,
  signal?: AbortSignal,
): AsyncGenerator<CommitBatch> {
  let cursor = checkCursor(source.snapshot(), after);
  for (;;) {
    signal?.throwIfAborted();
    const snapshot = source.snapshot();
    for (let commit = cursor + 1; commit <= snapshot.watermark.commit; commit++) {
      signal?.throwIfAborted();
      // The gate is held while one commit is read, not while the consumer handles it.
      const batch = await source.holdReads(async () => {
        const record = snapshot.commits.at(commit);
        return { commit: record, records: await readCommitRecords(snapshot, record) };
      });
      yield batch;
      cursor = commit;
    }
    // Past the head lies corruption: a live reader cannot go on, and must not wait forever.
    if (snapshot.headDamage) assertIntact(snapshot, snapshot.watermark.position + 1, snapshot.watermark.position + 1);
    await source.waitForCommitAfter(cursor, signal);
  }
}

/** Commits after `after` up to the snapshot's watermark, whole, stopping before `maxRecords`. */
export async function pollCommits(
  snapshot: Snapshot,
  after: number,
  maxRecords: number,
): Promise<{ batches: CommitBatch[]; cursor: number }> {
  let cursor = checkCursor(snapshot, after, 'cursor');
  const batches: CommitBatch[] = [];
  let records = 0;
  for (let commit = cursor + 1; commit <= snapshot.watermark.commit; commit++) {
    const record = snapshot.commits.at(commit);
    // Whole commits only: a cursor names a commit, so a poll never ends inside one. The first
    // commit is always returned, however large, so a poll always makes progress.
    if (batches.length > 0 && records + record.records > maxRecords) break;
    batches.push({ commit: record, records: await readCommitRecords(snapshot, record) });
    records += record.records;
    cursor = commit;
  }
  return { batches, cursor };
}
