/**
 * Live reads as Server-Sent Events: catch-up then live in the engine's one follow loop, one
 * `commit` event per commit (`id:` the commit number, `data:` the commit and its record lines),
 * so a reconnect with `Last-Event-ID` resumes after exactly the last commit received; and a
 * `heartbeat` event with the watermark when nothing was sent for a while, so that both ends
 * can tell a quiet feed from a dead connection. Draining the server ends the stream.
 *
 * @example
 * // curl -N -H 'Accept: text/event-stream' 'http://127.0.0.1:4437/v1/feeds/orders/records?after=0'
 * // id: 1
 * // event: commit
 * // data: {"commit":{"commit":1,…},"records":[{"feed":"orders","commit":1,…}]}
 */
import { once } from 'node:events';
import { type Feed, recordLine, StreamStackError } from '@streamstack/engine';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServerContext } from './context.js';
import { errorBody, typedRequestError } from './http-errors.js';
import { integerText, numberText, type QueryParams, single } from './request-params.js';

/** True when the request asks for an event stream. */
export function wantsEventStream(request: FastifyRequest): boolean {
  return (request.headers.accept ?? '').split(',').some((type) => type.trim().split(';')[0] === 'text/event-stream');
}

/** Where a live read starts: `Last-Event-ID` (a reconnect) wins over `after`. */
function startOf(request: FastifyRequest): number | undefined {
  const lastEventId = request.headers['last-event-id'];
  if (typeof lastEventId === 'string' && lastEventId !== '') return integerText(lastEventId, 'Last-Event-ID');
  return numberText(single(request.query as QueryParams, 'after'), 'after');
}

async function watermarkOf(feed: Feed): Promise<{ commit: number; position: number }> {
  const head = await feed.head();
  return { commit: head?.commit ?? 0, position: head?.lastPosition ?? 0 };
}

/** Follows `feed` over SSE until the client leaves, the server drains, or the read fails. */
export async function followOverSse(
  request: FastifyRequest,
  reply: FastifyReply,
  feed: Feed,
  ctx: ServerContext,
): Promise<void> {
  const after = startOf(request);
  // Checked before the stream starts, so a bad cursor still gets its status (416, 410).
  if (after !== undefined) feed.commits({ after, limit: 0 });
  const raw = reply.raw;
  const stop = new AbortController();
  const signal = AbortSignal.any([stop.signal, ctx.drainSignal]);
  raw.once('close', () => stop.abort());
  reply.hijack();
  raw.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
  });
  ctx.metrics.liveReaders.inc({ kind: 'sse' });
  let lastWrite = Date.now();
  const write = async (text: string) => {
    lastWrite = Date.now();
    if (!raw.write(text)) await Promise.race([once(raw, 'drain'), once(raw, 'close')]);
  };
  const heartbeat = setInterval(() => {
    if (Date.now() - lastWrite >= ctx.live.heartbeatMs / 2 && !raw.writableEnded) {
      lastWrite = Date.now();
      watermarkOf(feed).then(
        (watermark) => {
          if (!raw.writableEnded) raw.write(`event: heartbeat\ndata: ${JSON.stringify(watermark)}\n\n`);
        },
        // The feed went (deleted, or the store closed): the follow loop reports it.
        () => {},
      );
    }
  }, ctx.live.heartbeatMs);
  try {
    await write(`retry: 1000\nevent: heartbeat\ndata: ${JSON.stringify(await watermarkOf(feed))}\n\n`);
    for await (const { commit, records } of feed.follow({ ...(after === undefined ? {} : { after }), signal })) {
      await write(
        `id: ${commit.commit}\nevent: commit\ndata: ${JSON.stringify({ commit, records: records.map(recordLine) })}\n\n`,
      );
    }
  } catch (error) {
    if (!signal.aborted) {
      const typed = error instanceof StreamStackError ? error : typedRequestError(error);
      if (!raw.writableEnded && !raw.destroyed)
        raw.write(`event: error\ndata: ${JSON.stringify(errorBody(typed))}\n\n`);
      request.log.warn({ err: typed }, 'live read failed');
    }
  } finally {
    clearInterval(heartbeat);
    ctx.metrics.liveReaders.dec({ kind: 'sse' });
    if (!raw.writableEnded) raw.end();
  }
}
