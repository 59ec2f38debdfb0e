/**
 * A feed: its writer lease, its streams, one-shot appends, and its commit history.
 *
 * @example
 * const feed = await store.createFeed('orders');
 * const { token } = await feed.acquireLease({ holder: 'ingest-1' });
 * const stream = await feed.openStream({ token, message: 'hourly poll' });
 * await stream.append([{ payload: '{"id":1}', key: 'order-1' }], { token });
 * const commit = await stream.seal({ token });
 */
import { StreamStackError } from '../errors.js';
import type { FeedWriter, StreamStatus } from '../coordinator/feed-writer.js';
import type { TornTail } from '../coordinator/feed-writer-types.js';
import type { LeaseGrant } from '../coordinator/lease.js';
import { leaseTtlMsDefault } from '../limits.js';
import {
  toCommit,
  validateCursor,
  validateMessage,
  validateRecords,
  validateToken,
  type AppendRecord,
  type Commit,
  type StoredRecord,
} from './records.js';

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
}

export class Feed {
  /** @internal */
  constructor(
    readonly name: string,
    private readonly createdAt: number,
    /** @internal */
    readonly writer: FeedWriter,
  ) {}

  /** What recovery cut off torn tails when this feed was opened (empty after a clean close). */
  get recovery(): readonly TornTail[] {
    return this.writer.tornTails;
  }

  /** Takes the feed's writer lease with a new, strictly larger epoch and a fresh fencing token. */
  async acquireLease(options: { holder: string; ttlMs?: number }): Promise<LeaseGrant> {
    return this.writer.acquireLease(options.holder, options.ttlMs ?? leaseTtlMsDefault);
  }

  async renewLease(options: { token: string; ttlMs?: number }): Promise<LeaseGrant> {
    return this.writer.renewLease(validateToken(options.token), options.ttlMs ?? leaseTtlMsDefault);
  }

  async releaseLease(options: { token: string }): Promise<void> {
    return this.writer.releaseLease(validateToken(options.token));
  }

  /** Opens a stream (one at a time per feed) under the lease. */
  async openStream(options: { token: string; message?: string }): Promise<Stream> {
    const opened = await this.writer.openStreamWith(validateToken(options.token), validateMessage(options.message));
    return new Stream(this, opened.stream);
  }

  /** A handle on stream `id`, open or sealed. */
  stream(id: string): Stream {
    if (typeof id !== 'string' || id.length === 0) throw new StreamStackError('INVALID_ARGUMENT', 'a stream id is a non-empty string');
    return new Stream(this, id);
  }

  /** The open stream, if there is one (a new lease holder finds its predecessor's here). */
  activeStream(): Stream | undefined {
    const id = this.writer.activeStream;
    return id === undefined ? undefined : new Stream(this, id);
  }

  /**
   * One-shot append: the records become one commit of their own, written straight into history
   * with one fsync (shared with concurrent one-shot appends). While a lease is live, `token` is
   * required.
   */
  async append(records: readonly AppendRecord[], options: { token?: string; message?: string } = {}): Promise<Commit> {
    const validated = validateRecords(records);
    const token = options.token === undefined ? undefined : validateToken(options.token);
    const commit = await this.writer.appendOneShot(validated, token, validateMessage(options.message));
    return toCommit(this.name, commit);
  }

  /** Commits after cursor `after` (a commit sequence; 0, the default, is the start), oldest first. */
  commits(options: { after?: number; limit?: number } = {}): Commit[] {
    const after = validateCursor(options.after, 'after') ?? 0;
    const limit = validateCursor(options.limit, 'limit') ?? Number.POSITIVE_INFINITY;
    const head = this.writer.watermark.commit;
    if (after > head) {
      throw new StreamStackError('INVALID_ARGUMENT', `cursor ${after} is beyond the head (${head})`, { details: { after, head } });
    }
    return this.writer.commits.slice(after, Math.min(head, after + limit)).map((record) => toCommit(this.name, record));
  }

