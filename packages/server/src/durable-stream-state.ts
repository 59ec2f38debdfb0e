/**
 * What a Durable Streams stream is, kept durably in its feed's commit messages and rebuilt from
 * them when the stream is first opened (docs/http.md, Durable Streams compatibility).
 *
 * Every write is one commit, and a commit that says something beyond "data" carries a small
 * JSON message, `{"ds":1, …}`:
 *
 * - `create`: the stream's configuration (`contentType`, `ttlSeconds` or `expiresAt`, and for a
 *   fork its source), on its first commit. A fork is a feed forked from its source's feed
 *   (`store.forkFeed`): its history starts with the source's commits, and its own begins at the
 *   commit carrying its `create`, which may also hold the part of the source's next commit a
 *   sub-offset inherits. What the stream is (configuration, producers, `Stream-Seq`, closure)
 *   starts over at every `create`: only the data before it is inherited;
 * - `deleted: true`: the stream was deleted while forks of it lived: it is kept for them, and
 *   answers `STREAM_DELETED` until the last of them goes and it is deleted for good;
 * - `closed: true`: the stream is closed from this commit on (the close and the final append
 *   are one commit, so they are atomic);
 * - `empty: true`: the commit holds no data, only the one placeholder record a commit must
 *   have (a create without a body, a close without one);
 * - `seq`: the `Stream-Seq` the append carried;
 * - `producer`: `{id, epoch, seq}` of the idempotent producer that wrote it.
 *
 * The producer state and the data it guards are therefore written by one fsync'd commit:
 * after a crash either both are there or neither, and replaying the messages in order gives
 * every producer's epoch and last seq, the last `Stream-Seq`, the closure (and who closed),
 * and the tail. A commit without a message is plain data (a feed written through the native
 * routes reads as data too).
 */
import { type Feed, limits, StreamStackError } from '@streamstack/engine';
import type { ProducerState, ProducerTuple } from './durable-producers.js';

/** A stream's configuration, fixed at creation. */
export interface StreamConfig {
  /** The Content-Type the stream was created with, as given (matched on its media type). */
  readonly contentType: string;
  /** A sliding time-to-live: the stream expires this long after its last read or write. */
  readonly ttlSeconds?: number;
  /** An absolute expiry (RFC 3339, normalised to UTC). */
  readonly expiresAt?: string;
  /** Only for a fork: where it was forked from. */
  readonly fork?: StreamFork;
}

/** Where a fork was forked from: its source, and how much of it it inherits. */
export interface StreamFork {
  /** The source stream's name. */
  readonly stream: string;
  /** The last commit of the source it inherits whole. */
  readonly offset: number;
  /** Bytes (JSON: messages) of the source's next data commit it inherits too. */
  readonly subOffset: number;
}

/** What one commit's message says (all absent: a plain data commit). */
export interface CommitMeta {
  readonly create?: StreamConfig;
  readonly deleted?: boolean;
  readonly closed?: boolean;
  readonly empty?: boolean;
  readonly seq?: string;
  readonly producer?: ProducerTuple;
}

/** The type of the placeholder record of a commit that holds no data. */
export const emptyRecordType = 'ds.empty';

const formatVersion = 1;

/** The message for `meta`, or undefined when there is nothing to say (a plain data commit). */
export function encodeCommitMeta(meta: CommitMeta): string | undefined {
  const fields: Record<string, unknown> = {};
  if (meta.create) fields.create = meta.create;
  if (meta.deleted) fields.deleted = true;
  if (meta.closed) fields.closed = true;
  if (meta.empty) fields.empty = true;
  if (meta.seq !== undefined) fields.seq = meta.seq;
  if (meta.producer) fields.producer = meta.producer;
  if (Object.keys(fields).length === 0) return undefined;
  const message = JSON.stringify({ ds: formatVersion, ...fields });
  if (Buffer.byteLength(message) > limits.messageBytesMax) {
    const limit = `the ${limits.messageBytesMax} bytes a commit message holds`;
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `the request's Stream-Seq, producer and Content-Type headers take more than ${limit}`,
      {
        details: { bytes: Buffer.byteLength(message), max: limits.messageBytesMax },
      },
    );
  }
  return message;
}

/** What a commit's message says; a message that is not ours (or none) is a plain data commit. */
export function decodeCommitMeta(message: string | null): CommitMeta {
  if (message === null || !message.startsWith('{"ds":')) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(message);
  } catch {
    return {};
  }
  const fields = parsed as Record<string, unknown>;
  if (typeof fields !== 'object' || fields === null || fields.ds !== formatVersion) return {};
  return {
    ...(isConfig(fields.create) ? { create: fields.create } : {}),
    ...(fields.deleted === true ? { deleted: true } : {}),
    ...(fields.closed === true ? { closed: true } : {}),
    ...(fields.empty === true ? { empty: true } : {}),
    ...(typeof fields.seq === 'string' ? { seq: fields.seq } : {}),
    ...(isProducer(fields.producer) ? { producer: fields.producer } : {}),
  };
}

