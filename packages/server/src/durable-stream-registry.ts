/**
 * The Durable Streams streams this server serves (docs/http.md, Durable Streams compatibility):
 * each stream one feed (durable-stream-names.ts), its state rebuilt from the feed's commit
 * messages on first use (durable-stream-state.ts) and kept in memory after.
 *
 * Writes to one stream (create, append, close, delete, expiry) run one at a time, in arrival
 * order: each checks the state (closed, Content-Type, producer, `Stream-Seq`) and then writes
 * one commit that carries the new state, so no check can be overtaken by another write. Reads
 * take no turn: they read the feed's published commits.
 *
 * A stream with a TTL or an expiry is deleted when it is found expired (on any request, HEAD
 * included) and by a sweep over the streams this server has open; streams not opened since a
 * restart are found on their first request.
 */
import { type AppendRecord, type Feed, isStreamStackError, StreamStackError } from '@streamstack/engine';
import type { ServerContext } from './context.js';
import { checkProducer, isClosingAppend, type ProducerState, type ProducerTuple } from './durable-producers.js';
import { recordsOfBody } from './durable-stream-bodies.js';
import { streamFeedName } from './durable-stream-names.js';
import { mediaTypeOf, offsetOf } from './durable-stream-protocol.js';
import {
  applyCommit,
  type CommitMeta,
  emptyRecordType,
  encodeCommitMeta,
  isExpired,
  newState,
  replayState,
  type StreamConfig,
  type StreamState,
} from './durable-stream-state.js';

/** What a PUT asks for. */
export interface CreateRequest {
  readonly config: StreamConfig;
  readonly closed: boolean;
  readonly body: Buffer;
}

/** What a POST carries. */
export interface AppendRequest {
  readonly contentType: string | undefined;
  readonly body: Buffer;
  readonly closed: boolean;
  readonly seq: string | undefined;
  readonly producer: ProducerTuple | undefined;
}

/** How an append went: written, or answered as a duplicate (a producer retry, a repeated close). */
export interface AppendOutcome {
  readonly kind: 'appended' | 'duplicate';
  readonly state: StreamState;
  /** The producer's state after the append (for `Producer-Epoch` and `Producer-Seq`). */
  readonly producer: ProducerState | undefined;
}

/** What a feed of the stream namespace holds. */
type Lookup =
  | { readonly kind: 'stream'; readonly state: StreamState }
  | { readonly kind: 'absent' }
  /** A feed with no commit yet: a creation cut short before its first commit. */
  | { readonly kind: 'empty'; readonly feed: Feed }
  /** A feed whose first commit is not a stream's creation. */
  | { readonly kind: 'foreign' };

/** The placeholder record of a commit without data: a commit holds at least one record. */
const placeholder: AppendRecord = { payload: '', type: emptyRecordType };

/** Longest `Stream-Seq`, in characters: it is kept in the commit message of the append. */
export const streamSeqCharactersMax = 1024;

export class DurableStreams {
  /** Lookups by stream name: in flight, or settled on a stream (absent names are not kept). */
  private readonly lookups = new Map<string, Promise<Lookup>>();
  /** The streams open now, for the expiry sweep. */
  private readonly open = new Map<string, StreamState>();
  /** Each stream's queue of writes: the last one's settling. */
  private readonly queues = new Map<string, Promise<unknown>>();
  private readonly sweeper: NodeJS.Timeout;

  /**
   * @param sweepMs how often the open streams are checked for expiry
   * @param report where a failed sweep is reported (the next sweep tries again)
   */
  constructor(
    private readonly ctx: ServerContext,
    sweepMs: number,
    report: (error: unknown) => void,
    private readonly clock: () => number = Date.now,
  ) {
    this.sweeper = setInterval(() => void this.sweep().catch(report), sweepMs);
    this.sweeper.unref();
  }

  /** Stops the expiry sweep (the server is closing). */
  close(): void {
    clearInterval(this.sweeper);
  }

  /** The stream `name`, for a read or a HEAD; `FEED_NOT_FOUND` if there is none (or it expired). */
  async stream(name: string): Promise<StreamState> {
    const found = await this.lookup(name);
    if (found.kind !== 'stream') throw notFound(name);
    if (isExpired(found.state, this.clock())) {
      await this.serialize(name, () => this.dropIfExpired(found.state));
      throw notFound(name);
    }
    return found.state;
  }

  /** A read resets the TTL countdown (HEAD does not). */
  touch(state: StreamState): void {
    state.lastAccess = Math.max(state.lastAccess, this.clock());
  }