  /** The records of commit `commit`, in position order. */
  async readCommit(commit: number): Promise<StoredRecord[]> {
    const head = this.writer.watermark.commit;
    if (!Number.isSafeInteger(commit) || commit < 1 || commit > head) {
      throw new StreamStackError('INVALID_ARGUMENT', `commit ${commit} does not exist (the head is ${head})`, { details: { commit, head } });
    }
    const record = this.writer.commits[commit - 1];
    const run = await this.writer.readRun(record);
    const out: StoredRecord[] = [];
    for (const [index, entry] of run.entries.entries()) {
      out.push({
        feed: this.name,
        commit,
        stream: record.stream,
        seq: entry.seq,
        position: record.firstPosition + index,
        timestamp: entry.timestamp,
        fingerprint: entry.fingerprint,
        payload: await this.writer.readPayload(entry.payload, run),
        ...(entry.key === undefined ? {} : { key: entry.key }),
        ...(entry.version === undefined ? {} : { version: entry.version }),
        tombstone: entry.tombstone,
        ...(entry.type === undefined ? {} : { type: entry.type }),
        tags: entry.tags,
      });
    }
    return out;
  }

  /** The latest commit, or undefined when the feed has none. */
  head(): Commit | undefined {
    const head = this.writer.watermark.commit;
    return head === 0 ? undefined : toCommit(this.name, this.writer.commits[head - 1]);
  }

  info(): FeedInfo {
    const live = this.writer.lease.live();
    const head = this.head();
    return {
      name: this.name,
      createdAt: this.createdAt,
      commits: this.writer.watermark.commit,
      records: this.writer.watermark.position,
      head: head ?? null,
      activeStream: this.writer.activeStream ?? null,
      lease: live ? { epoch: live.epoch, holder: live.holder, expiresAt: live.expiresAt } : null,
      epoch: this.writer.lease.epoch,
    };
  }
}

export interface StreamInfo {
  readonly id: string;
  readonly state: StreamStatus['state'];
  /** The commit a sealed stream became. */
  readonly commit?: Commit;
  /** Acknowledged records of an open stream. */
  readonly records?: number;
}

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
    const validated = validateRecords(records);
    const expectedSeq = validateCursor(options.expectedSeq, 'expectedSeq');
    return this.feed.writer.append(this.id, validateToken(options.token), validated, expectedSeq);
  }

  /** Seals the stream into one commit; resolves with it once it is durable and published. */
  async seal(options: { token: string; message?: string }): Promise<Commit> {
    const commit = await this.feed.writer.seal(this.id, validateToken(options.token), validateMessage(options.message));
    return toCommit(this.feed.name, commit);
  }

  /** Aborts the stream: nothing of it is ever published. */
  async abort(options: { token: string }): Promise<void> {
    return this.feed.writer.abort(this.id, validateToken(options.token));
  }

  /**
   * The acknowledged records of this stream from `fromSeq` (default 1): from history once it is
   * sealed, from the WAL while it is open.
   */
  async read(options: { fromSeq?: number } = {}): Promise<{ seq: number; payload: Uint8Array; key?: string; type?: string; tags: readonly string[]; timestamp: number }[]> {
    const fromSeq = validateCursor(options.fromSeq, 'fromSeq') ?? 1;
    const status = this.feed.writer.streamStatus(this.id);
    if (status.state === 'sealed') {
      return (await this.feed.readCommit(status.commit.commit)).filter((record) => record.seq >= fromSeq);
    }
    if (status.state !== 'open') {
      throw new StreamStackError('STREAM_NOT_FOUND', `no stream ${this.id} on feed ${this.feed.name}`, { details: { stream: this.id } });
    }
    return (await this.feed.writer.readOpenStream(this.id, fromSeq)).map(({ seq, record }) => ({ ...record, seq }));
  }

  info(): StreamInfo {
    const status = this.feed.writer.streamStatus(this.id);
    if (status.state === 'sealed') return { id: this.id, state: 'sealed', commit: toCommit(this.feed.name, status.commit) };
    if (status.state === 'open') return { id: this.id, state: 'open', records: status.acknowledged };
    return { id: this.id, state: status.state };
  }
}
