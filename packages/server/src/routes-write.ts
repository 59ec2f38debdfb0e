/** The write path: streams (open, append a batch, seal, abort, read, info) and one-shot appends. */

import { type AppendRecord, recordLine, type Stream, StreamStackError } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';
import { sendLines } from './ndjson.js';
import {
  conditionOf,
  expectedSeq,
  fencingToken,
  integer,
  optionalFencingToken,
  type QueryParams,
  single,
} from './request-params.js';
import { bodyObject } from './routes-feeds.js';
import * as schemas from './schemas-streams.js';

type FeedParams = { feed: string };
type StreamParams = { feed: string; id: string };

/** The stream a route names; `FEED_NOT_FOUND` or `STREAM_NOT_FOUND` if it has none. */
async function streamOf(ctx: ServerContext, params: StreamParams): Promise<Stream> {
  return (await ctx.feed(params.feed)).stream(params.id);
}

/** The records of an NDJSON body; another body type is refused so that nothing is guessed. */
function recordsOf(body: unknown): AppendRecord[] {
  if (!Array.isArray(body)) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      'records are sent as NDJSON (Content-Type: application/x-ndjson), one record line each',
    );
  }
  return body as AppendRecord[];
}

export function addWriteRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.post<{ Params: FeedParams }>(
    '/v1/feeds/:feed/streams',
    { config: { operation: 'write' }, schema: schemas.openStream },
    async (request, reply) => {
      const { message } = bodyObject(request.body);
      const stream = await (await ctx.feed(request.params.feed)).openStream({
        token: fencingToken(request.headers),
        ...(message === undefined ? {} : { message: message as string }),
      });
      return reply.code(201).send({ stream: stream.id });
    },
  );

  app.get<{ Params: StreamParams }>(
    '/v1/feeds/:feed/streams/:id',
    { config: { operation: 'read' }, schema: schemas.streamInfo },
    async (request) => (await streamOf(ctx, request.params)).info(),
  );

  app.post<{ Params: StreamParams }>(
    '/v1/feeds/:feed/streams/:id/records',
    { config: { operation: 'write' }, schema: schemas.appendBatch },
    async (request) => {
      const records = recordsOf(request.body);
      const seq = expectedSeq(request.headers);
      const feed = await ctx.feed(request.params.feed);
      const appended = await (await feed.stream(request.params.id)).append(records, {
        token: fencingToken(request.headers),
        ...(seq === undefined ? {} : { expectedSeq: seq }),
      });
      ctx.metrics.appended(feed.name, 'batch', records);
      return appended;
    },
  );

  app.get<{ Params: StreamParams; Querystring: QueryParams }>(
    '/v1/feeds/:feed/streams/:id/records',
    { config: { operation: 'read' }, schema: schemas.streamRecords },
    async (request, reply) => {
      const fromSeq = integer(request.query, 'fromSeq');
      const records = await (await streamOf(ctx, request.params)).read(fromSeq === undefined ? {} : { fromSeq });
      return sendLines(reply, records.map(recordLine));
    },
  );

  app.post<{ Params: StreamParams; Querystring: QueryParams }>(
    '/v1/feeds/:feed/streams/:id/seal',
    { config: { operation: 'write' }, schema: schemas.seal },
    async (request) => {
      const message = single(request.query, 'message');
      const condition = conditionOf(request.query);
      const feed = await ctx.feed(request.params.feed);
      const commit = await (await feed.stream(request.params.id)).seal({
        token: fencingToken(request.headers),
        ...(message === undefined ? {} : { message }),
        ...(condition ? { condition } : {}),
      });
      ctx.metrics.committed(feed.name);
      return commit;
    },
  );

  app.post<{ Params: StreamParams }>(
    '/v1/feeds/:feed/streams/:id/abort',
    { config: { operation: 'write' }, schema: schemas.abort },
    async (request) => {
      await (await streamOf(ctx, request.params)).abort({ token: fencingToken(request.headers) });
      return { stream: request.params.id, aborted: true };
    },
  );

  app.post<{ Params: FeedParams; Querystring: QueryParams }>(
    '/v1/feeds/:feed/records',
    {
      config: { operation: 'write' },
      schema: schemas.appendOneShot,
    },
    async (request, reply) => {
      const records = recordsOf(request.body);
      const message = single(request.query, 'message');
      const condition = conditionOf(request.query);
      const token = optionalFencingToken(request.headers);
      const feed = await ctx.feed(request.params.feed);
      const commit = await feed.append(records, {
        ...(token === undefined ? {} : { token }),
        ...(message === undefined ? {} : { message }),
        ...(condition ? { condition } : {}),
      });
      ctx.metrics.appended(feed.name, 'one-shot', records);
      ctx.metrics.committed(feed.name);
      return reply.code(201).send(commit);
    },
  );
}
