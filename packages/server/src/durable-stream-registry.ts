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
 *
 * Forks (durable-stream-forks.ts): a stream deleted (or expired) while forks of it live is
 * soft-deleted: one commit marks it, and it answers `STREAM_DELETED` (410) until the last fork
 * goes; then it is deleted for good, and so on up the chain of sources. The forks of a stream
 * are the feeds the store says were forked from its feed (`store.forksOf`), so the count holds
 * across restarts; a soft-deleted stream found with none left is deleted when next asked for.
 */
import { type AppendRecord, type Feed, isStreamStackError, StreamStackError } from '@streamstack/engine';
import type { ServerContext } from './context.js';
import { checkProducer, isClosingAppend, type ProducerState, type ProducerTuple } from './durable-producers.js';
import { recordsOfBody } from './durable-stream-bodies.js';
import { checkStreamSeq, closedError, live, notFound, sameCreation } from './durable-stream-checks.js';
import { checkForkPoint, forkConfig, subOffsetRecords } from './durable-stream-forks.js';
import { feedStreamName, isReservedName, streamFeedName } from './durable-stream-names.js';
import { type ForkRequest, type Lifetime, mediaTypeOf } from './durable-stream-protocol.js';
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
import { KeyedTurns } from './keyed-turns.js';

/** What a PUT asks for. */
export interface CreateRequest {
  /** The Content-Type given; undefined: `application/octet-stream`, or a fork's source's. */
  readonly contentType: string | undefined;
  readonly lifetime: Lifetime;
  readonly closed: boolean;
  readonly body: Buffer;
  /** Only for a fork (`Stream-Forked-From`). */
  readonly fork: ForkRequest | undefined;
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
  /** A feed with no commit of its own yet: a creation (or a fork) cut short before it. */
  | { readonly kind: 'empty'; readonly feed: Feed }
  /** A feed whose first commit is not a stream's creation. */
  | { readonly kind: 'foreign' };

/** The placeholder record of a commit without data: a commit holds at least one record. */
const placeholder: AppendRecord = { payload: '', type: emptyRecordType };

export class DurableStreams {
  /** Lookups by stream name: in flight, or settled on a stream (absent names are not kept). */
  private readonly lookups = new Map<string, Promise<Lookup>>();
  /** The streams open now, for the expiry sweep. */
  private readonly open = new Map<string, StreamState>();
  /** Each stream's queue of writes: the last one's settling. */
  private readonly turns = new KeyedTurns();
  private readonly sweeper: NodeJS.Timeout;
  /**
   * Told of every commit holding data, with the stream's tail before it (subscriptions link and
   * wake on it); it must not throw.
   */
  onDataWritten: ((name: string, before: number) => void) | undefined;

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

  /**
   * The stream `name`, for a read or a HEAD; `FEED_NOT_FOUND` if there is none (or it expired),
   * `STREAM_DELETED` while it is kept only for its forks.
   */
  async stream(name: string): Promise<StreamState> {
    const found = await this.lookup(name);
    if (found.kind !== 'stream') throw notFound(name);
    const { state } = found;
    if (state.softDeleted || isExpired(state, this.clock())) {
      const source = await this.serialize(name, () => this.settle(state));
      await this.collect(source);
    }
    return live(state);
  }

  /** A read resets the TTL countdown (HEAD does not). */
  touch(state: StreamState): void {
    state.lastAccess = Math.max(state.lastAccess, this.clock());
  }

