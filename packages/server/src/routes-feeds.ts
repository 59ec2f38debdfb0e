/** Feeds, leases, retention, trim and verify: the CLI's `feed`, `lease`, `retention`, `trim`, `verify`. */
import type { FastifyInstance } from 'fastify';
import { StreamStackError, type RetentionPolicy } from '@streamstack/engine';
import type { Authorizer, TokenGrant } from './auth.js';
import type { ServerContext } from './context.js';
import { sendLines } from './ndjson.js';
import { fencingToken } from './request-params.js';
import { describe } from './route-schemas.js';

type FeedParams = { feed: string };

/** A JSON body as an object (an absent body is `{}`), else `INVALID_ARGUMENT`. */
export function bodyObject(body: unknown): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body)) throw new StreamStackError('INVALID_ARGUMENT', 'the request body is a JSON object');
  return body as Record<string, unknown>;
}

export function addFeedRoutes(app: FastifyInstance, ctx: ServerContext, auth: Authorizer | undefined): void {
  app.post('/v1/feeds', { config: { operation: 'admin', scope: 'any' }, schema: describe('feeds', 'create a feed: {"name", "retention"?}') }, async (request, reply) => {
    const { name, retention } = bodyObject(request.body);
    if (auth) auth.authorize(request.grant!, 'admin', typeof name === 'string' ? name : undefined);
    const feed = await ctx.store.createFeed(name as string, retention === undefined ? {} : { retention: retention as RetentionPolicy });
    return reply.code(201).send(await feed.info());
  });

  app.get('/v1/feeds', { config: { operation: 'read', scope: 'any' }, schema: describe('feeds', 'every feed the token may read, one info line each (NDJSON)') }, async (request, reply) => {
    const grant: TokenGrant | undefined = request.grant;
    const names = (await ctx.store.feedNames()).filter((name) => !auth || !grant || grantCovers(auth, grant, name));
    return sendLines(reply, (async function* () {
      for (const name of names) yield (await ctx.feed(name)).info();
    })());
  });

  app.get<{ Params: FeedParams }>('/v1/feeds/:feed', { config: { operation: 'read' }, schema: describe('feeds', "a feed's info: head, counts, lease, active stream") }, async (request) =>
    (await ctx.feed(request.params.feed)).info(),
  );

  app.get<{ Params: FeedParams }>('/v1/feeds/:feed/disk', { config: { operation: 'read' }, schema: describe('feeds', 'what the feed takes on disk: {"historySegments", "files", "bytes"}') }, async (request) =>
    (await ctx.feed(request.params.feed)).diskUse(),
  );

  app.post<{ Params: FeedParams }>('/v1/feeds/:feed/lease', { config: { operation: 'lease' }, schema: describe('leases', 'acquire the lease: {"holder", "ttlMs"?}') }, async (request, reply) => {
    const { holder, ttlMs } = bodyObject(request.body);
    const grant = await (await ctx.feed(request.params.feed)).acquireLease({ holder: holder as string, ...(ttlMs === undefined ? {} : { ttlMs: ttlMs as number }) });
    return reply.code(201).send(grant);
  });

  app.put<{ Params: FeedParams }>('/v1/feeds/:feed/lease', { config: { operation: 'lease' }, schema: describe('leases', 'renew the lease of SS-Fencing-Token: {"ttlMs"?}') }, async (request) => {
    const { ttlMs } = bodyObject(request.body);
    return (await ctx.feed(request.params.feed)).renewLease({ token: fencingToken(request.headers), ...(ttlMs === undefined ? {} : { ttlMs: ttlMs as number }) });
  });

  app.delete<{ Params: FeedParams }>('/v1/feeds/:feed/lease', { config: { operation: 'lease' }, schema: describe('leases', 'release the lease of SS-Fencing-Token') }, async (request) => {
    await (await ctx.feed(request.params.feed)).releaseLease({ token: fencingToken(request.headers) });
    return { feed: request.params.feed, released: true };
  });

  app.get<{ Params: FeedParams }>('/v1/feeds/:feed/retention', { config: { operation: 'read' }, schema: describe('history', 'the retention policy, low mark and what holds it back') }, async (request) =>
    (await ctx.feed(request.params.feed)).retention(),
  );

  app.put<{ Params: FeedParams }>('/v1/feeds/:feed/retention', { config: { operation: 'admin' }, schema: describe('history', 'set the retention policy: {"maxAgeMs"?, "maxRecords"?, "maxBytes"?} ({} keeps all)') }, async (request) =>
    (await ctx.feed(request.params.feed)).setRetention(bodyObject(request.body) as RetentionPolicy),
  );

  app.post<{ Params: FeedParams }>('/v1/feeds/:feed/trim', { config: { operation: 'admin' }, schema: describe('history', 'trim whole history segments: {"before"?, "force"?}') }, async (request) => {
    const { before, force } = bodyObject(request.body);
    return (await ctx.feed(request.params.feed)).trim({ ...(before === undefined ? {} : { before: before as number }), ...(force === undefined ? {} : { force: force as boolean }) });
  });

  app.post<{ Params: FeedParams }>('/v1/feeds/:feed/compact', { config: { operation: 'admin' }, schema: describe('history', 'merge adjacent sealed history segments (every read stays as it was)') }, async (request) => {
    bodyObject(request.body ?? {});
    return (await ctx.feed(request.params.feed)).compact();
  });

  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/compact-keys',
    { config: { operation: 'admin' }, schema: describe('history', 'key compaction up to a horizon: {"horizon", "force"?, "keyless"?: "keep" | "drop"}') },
    async (request) => {
      const { horizon, force, keyless } = bodyObject(request.body);
      return (await ctx.feed(request.params.feed)).compactKeys({
        horizon: horizon as number,
        ...(force === undefined ? {} : { force: force as boolean }),
        ...(keyless === undefined ? {} : { keyless: keyless as 'keep' | 'drop' }),
      });
    },
  );

  app.get<{ Params: FeedParams }>('/v1/feeds/:feed/verify', { config: { operation: 'admin' }, schema: describe('feeds', "check the feed's CRCs, chain, manifests and WAL; repairs nothing") }, async (request) => {
    await ctx.feed(request.params.feed);
    const [result] = await ctx.store.verify(request.params.feed);
    return result;
  });

  app.get('/v1/verify', { config: { operation: 'admin' }, schema: describe('feeds', 'verify every feed, one report per line (NDJSON)') }, async (_request, reply) =>
    sendLines(reply, await ctx.store.verify()),
  );
}

function grantCovers(auth: Authorizer, grant: TokenGrant, feed: string): boolean {
  try {
    auth.authorize(grant, 'read', feed);
    return true;
  } catch {
    return false;
  }
}
