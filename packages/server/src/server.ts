/**
 * The HTTP server: a fastify app over one opened Store, with the routes of docs/http.md, typed
 * errors with one status per code, bearer-token auth when a token file is given, structured logs
 * that never carry a token, Prometheus metrics, an OpenAPI document, and a graceful close.
 *
 * @example
 * const store = await Store.open('./data');
 * const server = await createServer({ store });
 * const url = await server.listen({ port: 4437 }); // 127.0.0.1 unless `host` says otherwise
 * // … later, or on SIGTERM: stop accepting, finish in-flight requests, close the store.
 * await server.close();
 */
import path from 'node:path';
import type { Readable } from 'node:stream';
import swagger from '@fastify/swagger';
import { limits, type Store, StreamStackError } from '@streamstack/engine';
import fastify, {
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import { Authorizer, type TokenGrant } from './auth.js';
import { BodyGate } from './body-gate.js';
import { ConnectionSweep } from './connection-sweep.js';
import { feedParam, type LiveSettings, type RouteConfig, ServerContext } from './context.js';
import { answerClientError, errorBody, errorHeaders, statusOf, typedRequestError } from './http-errors.js';
import { bodyBytesInFlightMaxDefault, bodyRetryAfterSeconds, bodyWaitMsMaxDefault } from './limits.js';
import { ServerMetrics } from './metrics.js';
import { bytesOfStream, ndjsonTypes, recordsOfStream } from './ndjson.js';
import { ownerRedirect } from './owner-redirect.js';
import { RequestGuards } from './request-guards.js';
import { bearerScheme, finishDocument } from './route-schemas.js';
import { addDurableStreamRoutes, type DurableStreamSettings, durableStreamDefaults } from './routes-durable-streams.js';
import { addExportRoutes } from './routes-export.js';
import { addFeedRoutes } from './routes-feeds.js';
import { addGroupRoutes } from './routes-groups.js';
import { addHistoryTailRoute } from './routes-history-tail.js';
import { addReadRoutes } from './routes-read.js';
import { addServiceRoutes } from './routes-service.js';
import { addSubscriptionRoutes } from './routes-subscriptions.js';
import { addWriteRoutes } from './routes-write.js';
import { useRouteSchemaCompilers } from './schema-validation.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The token grant of an authenticated request (only when the server has a token file). */
    grant?: TokenGrant;
  }
}

export interface ServerOptions {
  /** An opened store; the server closes it when it closes. */
  readonly store: Store;
  /** Token grants (see auth.ts); without them the server checks nothing and must stay local. */
  readonly tokens?: readonly TokenGrant[];
  /** The largest request body, in bytes (default 64 MiB, a batch's worth of large records). */
  readonly bodyLimit?: number;
  /** fastify's logger option: `true`, `false`, or pino options (a level, a destination stream). */
  readonly logger?: FastifyServerOptions['logger'];
  /** The directory exports are written under (each export names a directory inside it). */
  readonly exportDirectory?: string;
  /** SSE heartbeat interval and the longest long-poll. */
  readonly live?: Partial<LiveSettings>;
  /** The Durable Streams route's long-poll wait, SSE connection length, expiry sweep and read size. */
  readonly durableStreams?: Partial<DurableStreamSettings>;
  /**
   * `Host` names the server answers besides loopback names, IP literals and the name it listens
   * on (`name` or `name:port`; `*` turns the check off, for a proxy that rewrites `Host`). Any
   * other `Host` is refused with 403 `FORBIDDEN`, which is what defeats DNS rebinding.
   */
  readonly allowedHosts?: readonly string[];
  /**
   * Origins a web page may call the server from (`https://app.example`), with CORS headers; `*`
   * allows every origin. None by default: a request from any other origin that changes
   * something is refused with 403 `FORBIDDEN`, and no answer carries CORS headers.
   */
  readonly corsOrigins?: readonly string[];
  /**
   * NDJSON body bytes parsed at once across requests (default 256 MiB, at least `bodyLimit`): a
   * body reserves its Content-Length (or the body limit) before it is read, and waits for room.
   */
  readonly bodyBytesInFlightMax?: number;
  /** How long a body waits for that room, in milliseconds, before 503 `UNAVAILABLE` with `Retry-After` (default 10 s). */
  readonly bodyWaitMs?: number;
}

