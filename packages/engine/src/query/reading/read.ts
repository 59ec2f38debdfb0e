/**
 * Feed-scope reads (docs/architecture.md, Reading) over a snapshot: RAW (every record in position order), dedup (the
 * first occurrence of each fingerprint, over the whole history or over the read window) and
 * latest (one winner per key: the highest version, then the highest position; a tombstone hides
 * its key; unkeyed records are not in this view). Results come one commit at a time as arrays
 * (the batch form); the object form flattens them.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import {
  isReadMode,
  type ReadMode,
  type ReadOptions,
  type RecordFilter,
  readModesInWords,
} from '@streamstack/protocol';
import { assert, StreamStackError } from '../../errors.js';
import { columnBatchRowsMax, keyTableSlotsInitial, runsReadBytesFirst, runsReadBytesMax } from '../../limits.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { fingerprintKey } from '../../storage/commit-run.js';
import { winsOver } from '../../storage/key-file.js';
import type { RunBufferPool } from '../../storage/run-buffers.js';
import { rowsOfPositions } from '../../storage/run-columns.js';
import { joinsStretch, runsOfStretch } from '../../storage/run-reads.js';
import type { KeyIndex } from '../indexes/key-index.js';
import { ByteKeyTable } from '../indexes/key-table.js';
import { ColumnBatch } from './column-batch.js';
import { columnMatcher, markedRows } from './column-filter.js';
import { plannedColumns, plannedRead } from './planned-read.js';
import { normalizeQuery, type Query } from './planner.js';
import { checkCursor, readEnd } from './read-cursor.js';
import { assertIntact, type Snapshot, type StoredRecord } from './snapshot.js';

export { checkCursor, readEnd } from './read-cursor.js';
export type { ReadMode, ReadOptions, RecordFilter };

/** The commits a read after `cursor` up to `end` covers, read as they are reached. */
function windowOf(snapshot: Snapshot, cursor: number, end: number): Generator<CommitRecord> {
  return snapshot.commits.range(cursor + 1, end);
}

/**
 * The runs of the commits after `cursor`, as columns (batches of at most `columnBatchRowsMax`
 * rows, each within one commit unless `spanCommits`), in commit order. Spanning, the runs of
 * each stretch are decoded together: a thousand one-record commits are one batch, one kernel
 * call, not a thousand. Consecutive runs of a segment are read as one stretch
 * (`HistoryRuns.readStretchBytes`), the first a short one, and the next stretch is read from disk
 * while this one is decoded and consumed; `more` is asked before each read ahead, so a read that
 * has what it wants reads no further.
 */
async function* runColumns(
  snapshot: Snapshot,
  cursor: number,
  end: number,
  more: () => boolean,
  signal: AbortSignal | undefined,
  runBuffers: RunBufferPool | undefined,
  /**
   * Rows the consumer still takes, when it says (a RAW read with a limit): a commit's batches are
   * no larger, so a read of its first few records does not decode, nor fetch the payloads
   * stored elsewhere of, the rest of a large commit.
   */
  rowsWanted?: () => number,
  spanCommits = false,
): AsyncGenerator<ColumnBatch> {
  const commits = windowOf(snapshot, cursor, end);
  let held = commits.next();
  // The first stretch is small, so the first record comes after one short read (a cold block of
  // evicted history, not eight MiB of them); each next one doubles, up to `runsReadBytesMax`.
  let stretchBytesMax = runsReadBytesFirst;
  const nextStretch = (): CommitRecord[] => {
    const stretch: CommitRecord[] = [];
    while (!held.done && (stretch.length === 0 || joinsStretch(stretch[0], held.value, stretchBytesMax))) {
      stretch.push(held.value);
      held = commits.next();
    }
    stretchBytesMax = Math.min(runsReadBytesMax, stretchBytesMax * 2);
    return stretch;
  };
  const readNext = (): Promise<Uint8Array> | undefined => {
    if (upcoming.length === 0) return undefined;
    const reading = snapshot.history.runs.readStretchBytes(upcoming, runBuffers);
    // A prefetch that is never awaited must not turn into an unhandled rejection.
    reading.catch(() => undefined);
    return reading;
  };
  let upcoming = nextStretch();
  let next = readNext();
  while (upcoming.length > 0) {
    const stretch = upcoming;
    const current = next!;
    // The next stretch is read ahead unless this one holds every row the consumer still takes:
    // the first record after a cursor in evicted history then costs one request, not a second
    // for bytes it never reads. Should it hold fewer after all (a compacted run), the next
    // stretch is read below, once this one is consumed.
    upcoming = more() && (rowsWanted === undefined || entriesOf(stretch) < rowsWanted()) ? nextStretch() : [];
    next = readNext();
    const bytes = await current;
    const rowsMax = () => Math.max(1, Math.min(columnBatchRowsMax, rowsWanted?.() ?? columnBatchRowsMax));
    if (spanCommits && stretch.length > 1) {
      // The stretch's runs lie side by side in one buffer, as they were read.
      for await (const run of snapshot.history.runs.stretchColumns(stretch, bytes, rowsMax)) {
        signal?.throwIfAborted();
        yield ColumnBatch.ofRuns(snapshot.feed, stretch, run);
      }
    } else {
      const runs = runsOfStretch(stretch, bytes);
      for (const [index, commit] of stretch.entries()) {
        signal?.throwIfAborted();
        for await (const run of snapshot.history.runs.runColumns(commit, runs[index], rowsMax())) {
          yield ColumnBatch.ofRun(snapshot.feed, commit, run);
        }
      }
    }
    // Every batch of the stretch was handed out: the consumer says when it holds none.
    runBuffers?.readerDone(bytes);
    if (upcoming.length === 0 && more()) {
      upcoming = nextStretch();
      next = readNext();
    }
  }
}

