/**
 * A feed's unsealed tail for followers on other machines: the durable groups of its active
 * history segment, or of a finished one still whole here (its `SegmentEnd` last, and the next
 * segment named in headers), from a byte offset on, as they lie on disk (checked before they are
 * sent), with a long poll when there are none yet. A follower copies them into its own copy of
 * the segment.
 */
import { StreamStackError, tailHeaders } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';
import { tailBytesMax, tailWaitMsMax } from './limits.js';
import { closedSignal } from './live-wait.js';
import { integer, type QueryParams } from './request-params.js';
import * as schemas from './schemas-reads.js';

export function addHistoryTailRoute(app: FastifyInstance, ctx: ServerContext): void {
  app.get<{ Params: { feed: string }; Querystring: QueryParams }>(
    '/v1/feeds/:feed/history/tail',
    { config: { operation: 'read' }, schema: schemas.historyTail },
    async (request, reply) => {
      const base = required(request.query, 'base', 1);
      const from = required(request.query, 'from', 0);
      const waitMs = integer(request.query, 'waitMs') ?? 0;
      const bytesMax = integer(request.query, 'bytesMax') ?? tailBytesMax;
      if (waitMs < 0 || waitMs > tailWaitMsMax)
        throw new StreamStackError('INVALID_ARGUMENT', `waitMs is from 0 to ${tailWaitMsMax}`, {
          details: { parameter: 'waitMs', max: tailWaitMsMax },
        });
      if (bytesMax < 1 || bytesMax > tailBytesMax)
        throw new StreamStackError('INVALID_ARGUMENT', `bytesMax is from 1 to ${tailBytesMax}`, {
          details: { parameter: 'bytesMax', max: tailBytesMax },
        });
      const feed = await ctx.feed(request.params.feed);
      const answer = await feed.historyTail({
        base,
        from,
        bytesMax,
        waitMs,
        signal: AbortSignal.any([ctx.drainSignal, closedSignal(reply.raw)]),
      });
      if (!answer.tail) {
        if (answer.base !== undefined) reply.header(tailHeaders.base, String(answer.base));
        return reply.code(204).send();
      }
      const { tail } = answer;
      reply.header(tailHeaders.base, String(base));
      reply.header(tailHeaders.from, String(tail.from));
      reply.header(tailHeaders.end, String(tail.end));
      if (tail.next) {
        reply.header(tailHeaders.nextBase, String(tail.next.nextBase));
        reply.header(tailHeaders.nextCommit, String(tail.next.nextBaseCommit));
      }
      reply.header('content-type', 'application/octet-stream');
      return reply.send(Buffer.from(tail.bytes.buffer, tail.bytes.byteOffset, tail.bytes.byteLength));
    },
  );
}

/** A query parameter that must be given, an integer of at least `min`. */
function required(query: QueryParams, name: string, min: number): number {
  const value = integer(query, name);
  if (value === undefined || value < min)
    throw new StreamStackError('INVALID_ARGUMENT', `${name} is required, an integer of at least ${min}`, {
      details: { parameter: name },
    });
  return value;
}