export const bodyLimitDefault = 64 * 1024 * 1024;

/** Headers that hold secrets: pino replaces them before a log line is written. */
const redactedPaths = [
  'req.headers.authorization',
  'req.headers["ss-fencing-token"]',
  'headers.authorization',
  'headers["ss-fencing-token"]',
];

/** A route fastify serves: its method and its path as fastify writes it (`/v1/feeds/:feed`). */
export interface ServedRoute {
  readonly method: string;
  readonly url: string;
}

export interface StreamStackServer {
  readonly app: FastifyInstance;
  /** Every route added, without the HEAD routes fastify adds for GET ones (what /openapi.json must cover). */
  servedRoutes(): ServedRoute[];
  readonly metrics: ServerMetrics;
  /** Starts listening (127.0.0.1 and port 4437 unless given); resolves with the base URL. */
  listen(options?: { host?: string; port?: number }): Promise<string>;
  /** Stops accepting, ends live reads, finishes in-flight requests, closes the store. */
  close(): Promise<void>;
}

/** True for a loopback address, where a server without tokens may listen. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}

/** fastify's logger option with the secret headers redacted, whatever the caller passed. */
function loggerOption(logger: ServerOptions['logger']): FastifyServerOptions['logger'] {
  if (logger === undefined || logger === false) return false;
  if (logger === true) return { redact: redactedPaths };
  return { ...logger, redact: redactedPaths };
}

/**
 * Records every route added from here on. fastify adds a HEAD route for each GET with the GET's
 * handler; those are left out, as the document leaves them out.
 */
function collectRoutes(app: FastifyInstance): () => ServedRoute[] {
  const routes: (ServedRoute & { handler: unknown })[] = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) routes.push({ method, url: route.url, handler: route.handler });
  });
  // Read when asked, after every route is in: a GET's HEAD twin is known by its handler.
  return () =>
    routes
      .filter(
        (route) =>
          !(
            route.method === 'HEAD' &&
            routes.some((other) => other.method === 'GET' && other.url === route.url && other.handler === route.handler)
          ),
      )
      .map(({ method, url }) => ({ method, url }));
}

/**
 * The Durable Streams route's wildcard (fastify's `*`) as the path parameter `name` in the
 * document, which a generator cannot make an identifier of otherwise.
 */
function nameWildcard({ schema, url }: { schema: Record<string, unknown> | undefined; url: string }) {
  if (!url.endsWith('*') || !schema) return { schema, url };
  const params = schema.params as { properties: Record<string, unknown>; required: string[] } | undefined;
  const renamed = params ? { ...params, required: ['name'], properties: { name: params.properties['*'] } } : undefined;
  return { schema: { ...schema, ...(renamed ? { params: renamed } : {}) }, url: `${url.slice(0, -1)}:name` };
}

/** Builds the server over `options.store` (not yet listening). */
export async function createServer(options: ServerOptions): Promise<StreamStackServer> {
  const { store } = options;
  const bodyLimit = options.bodyLimit ?? bodyLimitDefault;
  const app = createApp(options, bodyLimit);
  // The metrics read the context's open feeds at scrape time, and the context holds the metrics.
  const metrics: ServerMetrics = new ServerMetrics(() => ctx.openFeeds());
  const ctx = new ServerContext(store, metrics, {
    heartbeatMs: options.live?.heartbeatMs ?? 15_000,
    waitSecondsMax: options.live?.waitSecondsMax ?? 300,
  });
  const auth = options.tokens ? new Authorizer(options.tokens) : undefined;
  const guards = new RequestGuards({
    allowedHosts: options.allowedHosts ?? [],
    corsOrigins: options.corsOrigins ?? [],
  });

  const streamBody = addBodyParsers(app, options, bodyLimit);
  setErrorHandlers(app, ctx);
  addRequestHooks(app, ctx, auth, guards, metrics);

  // What the handlers look up before they read a body or a header: the feed, then the stream
  // or the subscription the route names (a `name` parameter only subscription routes have).
  useRouteSchemaCompilers(app, async (request) => {
    const { feed, id, name } = request.params as { feed?: string; id?: string; name?: string };
    if (feed === undefined) return;
    const opened = await ctx.feed(feed);
    if (id !== undefined) await opened.stream(id);
    else if (name !== undefined) await opened.subscription(name);
  });
  const routes = collectRoutes(app);
  await registerDocument(app);
  addFeedRoutes(app, ctx, auth);
  addWriteRoutes(app, ctx);
  addReadRoutes(app, ctx);
  addHistoryTailRoute(app, ctx);
  addSubscriptionRoutes(app, ctx);
  addGroupRoutes(app, ctx, auth);
  addExportRoutes(app, ctx, options.exportDirectory === undefined ? undefined : path.resolve(options.exportDirectory));
  await addDurableStreamRoutes(
    app,
    ctx,
    auth,
    streamBody,
    { ...durableStreamDefaults, ...options.durableStreams },
    guards.corsEnabled,
  );
  addServiceRoutes(app, store, metrics, auth);
  return serverHandle(app, store, ctx, metrics, auth, guards, routes);
}

