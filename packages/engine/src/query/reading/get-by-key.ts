/**
 * A point lookup through the key index: a key's live winner as of a commit, read from its
 * manifest entry and payload (in evicted history, fetched from object storage first), and
 * checked against what the index says before it is answered.
 */
import { assert, StreamStackError } from '../../errors.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { entryPosition } from '../../storage/commit-record.js';
import type { KeyWinner } from '../../storage/key-file.js';
import type { ManifestEntry } from '../../storage/records.js';
import { type KeyIndex, notHeld } from '../indexes/key-index.js';
import { commitHolding } from './planner.js';
import { assertIntact, type Snapshot, type StoredRecord, toRecord } from './snapshot.js';

/** A point lookup through the key index: the live winner of `key` as of commit `asOf`. */
export async function getByKey(
  snapshot: Snapshot,
  keys: KeyIndex,
  key: string,
  asOf: number,
): Promise<StoredRecord | undefined> {
  // A key's winner may lie in records corruption took, so a lookup over them cannot answer.
  const asOfPosition = snapshot.commits.positionAfter(asOf);
  assertIntact(snapshot, 1, asOfPosition, asOf === snapshot.watermark.commit);
  if (asOfPosition === 0) return undefined;
  const winner = await keys.winner(key, asOfPosition);
  if (!winner || winner.tombstone) return undefined;
  const commit = commitHolding(snapshot, winner.position);
  assert(commit !== undefined && commit.firstPosition <= winner.position, 'a key winner lies in a published commit');
  // A point lookup reads one small entry and payload: a positional read straight from the page
  // cache costs a few microseconds, a trip through the thread pool several times that (an
  // evicted segment's blocks are fetched first, then read the same way).
  const matches = (found: ManifestEntry | undefined): found is ManifestEntry =>
    isWinnerEntry(found, key, winner, commit);
  let entry: ManifestEntry | undefined;
  try {
    entry = await snapshot.history.entries.entryAt(commit.segment, winner.locator, commit.runStart);
  } catch (error) {
    // Object storage out of reach is its own answer; a damaged or moved entry is looked for below.
    if (error instanceof StreamStackError && error.code === 'UNAVAILABLE') throw error;
    entry = undefined;
  }
  if (!matches(entry)) {
    // The locator is where the entry lay when the dictionary was built; a merge since then lays
    // the segment out anew (dictionaries after it keep their winners' old locators), so the
    // entry is looked for by its position in its commit's run.
    const run = await snapshot.history.runs.readRun(commit);
    entry = run.entries.find((candidate, index) => entryPosition(commit, index, candidate.seq) === winner.position);
  }
  if (!matches(entry)) {
    // Checked after reading, as every derived answer is: a key index that names another record
    // is damaged, and the answer would be wrong.
    throw new StreamStackError(
      'CORRUPT',
      `the key index names position ${winner.position} for ${JSON.stringify(key)}, but the record there does not match`,
      {
        details: { file: snapshot.history.segments.fileFor(commit.segment), offset: winner.locator },
      },
    );
  }
  const payload = await snapshot.history.bytes.payloadAt(entry.payload);
  return toRecord(snapshot.feed, commit, winner.position, entry, payload);
}

/**
 * `getByKey`, answered in this turn when the winner, its entry and its payload are all at hand
 * (dictionaries in memory, the segment on local disk) and the entry is where the index says:
 * `notHeld` otherwise, and for any failure, for `getByKey` to answer (and report) instead. A
 * lookup that never yields needs no read gate, for no switch-over can run inside it, and skips
 * the promise of every step: most of a warm lookup's cost besides its two reads.
 */
export function getByKeyNow(
  snapshot: Snapshot,
  keys: KeyIndex,
  key: string,
  asOf: number,
): StoredRecord | undefined | typeof notHeld {
  try {
    const asOfPosition = snapshot.commits.positionAfter(asOf);
    assertIntact(snapshot, 1, asOfPosition, asOf === snapshot.watermark.commit);
    if (asOfPosition === 0) return undefined;
    const winner = keys.winnerNow(key, asOfPosition);
    if (winner === notHeld) return notHeld;
    if (!winner || winner.tombstone) return undefined;
    const commit = commitHolding(snapshot, winner.position);
    if (commit === undefined || commit.firstPosition > winner.position) return notHeld;
    const entry = snapshot.history.entries.readEntrySync(commit.segment, winner.locator, commit.runStart);
    if (!isWinnerEntry(entry, key, winner, commit)) return notHeld;
    return toRecord(
      snapshot.feed,
      commit,
      winner.position,
      entry,
      snapshot.history.bytes.readPayloadSync(entry.payload),
    );
  } catch {
    return notHeld;
  }
}

/** Whether `found` is the entry of `key`'s winner `winner`, in `commit`. */
function isWinnerEntry(
  found: ManifestEntry | undefined,
  key: string,
  winner: KeyWinner,
  commit: CommitRecord,
): found is ManifestEntry {
  return (
    found !== undefined &&
    found.key === key &&
    (found.version ?? 0) === winner.version &&
    commit.firstPosition + found.seq - 1 === winner.position
  );
}
