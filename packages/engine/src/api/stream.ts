/**
 * One stream of a feed: append batches while it is open, then seal or abort it; read it, sealed
 * or open.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { StreamInfo, StreamRecord } from '@streamstack/protocol';
import { type AppendCondition, validateCondition } from '../coordinator/writing/conditions.js';
import { StreamStackError } from '../errors.js';
import type { Feed } from './feed.js';
import {
  type AppendRecord,
  type Commit,
  optionsOf,
  toCommit,
  validateCursor,
  validateMessage,
  validateRecords,
  validateToken,
} from './records.js';

export type { StreamInfo, StreamRecord };

/** One stream of a feed: append batches while it is open, then seal or abort it. */
export class Stream {
  /** @internal */
  constructor(
    readonly feed: Feed,
    readonly id: string,
  ) {}

  /**
   * Appends one batch; resolves once it is in the WAL and fsync'd. With `expectedSeq`, the
   * append fails with `SEQ_MISMATCH` unless the batch's first record would get exactly that seq,
   * so retrying after a lost acknowledgement cannot write a batch twice.
   */
  async append(
    records: readonly AppendRecord[],
    options: { token: string; expectedSeq?: number },
  ): Promise<{ stream: string; firstSeq: number; lastSeq: number }> {
    options = optionsOf(options, 'stream.append');
    const validated = validateRecords(records);
    const expectedSeq = validateCursor(options.expectedSeq, 'expectedSeq');
    return this.feed.writer.append(this.id, validateToken(options.token), validated, expectedSeq);
  }

  /**
   * Seals the stream into one commit; resolves with it once it is durable and published. With
   * `condition`, the seal publishes only if nothing matching `condition.failIfMatch` was
   * published after `condition.after` (else `CONDITION_FAILED`, and the stream stays open).
   */
  async seal(options: { token: string; message?: string; condition?: AppendCondition }): Promise<Commit> {
    options = optionsOf(options, 'stream.seal');
    const condition = validateCondition(options.condition);
    const commit = await this.feed.writer.seal(
      this.id,
      validateToken(options.token),
      validateMessage(options.message),
      condition,
    );
    return toCommit(this.feed.name, commit);
  }

  /** Aborts the stream: nothing of it is ever published. */
  async abort(options: { token: string }): Promise<void> {
    options = optionsOf(options, 'stream.abort');
    return this.feed.writer.abort(this.id, validateToken(options.token));
  }

  /**
   * The acknowledged records of this stream from `fromSeq` (default 1): from history once it is
   * sealed, from the WAL while it is open.
   */
  async read(options: { fromSeq?: number } = {}): Promise<StreamRecord[]> {
    options = optionsOf(options, 'stream.read');
    this.feed.writer.assertPresent();
    const fromSeq = validateCursor(options.fromSeq, 'fromSeq') ?? 1;
    const status = this.feed.writer.streamStatus(this.id);
    if (status.state === 'sealed') {
      return (await this.feed.readCommit(status.commit.commit)).filter((record) => record.seq >= fromSeq);
    }
    if (status.state !== 'open') {
      throw new StreamStackError('STREAM_NOT_FOUND', `no stream ${this.id} on feed ${this.feed.name}`, {
        details: { stream: this.id },
      });
    }
    return (await this.feed.writer.readOpenStream(this.id, fromSeq)).map(({ seq, record }) => ({
      feed: this.feed.name,
      stream: this.id,
      seq,
      timestamp: record.timestamp,
      fingerprint: record.fingerprint,
      payload: record.payload,
      key: record.key,
      version: record.version,
      tombstone: record.tombstone,
      type: record.type,
      tags: record.tags,
    }));
  }

  /**
   * The stream's state: open (with its acknowledged record count), sealed (with its commit) or
   * aborted.
   *
   * @example
   * const { state, commit } = await stream.info();
   */
  async info(): Promise<StreamInfo> {
    this.feed.writer.assertPresent();
    const status = this.feed.writer.streamStatus(this.id);
    if (status.state === 'sealed')
      return { id: this.id, state: 'sealed', commit: toCommit(this.feed.name, status.commit) };
    if (status.state === 'open') return { id: this.id, state: 'open', records: status.acknowledged };
    return { id: this.id, state: status.state };
  }
}
