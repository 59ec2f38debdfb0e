/**
 * What a read runs over (DESIGN §2.4, §7): the commits published when the read started, bounded
 * by the watermark it loaded then. The commit list is append-only, so a read keeps the length it
 * saw and never sees part of a commit, and nothing it does waits for the writer.
 */
import type { Kernels } from '../kernels/kernels.js';
import type { CommitRecord } from '../storage/history.js';
import type { FeedIndex } from './feed-index.js';
import type { CommitRun, History } from '../storage/history-log.js';
import type { ManifestEntry, PayloadLocation } from '../storage/records.js';

export interface Watermark {
  readonly commit: number;
  readonly position: number;
}

/** The immutable view one read runs over. */
export interface Snapshot {
  readonly feed: string;
  readonly watermark: Watermark;
  /** `commits[c - 1]` is commit c, for every c up to the watermark. */
  readonly commits: readonly CommitRecord[];
  readonly history: History;
  /** The tag and type index; its tail may run past the watermark, which reads ignore. */
  readonly index: FeedIndex;
  readonly kernels: Kernels;
}

/** A published record, as reads return it. */
export interface StoredRecord {
  readonly feed: string;
  readonly commit: number;
  readonly stream: string;
  readonly seq: number;
  readonly position: number;
  readonly timestamp: number;
  readonly fingerprint: Uint8Array;
  readonly payload: Uint8Array;
  readonly key?: string;
  readonly version?: number;
  readonly tombstone: boolean;
  readonly type?: string;
  readonly tags: readonly string[];
}

export function commitOf(snapshot: Snapshot, commit: number): CommitRecord {
  return snapshot.commits[commit - 1];
}

/** Reads a commit's run and turns its entries into records, payloads included. */
export async function readCommitRecords(snapshot: Snapshot, commit: CommitRecord): Promise<StoredRecord[]> {
  const run = await snapshot.history.readRun(commit);
  const records = new Array<StoredRecord>(run.entries.length);
  for (let index = 0; index < run.entries.length; index++) {
    records[index] = toRecord(snapshot.feed, commit, commit.firstPosition + index, run.entries[index], await payloadOf(snapshot, run, run.entries[index].payload));
  }
  return records;
}

/** A payload from the run already read when it lies there (the common case), else from disk. */
export function payloadOf(snapshot: Snapshot, run: CommitRun, location: PayloadLocation): Uint8Array | Promise<Uint8Array> {
  const start = location.offset - run.commit.runStart;
  if (location.segment === run.commit.segment && start >= 0 && start + location.length <= run.bytes.length) {
    return run.bytes.subarray(start, start + location.length);
  }
  return snapshot.history.readPayload(location);
}

export function toRecord(feed: string, commit: CommitRecord, position: number, entry: ManifestEntry, payload: Uint8Array): StoredRecord {
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