/** The fastify app with the server's options: no routes, parsers or hooks of ours yet. */
function createApp(options: ServerOptions, bodyLimit: number): FastifyInstance {
  return fastify({
    logger: loggerOption(options.logger),
    bodyLimit,
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // Node's parser refusing a request, and fastify failing to route one (a bad % escape),
    // would otherwise answer bodies of their own: both get the error shape and a stable code.
    clientErrorHandler: answerClientError,
    frameworkErrors: (error, _request, reply: FastifyReply) => {
      const typed = new StreamStackError('INVALID_ARGUMENT', `the request URL cannot be decoded: ${error.message}`, {
        details: { reason: error.code },
      });
      return reply.code(statusOf(typed.code)).type('application/json').send(errorBody(typed));
    },
  });
}

/**
 * The app's body parsers (the Durable Streams scope puts its own in their place). Returns the
 * reader of a Durable Stream's body, which that scope installs, so that both share one gate.
 */
function addBodyParsers(
  app: FastifyInstance,
  options: ServerOptions,
  bodyLimit: number,
): (request: FastifyRequest, payload: Readable) => Promise<Buffer> {
  // Writes take only their documented types: NDJSON for records, JSON for the rest. fastify's
  // own text/plain parser goes, since text/plain is what a cross-site page can POST without a
  // preflight; such a body now gets 415 UNSUPPORTED_MEDIA_TYPE like any other unknown type.
  app.removeContentTypeParser('text/plain');
  // NDJSON bodies are parsed as they arrive, within the body limit and the batch limit (so a
  // body of a million tiny lines stops at the limit, holding a batch's records and one chunk),
  // and only as many bytes of them at once as the gate allows.
  const gate = new BodyGate(
    Math.max(options.bodyBytesInFlightMax ?? bodyBytesInFlightMaxDefault, bodyLimit),
    options.bodyWaitMs ?? bodyWaitMsMaxDefault,
    bodyRetryAfterSeconds,
  );
  app.addContentTypeParser(ndjsonTypes, async (request: FastifyRequest, payload: Readable) =>
    gate.reading(request.headers['content-length'], bodyLimit, () =>
      recordsOfStream(payload, { recordsMax: limits.batchRecordsMax, bytesMax: bodyLimit }),
    ),
  );
  // A Durable Stream's body is its own bytes, kept whole: it takes its room in the same gate.
  return (request: FastifyRequest, payload: Readable) =>
    gate.reading(request.headers['content-length'], bodyLimit, () => bytesOfStream(payload, bodyLimit));
}

/** Every error as the error JSON with its code's status, and an unknown route as `NOT_FOUND`. */
function setErrorHandlers(app: FastifyInstance, ctx: ServerContext): void {
  app.setErrorHandler((error, request, reply) => {
    const typed = typedRequestError(error);
    const status = statusOf(typed.code);
    if (status >= 500 && typed.code !== 'UNAVAILABLE') request.log.error({ err: error }, typed.message);
    // While draining, a connection should not be kept for another request that would be refused.
    if (ctx.draining) reply.header('connection', 'close');
    return reply.code(status).headers(errorHeaders(typed)).type('application/json').send(errorBody(typed));
  });
  app.setNotFoundHandler((request, reply) => {
    const typed = new StreamStackError('NOT_FOUND', `no route ${request.method} ${request.url.split('?')[0]}`);
    return reply.code(404).type('application/json').send(errorBody(typed));
  });
}

