/**
 * A feed's retention state: its policy and its floor, the first history segment still kept, in
 * a small state log (`state/retention.log`, two files, the newest record wins). A trim writes
 * its floor here, marked pending, before it deletes a single file, and marks it done once every
 * file below the floor (and every key and fingerprint dictionary built over the history it cut)
 * is gone: recovery finishes a pending trim by deleting the same files again.
 */
// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { RetentionPolicy } from '@streamstack/protocol';
import { assert, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { retentionAgeMsMax, safeIntegerMax } from '../../limits.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { type RecordCodec, RecordLog } from '../../storage/record-log.js';

export type { RetentionPolicy };

/** The first retained commit and its first position: a history segment's first ones. */
export interface RetentionFloor {
  readonly commit: number;
  readonly position: number;
}

export interface RetentionState {
  readonly policy: RetentionPolicy;
  readonly floor: RetentionFloor;
  /** A trim recorded but maybe not finished: files below the floor may still be there. */
  readonly pending: boolean;
}

/** The state of a feed never trimmed, with no policy. */
export const untrimmed: RetentionState = { policy: {}, floor: { commit: 1, position: 1 }, pending: false };

const hasAge = 1;
const hasRecords = 2;
const hasBytes = 4;

const codec: RecordCodec<RetentionState> = {
  name: 'retention',
  version: 1,
  encode(writer, state) {
    const { policy } = state;
    const flags =
      (policy.maxAgeMs === undefined ? 0 : hasAge) |
      (policy.maxRecords === undefined ? 0 : hasRecords) |
      (policy.maxBytes === undefined ? 0 : hasBytes);
    writer.u8(flags);
    if (policy.maxAgeMs !== undefined) writer.varint(policy.maxAgeMs);
    if (policy.maxRecords !== undefined) writer.varint(policy.maxRecords);
    if (policy.maxBytes !== undefined) writer.varint(policy.maxBytes);
    writer
      .varint(state.floor.commit)
      .varint(state.floor.position)
      .u8(state.pending ? 1 : 0);
  },
  decode(reader, file) {
    const flags = reader.u8();
    if (flags > (hasAge | hasRecords | hasBytes)) {
      throw new StreamStackError('CORRUPT', `${file} holds a retention record of an unknown form`, {
        details: { file, offset: 0 },
      });
    }
    const policy: { maxAgeMs?: number; maxRecords?: number; maxBytes?: number } = {};
    if (flags & hasAge) policy.maxAgeMs = reader.varint();
    if (flags & hasRecords) policy.maxRecords = reader.varint();
    if (flags & hasBytes) policy.maxBytes = reader.varint();
    const floor = { commit: reader.varint(), position: reader.varint() };
    const pending = reader.u8() === 1;
    if (floor.commit < 1 || floor.position < 1) {
      throw new StreamStackError('CORRUPT', `${file} names a retention floor before the first commit`, {
        details: { file, offset: 0 },
      });
    }
    return { policy, floor, pending };
  },
};

/**
 * Checks a policy given by a caller: each limit, when given, a positive safe integer. Unknown
 * fields are refused, so a misspelt `maxAge` is not silently a policy that keeps everything.
 */
export function validateRetentionPolicy(policy: unknown): RetentionPolicy {
  if (policy === null || typeof policy !== 'object' || Array.isArray(policy)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      'a retention policy is an object of maxAgeMs, maxRecords and maxBytes',
    );
  }
  const limits: Record<string, number> = {
    maxAgeMs: retentionAgeMsMax,
    maxRecords: safeIntegerMax,
    maxBytes: safeIntegerMax,
  };
  const out: Record<string, number> = {};
  for (const [name, value] of Object.entries(policy as Record<string, unknown>)) {
    if (!(name in limits)) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `a retention policy has no ${JSON.stringify(name)}: it takes maxAgeMs, maxRecords and maxBytes`,
        { details: { field: name } },
      );
    }
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || (value as number) < 1 || (value as number) > limits[name]) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `${name} must be an integer from 1 to ${limits[name]}, not ${String(value)}`,
        { details: { field: name, value } },
      );
    }
    out[name] = value as number;
  }
  return out as RetentionPolicy;
}

/** The retention state of one feed, and the durable log behind it. */
export class RetentionLog extends RecordLog<RetentionState> {
  static async open(kernels: Kernels, directory: string, readOnly: boolean): Promise<RetentionLog> {
    return new RetentionLog(
      await RecordLog.openFiles(kernels, new FeedLayout(directory).stateLog('retention'), readOnly, codec),
    );
  }

  get state(): RetentionState {
    return this.newest ?? (this.floorFromHistory ? { ...untrimmed, floor: this.floorFromHistory } : untrimmed);
  }

  /** The floor taken from the history when the log holds no record (see `history-floors.ts`). */
  private floorFromHistory: RetentionFloor | undefined;

  /**
   * Takes `floor` (where the oldest history segment starts) as the floor of a log that holds no
   * record, so that the next record written keeps it instead of going back to commit 1.
   */
  adoptFloor(floor: RetentionFloor): void {
    assert(!this.recorded, 'only a log without a record takes its floor from the history');
    this.floorFromHistory = floor;
  }

  /** Whether the log holds a record (a feed never trimmed and given no policy has none). */
  get recorded(): boolean {
    return this.newest !== undefined;
  }
}
