/**
 * Fetching records by position (what the index path of a read returns): the index's locator
 * column says where each record's manifest entry lies, so a handful of records costs a handful
 * of small reads, and hits lying near each other share one (coalesced by where they lie); where
 * many hits fall in one commit, the commit's run is read once instead.
 */

import { assert } from '../../errors.js';
import { fetchRunHitsMin, fetchSparseHitsMax } from '../../limits.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { rowsOfPositions } from '../../storage/run-columns.js';
import type { FeedIndex } from '../indexes/feed-index.js';
import type { SegmentIndex } from '../indexes/segment-index.js';
import { ColumnBatch } from './column-batch.js';
import { commitHolding } from './planner.js';
import { type Snapshot, type StoredRecord, toRecord } from './snapshot.js';

/** The records at `positions` (ascending), grouped one array per commit. */
export function fetchByPosition(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
  options?: Omit<FetchOptions<never>, 'dense'>,
): AsyncGenerator<StoredRecord[]>;
export function fetchByPosition<T>(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
  options: FetchOptions<T>,
): AsyncGenerator<StoredRecord[] | T>;
export async function* fetchByPosition<T>(
  snapshot: Snapshot,
  index: FeedIndex,
  positions: readonly number[],
  options: FetchOptions<T> = {},
): AsyncGenerator<StoredRecord[] | T> {
  if (positions.length === 0) return;
  const { dense, byCommit = true } = options;
  const segments = await index.segmentsFor(positions[0], positions[positions.length - 1]);
  let segmentAt = 0;
  // Sparse hits of consecutive commits of one segment, fetched together: a tag query's hits lie
  // one or two to a commit, and a read (and an await) per commit cost more than the reads did.
  let sparse: SparseHits[] = [];
  let sparseCount = 0;
  const fetchSparse = async function* (): AsyncGenerator<StoredRecord[]> {
    const records = await sparseRecords(snapshot, segments[segmentAt], sparse);
    sparse = [];
    sparseCount = 0;
    if (byCommit) yield* records;
    else yield records.length === 1 ? records[0] : records.flat();
  };
  for (let at = 0; at < positions.length; ) {
    // Commits are found hit by hit: a sparse result over a long history skips the commits
    // between its hits without reading their records.
    const commit = commitHolding(snapshot, positions[at]);
    assert(commit !== undefined, 'an index hit lies in a published commit');
    const hits: number[] = [];
    while (at < positions.length && positions[at] <= commit.lastPosition) hits.push(positions[at++]);
    const isDense = hits.length >= fetchRunHitsMin;
    if (sparse.length > 0 && (isDense || commit.segment !== segments[segmentAt].base)) yield* fetchSparse();
    if (isDense) {
      yield await (dense ? dense(commit, hits) : fromRun(snapshot, commit, hits));
      continue;
    }
    while (segments[segmentAt].base !== commit.segment) segmentAt++;
    sparse.push({ commit, hits });
    sparseCount += hits.length;
    if (sparseCount >= fetchSparseHitsMax) yield* fetchSparse();
  }
  if (sparse.length > 0) yield* fetchSparse();
}

export interface FetchOptions<T> {
  /** Makes the answer for a commit holding at least `fetchRunHitsMin` hits, from its run. */
  readonly dense?: (commit: CommitRecord, hits: readonly number[]) => Promise<T>;
  /**
   * One array per commit (the default, what `readBatches` promises), or, when false, one array
   * for each group of sparse hits fetched together, which spares a consumer that flattens them
   * (`read`, a read's lines) a turn of its loop per commit.
   */
  readonly byCommit?: boolean;
}

/** A commit and the positions of its hits, fewer than `fetchRunHitsMin`. */
interface SparseHits {
  readonly commit: CommitRecord;
  readonly hits: readonly number[];
}

/**
 * The records of sparse hits of one segment, one array per commit: their manifest entries with
 * one read for each stretch of nearby bytes, then their payloads likewise.
 */
async function sparseRecords(
  snapshot: Snapshot,
  segment: SegmentIndex,
  commits: readonly SparseHits[],
): Promise<StoredRecord[][]> {
  const offsets: number[] = [];
  const runStarts: number[] = [];
  for (const { commit, hits } of commits) {
    assert(commit.segment === segment.base, 'sparse hits fetched together lie in one segment');
    for (const position of hits) {
      offsets.push(segment.locators[position - segment.base]);
      runStarts.push(commit.runStart);
    }
  }
  const entries = await snapshot.history.entries.entriesAt(segment.base, offsets, runStarts);
  const payloads = await snapshot.history.bytes.payloadsAt(entries.map((entry) => entry.payload));
  let at = 0;
  return commits.map(({ commit, hits }) =>
    hits.map((position) => {
      const record = toRecord(snapshot.feed, commit, position, entries[at], payloads[at]);
      at++;
      return record;
    }),
  );
}

async function fromRun(snapshot: Snapshot, commit: CommitRecord, hits: readonly number[]): Promise<StoredRecord[]> {
  return (await runHits(snapshot, commit, hits)).records();
}

/** The hits of one commit (at least one), from its run read whole, as columns. */
async function runHits(snapshot: Snapshot, commit: CommitRecord, hits: readonly number[]): Promise<ColumnBatch> {
  const parts: ColumnBatch[] = [];
  let next = 0;
  // The run is decoded whole, in one batch: a fetch's dense hits are one commit's answer.
  for await (const run of snapshot.history.runs.runColumns(
    commit,
    await snapshot.history.runs.readRunBytes(commit),
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
  for await (const records of fetchByPosition(snapshot, index, positions, {
    dense: (commit, hits) => runHits(snapshot, commit, hits),
  })) {
    yield records instanceof ColumnBatch ? records : ColumnBatch.ofRecords(records);
  }
}
