/**
 * Feed-scope reads (docs/architecture.md, Reading) over a snapshot: RAW (every record in position order), dedup (the
 * first occurrence of each fingerprint, over the whole history or over the read window) and
 * latest (one winner per key: the highest version, then the highest position; a tombstone hides
 * its key; unkeyed records are not in this view). Results come one commit at a time as arrays
 * (the batch form); the object form flattens them.
 */
import { assert, StreamStackError } from '../errors.js';
import { fingerprintKey, type CommitRecord } from '../storage/commit-run.js';
import { winsOver } from '../storage/key-file.js';
import { fetchByPosition } from './fetch.js';
import type { KeyIndex } from './key-index.js';
import { commitHolding, findPositions, matches, normalizeQuery, type Plan, type Query, type QueryItem } from './planner.js';
import { assertIntact, corruptionError, toRecord, type Snapshot, type StoredRecord } from './snapshot.js';

export type ReadMode = 'raw' | 'dedup' | 'latest';

/**
 * Which records a read returns: a query (an OR of items), or a single item — any of its `types`
 * (when given) and all of its `tags` (when given).
 */
export type RecordFilter = QueryItem | Query;

export interface ReadOptions {
  /** A commit cursor: records of later commits are read. 0 (the default) is the start. */
  readonly after?: number;
  readonly mode?: ReadMode;
  /** For dedup: compare against the whole history (default) or only the read window. */
  readonly dedupScope?: 'history' | 'window';
  readonly filter?: RecordFilter;
  /** How a filtered RAW read finds its records: the planner's choice, or forced. */
  readonly plan?: Plan;
  /** At most this many records. */
  readonly limit?: number;
  readonly signal?: AbortSignal;
}

