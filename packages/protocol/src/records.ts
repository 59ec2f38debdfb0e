/**
 * Records and commits as the engine hands them out and takes them in, and as the HTTP client
 * rebuilds them from record lines: one definition for both, so the embedded and the remote API
 * type-check as one.
 */

/** A record to append. A string payload is stored as its UTF-8 bytes. */
export interface AppendRecord {
  readonly payload: Uint8Array | string;
  readonly key?: string;
  readonly version?: number;
  readonly tombstone?: boolean;
  readonly type?: string;
  readonly tags?: readonly string[];
  /** Identifies the record for deduplicated reads; defaults to a hash of the payload. */
  readonly fingerprint?: Uint8Array | string;
  /** Milliseconds since the epoch; defaults to the time of the append. */
  readonly timestamp?: number;
}

/** A published commit. */
export interface Commit {
  readonly feed: string;
  readonly commit: number;
  readonly stream: string;
  /** The commit before this one, or null for the first. */
  readonly parent: number | null;
  readonly records: number;
  readonly firstPosition: number;
  readonly lastPosition: number;
  readonly openedAt: number;
  readonly sealedAt: number;
  readonly message: string | null;
  readonly epoch: number;
  /** True for a commit written by a one-shot append. */
  readonly oneShot: boolean;
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
  payload: Uint8Array;
  readonly key: string | undefined;
  readonly version: number | undefined;
  readonly tombstone: boolean;
  readonly type: string | undefined;
  readonly tags: readonly string[];
}

/**
 * A record read at stream scope. Sealed streams give published records (with `commit` and
 * `position`); an open stream's records have no position yet, and a fingerprint only when the
 * producer gave one (the default is computed when the stream is sealed).
 */
export type StreamRecord =
  | StoredRecord
  | (Omit<StoredRecord, 'commit' | 'position' | 'fingerprint'> & {
      readonly fingerprint?: Uint8Array;
      readonly commit?: undefined;
      readonly position?: undefined;
    });

/** One commit and its records, as a live read delivers them. */
export interface CommitRecords {
  readonly commit: Commit;
  readonly records: StoredRecord[];
}