/** The entries the runs of `stretch` hold: the rows its columns give. */
function entriesOf(stretch: readonly CommitRecord[]): number {
  let entries = 0;
  for (const commit of stretch) entries += commit.entries;
  return entries;
}

/** A fingerprint's bytes as its dictionary term, straight from the batch (no view is made). */
function fingerprintTerm(batch: ColumnBatch, row: number): string {
  const bytes = batch.bytes;
  const start = batch.fingerprintStarts[row];
  if (batch.fingerprintEnds[row] - start === 8) {
    return String.fromCharCode(
      bytes[start],
      bytes[start + 1],
      bytes[start + 2],
      bytes[start + 3],
      bytes[start + 4],
      bytes[start + 5],
      bytes[start + 6],
      bytes[start + 7],
    );
  }
  return fingerprintKey(batch.fingerprint(row));
}

/**
 * Reads records in RAW or dedup mode, a batch at a time (of one commit, or spanning commits when
 * `spanCommits`); runs are read into `runBuffers` when given.
 */
async function* scanModes(
  snapshot: Snapshot,
  options: ReadOptions,
  fingerprints: KeyIndex,
  runBuffers: RunBufferPool | undefined,
  spanCommits: boolean,
): AsyncGenerator<ColumnBatch> {
  const cursor = checkCursor(snapshot, options.after);
  const mode = options.mode ?? 'raw';
  const select = columnMatcher(normalizeQuery(options.filter));
  let remaining = options.limit ?? Number.POSITIVE_INFINITY;
  const windowFirst = mode === 'dedup' && options.dedupScope === 'window' ? new Set<string>() : undefined;
  for await (let batch of runColumns(
    snapshot,
    cursor,
    readEnd(snapshot, options),
    () => remaining > 0,
    options.signal,
    runBuffers,
    // Each row a RAW read without a filter decodes is a row it returns.
    mode === 'raw' && !select ? () => remaining : undefined,
    spanCommits,
  )) {
    if (remaining <= 0) return;
    if (mode === 'dedup' || select) {
      // Whole-history dedup: first occurrences were decided per sealed segment when its
      // fingerprint dictionary was built; the active segment's are looked up. A batch's rows
      // lie in one segment, spanning commits or not: a stretch is read from one.
      const current = batch;
      const firsts =
        mode === 'dedup' && !windowFirst
          ? await fingerprints.firstOccurrences(commitSegment(snapshot, current.commit), current.positions, (row) =>
              fingerprintTerm(current, row),
            )
          : undefined;
      const matched = select?.(batch);
      const rows = new Uint32Array(batch.length);
      let kept = 0;
      for (let row = 0; row < batch.length; row++) {
        if (mode === 'dedup') {
          if (windowFirst) {
            const term = fingerprintTerm(batch, row);
            if (windowFirst.has(term)) continue;
            windowFirst.add(term);
          } else if (firsts![row] === 0) continue;
        }
        if (matched && matched[row] === 0) continue;
        rows[kept++] = row;
      }
      batch = batch.take(rows.subarray(0, kept));
    }
    if (batch.length > remaining) batch = batch.slice(remaining);
    remaining -= batch.length;
    if (batch.length > 0) yield batch;
  }
}

function commitSegment(snapshot: Snapshot, commit: number): number {
  return snapshot.commits.at(commit).segment;
}