  /**
   * Creates stream `name` (a fork of another, with `request.fork`), or finds it as asked
   * (`created: false`); `FEED_EXISTS` if it differs.
   */
  async create(name: string, request: CreateRequest): Promise<{ created: boolean; state: StreamState }> {
    const feedName = streamFeedName(name);
    const { fork } = request;
    if (fork) streamFeedName(fork.source);
    return this.serialize(name, async () => {
      let found = await this.lookup(name);
      if (found.kind === 'stream' && (await this.settle(found.state)) !== undefined) found = { kind: 'absent' };
      if (found.kind === 'stream' && found.state.deleted) found = { kind: 'absent' };
      const existing = found.kind === 'stream' ? found.state.config.fork : undefined;
      // A PUT repeating a fork is compared with it even once its source is soft-deleted.
      const source = fork ? await this.forkSource(fork.source, existing !== undefined) : undefined;
      // A repeated fork without an offset asks for the one it was made at, wherever the tail is now.
      const asked =
        fork && fork.offset === undefined && existing?.stream === fork.source
          ? { ...fork, offset: existing.offset }
          : fork;
      const config: StreamConfig =
        asked && source
          ? forkConfig(source, { contentType: request.contentType, lifetime: request.lifetime, fork: asked })
          : { contentType: request.contentType ?? 'application/octet-stream', ...request.lifetime };
      // Checked before anything is written: a bad body creates no stream.
      const records = recordsOfBody(config.contentType, request.body, true);
      if (found.kind === 'stream') {
        const { state } = found;
        if (state.softDeleted) {
          throw new StreamStackError(
            'FEED_EXISTS',
            `stream ${name} was deleted and is kept for its forks: its name is taken until they go`,
            {
              details: { stream: name },
            },
          );
        }
        if (sameCreation(state, config, request.closed)) return { created: false, state };
        throw new StreamStackError(
          'FEED_EXISTS',
          `stream ${name} exists with another configuration (Content-Type, TTL, expiry, closure or fork)`,
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
      if (found.kind === 'empty' && (await found.feed.head()) !== undefined) {
        // A fork cut short holds its source's commits: it is removed, never taken over.
        await this.ctx.store.deleteFeed(feedName);
        this.ctx.forget(feedName);
        found = { kind: 'absent' };
      }
      let inherited: AppendRecord[] = [];
      let feed: Feed;
      if (source && config.fork) {
        await checkForkPoint(source, config.fork.offset);
        inherited = await subOffsetRecords(source, config.fork.offset, config.fork.subOffset);
        // A feed left with no commit by a creation cut short is in the fork's way.
        if (found.kind === 'empty') {
          await this.ctx.store.deleteFeed(feedName);
          this.ctx.forget(feedName);
        }
        feed = await this.ctx.store.forkFeed(source.feed.name, feedName, { at: config.fork.offset });
      } else {
        if (found.kind === 'absent') await this.ctx.store.createFeed(feedName);
        feed = found.kind === 'empty' ? found.feed : await this.ctx.feed(feedName);
      }
      const written = [...inherited, ...records];
      const meta: CommitMeta = {
        create: config,
        ...(request.closed ? { closed: true } : {}),
        ...(written.length === 0 ? { empty: true } : {}),
      };
      let commit;
      try {
        commit = await feed.append(written.length === 0 ? [placeholder] : written, {
          message: encodeCommitMeta(meta)!,
        });
      } catch (error) {
        // A feed without its creation commit is no stream; it is removed rather than left behind.
        await this.ctx.store.deleteFeed(feedName).catch(() => undefined);
        throw error;
      }
      const state = newState(name, feed, config, (await feed.info()).createdAt, this.clock());
      // A fork's data so far is what it inherited, up to its fork point.
      state.lastDataCommit = config.fork?.offset ?? 0;
      applyCommit(state, commit.commit, meta);
      this.remember(state);
      this.counted(feed, written);
      if (written.length > 0) this.onDataWritten?.(name, config.fork?.offset ?? 0);
      return { created: true, state };
    });
  }

  /**
   * The source of a fork: `FEED_NOT_FOUND` if there is none, `STREAM_DELETED` (its `source`
   * detail set: the protocol answers 409) if it is kept only for its forks, unless
   * `softDeletedToo` (a repeated PUT of an existing fork is compared with it). Its data is
   * read, never written: a fork takes no turn of its source.
   */
  private async forkSource(name: string, softDeletedToo: boolean): Promise<StreamState> {
    const found = await this.lookup(name);
    if (found.kind !== 'stream' || found.state.deleted) throw notFound(name);
    if (found.state.softDeleted && softDeletedToo) return found.state;
    if (isExpired(found.state, this.clock())) throw notFound(name);
    if (found.state.softDeleted) {
      throw new StreamStackError(
        'STREAM_DELETED',
        `stream ${name} was deleted and is kept for its forks: it cannot be forked`,
        {
          details: { stream: name, source: true },
        },
      );
    }
    return found.state;
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
      const before = state.lastDataCommit;
      applyCommit(state, commit.commit, meta);
      this.touch(state);
      this.counted(state.feed, records);
      if (records.length > 0) this.onDataWritten?.(name, before);
      return { kind: 'appended', state, producer: request.producer && state.producers.get(request.producer.id) };
    });
  }

  /**
   * Deletes stream `name` and its data (kept, soft-deleted, while forks of it live); then its
   * source, if that was soft-deleted and this was its last fork, and so on up the chain.
   * `FEED_NOT_FOUND` if there is none.
   */
  async delete(name: string): Promise<void> {
    const source = await this.serialize(name, async () => this.retire(await this.writable(name)));
    await this.collect(source);
  }

