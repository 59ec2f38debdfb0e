/**
 * The checks the Durable Streams registry (durable-stream-registry.ts) makes against a stream's
 * state before it writes or answers: whether a PUT asks for the stream as it is, whether a
 * `Stream-Seq` grows, and whether the stream is there at all; and the errors they raise.
 */
import { StreamStackError } from '@streamstack/engine';
import { sameFork } from './durable-stream-forks.js';
import { mediaTypeOf, offsetOf } from './durable-stream-protocol.js';
import type { StreamConfig, StreamState } from './durable-stream-state.js';

/** Longest `Stream-Seq`, in characters: it is kept in the commit message of the append. */
export const streamSeqCharactersMax = 1024;

/** True when a PUT asks for the stream as it is: the same media type, lifetime, closure and fork. */
export function sameCreation(state: StreamState, asked: StreamConfig, closed: boolean): boolean {
  const { config } = state;
  return (
    mediaTypeOf(config.contentType) === mediaTypeOf(asked.contentType) &&
    config.ttlSeconds === asked.ttlSeconds &&
    config.expiresAt === asked.expiresAt &&
    sameFork(config, asked) &&
    (state.closedAt !== undefined) === closed
  );
}

/**
 * `Stream-Seq` must grow, compared as strings: byte-wise, since Node gives header values one
 * character per byte.
 */
export function checkStreamSeq(state: StreamState, seq: string): void {
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

/** The state, unless the stream is gone (`FEED_NOT_FOUND`) or kept only for its forks (`STREAM_DELETED`). */
export function live(state: StreamState): StreamState {
  if (state.deleted) throw notFound(state.name);
  if (state.softDeleted) {
    throw new StreamStackError('STREAM_DELETED', `stream ${state.name} was deleted: it is kept only for its forks`, {
      details: { stream: state.name },
    });
  }
  return state;
}

export function notFound(name: string): StreamStackError {
  return new StreamStackError('FEED_NOT_FOUND', `no stream ${name}`, { details: { stream: name } });
}

/** An append to a closed stream: 409 with `Stream-Closed` and the final offset. */
export function closedError(state: StreamState): StreamStackError {
  return new StreamStackError('STREAM_SEALED', `stream ${state.name} is closed: it takes no more appends`, {
    details: { stream: state.name, streamClosed: true, nextOffset: offsetOf(state.lastDataCommit) },
  });
}