/** Reads the winners per key of the window, in position order. */
async function* scanLatest(snapshot: Snapshot, options: ReadOptions): AsyncGenerator<ColumnBatch> {
  const cursor = checkCursor(snapshot, options.after);
  const select = columnMatcher(normalizeQuery(options.filter));
  // Pass 1: the winner of every key in the window, from the manifests. Winners are slots of
  // parallel arrays, not an object each: a window can hold millions of keys.
  const slots = new ByteKeyTable();
  let commits = new Float64Array(keyTableSlotsInitial);
  let positions = new Float64Array(keyTableSlotsInitial);
  let versions = new Float64Array(keyTableSlotsInitial);
  let tombstones = new Uint8Array(keyTableSlotsInitial);
  for await (const batch of runColumns(
    snapshot,
    cursor,
    readEnd(snapshot, options),
    () => true,
    options.signal,
    undefined,
  )) {
    const { keyStarts, keyEnds, bytes } = batch;
    for (let row = 0; row < batch.length; row++) {
      if (!batch.hasKey(row)) continue;
      const version = batch.hasVersion(row) ? batch.versions[row] : 0;
      const position = batch.positions[row];
      const known = slots.size;
      const slot = slots.slotOf(bytes, keyStarts[row], keyEnds[row]);
      if (slot === known) {
        if (slot === commits.length) {
          const grow = <T extends Float64Array | Uint8Array>(column: T, make: new (length: number) => T): T => {
            const out = new make(column.length * 2);
            out.set(column as never);
            return out;
          };
          commits = grow(commits, Float64Array);
          positions = grow(positions, Float64Array);
          versions = grow(versions, Float64Array);
          tombstones = grow(tombstones, Uint8Array);
        }
      } else if (!winsOver({ version, position }, { version: versions[slot], position: positions[slot] })) {
        continue;
      }
      commits[slot] = batch.commitOf(row);
      positions[slot] = position;
      versions[slot] = version;
      tombstones[slot] = batch.isTombstone(row) ? 1 : 0;
    }
  }
  // Pass 2: the live winners, commit by commit, with their payloads.
  const byCommit = new Map<number, number[]>();
  for (let slot = 0; slot < slots.size; slot++) {
    if (tombstones[slot]) continue;
    const list = byCommit.get(commits[slot]);
    if (list) list.push(positions[slot]);
    else byCommit.set(commits[slot], [positions[slot]]);
  }
  let remaining = options.limit ?? Number.POSITIVE_INFINITY;
  // Only the commits that hold winners are visited, in commit order.
  for (const commitNumber of [...byCommit.keys()].sort((a, b) => a - b)) {
    if (remaining <= 0) return;
    const commit = snapshot.commits.at(commitNumber);
    options.signal?.throwIfAborted();
    // The winners' positions in the commit, ascending, found batch by batch.
    const winners = Float64Array.from(byCommit.get(commitNumber)!).sort();
    let next = 0;
    for await (const run of snapshot.history.runs.runColumns(
      commit,
      await snapshot.history.runs.readRunBytes(commit),
      columnBatchRowsMax,
    )) {
      // The winners among this batch's rows, as rows of the batch.
      const found = rowsOfPositions(run, winners, next);
      if (found.next === next) continue;
      next = found.next;
      const rows = found.rows;
      let batch = ColumnBatch.ofRun(snapshot.feed, commit, run).take(rows);
      const matched = select?.(batch);
      if (matched) batch = batch.take(markedRows(matched));
      if (batch.length > remaining) batch = batch.slice(remaining);
      remaining -= batch.length;
      if (batch.length > 0) yield batch;
      if (remaining <= 0) return;
      if (next === winners.length) break;
    }
  }
}

/** Checks a read's options: `INVALID_ARGUMENT` or `CURSOR_OUT_OF_RANGE`, before any I/O. */
export function checkReadOptions(
  snapshot: Snapshot,
  options: ReadOptions,
): { mode: ReadMode; query: Query | undefined } {
  const mode = options.mode ?? 'raw';
  if (!isReadMode(mode)) {
    throw new StreamStackError('INVALID_ARGUMENT', `mode must be ${readModesInWords}, not ${JSON.stringify(mode)}`);
  }
  checkCursor(snapshot, options.after);
  readEnd(snapshot, options);
  if (mode === 'raw' && options.plan !== undefined && !['auto', 'index', 'scan'].includes(options.plan)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `plan must be auto, index or scan, not ${JSON.stringify(options.plan)}`,
    );
  }
  return { mode, query: normalizeQuery(options.filter) };
}

