/**
 * What users hand StreamStack and what they get back, and the checks between the two: a record
 * that fails one is refused with `INVALID_RECORD` (naming the record and the field) before
 * anything is written, so bad input changes nothing.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { AppendRecord, Commit } from '@streamstack/protocol';
import type { RecordInput } from '../coordinator/writing/feed-writer.js';
import type { CommitRecord } from '../coordinator/writing/feed-writer-types.js';
import { StreamStackError } from '../errors.js';
import {
  batchRecordsMax,
  fingerprintBytesMax,
  keyBytesMax,
  messageBytesMax,
  payloadChunkBytes,
  tagBytesMax,
  tagsPerRecordMax,
  typeBytesMax,
} from '../limits.js';

export type { AppendRecord, Commit };

const encoder = new TextEncoder();

export type { StoredRecord } from '../coordinator/writing/feed-writer-types.js';

export function toCommit(feed: string, record: CommitRecord): Commit {
  return {
    feed,
    commit: record.commit,
    stream: record.stream,
    parent: record.parent === 0 ? null : record.parent,
    records: record.records,
    firstPosition: record.firstPosition,
    lastPosition: record.lastPosition,
    openedAt: record.openedAt,
    sealedAt: record.sealedAt,
    message: record.message ?? null,
    epoch: record.epoch,
    oneShot: record.oneShot,
  };
}

function invalid(index: number, field: string, reason: string): StreamStackError {
  return new StreamStackError('INVALID_RECORD', `record ${index}: ${field} ${reason}`, { details: { index, field } });
}

const noTags: string[] = [];

/**
 * A string with a lone surrogate has no UTF-8 form: TextEncoder would silently store U+FFFD in
 * its place, so what is read back would differ from what was written. Such strings are refused.
 */
function checkWellFormed(value: string, index: number, field: string): void {
  if (!value.isWellFormed()) throw invalid(index, field, 'must be well-formed UTF-16 (it has a lone surrogate)');
}

function checkText(value: unknown, index: number, field: string, bytesMax: number): string {
  if (typeof value !== 'string' || value.length === 0) throw invalid(index, field, 'must be a non-empty string');
  checkWellFormed(value, index, field);
  // A UTF-16 code unit encodes to at most 3 UTF-8 bytes, so short strings need no encoding.
  if (value.length * 3 > bytesMax && encoder.encode(value).length > bytesMax) {
    throw invalid(index, field, `must be at most ${bytesMax} bytes of UTF-8`);
  }
  return value;
}

/**
 * Encodes string payloads into shared chunks, each payload a view of one: a TextEncoder call per
 * payload allocates an ArrayBuffer each, and a thousand of them a batch kept the garbage
 * collector busy enough to stall the event loop for tens of milliseconds. The chunks are shared
 * by every batch (a one-record batch takes its few hundred bytes of the current chunk, not an
 * ArrayBuffer of its own, which cost more than the rest of validating it), and a chunk is let go
 * once the payloads in it are: they are views, never written again.
 */
class EncodedChunks {
  private chunk = new Uint8Array(0);
  private used = 0;

  encode(value: string): Uint8Array {
    // A UTF-16 code unit takes at most 3 bytes of UTF-8.
    const room = value.length * 3;
    if (this.chunk.length - this.used < room) {
      this.chunk = new Uint8Array(Math.max(room, payloadChunkBytes));
      this.used = 0;
    }
    const { written } = encoder.encodeInto(value, this.chunk.subarray(this.used));
    const bytes = this.chunk.subarray(this.used, this.used + written);
    this.used += written;
    return bytes;
  }
}

const sharedChunks = new EncodedChunks();

function toBytes(value: unknown, index: number, field: string, chunks?: EncodedChunks): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') {
    checkWellFormed(value, index, field);
    return chunks ? chunks.encode(value) : encoder.encode(value);
  }
  throw invalid(index, field, 'must be a Uint8Array or a string');
}

/** The fields a record may have: a misspelled one (`tag` for `tags`) is refused, not ignored. */
const recordFields = new Set(['payload', 'key', 'version', 'tombstone', 'type', 'tags', 'fingerprint', 'timestamp']);