  /** Creates stream `name`, or finds it as asked (`created: false`); `FEED_EXISTS` if it differs. */
  async create(name: string, request: CreateRequest): Promise<{ created: boolean; state: StreamState }> {
    const feedName = streamFeedName(name);
    // Checked before anything is written: a bad body creates no stream.
    const records = recordsOfBody(request.config.contentType, request.body, true);
    return this.serialize(name, async () => {
      let found = await this.lookup(name);
      if (found.kind === 'stream' && (await this.dropIfExpired(found.state))) found = { kind: 'absent' };
      if (found.kind === 'stream') {
        const { state } = found;
        if (sameCreation(state, request)) return { created: false, state };
        throw new StreamStackError(
          'FEED_EXISTS',
          `stream ${name} exists with another configuration (Content-Type, TTL, expiry or closure)`,
          {
            details: { stream: name, contentType: state.config.contentType, closed: state.closedAt !== undefined },
          },
        );
      }
      if (found.kind === 'foreign') {
        throw new StreamStackError('FEED_EXISTS', `feed ${feedName} exists and is not a Durable Streams stream`, {
          details: { stream: name, feed: feedName },
        });
      }
      if (found.kind === 'absent') await this.ctx.store.createFeed(feedName);
      const feed = found.kind === 'empty' ? found.feed : await this.ctx.feed(feedName);
      const meta: CommitMeta = {
        create: request.config,
        ...(request.closed ? { closed: true } : {}),
        ...(records.length === 0 ? { empty: true } : {}),
      };
      let commit;
      try {
        commit = await feed.append(records.length === 0 ? [placeholder] : records, {
          message: encodeCommitMeta(meta)!,
        });
      } catch (error) {
        // A feed without its creation commit is no stream; it is removed rather than left behind.
        await this.ctx.store.deleteFeed(feedName).catch(() => undefined);
        throw error;
      }
      const state = newState(name, feed, request.config, (await feed.info()).createdAt, this.clock());
      applyCommit(state, commit.commit, meta);
      this.remember(state);
      this.counted(feed, records);
      return { created: true, state };
    });
  }

  /** Appends to stream `name` (and closes it, if asked): one commit, after every check. */
  async append(name: string, request: AppendRequest): Promise<AppendOutcome> {
    return this.serialize(name, async () => {
      const state = await this.writable(name);
      const hasBody = request.body.length > 0;
      if (state.closedAt !== undefined) {
        // A retry of the closing append, or a repeated close without data, is answered again.
        if (isClosingAppend(state.closedBy, request.producer) || (request.closed && !hasBody)) {
          return { kind: 'duplicate', state, producer: request.producer && state.producers.get(request.producer.id) };
        }
        throw closedError(state);
      }
      if (!hasBody && !request.closed) {
        throw new StreamStackError(
          'INVALID_ARGUMENT',
          'an append needs a body (only a close, Stream-Closed: true, may have none)',
          {
            details: { field: 'body' },
          },
        );
      }
      let records: AppendRecord[] = [];
      if (hasBody) {
        if (request.contentType === undefined) {
          throw new StreamStackError('INVALID_ARGUMENT', 'an append with a body needs a Content-Type', {
            details: { header: 'Content-Type' },
          });
        }
        if (mediaTypeOf(request.contentType) !== mediaTypeOf(state.config.contentType)) {
          throw new StreamStackError(
            'CONTENT_TYPE_MISMATCH',
            `stream ${name} holds ${state.config.contentType}, not ${request.contentType}`,
            {
              details: { stream: name, contentType: state.config.contentType, received: request.contentType },
            },
          );
        }
        records = recordsOfBody(state.config.contentType, request.body, false);
      }
      // The producer's duplicate is recognised before Stream-Seq is checked: a retry carries both.
      if (request.producer && checkProducer(state.producers, request.producer).kind === 'duplicate') {
        return { kind: 'duplicate', state, producer: state.producers.get(request.producer.id) };
      }
      if (request.seq !== undefined) checkStreamSeq(state, request.seq);
      const meta: CommitMeta = {
        ...(request.closed ? { closed: true } : {}),
        ...(records.length === 0 ? { empty: true } : {}),
        ...(request.seq === undefined ? {} : { seq: request.seq }),
        ...(request.producer ? { producer: request.producer } : {}),
      };
      const message = encodeCommitMeta(meta);
      const commit = await state.feed.append(
        records.length === 0 ? [placeholder] : records,
        message === undefined ? {} : { message },
      );
      applyCommit(state, commit.commit, meta);
      this.touch(state);
      this.counted(state.feed, records);
      return { kind: 'appended', state, producer: request.producer && state.producers.get(request.producer.id) };
    });
  }

  /** Deletes stream `name` and its data; `FEED_NOT_FOUND` if there is none. */
  async delete(name: string): Promise<void> {
    await this.serialize(name, async () => {
      const state = await this.writable(name);
      await this.drop(state);
    });
  }

  /** The stream `name` inside its write turn; `FEED_NOT_FOUND` if there is none or it expired. */
  private async writable(name: string): Promise<StreamState> {
    const found = await this.lookup(name);
    if (found.kind !== 'stream' || (await this.dropIfExpired(found.state))) throw notFound(name);
    return found.state;
  }

