/** What a feed, a stream and a subscription report about themselves, embedded or over HTTP. */

import type { RetentionInfo } from './maintenance.js';
import type { Commit, CommitRecords } from './records.js';

export interface FeedInfo {
  readonly name: string;
  readonly createdAt: number;
  readonly commits: number;
  /** Published records (the last position). */
  readonly records: number;
  readonly head: Commit | null;
  readonly activeStream: string | null;
  readonly lease: { readonly epoch: number; readonly holder: string; readonly expiresAt: number } | null;
  /** The highest epoch ever granted. */
  readonly epoch: number;
  /**
   * What an acknowledgement promises: `local` (on this machine's disk) or `replicated` (also in
   * object storage), chosen when the feed was created.
   */
  readonly durability: 'local' | 'replicated';
  /** The first commit the history keeps (1 until a trim); cursors from `lowMark - 1` are valid. */
  readonly lowMark: number;
  /** The first position the history keeps. */
  readonly lowPosition: number;
  /** The retention policy, and what holds it back. */
  readonly retention: RetentionInfo;
  /**
   * The key-compaction horizon (0 when never compacted): cursors from `lowMark` to
   * `horizon - 1` fail with `COMPACTED`; the start (`lowMark - 1`) and `horizon` on are valid.
   */
  readonly horizon: number;
  /** Where its sealed history stands in object storage: only for a store opened with `objectStore`. */
  readonly tiering?: TieringInfo;
  /** How a follower keeps up with its writer: only for a store opened with `follower`. */
  readonly follower?: FollowerInfo;
  /** A replicated feed's slots in object storage: only for a feed created `durability: 'replicated'`. */
  readonly replication?: ReplicationInfo;
  /** Only for a fork: the feed it was forked from, and the last commit of it that it holds. */
  readonly fork?: { readonly feed: string; readonly at: number };
  /** Only while some of its history segments are shared with other feeds (forks): what, and with whom. */
  readonly shared?: FeedSharing;
}

/** History segments a feed shares with other feeds of its store (hard links made by forks). */
export interface FeedSharing {
  readonly segments: number;
  readonly bytes: number;
  /** The other feeds holding at least one of them. */
  readonly feeds: readonly string[];
}

/**
 * A replicated feed's slots (each group commit stored as an object before it is acknowledged),
 * since the feed was opened here.
 */
export interface ReplicationInfo {
  /** The highest slot number this writer took (0: none yet). */
  readonly lastSlot: number;
  /** Slots stored since the feed opened, fences included. */
  readonly slotsWritten: number;
  /** Object requests made for them (retries and read-backs included). */
  readonly requests: number;
  /** Why acknowledgements are waiting on object storage now, or null. */
  readonly stalled: string | null;
  /** Slots deleted since the feed opened: their content is in tiered history, or no longer needed. */
  readonly slotsRetired: number;
  /** Slots moved into packs (one object per run of them) since the feed opened. */
  readonly slotsPacked: number;
}

/**
 * A follower's syncs of its copy with object storage (each one a look for new segments, a trim
 * or a rewrite), since the feed was opened here. A failed sync keeps the history the follower
 * had, and the next one tries again.
 */
export interface FollowerInfo {
  /** When the last sync that succeeded ended (milliseconds since the epoch). */
  readonly syncedAt: number;
  readonly syncs: number;
  /** Syncs that found something new (a new view of the feed was opened). */
  readonly changes: number;
  /** Requests the syncs made to the object store. */
  readonly requests: number;
  /** Failed syncs in a row (0 once one succeeds), and the last failure. */
  readonly failures: number;
  readonly lastError: { readonly code: string; readonly message: string; readonly at: number } | null;
  /**
   * With `follow`: the unsealed tail read from the writer's server — its address, the commits
   * taken from it (not counting those a new view opened with), and the requests made. Null
   * without `follow`.
   */
  readonly tail: { readonly url: string; readonly commits: number; readonly requests: number } | null;
}

/**
 * A tiered feed's uploads: what object storage holds, what waits to go up (sealed segments not
 * yet visible there), and the last failure, which a pass that succeeds clears. Counters are since
 * the feed was opened.
 */