  /** The tail (last data commit) of stream `name`, or undefined when it is not there to read. */
  async tailOf(name: string): Promise<number | undefined> {
    try {
      const found = await this.lookup(name);
      if (found.kind !== 'stream' || found.state.deleted || found.state.softDeleted) return undefined;
      return isExpired(found.state, this.clock()) ? undefined : found.state.lastDataCommit;
    } catch (error) {
      if (isStreamStackError(error, 'INVALID_NAME')) return undefined;
      throw error;
    }
  }

  /** The name of every stream's feed in the namespace, the route's reserved ones aside. */
  async streamNames(): Promise<string[]> {
    return (await this.ctx.store.feedNames())
      .map((feed) => feedStreamName(feed))
      .filter((name): name is string => name !== undefined && !isReservedName(name));
  }

  /** Appends one JSON message to stream `name` (a pull-wake subscription's wake event). */
  async appendJson(name: string, value: unknown): Promise<void> {
    await this.append(name, {
      contentType: 'application/json',
      body: Buffer.from(JSON.stringify(value)),
      closed: false,
      seq: undefined,
      producer: undefined,
    });
  }

  /**
   * The stream `name` inside its write turn; `FEED_NOT_FOUND` if there is none or it expired,
   * `STREAM_DELETED` while it is kept only for its forks.
   */
  private async writable(name: string): Promise<StreamState> {
    const found = await this.lookup(name);
    if (found.kind !== 'stream') throw notFound(name);
    const source = await this.settle(found.state);
    // The source's turn is not taken inside this one: its cleanup goes on by itself.
    if (source !== undefined) void this.collect(source).catch(() => undefined);
    return live(found.state);
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
      const head = (await feed.head())?.commit ?? 0;
      // A fork's feed holding nothing past its fork point is a fork cut short before its own
      // creation commit: its first commit is its source's creation, not its own.
      const origin = head === 0 ? undefined : (await feed.info()).fork;
      if (head === 0 || (origin !== undefined && head <= origin.at)) return { kind: 'empty', feed };
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

  /**
   * Deletes the stream, or soft-deletes it while forks of it live; inside its write turn.
   * Returns the source whose fork it was, when it was deleted for good (to `collect`).
   */
  private async retire(state: StreamState): Promise<string | undefined> {
    if ((await this.ctx.store.forksOf(state.feed.name)).length > 0) {
      if (!state.softDeleted) {
        const meta: CommitMeta = { deleted: true, empty: true };
        const commit = await state.feed.append([placeholder], { message: encodeCommitMeta(meta)! });
        applyCommit(state, commit.commit, meta);
      }
      return undefined;
    }
    await this.drop(state);
    return state.config.fork?.stream;
  }

  /**
   * Brings the stream's lifecycle up to date inside its write turn: an expired stream is
   * retired, a soft-deleted one whose forks are all gone is deleted for good. Returns the
   * source to `collect`, if it was deleted.
   */
  private async settle(state: StreamState): Promise<string | undefined> {
    if (state.deleted) return undefined;
    if (state.softDeleted || isExpired(state, this.clock())) return this.retire(state);
    return undefined;
  }

  /**
   * Deletes `source` for good if it is soft-deleted and no fork of it is left, then its own
   * source likewise, up the chain; each in its own write turn.
   */
  private async collect(source: string | undefined): Promise<void> {
    for (let name = source; name !== undefined; ) {
      const next: string | undefined = await this.serialize(name, async () => {
        const found = await this.lookup(name!);
        return found.kind === 'stream' && found.state.softDeleted ? this.settle(found.state) : undefined;
      });
      name = next;
    }
  }

  /** Retires the open streams that have expired, each in its write turn. */
  private async sweep(): Promise<void> {
    const now = this.clock();
    for (const state of [...this.open.values()]) {
      if (state.softDeleted || !isExpired(state, now)) continue;
      try {
        await this.collect(await this.serialize(state.name, () => this.settle(state)));
      } catch (error) {
        // The store closing under the sweep (the server is shutting down) is no failure.
        if (!isStreamStackError(error, 'CLOSED')) throw error;
      }
    }
  }

  /** Runs `write` after every earlier write to stream `name` has settled. */
  private serialize<T>(name: string, write: () => Promise<T>): Promise<T> {
    return this.turns.run(name, write);
  }

  private counted(feed: Feed, records: readonly AppendRecord[]): void {
    this.ctx.metrics.appended(feed.name, 'one-shot', records);
    this.ctx.metrics.committed(feed.name);
  }
}
