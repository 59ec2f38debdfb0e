/**
 * What a read runs over (docs/architecture.md, Reading): the commits published when the read started, bounded
 * by the watermark it loaded then. The commit list is append-only, so a read keeps the length it
 * saw and never sees part of a commit, and nothing it does waits for the writer.
 */

import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import type { CommitList } from '../../storage/commit-list.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import type { History } from '../../storage/history-log.js';
import type { ManifestEntry, PublishedRecord } from '../../storage/records.js';
import { assertReadable } from '../../storage/run-reads.js';
import type { Corruption } from '../../storage/runs.js';
import type { FeedIndex } from '../indexes/feed-index.js';

export interface Watermark {
  readonly commit: number;
  readonly position: number;
}

/** The immutable view one read runs over. */
export interface Snapshot {
  readonly feed: string;
  readonly watermark: Watermark;
  /** Every published commit (and maybe later ones, which reads ignore): `commits.at(c)` is commit c. */
  readonly commits: CommitList;
  readonly history: History;
  /** The tag and type index; its tail may run past the watermark, which reads ignore. */
  readonly index: FeedIndex;
  readonly kernels: Kernels;
  /** Stand-ins for commits that corruption made unreadable, in commit order. */
  readonly lost: readonly CommitRecord[];
  /** Corruption past the last readable commit: the history's head is unknown. */
  readonly headDamage: Corruption | undefined;
}

/** The `CORRUPT` error for a read that reaches corruption `damage`. */
export function corruptionError(damage: Corruption, what: string): StreamStackError {
  return new StreamStackError(
    'CORRUPT',
    `${what}: ${damage.file} is corrupt at offset ${damage.offset} (${damage.reason})`,
    {
      details: { file: damage.file, offset: damage.offset },
    },
  );
}

/**
 * Fails with `CORRUPT` when positions [from, to] — or, with `toHead`, everything after `from` —
 * touch records corruption made unreadable: an answer over them (an index lookup, a condition,
 * a key's winner) could be silently wrong.
 */
export function assertIntact(snapshot: Snapshot, from: number, to: number, toHead = true): void {
  for (const lost of snapshot.lost) {
    if (lost.records > 0 && lost.firstPosition <= to && lost.lastPosition >= from) assertReadable(lost);
  }
  if (toHead && snapshot.headDamage)
    throw corruptionError(snapshot.headDamage, 'the history after the last readable commit is lost');
}

/**
 * Fails with `CORRUPT` when a read of the commits after `cursor` up to `end` would cover a
 * commit that corruption took. Positions cannot say it: where several consecutive commits are
 * lost, only the first stand-in carries their positions (what each held is unknown), so a
 * cursor inside the run lies past all of them by position while the commits after it are still
 * lost. A read that answers from the index rather than from the commits (whose stand-ins fail as
 * they are reached) must check by commit number.
 */
export function assertCommitsIntact(snapshot: Snapshot, cursor: number, end: number): void {
  for (const lost of snapshot.lost) {
    if (lost.commit > cursor && lost.commit <= end) assertReadable(lost);
  }
}

/** A published record, as reads return it. */
export type StoredRecord = PublishedRecord;

export function commitOf(snapshot: Snapshot, commit: number): CommitRecord {
  return snapshot.commits.at(commit);
}

/** Reads a commit's records, payloads included. */
export function readCommitRecords(snapshot: Snapshot, commit: CommitRecord): Promise<StoredRecord[]> {
  return snapshot.history.runs.readRunRecords(commit, snapshot.feed);
}

export function toRecord(
  feed: string,
  commit: CommitRecord,
  position: number,
  entry: ManifestEntry,
  payload: Uint8Array,
): StoredRecord {
  return {
    feed,
    commit: commit.commit,
    stream: commit.stream,
    seq: entry.seq,
    position,
    timestamp: entry.timestamp,
    fingerprint: entry.fingerprint,
    payload,
    key: entry.key,
    version: entry.version,
    tombstone: entry.tombstone,
    type: entry.type,
    tags: entry.tags,
  };
}
