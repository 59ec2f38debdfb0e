/** URL paths and query encodings shared by the remote classes. */
import {
  type AppendCondition,
  type AppendRecord,
  appendRecordLine,
  type ReadOptions,
  StreamStackError,
} from '@streamstack/protocol';
import type { QueryInput } from './transport.js';

export function feedPath(feed: string): string {
  return `/v1/feeds/${encodeURIComponent(feed)}`;
}

/** A condition as the server's JSON `condition` parameter, which says all an embedded one can. */
export function conditionQuery(condition: AppendCondition | undefined): QueryInput {
  return condition === undefined ? {} : { condition: JSON.stringify(condition) };
}

/** Read options as query parameters; the filter goes as JSON, so a query of several items fits. */
export function readQuery(options: ReadOptions): QueryInput {
  return {
    after: options.after,
    upTo: options.upTo,
    mode: options.mode,
    dedupScope: options.dedupScope,
    plan: options.plan,
    limit: options.limit,
    ...(options.filter === undefined ? {} : { filter: JSON.stringify(options.filter) }),
  };
}

/**
 * Records as input lines, refusing what the line format cannot carry with the errors the
 * embedded append gives (a non-array, a record that is not an object, a payload or fingerprint
 * that is neither a string nor bytes); everything else the server checks, as the engine does.
 */
export function recordLines(records: unknown): Record<string, unknown>[] {
  if (!Array.isArray(records)) throw new StreamStackError('INVALID_ARGUMENT', 'records must be an array');
  return records.map((record: unknown, index) => {
    const invalid = (field: string, reason: string) =>
      new StreamStackError('INVALID_RECORD', `record ${index}: ${field} ${reason}`, { details: { index, field } });
    if (typeof record !== 'object' || record === null || Array.isArray(record))
      throw invalid('record', 'must be an object');
    const { payload, fingerprint } = record as AppendRecord;
    if (typeof payload !== 'string' && !(payload instanceof Uint8Array))
      throw invalid('payload', 'must be a Uint8Array or a string');
    if (fingerprint !== undefined && typeof fingerprint !== 'string' && !(fingerprint instanceof Uint8Array))
      throw invalid('fingerprint', 'must be a Uint8Array or a string');
    // A record with no bytes in it is its own line: JSON gives it the same fields, without the
    // copy that turning bytes into base64 needs.
    if (typeof payload === 'string' && !(fingerprint instanceof Uint8Array)) return record as Record<string, unknown>;
    return appendRecordLine(record as AppendRecord);
  });
}
