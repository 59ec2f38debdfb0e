/** The requests and results of history management: retention, trims, merges, key compaction, exports. */

import type { ReadMode } from './reads.js';

/**
 * What a feed keeps: commits younger than `maxAgeMs`, the newest `maxRecords` records, the
 * newest `maxBytes` bytes of history segments. Each limit is optional; past any of them, whole
 * segments go, oldest first.
 */
export interface RetentionPolicy {
  readonly maxAgeMs?: number;
  readonly maxRecords?: number;
  readonly maxBytes?: number;
}

/** The subscription whose cursor holds retention back, and where it is. */
export interface RetentionPin {
  readonly subscription: string;
  readonly cursor: number;
}

export interface TrimResult {
  /** The low mark after the trim: the first commit kept. */
  readonly lowMark: number;
  /** The first position kept. */
  readonly lowPosition: number;
  readonly segmentsRemoved: number;
  readonly commitsRemoved: number;
  readonly recordsRemoved: number;
  /** Bytes of history segment files deleted (their preallocated size). */
  readonly bytesRemoved: number;
  /** Set when a subscription kept segments the request would have removed. */
  readonly heldBy?: RetentionPin;
}

/** How retention stands: the policy, the low mark, and what holds it back. */
export interface RetentionInfo {
  readonly policy: RetentionPolicy;
  readonly lowMark: number;
  readonly lowPosition: number;
  /** The low mark the policy alone would give now (equal to `lowMark` when nothing is due). */
  readonly policyLowMark: number;
  /** The subscription keeping the low mark below `policyLowMark`, if one does. */
  readonly pinnedBy: RetentionPin | null;
  /** The last failure of a trim run on its own, if the last one failed. */
  readonly lastError: { readonly code: string; readonly message: string } | null;
}

/** One merge: where the merged segment starts, how many it replaced, and their bytes. */
export interface SegmentMerge {
  readonly base: number;
  readonly segments: number;
  readonly commits: number;
  /** Records the rewritten segment holds. */
  readonly records: number;
  /** Bytes of the replaced segments' files, and of the merged one. */
  readonly bytesBefore: number;
  readonly bytesAfter: number;
}

export interface MergeResult {
  readonly merges: readonly SegmentMerge[];
  /** History segments after the merges. */
  readonly segments: number;
  /** Set when a switch-over was put off: reads held the read gate too long (try again later). */
  readonly putOff: boolean;
}

export interface KeyCompactionRequest {
  /** Compact the segments wholly at or before this commit, keeping each key's winner as of it. */
  readonly horizon: number;
  /** Move the horizon past subscriptions that have not reached it (they then fail with `COMPACTED`). */
  readonly force?: boolean;
  /** Records without a key: kept (the default) or dropped. */
  readonly keyless?: 'keep' | 'drop';
  readonly signal?: AbortSignal;
}

export interface KeyCompactionResult {
  /** The horizon after the compaction (unchanged when nothing could be compacted). */
  readonly horizon: number;
  /** Sealed segments rewritten, and the files they became. */
  readonly segmentsCompacted: number;
  readonly segmentsAfter: number;
  readonly recordsBefore: number;
  readonly recordsAfter: number;
  /** Bytes of the rewritten segments' files before, and of the files they became. */
  readonly bytesBefore: number;
  readonly bytesAfter: number;
  /** Set when a subscription held the horizon below the one asked for. */
  readonly heldBy?: RetentionPin;
  /** Set when a switch-over was put off (reads held the gate too long): run it again later. */
  readonly putOff: boolean;
}

export type ExportFormat = 'ndjson' | 'arrow' | 'parquet';

export interface ExportedFile {
  /** The file's name, inside the export's directory. */
  readonly name: string;
  readonly records: number;
  readonly bytes: number;
  readonly sha256: string;
  /** The first and last commit with records in this file. */
  readonly firstCommit: number;
  readonly lastCommit: number;
  /** True when every payload of the file is UTF-8 text: its `payloadText` column has no null (NDJSON: no `payloadBase64`). */
  readonly payloadText: boolean;
}

export interface ExportManifest {
  readonly manifestVersion: number;
  readonly streamstackVersion: string;
  readonly feed: string;
  readonly mode: ReadMode;
  readonly format: ExportFormat;
  /** The range exported: the commits after `after`, up to and including `upTo`. */
  readonly after: number;
  readonly upTo: number;
  readonly records: number;
  /** The columns of every file: the Arrow schema of Arrow and Parquet files, the fields of NDJSON lines. */
  readonly columns: readonly { readonly name: string; readonly type: string; readonly nullable: boolean }[];
  readonly files: readonly ExportedFile[];
}

export interface ExportOptions {
  /** The range: the commits after `after` (default: the start of the history kept) up to `upTo` (default: the head). */
  readonly after?: number;
  readonly upTo?: number;
  /** Which records: every one (`raw`, the default), first occurrences (`dedup`), or key winners (`latest`). */
  readonly mode?: ReadMode;
  readonly format: ExportFormat;
  /** The directory the files and the manifest go to; created when missing. */
  readonly to: string;
  readonly signal?: AbortSignal;
  /**
   * Called as the export advances (after each batch of records read, and as files are written),
   * for a progress display; the last call, once the manifest is written, has `done === total`.
   * It stays in the calling process: a remote export does not send it.
   */
  readonly onProgress?: (progress: ExportProgress) => void;
}

/** What a progress report's `done` and `total` count. */
export type ProgressUnit = 'records' | 'bytes';

/** How far a long operation is: `done` of `total` (in `unit`); the last call has `done === total`. */
export interface Progress {
  readonly done: number;
  readonly total: number;
  readonly unit: ProgressUnit;
}

/** A long operation's progress callback (`onProgress`). */
export type OnProgress<P extends Progress = Progress> = (progress: P) => void;

/**
 * An export's progress. `done` and `total` count the positions of the range (the records it
 * was committed with): each counts half once it is read and half once the file holding it is
 * written, so that converting, hashing and syncing the files — about half of an export's time —
 * moves the bar too, and `done` reaches `total` only when the manifest is written.
 */
export interface ExportProgress extends Progress {
  readonly after: number;
  readonly upTo: number;
  /** The last commit reached, from `after` to `upTo`. */
  readonly commit: number;
  /** Records read so far (the files may still be being written). */
  readonly records: number;
}