/** Checks a cursor against a snapshot: `CURSOR_OUT_OF_RANGE` before the start or past the head. */
export function checkCursor(snapshot: Snapshot, after: number | undefined, name = 'after'): number {
  const cursor = after ?? 0;
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

function matcher(filter: RecordFilter | undefined): ((record: { type?: string; tags: readonly string[] }) => boolean) | undefined {
  const query = normalizeQuery(filter);
  return query ? (record) => matches(query, record) : undefined;
}

/** A filtered RAW read: the planner finds the positions, then the records are fetched. */
async function* plannedRead(snapshot: Snapshot, query: Query, options: ReadOptions): AsyncGenerator<StoredRecord[]> {
  const cursor = checkCursor(snapshot, options.after);
  const afterPosition = cursor === 0 ? 0 : snapshot.commits.at(cursor).lastPosition;
  const positions = await findPositions(snapshot.kernels, snapshot, snapshot.index, query, afterPosition, {
    plan: options.plan ?? 'auto',
    ...(options.limit === undefined ? {} : { limit: options.limit }),
  });
  for await (const batch of fetchByPosition(snapshot, snapshot.index, positions)) {
    options.signal?.throwIfAborted();
    yield batch;
  }
}

/** The commits a read after `cursor` covers, read as they are reached. */
function windowOf(snapshot: Snapshot, cursor: number): Generator<CommitRecord> {
  return snapshot.commits.range(cursor + 1, snapshot.watermark.commit);
}

/** Reads records in RAW or dedup mode, one commit's worth at a time. */
async function* scanModes(snapshot: Snapshot, options: ReadOptions, fingerprints: KeyIndex): AsyncGenerator<StoredRecord[]> {
  const cursor = checkCursor(snapshot, options.after);
  const mode = options.mode ?? 'raw';
  const matches = matcher(options.filter);
  let remaining = options.limit ?? Number.POSITIVE_INFINITY;
  const windowFirst = mode === 'dedup' && options.dedupScope === 'window' ? new Set<string>() : undefined;
  const commits = windowOf(snapshot, cursor);
  // The next commit's bytes are read from disk while this one is decoded and consumed.
  let upcoming = commits.next();
  let next = upcoming.done ? undefined : snapshot.history.readRunBytes(upcoming.value);
  while (!upcoming.done) {
    const commit = upcoming.value;
    const current = next!;
    upcoming = remaining > 0 ? commits.next() : { done: true, value: undefined };
    next = upcoming.done ? undefined : snapshot.history.readRunBytes(upcoming.value);
    // A prefetch that is never awaited must not turn into an unhandled rejection.
    next?.catch(() => undefined);
    if (remaining <= 0) return;
    options.signal?.throwIfAborted();
    let records = await snapshot.history.decodeRunRecords(commit, snapshot.feed, await current);
    if (mode === 'dedup' || matches) {
      const terms = mode === 'dedup' ? records.map((record) => fingerprintKey(record.fingerprint)) : [];
      // Whole-history dedup: first occurrences were decided per sealed segment when its
      // fingerprint dictionary was built; the active segment's are looked up.
      const firsts =
        mode === 'dedup' && !windowFirst
          ? await fingerprints.firstOccurrences(
              commit.segment,
              records.map((record) => record.position),
              terms,
            )
          : undefined;
      records = records.filter((record, index) => {
        if (mode === 'dedup') {
          if (windowFirst) {
            if (windowFirst.has(terms[index])) return false;
            windowFirst.add(terms[index]);
          } else if (!firsts![index]) return false;
        }
        return !matches || matches(record);
      });
    }
    if (records.length > remaining) records = records.slice(0, remaining);
    remaining -= records.length;
    if (records.length > 0) yield records;
  }
}

/** Reads the winners per key of the window, in position order. */
async function* scanLatest(snapshot: Snapshot, options: ReadOptions): AsyncGenerator<StoredRecord[]> {
  const cursor = checkCursor(snapshot, options.after);
  const matches = matcher(options.filter);
  // Pass 1: the winner of every key in the window, from the manifests.
  const winners = new Map<string, { commit: number; index: number; position: number; version: number; tombstone: boolean }>();
  for (const commit of windowOf(snapshot, cursor)) {
    options.signal?.throwIfAborted();
    const run = await snapshot.history.readRun(commit);
    for (let index = 0; index < run.entries.length; index++) {
      const entry = run.entries[index];
      if (entry.key === undefined) continue;
      const candidate = { commit: commit.commit, index, position: commit.firstPosition + index, version: entry.version ?? 0, tombstone: entry.tombstone };
      const best = winners.get(entry.key);
      if (winsOver(candidate, best)) winners.set(entry.key, candidate);
    }
  }
  // Pass 2: the live winners, commit by commit, with their payloads.
  const byCommit = new Map<number, number[]>();
  for (const winner of winners.values()) {
    if (winner.tombstone) continue;
    const list = byCommit.get(winner.commit);
    if (list) list.push(winner.index);
    else byCommit.set(winner.commit, [winner.index]);
  }
  let remaining = options.limit ?? Number.POSITIVE_INFINITY;
  // Only the commits that hold winners are visited, in commit order.
  for (const commitNumber of [...byCommit.keys()].sort((a, b) => a - b)) {
    const commit = snapshot.commits.at(commitNumber);
    const indexes = byCommit.get(commitNumber);
    if (!indexes || remaining <= 0) continue;
    options.signal?.throwIfAborted();
    indexes.sort((a, b) => a - b);
    const records = await snapshot.history.readRunRecords(commit, snapshot.feed);
    const out: StoredRecord[] = [];
    for (const index of indexes) {
      const record = records[index];
      if (matches && !matches(record)) continue;
      if (remaining-- <= 0) break;
      out.push(record);
    }
    if (out.length > 0) yield out;
  }
}

/** The batch form of a feed read: arrays of records, each from one commit, in position order. */
export function readBatches(snapshot: Snapshot, options: ReadOptions, fingerprints: KeyIndex): AsyncGenerator<StoredRecord[]> {
  const mode = options.mode ?? 'raw';
  if (mode !== 'raw' && mode !== 'dedup' && mode !== 'latest') {
    throw new StreamStackError('INVALID_ARGUMENT', `mode must be raw, dedup or latest, not ${JSON.stringify(mode)}`);
  }
  checkCursor(snapshot, options.after);
  if (mode === 'raw' && options.plan !== undefined && !['auto', 'index', 'scan'].includes(options.plan)) {
    throw new StreamStackError('INVALID_ARGUMENT', `plan must be auto, index or scan, not ${JSON.stringify(options.plan)}`);
  }
  const query = normalizeQuery(options.filter);
  if (mode === 'raw' && query) return plannedRead(snapshot, query, options);
  const reads = mode === 'latest' ? scanLatest(snapshot, options) : scanModes(snapshot, options, fingerprints);
  return snapshot.headDamage ? endingAtDamage(snapshot, reads) : reads;
}

/** A read that reaches the head of a history whose head corruption took ends with `CORRUPT`. */
async function* endingAtDamage(snapshot: Snapshot, reads: AsyncGenerator<StoredRecord[]>): AsyncGenerator<StoredRecord[]> {
  yield* reads;
  assertIntact(snapshot, snapshot.watermark.position + 1, snapshot.watermark.position + 1);
}

/** A point lookup through the key index: the live winner of `key` as of commit `asOf`. */
export async function getByKey(snapshot: Snapshot, keys: KeyIndex, key: string, asOf: number): Promise<StoredRecord | undefined> {
  // A key's winner may lie in records corruption took, so a lookup over them cannot answer.
  const asOfPosition = asOf === 0 ? 0 : snapshot.commits.at(asOf).lastPosition;
  assertIntact(snapshot, 1, asOfPosition, asOf === snapshot.watermark.commit);
  if (asOfPosition === 0) return undefined;
  const winner = await keys.winner(key, asOfPosition);
  if (!winner || winner.tombstone) return undefined;
  const commit = commitHolding(snapshot, winner.position);
  assert(commit !== undefined && commit.firstPosition <= winner.position, 'a key winner lies in a published commit');
  // A point lookup reads one small entry and payload: a positional read straight from the page
  // cache costs a few microseconds, a trip through the thread pool several times that.
  const entry = snapshot.history.readEntrySync(commit.segment, winner.locator, commit.runStart);
  if (entry.key !== key || (entry.version ?? 0) !== winner.version || commit.firstPosition + entry.seq - 1 !== winner.position) {
    // Checked after reading, as every derived answer is: a key index that names another record
    // is damaged, and the answer would be wrong.
    throw new StreamStackError('CORRUPT', `the key index names position ${winner.position} for ${JSON.stringify(key)}, but the record there does not match`, {
      details: { file: snapshot.history.segments.fileFor(commit.segment), offset: winner.locator },
    });
  }
  const payload = snapshot.history.readPayloadSync(entry.payload);
  return toRecord(snapshot.feed, commit, winner.position, entry, payload);
}
