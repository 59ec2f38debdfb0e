/**
 * The Durable Streams protocol's reserved subscription APIs on the compatibility route
 * (docs/http.md, subscriptions): `/ds/v1/stream/__ds/subscriptions/{id}` and what hangs off it,
 * and `/ds/v1/stream/__ds/jwks.json`, the keys webhooks are signed with. These paths are routed
 * before the streams' wildcard, so no stream is ever named `__ds/…`.
 *
 * A subscription spans streams its pattern may match anywhere, so managing one (PUT, GET,
 * DELETE, its streams) needs `admin` across all feeds, and claiming a pull-wake `read` across
 * all feeds. A wake's callback, ack and release carry the wake's own token instead.
 *
 * @example
 * // curl -X PUT -H 'Content-Type: application/json' \
 * //   -d '{"type":"webhook","pattern":"events/*","webhook":{"url":"https://worker.example/hook"}}' \
 * //   http://127.0.0.1:4437/ds/v1/stream/__ds/subscriptions/processor
 */
import type { Readable } from 'node:stream';
import { StreamStackError } from '@streamstack/engine';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Authorizer, Operation } from './auth.js';
import { subscriptionConfigOf } from './durable-subscription-config.js';
import type { WakeRequest } from './durable-subscription-state.js';
import type { DurableSubscriptions } from './durable-subscriptions.js';
import { errorBody, errorHeaders, typedRequestError } from './http-errors.js';
import * as schemas from './schemas-durable-subscriptions.js';

const root = '/ds/v1/stream/__ds';
const subscription = `${root}/subscriptions/:id`;

/** The JSON body of a request, parsed; `INVALID_ARGUMENT` when it is not JSON. */
function jsonOf(request: FastifyRequest): unknown {
  const bytes = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
  try {
    return bytes.length === 0 ? {} : JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    throw new StreamStackError('INVALID_ARGUMENT', `the body is not JSON: ${(error as Error).message}`, {
      details: { field: 'body' },
    });
  }
}

/** What an ack, callback or release body names. */
function wakeRequestOf(request: FastifyRequest): WakeRequest {
  const body = jsonOf(request) as Record<string, unknown>;
  return { wakeId: body?.wake_id, generation: body?.generation, acks: body?.acks, done: body?.done };
}

/** The bearer token of a wake's call, if any. */
function bearerOf(request: FastifyRequest): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '')?.[1];
}

function idOf(request: FastifyRequest): string {
  return (request.params as { id: string }).id;
}

export function addDurableSubscriptionRoutes(
  app: FastifyInstance,
  auth: Authorizer | undefined,
  readBodyBytes: (request: FastifyRequest, payload: Readable) => Promise<Buffer>,
  subscriptions: DurableSubscriptions,
): Promise<void> {
  /** Checks that the token may do `operation` across every feed (a subscription spans them). */
  const acrossFeeds = (request: FastifyRequest, operation: Operation) => {
    if (auth) auth.authorize(request.grant!, operation, undefined);
  };
  // The routes a wake's token authorises take no server token: they name no operation.
  const options = (operation: Operation | undefined, schema: Record<string, unknown>) => ({
    config: (operation === undefined ? {} : { operation, scope: 'any' as const }) as Record<string, unknown>,
    schema,
  });
  return registered(app, async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', readBodyBytes);
    scope.setErrorHandler((error, request, reply) => {
      const typed = typedRequestError(error);
      const status = schemas.subscriptionStatusOf(typed.code);
      if (status >= 500 && typed.code !== 'UNAVAILABLE') request.log.error({ err: error }, typed.message);
      reply.code(status).headers(errorHeaders(typed));
      return reply.type('application/json').send(errorBody(typed));
    });

    scope.get(`${root}/jwks.json`, options(undefined, schemas.jwks), async (_request, reply: FastifyReply) =>
      reply
        .code(200)
        .header('cache-control', 'public, max-age=300')
        .type('application/jwk-set+json')
        .send(JSON.stringify(subscriptions.keys.jwks())),
    );

    scope.put(subscription, options('admin', schemas.put), async (request, reply) => {
      acrossFeeds(request, 'admin');
      const config = subscriptionConfigOf(jsonOf(request));
      const streamRoot = `${request.protocol}://${request.headers.host ?? request.hostname}/ds/v1/stream/`;
      const { created, view } = await subscriptions.put(idOf(request), config, streamRoot);
      return reply.code(created ? 201 : 200).send(view);
    });

    scope.get(subscription, options('admin', schemas.get), async (request, reply) => {
      acrossFeeds(request, 'admin');
      return reply.code(200).send(await subscriptions.get(idOf(request)));
    });

    scope.delete(subscription, options('admin', schemas.remove), async (request, reply) => {
      acrossFeeds(request, 'admin');
      await subscriptions.remove(idOf(request));
      return reply.code(204).send();
    });

    scope.post(`${subscription}/streams`, options('admin', schemas.addStreams), async (request, reply) => {
      acrossFeeds(request, 'admin');
      await subscriptions.addStreams(idOf(request), (jsonOf(request) as { streams?: unknown })?.streams);
      return reply.code(204).send();
    });

    scope.delete(`${subscription}/streams/*`, options('admin', schemas.removeStream), async (request, reply) => {
      acrossFeeds(request, 'admin');
      await subscriptions.removeStream(idOf(request), (request.params as { '*': string })['*']);
      return reply.code(204).send();
    });

    scope.post(`${subscription}/callback`, options(undefined, schemas.callback), async (request, reply) =>
      reply.code(200).send(await subscriptions.callback(idOf(request), bearerOf(request), wakeRequestOf(request))),
    );

    scope.post(`${subscription}/claim`, options('read', schemas.claim), async (request, reply) => {
      acrossFeeds(request, 'read');
      const grant = await subscriptions.claim(idOf(request), (jsonOf(request) as { worker?: unknown })?.worker);
      return grant === undefined ? reply.code(204).send() : reply.code(200).send(grant);
    });

    scope.post(`${subscription}/ack`, options(undefined, schemas.ack), async (request, reply) =>
      reply.code(200).send(await subscriptions.ack(idOf(request), bearerOf(request), wakeRequestOf(request))),
    );

    scope.post(`${subscription}/release`, options(undefined, schemas.release), async (request, reply) => {
      await subscriptions.release(idOf(request), bearerOf(request), wakeRequestOf(request));
      return reply.code(204).send();
    });
  });
}

/** Registers `plugin` as a scope of `app`, resolving once it is. */
async function registered(app: FastifyInstance, plugin: (scope: FastifyInstance) => Promise<void>): Promise<void> {
  await app.register(plugin);
}
