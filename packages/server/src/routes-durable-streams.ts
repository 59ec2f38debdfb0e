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
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Authorizer, Operation } from './auth.js';
import type { ServerContext } from './context.js';
import { producerOf } from './durable-producers.js';
import { isReservedName, streamFeedName } from './durable-stream-names.js';
import {
  closedFlagOf,
  contentTypeOf,
  dsHeader,
  forkRequestOf,
  lifetimeOf,
  offsetOf,
  singleHeader,
} from './durable-stream-protocol.js';
import { addReadRoute } from './durable-stream-read-route.js';
import { DurableStreams } from './durable-stream-registry.js';
import { type DurableStreamRoute, route, routeOptions } from './durable-stream-route.js';
import { DurableSubscriptions } from './durable-subscriptions.js';
import { errorBody, errorHeaders, typedRequestError } from './http-errors.js';
import { addDurableSubscriptionRoutes } from './routes-durable-subscriptions.js';
import * as schemas from './schemas-durable-streams.js';
import { WebhookKeys } from './webhook-signing.js';

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
  /**
   * The file of the Ed25519 key webhooks are signed with, made there (owner-only) if missing;
   * undefined: a key of this process only, so receivers must fetch the JWK Set again after a
   * restart.
   */
  readonly webhookKeyFile: string | undefined;
}

export const durableStreamDefaults: DurableStreamSettings = {
  longPollMs: 30_000,
  sseConnectionMs: 60_000,
  expirySweepMs: 5_000,
  readBytesMax: 4 * 1024 * 1024,
  webhookKeyFile: undefined,
};

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
    const subscriptions = new DurableSubscriptions(ctx, WebhookKeys.load(settings.webhookKeyFile), streams, (error) =>
      scope.log.warn({ err: error }, 'durable streams subscription failed'),
    );
    streams.onDataWritten = (name, before) => subscriptions.streamWritten(name, before);
    scope.addHook('onClose', async () => {
      streams.close();
      subscriptions.close();
    });
    setUpScope(scope, ctx, readBodyBytes, routeHeaders);

    /** Checks the token's scope on the feed of the request's stream, or of `name` (a fork's source). */
    const authorize = (request: FastifyRequest, operation: Operation, name = streamNameOf(request)): string => {
      if (isReservedName(name)) {
        throw new StreamStackError('INVALID_NAME', `stream names under __ds are the protocol's own: ${name} is none`, {
          details: { stream: name },
        });
      }
      const feed = streamFeedName(name);
      if (auth) auth.authorize(request.grant!, operation, feed);
      return name;
    };

    const handlers: DurableStreamRoute = { scope, ctx, streams, settings, routeHeaders, authorize };
    // In the order they always were: the OpenAPI document lists the methods in this order.
    addPreflightRoute(scope);
    addCreateRoute(handlers);
    addAppendRoute(handlers);
    addHeadRoute(handlers);
    addReadRoute(handlers);
    addDeleteRoute(handlers);
    await addDurableSubscriptionRoutes(scope, auth, readBodyBytes, subscriptions);
  });
}

/**
 * What the scope does for every answer before its routes are added: bodies taken as bytes, the
 * route's headers, and errors with the protocol's statuses and headers.
 */
function setUpScope(
  scope: FastifyInstance,
  ctx: ServerContext,
  readBodyBytes: (request: FastifyRequest, payload: Readable) => Promise<Buffer>,
  routeHeaders: Record<string, string>,
): void {
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
    const status = schemas.protocolStatusOf(typed.code, typed.details as Record<string, unknown>);
    if (status >= 500 && typed.code !== 'UNAVAILABLE') request.log.error({ err: error }, typed.message);
    if (ctx.draining) reply.header('connection', 'close');
    reply.code(status).headers({ ...errorHeaders(typed), ...protocolErrorHeaders(typed) });
    return reply.type('application/json').send(errorBody(typed));
  });
}

/**
 * OPTIONS. Preflights with an Origin are answered by the server's CORS check before routing;
 * this answers an OPTIONS without one (what the route allows), which grants a page nothing.
 */
function addPreflightRoute(scope: FastifyInstance): void {
  scope.options(route, { schema: schemas.preflight }, async (_request, reply) =>
    reply.code(204).headers(preflightHeaders).send(),
  );
}

/** PUT: creates a stream; 201 when it is new, 200 when it was there already. */
function addCreateRoute({ scope, streams, authorize }: DurableStreamRoute): void {
  scope.put(route, routeOptions('admin', schemas.create), async (request, reply) => {
    const name = authorize(request, 'admin');
    const fork = forkRequestOf(request.headers);
    // A fork reads its source: the token must be allowed to read it.
    if (fork) authorize(request, 'read', fork.source);
    const { created, state } = await streams.create(name, {
      contentType: contentTypeOf(request.headers),
      lifetime: lifetimeOf(request.headers),
      closed: closedFlagOf(request.headers),
      body: bodyOf(request),
      fork,
    });
    reply.header('content-type', state.config.contentType).header(dsHeader.nextOffset, offsetOf(state.lastDataCommit));
    if (state.closedAt !== undefined) reply.header(dsHeader.closed, 'true');
    if (created)
      reply.header(
        'location',
        `${request.protocol}://${request.headers.host ?? request.hostname}${request.url.split('?')[0]}`,
      );
    return reply.code(created ? 201 : 200).send();
  });
}

/** POST: appends a body, closes the stream, or both; a producer's appends are deduplicated. */
function addAppendRoute({ scope, streams, authorize }: DurableStreamRoute): void {
  scope.post(route, routeOptions('write', schemas.append), async (request, reply) => {
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
}

/** HEAD: the stream's metadata. */
function addHeadRoute({ scope, streams, authorize }: DurableStreamRoute): void {
  // HEAD is the protocol's metadata request, not fastify's HEAD of a GET: the document shows it.
  scope.head(
    route,
    {
      ...routeOptions('read', schemas.head),
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
}

/** DELETE: deletes the stream. */
function addDeleteRoute({ scope, streams, authorize }: DurableStreamRoute): void {
  scope.delete(route, routeOptions('admin', schemas.remove), async (request, reply) => {
    await streams.delete(authorize(request, 'admin'));
    return reply.code(204).send();
  });
}
