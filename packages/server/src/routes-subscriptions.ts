/** Subscriptions: create, list, info, delete, poll, advance, reset (the CLI's `sub`). */

import { recordLine, type Subscription } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';
import { sendLines } from './ndjson.js';
import { integer, type QueryParams } from './request-params.js';
import { bodyObject } from './routes-feeds.js';
import * as schemas from './schemas-subscriptions.js';

type FeedParams = { feed: string };
type SubscriptionParams = { feed: string; name: string };

/** The subscription a route names; `FEED_NOT_FOUND` or `SUBSCRIPTION_NOT_FOUND` if it has none. */
async function subscriptionOf(ctx: ServerContext, params: SubscriptionParams): Promise<Subscription> {
  return (await ctx.feed(params.feed)).subscription(params.name);
}

// Subscriptions are a reader's own cursors, so a read token may keep them (docs/http.md).
export function addSubscriptionRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/subscriptions',
    { config: { operation: 'read' }, schema: schemas.create },
    async (request, reply) => {
      const { name, after } = bodyObject(request.body);
      const subscription = await (await ctx.feed(request.params.feed)).createSubscription(
        name as string,
        after === undefined ? {} : { after: after as number },
      );
      return reply.code(201).send(await subscription.info());
    },
  );

  app.get<{ Params: FeedParams }>(
    '/v1/feeds/:feed/subscriptions',
    { config: { operation: 'read' }, schema: schemas.list },
    async (request, reply) => sendLines(reply, await (await ctx.feed(request.params.feed)).subscriptions()),
  );

  app.get<{ Params: SubscriptionParams }>(
    '/v1/feeds/:feed/subscriptions/:name',
    { config: { operation: 'read' }, schema: schemas.info },
    async (request) => (await subscriptionOf(ctx, request.params)).info(),
  );

  app.delete<{ Params: SubscriptionParams }>(
    '/v1/feeds/:feed/subscriptions/:name',
    { config: { operation: 'read' }, schema: schemas.remove },
    async (request) => {
      await (await subscriptionOf(ctx, request.params)).delete();
      return { feed: request.params.feed, subscription: request.params.name, deleted: true };
    },
  );

  app.get<{ Params: SubscriptionParams; Querystring: QueryParams }>(
    '/v1/feeds/:feed/subscriptions/:name/poll',
    { config: { operation: 'read' }, schema: schemas.poll },
    async (request) => {
      const max = integer(request.query, 'max');
      const polled = await (await subscriptionOf(ctx, request.params)).poll(max === undefined ? {} : { max });
      return {
        cursor: polled.cursor,
        commits: polled.commits.map(({ commit, records }) => ({ commit, records: records.map(recordLine) })),
      };
    },
  );

  app.post<{ Params: SubscriptionParams }>(
    '/v1/feeds/:feed/subscriptions/:name/advance',
    { config: { operation: 'read' }, schema: schemas.advance },
    async (request) => (await subscriptionOf(ctx, request.params)).advance(bodyObject(request.body).cursor as number),
  );

  app.post<{ Params: SubscriptionParams }>(
    '/v1/feeds/:feed/subscriptions/:name/reset',
    { config: { operation: 'read' }, schema: schemas.reset },
    async (request) => (await subscriptionOf(ctx, request.params)).reset(bodyObject(request.body).cursor as number),
  );
}
