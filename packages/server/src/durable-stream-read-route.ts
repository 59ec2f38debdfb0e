/**
 * GET on the Durable Streams route (routes-durable-streams.ts): a catch-up read, a tail offset
 * (`offset=now`), a long-poll (`live=long-poll`) or an SSE connection (`live=sse`), with the
 * protocol's headers and an ETag that turns a repeated catch-up read into a 304.
 */
import { StreamStackError } from '@streamstack/engine';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { readBody } from './durable-stream-bodies.js';
import {
  dsHeader,
  isJsonType,
  offsetOf,
  readStartOf,
  responseCursor,
  singleHeader,
} from './durable-stream-protocol.js';
import {
  type Chunk,
  followOverSse,
  nextOffsetOf,
  type ReadPoint,
  readChunk,
  readPointOf,
  waitForData,
} from './durable-stream-reads.js';
import { type DurableStreamRoute, route, routeOptions } from './durable-stream-route.js';
import type { StreamState } from './durable-stream-state.js';
import { closedSignal } from './live-wait.js';
import type { QueryParams } from './request-params.js';
import * as schemas from './schemas-durable-streams.js';

/** GET: reads the stream from an offset, at once or live. */
export function addReadRoute({ scope, ctx, streams, settings, routeHeaders, authorize }: DurableStreamRoute): void {
  scope.get<{ Querystring: QueryParams }>(route, routeOptions('read', schemas.read), async (request, reply) => {
    const state = await streams.stream(authorize(request, 'read'));
    const start = readStartOf(request.query);
    const live = liveModeOf(request.query);
    if (live !== undefined && start === undefined) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `live=${live} needs an offset (-1 for the start, now for the tail)`,
        {
          details: { parameter: 'offset' },
        },
      );
    }
    const cursor = singleText(request.query, 'cursor');
    streams.touch(state);
    const point = await readPointOf(state, start);
    if (live === 'sse') {
      ctx.metrics.liveReaders.inc({ kind: 'sse' });
      try {
        await followOverSse(reply, state, {
          point,
          cursor,
          bytesMax: settings.readBytesMax,
          connectionMs: settings.sseConnectionMs,
          headers: routeHeaders,
          drain: ctx.drainSignal,
          touch: () => streams.touch(state),
          warn: (error) => request.log.warn({ err: error }, 'durable stream SSE read ended'),
        });
      } finally {
        ctx.metrics.liveReaders.dec({ kind: 'sse' });
      }
      return reply;
    }
    if (start?.kind === 'now' && live === undefined) return answerTail(reply, state, point);
    let chunk: Chunk;
    if (live === 'long-poll') {
      ctx.metrics.liveReaders.inc({ kind: 'long-poll' });
      try {
        chunk = await waitForData(state, point, settings.longPollMs, settings.readBytesMax, [
          ctx.drainSignal,
          closedSignal(reply.raw),
        ]);
      } finally {
        ctx.metrics.liveReaders.dec({ kind: 'long-poll' });
      }
      streams.touch(state);
      if (!chunk.closed) reply.header(dsHeader.cursor, responseCursor(cursor, Date.now()));
      if (chunk.payloads.length === 0) {
        reply.header(dsHeader.nextOffset, nextOffsetOf(chunk)).header(dsHeader.upToDate, 'true');
        if (chunk.closed) reply.header(dsHeader.closed, 'true');
        return reply.code(204).send();
      }
    } else {
      chunk = await readChunk(state, point, settings.readBytesMax);
    }
    return answerChunk(request, reply, state, point, chunk);
  });
}

/** The `live` parameter: absent (catch-up), `long-poll` or `sse`. */
function liveModeOf(query: QueryParams): 'long-poll' | 'sse' | undefined {
  const live = query.live;
  if (live === undefined) return undefined;
  if (live === 'long-poll' || live === 'sse') return live;
  throw new StreamStackError('INVALID_ARGUMENT', 'live is long-poll or sse', {
    details: { parameter: 'live', value: live },
  });
}

/** True when `If-None-Match` names `etag` (or is `*`). */
function matchesEtag(ifNoneMatch: string | undefined, etag: string): boolean {
  if (ifNoneMatch === undefined) return false;
  return ifNoneMatch.split(',').some((candidate) => {
    const tag = candidate.trim().replace(/^W\//, '');
    return tag === '*' || tag === etag;
  });
}

/** A single query parameter as text; a repeated one is refused. */
function singleText(query: QueryParams, name: string): string | undefined {
  const value = query[name];
  if (Array.isArray(value))
    throw new StreamStackError('INVALID_ARGUMENT', `${name} is given more than once`, { details: { parameter: name } });
  return value;
}

/** `offset=now` without `live`: no data, the tail offset, never cached. */
function answerTail(reply: FastifyReply, state: StreamState, point: ReadPoint): FastifyReply {
  reply
    .header('content-type', state.config.contentType)
    .header(dsHeader.nextOffset, offsetOf(point.dataCommit))
    .header(dsHeader.upToDate, 'true')
    .header('cache-control', 'no-store');
  if (state.closedAt !== undefined) reply.header(dsHeader.closed, 'true');
  return reply.code(200).send(Buffer.from(isJsonType(state.config.contentType) ? '[]' : ''));
}

/**
 * A read's answer: the data, the next offset, up to date and closed when they hold, and an ETag
 * (the stream's identity, the range, and closure) that `If-None-Match` turns into a 304.
 */
function answerChunk(
  request: FastifyRequest,
  reply: FastifyReply,
  state: StreamState,
  point: ReadPoint,
  chunk: Chunk,
): FastifyReply {
  const next = nextOffsetOf(chunk);
  const etag = `"${state.createdAt.toString(36)}:${offsetOf(point.dataCommit)}:${next}${chunk.closed ? ':c' : ''}"`;
  reply.header('etag', etag).header(dsHeader.nextOffset, next);
  // A chunk inside the history never changes; the answer at the tail does as data comes.
  reply.header('cache-control', chunk.upToDate ? 'no-cache' : 'private, max-age=60, stale-while-revalidate=300');
  if (chunk.upToDate) reply.header(dsHeader.upToDate, 'true');
  if (chunk.closed) reply.header(dsHeader.closed, 'true');
  if (matchesEtag(singleHeader(request.headers, 'if-none-match'), etag)) return reply.code(304).send();
  return reply
    .header('content-type', state.config.contentType)
    .code(200)
    .send(readBody(state.config.contentType, chunk.payloads));
}
