/**
 * Subscription groups over HTTP: create or change one (PUT), list, describe, delete, and the
 * workers' calls: claim (a long-poll with `waitMs`), ack and nack. Creating or changing a group
 * needs `write` on its feed and on its dead-letter feed, since parking appends there; claims,
 * acks and nacks are a consumer's calls and need `read`, as a subscription's do.
 */
import { recordLine, type SubscriptionGroup, type SubscriptionGroupOptions } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { Authorizer } from './auth.js';
import type { ServerContext } from './context.js';
import { closedSignal } from './live-wait.js';
import { sendLines } from './ndjson.js';
import { bodyObject } from './routes-feeds.js';
import * as schemas from './schemas-groups.js';

type FeedParams = { feed: string };
type GroupParams = { feed: string; group: string };

/** The group a route names; `SUBSCRIPTION_NOT_FOUND` when the feed has none of that name. */
async function groupOf(ctx: ServerContext, params: GroupParams): Promise<SubscriptionGroup> {
  return (await ctx.feed(params.feed)).existingSubscriptionGroup(params.group);
}

export function addGroupRoutes(app: FastifyInstance, ctx: ServerContext, auth: Authorizer | undefined): void {
  app.put<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group',
    { config: { operation: 'write' }, schema: schemas.put },
    async (request) => {
      const body = bodyObject(request.body);
      const feed = await ctx.feed(request.params.feed);
      const existing = (await feed.subscriptionGroups()).find((group) => group.name === request.params.group);
      const deadLetter =
        (body.deadLetter as string | undefined) ??
        existing?.deadLetter ??
        `${request.params.feed}.${request.params.group}.parked`;
      if (auth) auth.authorize(request.grant!, 'write', deadLetter);
      const group = await feed.subscriptionGroup(request.params.group, body as SubscriptionGroupOptions);
      return group.info();
    },
  );

  app.get<{ Params: FeedParams }>(
    '/v1/feeds/:feed/groups',
    { config: { operation: 'read' }, schema: schemas.list },
    async (request, reply) => sendLines(reply, await (await ctx.feed(request.params.feed)).subscriptionGroups()),
  );

  app.get<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group',
    { config: { operation: 'read' }, schema: schemas.info },
    async (request) => (await groupOf(ctx, request.params)).info(),
  );

  app.delete<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group',
    { config: { operation: 'write' }, schema: schemas.remove },
    async (request) => {
      await (await groupOf(ctx, request.params)).delete();
      return { feed: request.params.feed, group: request.params.group, deleted: true };
    },
  );

  app.post<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group/claim',
    { config: { operation: 'read' }, schema: schemas.claim },
    async (request, reply) => {
      const { worker, max, waitMs } = bodyObject(request.body);
      const group = await groupOf(ctx, request.params);
      const claims = await group.claim({
        worker: worker as string,
        ...(max === undefined ? {} : { max: max as number }),
        ...(waitMs === undefined ? {} : { waitMs: waitMs as number }),
        signal: AbortSignal.any([ctx.drainSignal, closedSignal(reply.raw)]),
      });
      return {
        claims: claims.map((claim) => ({ ...claim, records: claim.records.map(recordLine) })),
      };
    },
  );

  app.post<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group/ack',
    { config: { operation: 'read' }, schema: schemas.ack },
    async (request) => {
      const { worker, commit } = bodyObject(request.body);
      await (await groupOf(ctx, request.params)).ack(commit as number, { worker: worker as string });
      return { commit, acked: true };
    },
  );

  app.post<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group/nack',
    { config: { operation: 'read' }, schema: schemas.nack },
    async (request) => {
      const { worker, commit, reason } = bodyObject(request.body);
      return (await groupOf(ctx, request.params)).nack(commit as number, {
        worker: worker as string,
        ...(reason === undefined ? {} : { reason: reason as string }),
      });
    },
  );

  app.post<{ Params: GroupParams }>(
    '/v1/feeds/:feed/groups/:group/reset',
    { config: { operation: 'write' }, schema: schemas.reset },
    async (request) => (await groupOf(ctx, request.params)).reset(bodyObject(request.body).cursor as number),
  );
}