function isConfig(value: unknown): value is StreamConfig {
  const config = value as StreamConfig;
  if (typeof config !== 'object' || config === null || typeof config.contentType !== 'string') return false;
  const fork = config.fork;
  return (
    fork === undefined ||
    (typeof fork === 'object' &&
      fork !== null &&
      typeof fork.stream === 'string' &&
      Number.isSafeInteger(fork.offset) &&
      Number.isSafeInteger(fork.subOffset))
  );
}

function isProducer(value: unknown): value is ProducerTuple {
  const producer = value as ProducerTuple;
  if (typeof producer !== 'object' || producer === null) return false;
  return typeof producer.id === 'string' && Number.isSafeInteger(producer.epoch) && Number.isSafeInteger(producer.seq);
}

/** One open stream, as this server knows it: rebuilt from the commits, then kept up to date by its writes. */
export interface StreamState {
  readonly name: string;
  readonly feed: Feed;
  /** Set by the stream's `create` commit (a fork's replaces the source's it inherited). */
  config: StreamConfig;
  /** The commit holding the stream's `create`: 1, or for a fork the first of its own. */
  ownStart: number;
  /** When the feed was made: a stream recreated under the same name gets new ETags. */
  readonly createdAt: number;
  /** The last commit this state has taken in. */
  head: number;
  /** The last commit that holds data: the tail offset. */
  lastDataCommit: number;
  /** The commit that closed the stream, if it is closed. */
  closedAt: number | undefined;
  /** The producer whose append closed the stream, so that its retry is a duplicate. */
  closedBy: ProducerTuple | undefined;
  /** The last `Stream-Seq` accepted. */
  streamSeq: string | undefined;
  readonly producers: Map<string, ProducerState>;
  /** The last read or write, for the sliding TTL (kept in memory only; see docs/http.md). */
  lastAccess: number;
  /** Set once the stream is deleted or expired: handles still held must not be used. */
  deleted: boolean;
  /** Deleted while forks of it lived: kept for them, and `STREAM_DELETED` to everyone else. */
  softDeleted: boolean;
}

/** Takes one commit's meta into the state (in commit order). */
export function applyCommit(state: StreamState, commit: number, meta: CommitMeta): void {
  state.head = commit;
  if (meta.create) {
    // A creation starts the stream over: a fork inherits the source's data, never its state.
    state.config = meta.create;
    state.ownStart = commit;
    state.producers.clear();
    state.streamSeq = undefined;
    state.closedAt = undefined;
    state.closedBy = undefined;
    state.softDeleted = false;
  }
  if (meta.deleted) state.softDeleted = true;
  if (!meta.empty) state.lastDataCommit = commit;
  if (meta.seq !== undefined) state.streamSeq = meta.seq;
  if (meta.producer) state.producers.set(meta.producer.id, { epoch: meta.producer.epoch, lastSeq: meta.producer.seq });
  if (meta.closed && state.closedAt === undefined) {
    state.closedAt = commit;
    state.closedBy = meta.producer;
  }
}

/**
 * The state of `feed` rebuilt from its commit messages, or undefined when its first commit is not
 * a stream's creation (a feed with no commits yet: a creation cut short; or a feed of another
 * kind in the namespace). `now` starts the TTL countdown: reads are not written down, so after
 * a restart the countdown runs from the restart or the last write, whichever is later.
 */
export async function replayState(name: string, feed: Feed, now: number): Promise<StreamState | undefined> {
  let state: StreamState | undefined;
  let lastWrite = 0;
  for await (const commit of feed.commits({ after: 0 })) {
    const meta = decodeCommitMeta(commit.message);
    if (!state) {
      if (commit.commit !== 1 || !meta.create) return undefined;
      state = newState(name, feed, meta.create, (await feed.info()).createdAt, now);
    }
    applyCommit(state, commit.commit, meta);
    lastWrite = commit.sealedAt;
  }
  if (state) state.lastAccess = Math.max(now, lastWrite);
  return state;
}

/** A stream's state before its first commit is taken in. */
export function newState(name: string, feed: Feed, config: StreamConfig, createdAt: number, now: number): StreamState {
  return {
    name,
    feed,
    config,
    ownStart: 0,
    createdAt,
    head: 0,
    lastDataCommit: 0,
    closedAt: undefined,
    closedBy: undefined,
    streamSeq: undefined,
    producers: new Map(),
    lastAccess: now,
    deleted: false,
    softDeleted: false,
  };
}

/** When the stream expires (milliseconds since the epoch), or undefined if it never does. */
export function expiresAtOf(state: StreamState): number | undefined {
  if (state.config.expiresAt !== undefined) return Date.parse(state.config.expiresAt);
  if (state.config.ttlSeconds !== undefined) return state.lastAccess + state.config.ttlSeconds * 1000;
  return undefined;
}

/** True when the stream has expired at `now`. */
export function isExpired(state: StreamState, now: number): boolean {
  const at = expiresAtOf(state);
  return at !== undefined && now >= at;
}
