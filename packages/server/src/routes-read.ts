/** The read path: commits, reads after a cursor (long-poll with `wait=`), one commit, `get`. */

import { type ReadOptions, readModes, recordLine, StreamStackError } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';
import { followOverSse, wantsEventStream } from './live-sse.js';
import { closedSignal, waitForCommit } from './live-wait.js';
import { sendLineChunks, sendLines } from './ndjson.js';
import {
  choice,
  integer,
  integerText,
  jsonParameter,
  many,
  numberText,
  plans,
  type QueryParams,
  single,
} from './request-params.js';
import * as schemas from './schemas-reads.js';

type FeedParams = { feed: string };

/** The read options of a request's query, as the CLI's `read` flags give them. */
function readOptionsOf(query: QueryParams): ReadOptions {
  const after = integer(query, 'after');
  const upTo = integer(query, 'upTo');
  const limit = integer(query, 'limit');
  const mode = choice(query, 'mode', readModes);
  const plan = choice(query, 'plan', plans);
  const dedupScope = choice(query, 'dedupScope', ['history', 'window'] as const);
  const types = many(query, 'type');
  const tags = many(query, 'tag');
  const filter = jsonParameter(query, 'filter');
  if (filter !== undefined && (types.length > 0 || tags.length > 0)) {
    throw new StreamStackError('INVALID_ARGUMENT', 'filter is given as JSON or as type/tag, not both', {
      details: { parameter: 'filter' },
    });
  }
  return {
    ...(filter === undefined ? {} : { filter: filter as ReadOptions['filter'] }),
    ...(after === undefined ? {} : { after }),
    ...(upTo === undefined ? {} : { upTo }),
    ...(limit === undefined ? {} : { limit }),
    ...(mode === undefined ? {} : { mode }),
    ...(plan === undefined ? {} : { plan }),
    ...(dedupScope === undefined ? {} : { dedupScope }),
    ...(types.length > 0 || tags.length > 0
      ? { filter: { ...(types.length > 0 ? { types } : {}), ...(tags.length > 0 ? { tags } : {}) } }
      : {}),
  };
}

export function addReadRoutes(app: FastifyInstance, ctx: ServerContext): void {
  app.get<{ Params: FeedParams; Querystring: QueryParams }>(
    '/v1/feeds/:feed/commits',
    { config: { operation: 'read' }, schema: schemas.commits },
    async (request, reply) => {
      const after = integer(request.query, 'after');
      const limit = integer(request.query, 'limit');
      const feed = await ctx.feed(request.params.feed);
      return sendLines(
        reply,
        feed.commits({ ...(after === undefined ? {} : { after }), ...(limit === undefined ? {} : { limit }) }),
      );
    },
  );

  app.get<{ Params: FeedParams & { commit: string } }>(
    '/v1/feeds/:feed/commits/:commit',
    { config: { operation: 'read' }, schema: schemas.commit },
    async (request) => {
      const commit = numberText(request.params.commit, 'commit')!;
      const feed = await ctx.feed(request.params.feed);
      const head = (await feed.head())?.commit ?? 0;
      if (commit < 1 || commit > head) {
        throw new StreamStackError('CURSOR_OUT_OF_RANGE', `commit ${commit} does not exist (the head is ${head})`, {
          details: { commit, head },
        });
      }
      for await (const found of feed.commits({ after: commit - 1, limit: 1 })) return found;
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', `commit ${commit} does not exist`, {
        details: { commit, head },
      });
    },
  );

  app.get<{ Params: FeedParams & { commit: string } }>(
    '/v1/feeds/:feed/commits/:commit/records',
    { config: { operation: 'read' }, schema: schemas.commitRecords },
    async (request, reply) => {
      const commit = numberText(request.params.commit, 'commit')!;
      const records = await (await ctx.feed(request.params.feed)).readCommit(commit);
      return sendLines(reply, records.map(recordLine));
    },
  );

  app.get<{ Params: FeedParams; Querystring: QueryParams }>(
    '/v1/feeds/:feed/records',
    {
      config: { operation: 'read' },
      schema: schemas.records,
    },
    async (request, reply) => {
      const feed = await ctx.feed(request.params.feed);
      if (wantsEventStream(request)) return followOverSse(request, reply, feed, ctx);
      const options = readOptionsOf(request.query);
      const wait = integerText(single(request.query, 'wait'), 'wait');
      if (wait !== undefined && wait > ctx.live.waitSecondsMax) {
        throw new StreamStackError('INVALID_ARGUMENT', `wait is at most ${ctx.live.waitSecondsMax} seconds`, {
          details: { parameter: 'wait', max: ctx.live.waitSecondsMax },
        });
      }
      const after = options.after ?? (await feed.retention()).lowMark - 1;
      // Checks the cursor at once (TRIMMED, beyond the head) before any wait.
      feed.commits({ after, limit: 0 });
      if (wait !== undefined && wait > 0 && ((await feed.head())?.commit ?? 0) <= after) {
        ctx.metrics.liveReaders.inc({ kind: 'long-poll' });
        try {
          await waitForCommit(feed, after, wait * 1000, [ctx.drainSignal, closedSignal(reply.raw)]);
        } finally {
          ctx.metrics.liveReaders.dec({ kind: 'long-poll' });
        }
      }
      reply.header('ss-head', String((await feed.head())?.commit ?? 0));
      return sendLineChunks(reply, feed.readLines(options));
    },
  );

  app.get<{ Params: FeedParams & { key: string }; Querystring: QueryParams }>(
    '/v1/feeds/:feed/keys/:key',
    { config: { operation: 'read' }, schema: schemas.key },
    async (request) => {
      const asOf = integer(request.query, 'asOf');
      const { key } = request.params;
      const record = await (await ctx.feed(request.params.feed)).get(key, asOf === undefined ? {} : { asOf });
      if (!record) {
        throw new StreamStackError(
          'KEY_NOT_FOUND',
          `key ${key} has no live record${asOf === undefined ? '' : ` as of commit ${asOf}`}`,
          { details: { key } },
        );
      }
      return recordLine(record);
    },
  );
}
