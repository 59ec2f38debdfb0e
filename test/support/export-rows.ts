/**
 * What an exported row holds for a stored record, field by field, as the reader scripts
 * (`export_reader.py`, `export_schema.py`) normalise rows: the fields every format shares.
 */
import type { StoredRecord } from '../../packages/engine/src/index.js';

export const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** The fields of `record` every export format holds, as a reader script gives them back. */
export function sharedRowFields(record: StoredRecord) {
  return {
    feed: record.feed,
    commit: record.commit,
    stream: record.stream,
    seq: record.seq,
    position: record.position,
    timestamp: record.timestamp,
    key: record.key ?? null,
    version: record.version ?? null,
    tombstone: record.tombstone,
    type: record.type ?? null,
    tags: [...record.tags],
  };
}