  private lookup(name: string): Promise<Lookup> {
    const known = this.lookups.get(name);
    if (known) return known;
    const feedName = streamFeedName(name);
    const pending = (async (): Promise<Lookup> => {
      let feed: Feed;
      try {
        feed = await this.ctx.feed(feedName);
      } catch (error) {
        if (isStreamStackError(error, 'FEED_NOT_FOUND')) return { kind: 'absent' };
        throw error;
      }
      if ((await feed.head()) === undefined) return { kind: 'empty', feed };
      const state = await replayState(name, feed, this.clock());
      return state ? { kind: 'stream', state } : { kind: 'foreign' };
    })();
    this.lookups.set(name, pending);
    const forget = () => {
      if (this.lookups.get(name) === pending) this.lookups.delete(name);
    };
    pending.then((found) => (found.kind === 'stream' ? this.open.set(name, found.state) : forget()), forget);
    return pending;
  }

  private remember(state: StreamState): void {
    this.lookups.set(state.name, Promise.resolve({ kind: 'stream', state }));
    this.open.set(state.name, state);
  }

  /** Deletes the stream's feed and forgets it; inside the stream's write turn. */
  private async drop(state: StreamState): Promise<void> {
    if (state.deleted) return;
    state.deleted = true;
    this.lookups.delete(state.name);
    this.open.delete(state.name);
    const feedName = state.feed.name;
    try {
      await this.ctx.store.deleteFeed(feedName);
    } catch (error) {
      if (!isStreamStackError(error, 'FEED_NOT_FOUND')) throw error;
    }
    this.ctx.forget(feedName);
  }

  /** Drops the stream if it has expired; true when it had. */
  private async dropIfExpired(state: StreamState): Promise<boolean> {
    if (state.deleted) return true;
    if (!isExpired(state, this.clock())) return false;
    await this.drop(state);
    return true;
  }

  /** Deletes the open streams that have expired, each in its write turn. */
  private async sweep(): Promise<void> {
    const now = this.clock();
    for (const state of [...this.open.values()]) {
      if (!isExpired(state, now)) continue;
      try {
        await this.serialize(state.name, () => this.dropIfExpired(state));
      } catch (error) {
        // The store closing under the sweep (the server is shutting down) is no failure.
        if (!isStreamStackError(error, 'CLOSED')) throw error;
      }
    }
  }

  /** Runs `write` after every earlier write to stream `name` has settled. */
  private serialize<T>(name: string, write: () => Promise<T>): Promise<T> {
    const before = this.queues.get(name) ?? Promise.resolve();
    const turn = before.then(write, write);
    const settled = turn.then(
      () => undefined,
      () => undefined,
    );
    this.queues.set(name, settled);
    void settled.then(() => {
      if (this.queues.get(name) === settled) this.queues.delete(name);
    });
    return turn;
  }

  private counted(feed: Feed, records: readonly AppendRecord[]): void {
    this.ctx.metrics.appended(feed.name, 'one-shot', records);
    this.ctx.metrics.commits.inc({ feed: feed.name });
  }
}

/** True when a PUT asks for the stream as it is: the same media type, lifetime and closure. */
function sameCreation(state: StreamState, request: CreateRequest): boolean {
  const { config } = state;
  return (
    mediaTypeOf(config.contentType) === mediaTypeOf(request.config.contentType) &&
    config.ttlSeconds === request.config.ttlSeconds &&
    config.expiresAt === request.config.expiresAt &&
    (state.closedAt !== undefined) === request.closed
  );
}

/**
 * `Stream-Seq` must grow, compared as strings: byte-wise, since Node gives header values one
 * character per byte.
 */
function checkStreamSeq(state: StreamState, seq: string): void {
  if (seq.length === 0 || seq.length > streamSeqCharactersMax) {
    throw new StreamStackError('INVALID_ARGUMENT', `Stream-Seq is 1 to ${streamSeqCharactersMax} characters`, {
      details: { header: 'Stream-Seq' },
    });
  }
  if (state.streamSeq !== undefined && seq <= state.streamSeq) {
    const message = `Stream-Seq ${JSON.stringify(seq)} does not follow ${JSON.stringify(state.streamSeq)}: it must grow (compared byte by byte)`;
    throw new StreamStackError('SEQ_MISMATCH', message, {
      details: { stream: state.name, streamSeq: state.streamSeq, received: seq },
    });
  }
}

function notFound(name: string): StreamStackError {
  return new StreamStackError('FEED_NOT_FOUND', `no stream ${name}`, { details: { stream: name } });
}

/** An append to a closed stream: 409 with `Stream-Closed` and the final offset. */
function closedError(state: StreamState): StreamStackError {
  return new StreamStackError('STREAM_SEALED', `stream ${state.name} is closed: it takes no more appends`, {
    details: { stream: state.name, streamClosed: true, nextOffset: offsetOf(state.lastDataCommit) },
  });
}