export interface TieringInfo {
  /** Segments visible remotely (their descriptors confirmed), and their files' bytes. */
  readonly remoteSegments: number;
  readonly remoteBytes: number;
  /** Sealed segments not yet visible remotely, and the bytes of those given an ordinal. */
  readonly pendingSegments: number;
  readonly pendingBytes: number;
  /** Segments gone locally (trimmed, or replaced by a rewrite) whose objects are being deleted. */
  readonly retiringSegments: number;
  /** The ordinal the next segment will be given; ordinals are never reused. */
  readonly nextOrdinal: number;
  readonly uploadedObjects: number;
  readonly uploadedBytes: number;
  /** Requests made to the object store. */
  readonly requests: number;
  /** Failed passes in a row (0 once one succeeds). */
  readonly failures: number;
  readonly lastError: { readonly code: string; readonly message: string; readonly at: number } | null;
  /**
   * From a segment's last seal to its descriptor being confirmed, in milliseconds, over the
   * latest segments sealed since the feed was opened (`count` of them in all).
   */
  readonly visibleLagMs: { readonly count: number; readonly p50: number; readonly p99: number; readonly max: number };
  /**
   * Sealed history segments evicted to keep the local budget (`localHistoryBytesMax`, null for
   * none): their records are read back from object storage. `localHistoryBytes` is what the
   * sealed segments still local take.
   */
  readonly evictedSegments: number;
  readonly localHistoryBytes: number;
  readonly localHistoryBytesMax: number | null;
  /**
   * Reads of evicted history since the feed was opened: blocks found in the cache (`hits`) or
   * fetched (`misses`, and `readAhead` fetched before a scan asked), with the requests and bytes
   * they took (descriptors read by GET included: one whose local copy is kept takes none).
   */
  readonly remoteReads: {
    readonly hits: number;
    readonly misses: number;
    readonly readAhead: number;
    readonly requests: number;
    readonly bytesFetched: number;
  };
}

export interface StreamInfo {
  readonly id: string;
  /**
   * The states of the engine's `StreamStatus`, spelled out because the protocol cannot import the
   * engine; `Stream.info` passes the engine's state through, so a state added there does not
   * compile until it is added here too.
   */
  readonly state: 'open' | 'sealed' | 'aborted' | 'unknown';
  /** The commit a sealed stream became. */
  readonly commit?: Commit;
  /** Acknowledged records of an open stream. */
  readonly records?: number;
}

export interface SubscriptionInfo {
  readonly name: string;
  readonly cursor: number;
  readonly createdAt: number;
  readonly updatedAt: number;
  /** How far the cursor is behind the head. */
  readonly lag: { readonly commits: number; readonly records: number; readonly bytes: number };
  /**
   * True when a forced trim removed commits this subscription had not passed: its next poll
   * fails with `TRIMMED` until it is reset to the low mark or later.
   */
  readonly trimmed: boolean;
}

export interface PollResult {
  /** Whole commits after the saved cursor, oldest first. */
  readonly commits: CommitRecords[];
  /** The cursor to advance to once these are handled (the last commit returned). */
  readonly cursor: number;
}

/** What a caller holding the lease gets back. */
export interface LeaseGrant {
  readonly epoch: number;
  readonly token: string;
  readonly expiresAt: number;
  readonly holder: string;
}

export interface FeedDiskUse {
  /** History segment files (`history/*.hist`). */
  readonly historySegments: number;
  /** Every file under the feed's directory. */
  readonly files: number;
  /** Bytes the files take on disk (allocated blocks: preallocated segments count whole). */
  readonly bytes: number;
  /**
   * For a tiered feed only: the bytes of sealed segments object storage holds (their files, all
   * together), and of sealed segments not uploaded yet. The active segment is neither.
   */
  readonly remoteBytes?: number;
  readonly notUploadedBytes?: number;
}

/**
 * What a problem is: `CORRUPT` damage to a log (file and offset), `TORN_TAIL` a torn last write
 * that recovery cuts on the next read-write open, `CHAIN` a break in the commit chain,
 * `MANIFEST` a record pointing at bytes no pack holds, `WAL` the WAL disagreeing with history,
 * `INDEX` a damaged index file, key dictionary or summary, or one of another segment (derived: each report says when it is rebuilt), `ERROR` anything else.
 */
export type VerificationCode = 'CORRUPT' | 'TORN_TAIL' | 'CHAIN' | 'MANIFEST' | 'WAL' | 'INDEX' | 'ERROR';

export interface VerificationProblem {
  readonly code: VerificationCode;
  readonly message: string;
  readonly file?: string;
  readonly offset?: number;
}

export interface FeedVerification {
  readonly feed: string;
  readonly ok: boolean;
  /** The first commit the history keeps (1 unless trimmed). */
  readonly lowMark: number;
  /** Commits kept (from the low mark to the head). */
  readonly commits: number;
  readonly records: number;
  readonly segments: number;
  readonly walEvents: number;
  /** For a store with object storage and a tiered feed: the remote segments checked, object by object. */
  readonly remoteSegments?: number;
  readonly problems: VerificationProblem[];
}
