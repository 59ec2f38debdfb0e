/**
 * What a key compaction keeps of one group of consecutive segments (docs/history.md, Key
 * compaction): each key's winner as of the horizon (the highest version, then the highest
 * position) unless it is a tombstone, records without a key unless dropped by policy, and, of the
 * dropped records, the first occurrences of fingerprints a later record repeats (retired, so
 * whole-history dedup after the horizon is unchanged). It asks a history and its key and
 * fingerprint dictionaries: the feed's own, or a read-only snapshot of them on a rewrite's worker.
 */
import { yieldToEventLoop } from '../../event-loop.js';
import { columnBatchRowsMax, compactionLookupSliceRecords, eventLoopSliceRecords } from '../../limits.js';
import type { KeyIndex } from '../../query/indexes/key-index.js';
import { fingerprintKey, type RetiredFingerprint } from '../../storage/commit-run.js';
import type { History } from '../../storage/history-log.js';
import type { PublishedRecord } from '../../storage/records.js';
import type { RunSelection } from '../../storage/segment-merge.js';

/** The key and fingerprint dictionaries a selection asks. */
export interface KeyIndexes {
  readonly keys: KeyIndex;
  readonly fingerprints: KeyIndex;
}

/** What a key compaction up to the position `horizonPosition` keeps of each commit of the segments at `group`. */
export async function keyCompactionSelection(
  history: History,
  indexes: KeyIndexes,
  group: readonly number[],
  horizonPosition: number,
  keyless: 'keep' | 'drop',
  signal?: AbortSignal,
): Promise<RunSelection> {
  const repeats = await repeatsIn(history, indexes.fingerprints, group, signal);
  /** Each key's winner as of the horizon, looked up once: a key is updated many times. */
  const winners = new Map<string, { position: number; tombstone: boolean } | null>();
  const winnerOf = async (key: string) => {
    let winner = winners.get(key);
    if (winner === undefined) {
      const found = await indexes.keys.winner(key, horizonPosition);
      winner = found ? { position: found.position, tombstone: found.tombstone } : null;
      winners.set(key, winner);
    }
    return winner;
  };
  return async (commit, records, retiredBefore) => {
    const kept: PublishedRecord[] = [];
    const dropped: PublishedRecord[] = [];
    for (const [index, record] of records.entries()) {
      // Winners found in memory answer in microtasks, which alone never let the event loop
      // turn; a lookup costs microseconds, so the turns come more often than a decode's.
      if (index > 0 && index % compactionLookupSliceRecords === 0) await yieldToEventLoop();
      if (record.key === undefined) {
        (keyless === 'keep' ? kept : dropped).push(record);
        continue;
      }
      const winner = await winnerOf(record.key);
      if (winner && winner.position === record.position && !winner.tombstone) kept.push(record);
      else dropped.push(record);
    }
    if (dropped.length === 0) return { kept, retired: retiredBefore };
    // Of the dropped records, those holding the first occurrence of their fingerprint.
    const firsts = await indexes.fingerprints.firstOccurrences(
      commit.segment,
      dropped.map((record) => record.position),
      (index) => fingerprintKey(dropped[index].fingerprint),
    );
    // Both lists ascend by seq already: merged in one pass. A first occurrence no later record
    // repeats is not kept: no read after the horizon could count it.
    const added: RetiredFingerprint[] = [];
    for (let index = 0; index < dropped.length; index++) {
      if (index > 0 && index % compactionLookupSliceRecords === 0) await yieldToEventLoop();
      if (firsts[index] === 1 && repeats.has(fingerprintKey(dropped[index].fingerprint))) {
        added.push({
          seq: dropped[index].position - commit.firstPosition + 1,
          fingerprint: dropped[index].fingerprint,
        });
      }
    }
    return { kept, retired: mergeBySeq(retiredBefore, added) };
  };
}

/**
 * The fingerprints some later record repeats, of the records in the segments at `group`: those
 * of the records here that are not their fingerprint's first occurrence, and the first
 * occurrences here that a later segment holds again. A first occurrence compaction drops is
 * retired only when its fingerprint is among them. Read without payloads.
 */
async function repeatsIn(
  history: History,
  fingerprints: KeyIndex,
  group: readonly number[],
  signal: AbortSignal | undefined,
): Promise<Set<string>> {
  const repeats = new Set<string>();
  /** The group's first occurrences, asked of the later segments all at once at the end. */
  const firstTerms: string[] = [];
  let sinceYield = 0;
  for (const base of group) {
    for await (const { commit, bytes } of history.runs.runsInStretches(history.commits.commitsInSegment(base))) {
      signal?.throwIfAborted();
      for await (const columns of history.runs.runColumns(commit, bytes, columnBatchRowsMax, false)) {
        const term = (row: number) =>
          fingerprintKey(columns.bytes.subarray(columns.fingerprintStarts[row], columns.fingerprintEnds[row]));
        const firsts = await fingerprints.firstOccurrences(commit.segment, columns.positions, term);
        for (let row = 0; row < columns.count; row++) {
          if (firsts[row] === 0) repeats.add(term(row));
          else firstTerms.push(term(row));
        }
        sinceYield += columns.count;
        if (sinceYield >= eventLoopSliceRecords) {
          sinceYield = 0;
          await yieldToEventLoop();
        }
      }
    }
  }
  // A first occurrence here that a later segment repeats counts as repeated too.
  for (const term of await fingerprints.occurringAfter(firstTerms, group[group.length - 1])) repeats.add(term);
  return repeats;
}

/** Two lists of retired fingerprints, each ascending by seq and disjoint, as one. */
function mergeBySeq(a: readonly RetiredFingerprint[], b: readonly RetiredFingerprint[]): readonly RetiredFingerprint[] {
  if (a.length === 0) return b;
  if (b.length === 0) return a;
  const out: RetiredFingerprint[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length)
    out.push(j >= b.length || (i < a.length && a[i].seq < b[j].seq) ? a[i++] : b[j++]);
  return out;
}