/**
 * The checks every request passes before its route (draining, Host, Origin, then the token),
 * and the request-duration metric after it.
 */
function addRequestHooks(
  app: FastifyInstance,
  ctx: ServerContext,
  auth: Authorizer | undefined,
  guards: RequestGuards,
  metrics: ServerMetrics,
): void {
  // Callback hooks, not async ones: every request passes through each, and an async hook costs
  // a promise and a turn of the microtask queue apiece. None of these waits for anything.
  app.addHook('onRequest', (request, reply, done) => {
    let answered: boolean;
    try {
      answered = checkRequest(request, reply, ctx, auth, guards);
    } catch (error) {
      done(error as Error);
      return;
    }
    // A preflight answered here ends the request: fastify is not told to go on.
    if (!answered) done();
  });
  // After the token: a request the token does not allow learns nothing of where a feed lives.
  app.addHook('onRequest', (request, _reply, done) => {
    done(ownerRedirect(ctx.store, request));
  });
  app.addHook('onResponse', (request, reply, done) => {
    metrics.answered(request.method, request.routeOptions.url ?? 'unknown', reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
}

/**
 * The checks of one request, in order: draining, Host, Origin (which answers a preflight itself:
 * true), then the token and what it may do. Throws the typed error of the first that fails.
 */
function checkRequest(
  request: FastifyRequest,
  reply: FastifyReply,
  ctx: ServerContext,
  auth: Authorizer | undefined,
  guards: RequestGuards,
): boolean {
  if (ctx.draining) throw new StreamStackError('UNAVAILABLE', 'the server is shutting down');
  // Before auth: a page's request is refused whatever token it might carry.
  guards.checkHost(request);
  if (guards.checkOrigin(request, reply)) return true;
  const config = request.routeOptions.config as Partial<RouteConfig>;
  if (!auth || config.operation === undefined) return false;
  request.grant = auth.authenticate(request.headers.authorization);
  if (config.scope === 'any') {
    if (!request.grant.operations.includes(config.operation))
      auth.authorize(request.grant, config.operation, undefined);
    return false;
  }
  auth.authorize(request.grant, config.operation, feedParam(request));
  return false;
}

/** The OpenAPI document's plugin: it must be in before the routes it documents are added. */
async function registerDocument(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      // 3.1: bearer security requirements name the operation a token needs as their scope.
      openapi: '3.1.0',
      info: { title: 'StreamStack', description: 'A durable stream store over HTTP (docs/http.md).', version: '0.1.0' },
      components: { securitySchemes: { bearer: bearerScheme } },
    },
    // The option's type is a union over swagger and openapi modes that a plain function does not satisfy.
    transform: nameWildcard as never,
    transformObject: (document) =>
      'openapiObject' in document ? finishDocument(document.openapiObject) : document.swaggerObject,
  });
}

/** The server's handle: listening, on loopback only without tokens, and the graceful close. */
function serverHandle(
  app: FastifyInstance,
  store: Store,
  ctx: ServerContext,
  metrics: ServerMetrics,
  auth: Authorizer | undefined,
  guards: RequestGuards,
  routes: () => ServedRoute[],
): StreamStackServer {
  let closing: Promise<void> | undefined;
  const connections = new ConnectionSweep(app.server);
  return {
    app,
    servedRoutes: routes,
    metrics,
    async listen(listenOptions = {}) {
      const host = listenOptions.host ?? '127.0.0.1';
      if (!auth && !isLoopback(host)) {
        throw new StreamStackError(
          'INVALID_ARGUMENT',
          `without a token file the server listens on loopback only, not ${host} (give --tokens FILE)`,
          { details: { host } },
        );
      }
      // A server listening on a name answers requests that name it.
      guards.allowHost(host);
      return app.listen({ host, port: listenOptions.port ?? 4437 });
    },
    close() {
      closing ??= (async () => {
        // New requests get 503 from here on; live reads end, so that close does not wait on them.
        ctx.startDraining();
        // Connections whose last response ends while draining would otherwise idle in
        // keep-alive until it times out, holding close up: they are closed as they go quiet.
        const sweep = setInterval(() => {
          app.server.closeIdleConnections();
          connections.closeQuiet();
        }, 50);
        try {
          await app.close();
        } finally {
          clearInterval(sweep);
          await store.close();
        }
      })();
      return closing;
    },
  };
}
