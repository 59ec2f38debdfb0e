/**
 * Fetching records by position (what the index path of a read returns): the index's locator
 * column says where each record's manifest entry lies, so a handful of records costs a handful
 * of small reads, and hits lying near each other share one (coalesced by where they lie); where
 * many hits fall in one commit, the commit's run is read once instead.
 */

import { assert } from '../../errors.js';
import { fetchRunHitsMin } from '../../limits.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { rowsOfPositions } from '../../storage/run-columns.js';
import type { FeedIndex } from '../indexes/feed-index.js';
import { ColumnBatch } from './column-batch.js';
import { commitHolding } from './planner.js';
import { type Snapshot, type StoredRecord, toRecord } from './snapshot.js';

/** The records at `positions` (ascending), grouped one array per commit. */
export function fetchByPosition(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
): AsyncGenerator<StoredRecord[]>;
export function fetchByPosition<T>(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
  dense: (commit: CommitRecord, hits: readonly number[]) => Promise<T>,
): AsyncGenerator<StoredRecord[] | T>;
export async function* fetchByPosition<T>(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
  dense?: (commit: CommitRecord, hits: readonly number[]) => Promise<T>,
): AsyncGenerator<StoredRecord[] | T> {
  if (positions.length === 0) return;
  const segments = await index.segmentsFor(positions[0], positions[positions.length - 1]);
  let segmentAt = 0;
  for (let at = 0; at < positions.length; ) {
    // Commits are found hit by hit: a sparse result over a long history skips the commits
    // between its hits without reading their records.
    const commit = commitHolding(snapshot, positions[at]);
    assert(commit !== undefined, 'an index hit lies in a published commit');
    const hits: number[] = [];
    while (at < positions.length && positions[at] <= commit.lastPosition) hits.push(positions[at++]);
    if (hits.length >= fetchRunHitsMin) {
      yield await (dense ? dense(commit, hits) : fromRun(snapshot, commit, hits));
      continue;
    }
    while (segments[segmentAt].base !== commit.segment) segmentAt++;
    const segment = segments[segmentAt];
    // Entries, then payloads, each read with one read per stretch of nearby bytes.
    const entries = await snapshot.history.entriesAt(
      commit.segment,
      hits.map((position) => segment.locators[position - segment.base]),
      commit.runStart,
    );
    const payloads = await snapshot.history.payloadsAt(entries.map((entry) => entry.payload));
    yield hits.map((position, index) => toRecord(snapshot.feed, commit, position, entries[index], payloads[index]));
  }
}

async function fromRun(snapshot: Snapshot, commit: CommitRecord, hits: readonly number[]): Promise<StoredRecord[]> {
  return (await runHits(snapshot, commit, hits)).records();
}

/** The hits of one commit (at least one), from its run read whole, as columns. */
async function runHits(snapshot: Snapshot, commit: CommitRecord, hits: readonly number[]): Promise<ColumnBatch> {
  const parts: ColumnBatch[] = [];
  let next = 0;
  // The run is decoded whole, in one batch: a fetch's dense hits are one commit's answer.
  for await (const run of snapshot.history.runColumns(
    commit,
    await snapshot.history.readRunBytes(commit),
    Math.max(1, commit.entries),
  )) {
    const found = rowsOfPositions(run, hits, next);
    next = found.next;
    parts.push(ColumnBatch.ofRun(snapshot.feed, commit, run).take(found.rows));
  }
  assert(parts.length === 1, 'a run decoded whole is one batch');
  return parts[0];
}

/** `fetchByPosition` in the columnar form: hits dense in a commit are taken from its run's columns. */
export async function* fetchColumnsByPosition(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
): AsyncGenerator<ColumnBatch> {
  for await (const records of fetchByPosition(snapshot, index, positions, (commit, hits) =>
    runHits(snapshot, commit, hits),
  )) {
    yield records instanceof ColumnBatch ? records : ColumnBatch.ofRecords(records);
  }
}
