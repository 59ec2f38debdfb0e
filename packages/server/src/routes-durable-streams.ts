/**
 * The Durable Streams protocol on `/ds/v1/stream/{name}` (docs/http.md, Durable Streams
 * compatibility): PUT creates, POST appends (and closes), GET reads (catch-up, `live=long-poll`,
 * `live=sse`), HEAD gives the metadata, DELETE deletes, OPTIONS answers CORS preflights. Bodies
 * are the stream's own bytes of any Content-Type. Errors keep the server's error JSON and
 * codes; the statuses are the protocol's (a regressing `Stream-Seq` or a producer's gap is 409,
 * a fenced producer epoch 403), and the facts a client needs go into the protocol's headers.
 *
 * @example
 * // curl -X PUT -H 'Content-Type: text/plain' --data 'hello' http://127.0.0.1:4437/ds/v1/stream/chat-1
 * // curl 'http://127.0.0.1:4437/ds/v1/stream/chat-1?offset=-1'
 */
import type { Readable } from 'node:stream';
import { StreamStackError } from '@streamstack/engine';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authorizer, Operation } from './auth.js';
import type { ServerContext } from './context.js';
import { producerOf } from './durable-producers.js';
import { readBody } from './durable-stream-bodies.js';
import { streamFeedName } from './durable-stream-names.js';
import {
  closedFlagOf,
  contentTypeOf,
  dsHeader,
  isJsonType,
  lifetimeOf,
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
import { DurableStreams } from './durable-stream-registry.js';
import type { StreamState } from './durable-stream-state.js';
import { errorBody, errorHeaders, typedRequestError } from './http-errors.js';
import { closedSignal } from './live-wait.js';
import type { QueryParams } from './request-params.js';
import * as schemas from './schemas-durable-streams.js';

/** Settings of the compatibility route. */
export interface DurableStreamSettings {
  /** How long a long-poll waits for data before it answers 204 (default 30 s). */
  readonly longPollMs: number;
  /** How long an SSE connection stays open before the server ends it (default 60 s, as the protocol suggests). */
  readonly sseConnectionMs: number;
  /** How often the open streams are checked for expiry (default 5 s). */
  readonly expirySweepMs: number;
  /** Payload bytes a read gathers at most before it stops at a commit boundary (default 4 MiB). */
  readonly readBytesMax: number;
}

export const durableStreamDefaults: DurableStreamSettings = {
  longPollMs: 30_000,
  sseConnectionMs: 60_000,
  expirySweepMs: 5_000,
  readBytesMax: 4 * 1024 * 1024,
};

const route = '/ds/v1/stream/*';

/**
 * Headers every answer of the route carries: the protocol's browser-security headers. CORS
 * headers are the server's (request-guards.ts), sent only to configured origins; without any,
 * a stream is not to be embedded cross-origin either (a `<script src>` of a text stream).
 */
function routeHeadersOf(corsEnabled: boolean): Record<string, string> {
  return {
    'x-content-type-options': 'nosniff',
    'cross-origin-resource-policy': corsEnabled ? 'cross-origin' : 'same-origin',
  };
}

const preflightHeaders: Record<string, string> = {
  'access-control-allow-methods': 'GET, HEAD, PUT, POST, DELETE, OPTIONS',
  'access-control-allow-headers': [
    'Content-Type',
    'Authorization',
    'If-None-Match',
    'Stream-Seq',
    'Stream-TTL',
    'Stream-Expires-At',
    'Stream-Closed',
    'Producer-Id',
    'Producer-Epoch',
    'Producer-Seq',
  ].join(', '),
  'access-control-max-age': '86400',
};

/** The protocol headers an error's details call for. */
function protocolErrorHeaders(error: StreamStackError): Record<string, string> {
  const details = error.details as Record<string, unknown>;
  const headers: Record<string, string> = {};
  if (details.streamClosed === true) headers[dsHeader.closed] = 'true';
  if (typeof details.nextOffset === 'string') headers[dsHeader.nextOffset] = details.nextOffset;
  if (typeof details.producerEpoch === 'number') headers[dsHeader.producerEpoch] = String(details.producerEpoch);
  if (typeof details.expectedSeq === 'number') headers[dsHeader.producerExpectedSeq] = String(details.expectedSeq);
  if (typeof details.receivedSeq === 'number') headers[dsHeader.producerReceivedSeq] = String(details.receivedSeq);
  return headers;
}

/** The stream name of a request: its decoded path after `/ds/v1/stream/`. */
function streamNameOf(request: FastifyRequest): string {
  return (request.params as { '*': string })['*'];
}

function bodyOf(request: FastifyRequest): Buffer {
  return Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
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

export async function addDurableStreamRoutes(
  app: FastifyInstance,
  ctx: ServerContext,
  auth: Authorizer | undefined,
  readBodyBytes: (request: FastifyRequest, payload: Readable) => Promise<Buffer>,
  settings: DurableStreamSettings,
  corsEnabled: boolean,
): Promise<void> {
  const routeHeaders = routeHeadersOf(corsEnabled);
  await app.register(async (scope) => {
    const streams = new DurableStreams(ctx, settings.expirySweepMs, (error) =>
      scope.log.warn({ err: error }, 'durable streams expiry sweep failed'),
    );
    scope.addHook('onClose', async () => streams.close());

    // A stream's body is its own bytes, of any type: every body is taken as it is.
    scope.removeAllContentTypeParsers();
    // Read within the body limit and the server's gate on bodies in flight (server.ts).
    scope.addContentTypeParser('*', readBodyBytes);

    scope.addHook('onSend', async (_request, reply, payload) => {
      reply.headers(routeHeaders);
      return payload;
    });

    scope.setErrorHandler((error, request, reply) => {
      const typed = typedRequestError(error);
      const status = schemas.protocolStatusOf(typed.code);
      if (status >= 500 && typed.code !== 'UNAVAILABLE') request.log.error({ err: error }, typed.message);
      if (ctx.draining) reply.header('connection', 'close');
      reply.code(status).headers({ ...errorHeaders(typed), ...protocolErrorHeaders(typed) });
      return reply.type('application/json').send(errorBody(typed));
    });

    /** Checks the token's scope on the stream's feed (the hook checked the operation on some feed). */
    const authorize = (request: FastifyRequest, operation: Operation): string => {
      const name = streamNameOf(request);
      const feed = streamFeedName(name);
      if (auth) auth.authorize(request.grant!, operation, feed);
      return name;
    };

    /** A route's auth settings and schema. */
    const options = (operation: Operation, schema: Record<string, unknown>) => ({
      config: { operation, scope: 'any' as const },
      schema,
    });

    // Preflights with an Origin are answered by the server's CORS check before routing; this
    // answers an OPTIONS without one (what the route allows), which grants a page nothing.
    scope.options(route, { schema: schemas.preflight }, async (_request, reply) =>
      reply.code(204).headers(preflightHeaders).send(),
    );

    scope.put(route, options('admin', schemas.create), async (request, reply) => {
      const name = authorize(request, 'admin');
      if (request.headers['stream-forked-from'] !== undefined) {
        throw new StreamStackError('INVALID_ARGUMENT', 'forks (Stream-Forked-From) are not supported yet', {
          details: { header: 'Stream-Forked-From' },
        });
      }
      const config = {
        contentType: contentTypeOf(request.headers) ?? 'application/octet-stream',
        ...lifetimeOf(request.headers),
      };
      const { created, state } = await streams.create(name, {
        config,
        closed: closedFlagOf(request.headers),
        body: bodyOf(request),
      });
      reply
        .header('content-type', state.config.contentType)
        .header(dsHeader.nextOffset, offsetOf(state.lastDataCommit));
      if (state.closedAt !== undefined) reply.header(dsHeader.closed, 'true');
      if (created)
        reply.header(
          'location',
          `${request.protocol}://${request.headers.host ?? request.hostname}${request.url.split('?')[0]}`,
        );
      return reply.code(created ? 201 : 200).send();
    });

    scope.post(route, options('write', schemas.append), async (request, reply) => {
      const name = authorize(request, 'write');
      const body = bodyOf(request);
      const producer = producerOf(request.headers);
      // A close without a body is not refused for its Content-Type, whatever it says.
      const contentType = body.length > 0 ? contentTypeOf(request.headers) : undefined;
      const closed = closedFlagOf(request.headers);
      const outcome = await streams.append(name, {
        contentType,
        body,
        closed,
        seq: singleHeader(request.headers, dsHeader.seq),
        producer,
      });
      const { state } = outcome;
      reply.header(dsHeader.nextOffset, offsetOf(state.lastDataCommit));
      if (state.closedAt !== undefined) reply.header(dsHeader.closed, 'true');
      if (outcome.producer) {
        reply
          .header(dsHeader.producerEpoch, String(outcome.producer.epoch))
          .header(dsHeader.producerSeq, String(outcome.producer.lastSeq));
      }
      // 200 says a producer's data was written; a duplicate, a close alone, or a plain append is 204.
      return reply.code(outcome.kind === 'appended' && producer && body.length > 0 ? 200 : 204).send();
    });

    // HEAD is the protocol's metadata request, not fastify's HEAD of a GET: the document shows it.
    scope.head(
      route,
      {
        ...options('read', schemas.head),
        config: { operation: 'read', scope: 'any', swagger: { exposeHeadRoute: true } },
      },
      async (request, reply) => {
        // HEAD neither reads nor writes: it does not reset the TTL.
        const state = await streams.stream(authorize(request, 'read'));
        reply
          .header('content-type', state.config.contentType)
          .header(dsHeader.nextOffset, offsetOf(state.lastDataCommit));
        reply.header('cache-control', 'no-store');
        if (state.config.ttlSeconds !== undefined) reply.header(dsHeader.ttl, String(state.config.ttlSeconds));
        if (state.config.expiresAt !== undefined) reply.header(dsHeader.expiresAt, state.config.expiresAt);
        if (state.closedAt !== undefined) reply.header(dsHeader.closed, 'true');
        return reply.code(200).send();
      },
    );

    scope.get<{ Querystring: QueryParams }>(route, options('read', schemas.read), async (request, reply) => {
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

    scope.delete(route, options('admin', schemas.remove), async (request, reply) => {
      await streams.delete(authorize(request, 'admin'));
      return reply.code(204).send();
    });
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
