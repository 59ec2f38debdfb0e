/** Feeds, leases, retention, trim and verify: the CLI's `feed`, `lease`, `retention`, `trim`, `verify`. */

import { type Durability, type RetentionPolicy, StreamStackError } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { Authorizer, TokenGrant } from './auth.js';
import type { ServerContext } from './context.js';
import { sendLines } from './ndjson.js';
import { fencingToken } from './request-params.js';
import * as schemas from './schemas-feeds.js';

type FeedParams = { feed: string };

/** A JSON body as an object (an absent body is `{}`), else `INVALID_ARGUMENT`. */
export function bodyObject(body: unknown): Record<string, unknown> {
  if (body === undefined || body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body))
    throw new StreamStackError('INVALID_ARGUMENT', 'the request body is a JSON object');
  return body as Record<string, unknown>;
}

export function addFeedRoutes(app: FastifyInstance, ctx: ServerContext, auth: Authorizer | undefined): void {
  addFeedListRoutes(app, ctx, auth);
  addLeaseRoutes(app, ctx);
  addHistoryRoutes(app, ctx);
  addVerifyRoutes(app, ctx);
}

/** Creating, listing and describing feeds; the list shows only the feeds a token may read. */
function addFeedListRoutes(app: FastifyInstance, ctx: ServerContext, auth: Authorizer | undefined): void {
  app.post(
    '/v1/feeds',
    { config: { operation: 'admin', scope: 'any' }, schema: schemas.createFeed },
    async (request, reply) => {
      const { name, retention, durability } = bodyObject(request.body);
      if (auth) auth.authorize(request.grant!, 'admin', typeof name === 'string' ? name : undefined);
      const feed = await ctx.store.createFeed(name as string, {
        ...(retention === undefined ? {} : { retention: retention as RetentionPolicy }),
        ...(durability === undefined ? {} : { durability: durability as Durability }),
      });
      return reply.code(201).send(await feed.info());
    },
  );

  app.get(
    '/v1/feeds',
    { config: { operation: 'read', scope: 'any' }, schema: schemas.listFeeds },
    async (request, reply) => {
      const grant: TokenGrant | undefined = request.grant;
      const names = (await ctx.store.feedNames()).filter((name) => !auth || !grant || grantCovers(auth, grant, name));
      return sendLines(
        reply,
        (async function* () {
          for (const name of names) yield (await ctx.feed(name)).info();
        })(),
      );
    },
  );

  app.get<{ Params: FeedParams }>(
    '/v1/feeds/:feed',
    { config: { operation: 'read' }, schema: schemas.feedInfo },
    async (request) => (await ctx.feed(request.params.feed)).info(),
  );

  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/fork',
    { config: { operation: 'read' }, schema: schemas.forkFeed },
    async (request, reply) => {
      const { name, at } = bodyObject(request.body);
      // The fork is a new feed: its name needs what creating one needs.
      if (auth) auth.authorize(request.grant!, 'admin', typeof name === 'string' ? name : undefined);
      const fork = await ctx.store.forkFeed(
        request.params.feed,
        name as string,
        at === undefined ? {} : { at: at as number },
      );
      return reply.code(201).send(await fork.info());
    },
  );

  app.get<{ Params: FeedParams }>(
    '/v1/feeds/:feed/disk',
    { config: { operation: 'read' }, schema: schemas.diskUse },
    async (request) => (await ctx.feed(request.params.feed)).diskUse(),
  );
}

/** Taking, renewing and releasing a feed's writer lease. */
function addLeaseRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/lease',
    { config: { operation: 'lease', owner: 'any' }, schema: schemas.acquireLease },
    async (request, reply) => {
      const { holder, ttlMs } = bodyObject(request.body);
      // On a node of a cluster, a replicated feed written elsewhere (or fenced off here) is taken over.
      const grant = await ctx.store.acquireLease(request.params.feed, {
        holder: holder as string,
        ...(ttlMs === undefined ? {} : { ttlMs: ttlMs as number }),
      });
      ctx.remember(request.params.feed);
      return reply.code(201).send(grant);
    },
  );

  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/takeover',
    { config: { operation: 'lease', owner: 'any' }, schema: schemas.takeOver },
    async (request, reply) => {
      const { holder, ttlMs } = bodyObject(request.body);
      const taken = await ctx.store.takeOver(request.params.feed, {
        holder: holder as string,
        ...(ttlMs === undefined ? {} : { ttlMs: ttlMs as number }),
      });
      ctx.remember(request.params.feed);
      return reply.code(201).send(taken);
    },
  );

  app.put<{ Params: FeedParams }>(
    '/v1/feeds/:feed/lease',
    { config: { operation: 'lease' }, schema: schemas.renewLease },
    async (request) => {
      const { ttlMs } = bodyObject(request.body);
      return (await ctx.feed(request.params.feed)).renewLease({
        token: fencingToken(request.headers),
        ...(ttlMs === undefined ? {} : { ttlMs: ttlMs as number }),
      });
    },
  );

  app.delete<{ Params: FeedParams }>(
    '/v1/feeds/:feed/lease',
    { config: { operation: 'lease' }, schema: schemas.releaseLease },
    async (request) => {
      await (await ctx.feed(request.params.feed)).releaseLease({ token: fencingToken(request.headers) });
      return { feed: request.params.feed, released: true };
    },
  );
}

/** A feed's retention policy, trim and both compactions. */
function addHistoryRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.get<{ Params: FeedParams }>(
    '/v1/feeds/:feed/retention',
    { config: { operation: 'read' }, schema: schemas.retention },
    async (request) => (await ctx.feed(request.params.feed)).retention(),
  );

  app.put<{ Params: FeedParams }>(
    '/v1/feeds/:feed/retention',
    { config: { operation: 'admin' }, schema: schemas.setRetention },
    async (request) => (await ctx.feed(request.params.feed)).setRetention(bodyObject(request.body) as RetentionPolicy),
  );

  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/trim',
    { config: { operation: 'admin' }, schema: schemas.trim },
    async (request) => {
      const { before, force } = bodyObject(request.body);
      return (await ctx.feed(request.params.feed)).trim({
        ...(before === undefined ? {} : { before: before as number }),
        ...(force === undefined ? {} : { force: force as boolean }),
      });
    },
  );

  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/compact',
    { config: { operation: 'admin' }, schema: schemas.compact },
    async (request) => {
      bodyObject(request.body ?? {});
      return (await ctx.feed(request.params.feed)).compact();
    },
  );

  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/compact-keys',
    { config: { operation: 'admin' }, schema: schemas.compactKeys },
    async (request) => {
      const { horizon, force, keyless } = bodyObject(request.body);
      return (await ctx.feed(request.params.feed)).compactKeys({
        horizon: horizon as number,
        ...(force === undefined ? {} : { force: force as boolean }),
        ...(keyless === undefined ? {} : { keyless: keyless as 'keep' | 'drop' }),
      });
    },
  );
}

/** Verifying one feed, or every feed as NDJSON lines. */
function addVerifyRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.get<{ Params: FeedParams }>(
    '/v1/feeds/:feed/verify',
    { config: { operation: 'admin' }, schema: schemas.verifyFeed },
    async (request) => {
      await ctx.feed(request.params.feed);
      const [result] = await ctx.store.verify(request.params.feed);
      return result;
    },
  );

  app.get('/v1/verify', { config: { operation: 'admin' }, schema: schemas.verifyAll }, async (_request, reply) =>
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