/**
 * The columnar form of a feed read: batches in position order, each of one commit's records —
 * or, with `spanCommits`, of several small commits' where a RAW or dedup scan meets them (see
 * `ColumnBatch.spansCommits`).
 */
export function readColumns(
  snapshot: Snapshot,
  options: ReadOptions,
  fingerprints: KeyIndex,
  runBuffers?: RunBufferPool,
  spanCommits = false,
): AsyncGenerator<ColumnBatch> {
  const { mode, query } = checkReadOptions(snapshot, options);
  // Only a scan in RAW or dedup mode reads through `runBuffers`: the others read few runs.
  const reads =
    mode === 'raw' && query
      ? plannedColumns(snapshot, query, options)
      : mode === 'latest'
        ? scanLatest(snapshot, options)
        : scanModes(snapshot, options, fingerprints, runBuffers, spanCommits);
  // A read that stops before the head never reaches the damage, so it ends as any read does.
  const toHead = readEnd(snapshot, options) === snapshot.watermark.commit;
  if (!snapshot.headDamage || !toHead || (mode === 'raw' && query)) return reads;
  // A key's winner may lie in the history past the damage: latest cannot name one winner before
  // it has seen everything, so it fails before it yields any. RAW and dedup records are exact up
  // to the damage, and the read ends there.
  return mode === 'latest' ? failingAtDamage(snapshot) : endingAtDamage(snapshot, reads);
}

/** The batch form of a feed read: arrays of records, each from one commit, in position order. */
export function readBatches(
  snapshot: Snapshot,
  options: ReadOptions,
  fingerprints: KeyIndex,
): AsyncGenerator<StoredRecord[]> {
  const { mode, query } = checkReadOptions(snapshot, options);
  // A filtered RAW read fetches its few records one by one: they are made as objects directly.
  if (mode === 'raw' && query) return plannedRead(snapshot, query, options, true);
  return asRecords(readColumns(snapshot, options, fingerprints, undefined, true), options.signal);
}

/**
 * The records of a read as they come: batches of columns, whose records are made as they are
 * handed out (so a record not kept dies young), or arrays of records where a filtered RAW read
 * fetched them one by one. What `feed.read` flattens.
 */
export function readRecords(
  snapshot: Snapshot,
  options: ReadOptions,
  fingerprints: KeyIndex,
): AsyncGenerator<ColumnBatch | StoredRecord[]> {
  const { mode, query } = checkReadOptions(snapshot, options);
  if (mode === 'raw' && query) return plannedRead(snapshot, query, options, false);
  return readColumns(snapshot, options, fingerprints, undefined, true);
}

/**
 * A filtered RAW read's records, in arrays that may span commits (a read's lines take them so):
 * `readRecords` for a read known to be one.
 */
export function readFilteredRecords(snapshot: Snapshot, options: ReadOptions): AsyncGenerator<StoredRecord[]> {
  const { mode, query } = checkReadOptions(snapshot, options);
  assert(mode === 'raw' && query !== undefined, 'a filtered read is a RAW read with a filter');
  return plannedRead(snapshot, query!, options, false);
}

/**
 * Records made from the batches, one array per commit: a commit may span several batches, and a
 * batch several commits.
 */
async function* asRecords(batches: AsyncGenerator<ColumnBatch>, signal?: AbortSignal): AsyncGenerator<StoredRecord[]> {
  let pending: StoredRecord[] = [];
  let commit = 0;
  for await (const batch of batches) {
    for (let row = 0; row < batch.length; row++) {
      const rowCommit = batch.commitOf(row);
      if (rowCommit !== commit && pending.length > 0) {
        // A batch may hold a thousand commits: a read whose signal aborts stops at the next.
        signal?.throwIfAborted();
        yield pending;
        pending = [];
      }
      commit = rowCommit;
      pending.push(batch.record(row));
    }
  }
  if (pending.length > 0) yield pending;
}

/** A read that reaches the head of a history whose head corruption took ends with `CORRUPT`. */
async function* endingAtDamage<T>(snapshot: Snapshot, reads: AsyncGenerator<T>): AsyncGenerator<T> {
  yield* reads;
  assertIntact(snapshot, snapshot.watermark.position + 1, snapshot.watermark.position + 1);
}

/** A read whose every answer depends on history corruption took: it fails when first read. */
// biome-ignore lint/correctness/useYield: it yields nothing on purpose, failing when first read.
async function* failingAtDamage<T>(snapshot: Snapshot): AsyncGenerator<T> {
  assertIntact(snapshot, snapshot.watermark.position + 1, snapshot.watermark.position + 1);
}