/** Checks and normalises a batch; throws before anything is written. */
export function validateRecords(records: unknown): RecordInput[] {
  if (!Array.isArray(records)) {
    throw new StreamStackError('INVALID_ARGUMENT', 'records must be an array');
  }
  if (records.length === 0 || records.length > batchRecordsMax) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `a batch holds 1 to ${batchRecordsMax} records, not ${records.length}`,
    );
  }
  return records.map((record: unknown, index) => {
    if (typeof record !== 'object' || record === null || Array.isArray(record))
      throw invalid(index, 'record', 'must be an object');
    const input = record as Record<string, unknown>;
    for (const field in input) {
      if (!recordFields.has(field))
        throw invalid(index, field, `is not a record field (they are ${[...recordFields].join(', ')})`);
    }
    const key = input.key === undefined ? undefined : checkText(input.key, index, 'key', keyBytesMax);
    if (input.version !== undefined && (!Number.isSafeInteger(input.version) || (input.version as number) < 0)) {
      throw invalid(index, 'version', 'must be a non-negative safe integer');
    }
    if (input.tombstone !== undefined) {
      if (typeof input.tombstone !== 'boolean') throw invalid(index, 'tombstone', 'must be a boolean');
      if (input.tombstone && key === undefined) throw invalid(index, 'tombstone', 'needs a key to delete');
    }
    let tags: string[] = noTags;
    if (input.tags !== undefined) {
      if (!Array.isArray(input.tags) || input.tags.length > tagsPerRecordMax) {
        throw invalid(index, 'tags', `must be an array of at most ${tagsPerRecordMax} strings`);
      }
      tags = [...new Set(input.tags.map((tag) => checkText(tag, index, 'tags', tagBytesMax)))];
    }
    let fingerprint: Uint8Array | undefined;
    if (input.fingerprint !== undefined) {
      fingerprint = toBytes(input.fingerprint, index, 'fingerprint');
      if (fingerprint.length === 0 || fingerprint.length > fingerprintBytesMax) {
        throw invalid(index, 'fingerprint', `must be 1 to ${fingerprintBytesMax} bytes`);
      }
    }
    if (input.timestamp !== undefined && (!Number.isSafeInteger(input.timestamp) || (input.timestamp as number) < 0)) {
      throw invalid(index, 'timestamp', 'must be non-negative integer milliseconds');
    }
    // Every field is present (undefined when absent), so every record has the same shape and
    // the hot paths that read them stay monomorphic.
    return {
      payload: toBytes(input.payload, index, 'payload', sharedChunks),
      timestamp: input.timestamp as number | undefined,
      fingerprint,
      key,
      version: input.version as number | undefined,
      tombstone: input.tombstone === true,
      type: input.type === undefined ? undefined : checkText(input.type, index, 'type', typeBytesMax),
      tags,
    };
  });
}

export function validateMessage(message: unknown): string | undefined {
  if (message === undefined) return undefined;
  if (typeof message !== 'string' || encoder.encode(message).length > messageBytesMax) {
    throw new StreamStackError('INVALID_ARGUMENT', `a message is a string of at most ${messageBytesMax} bytes`);
  }
  // As with record fields (checkWellFormed): a lone surrogate would be stored altered.
  if (!message.isWellFormed()) {
    throw new StreamStackError('INVALID_ARGUMENT', 'a message must be well-formed UTF-16 (it has a lone surrogate)', {
      details: { field: 'message' },
    });
  }
  return message;
}

export function validateToken(token: unknown): string {
  if (typeof token !== 'string' || token.length === 0) {
    throw new StreamStackError('INVALID_ARGUMENT', 'a lease token (a non-empty string) is required');
  }
  return token;
}

export function validateCursor(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || (value as number) < 0) {
    throw new StreamStackError('INVALID_ARGUMENT', `${name} must be a non-negative integer`);
  }
  return value as number;
}

/**
 * A method's options argument: undefined stands for none; anything but a plain object (null, a
 * number, an array) is refused with `INVALID_ARGUMENT` rather than failing later as a TypeError.
 */
export function optionsOf<T extends object>(value: T | undefined, method: string, known?: readonly string[]): T {
  if (value === undefined) return {} as T;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `${method} takes an options object, not ${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value}`,
    );
  }
  // A misspelt or misplaced option (`types` beside `filter`, say) would otherwise be ignored
  // without a word, and the call would answer something other than what was asked.
  if (known) {
    for (const name of Object.keys(value)) {
      if (!known.includes(name)) {
        throw new StreamStackError(
          'INVALID_ARGUMENT',
          `${method} takes { ${known.join(', ')} }, not ${JSON.stringify(name)}`,
          { details: { field: name } },
        );
      }
    }
  }
  return value;
}

/** The options a feed read takes (`ReadOptions`). */
export const readOptionNames = ['after', 'upTo', 'mode', 'dedupScope', 'filter', 'plan', 'limit', 'signal'] as const;
