/**
 * Reading a Durable Streams stream (docs/http.md, Durable Streams compatibility): whole commits
 * after a commit cursor, up to a byte budget, with what the answer's headers need (the next
 * offset, up to date, closed); a long-poll's wait for data; and SSE, catch-up and live tail in
 * one loop.
 */
import { once } from 'node:events';
import { StreamStackError } from '@streamstack/engine';
import type { FastifyReply } from 'fastify';
import { sseControlEvent, sseDataEvent } from './durable-stream-bodies.js';
import { dsHeader, isTextType, offsetOf, type ReadStart, responseCursor } from './durable-stream-protocol.js';
import { decodeCommitMeta, emptyRecordType, type StreamState } from './durable-stream-state.js';
import { waitForCommit } from './live-wait.js';

/** Where a read begins: commits after `from` are read; `dataCommit` is the offset it starts at. */
export interface ReadPoint {
  readonly from: number;
  readonly dataCommit: number;
}

/** One read's worth of a stream. */
export interface Chunk {
  /** The data's payloads, in order. */
  readonly payloads: Uint8Array[];
  /** The last commit holding data up to where the read got: the next offset. */
  readonly dataCommit: number;
  /** The last commit the read looked at, data or not: where the next read starts. */
  readonly lastCommit: number;
  /** Every commit published when the read began was read. */
  readonly upToDate: boolean;
  /** Up to date and closed: nothing will ever follow. */
  readonly closed: boolean;
}

/** The offset a chunk ends at. */
export function nextOffsetOf(chunk: Chunk): string {
  return offsetOf(chunk.dataCommit);
}

/**
 * Where a read from `start` begins (a missing offset is the start), checked against the head:
 * an offset past it was never this stream's (`INVALID_ARGUMENT`).
 */
export async function readPointOf(state: StreamState, start: ReadStart | undefined): Promise<ReadPoint> {
  const head = (await state.feed.head())?.commit ?? 0;
  if (start === undefined || start.kind === 'start') return { from: 0, dataCommit: 0 };
  // `now` skips every commit published, and answers with the tail offset.
  if (start.kind === 'now') return { from: head, dataCommit: Math.min(state.lastDataCommit, head) };
  if (start.commit > head) {
    throw new StreamStackError('INVALID_ARGUMENT', `offset ${offsetOf(start.commit)} lies beyond the stream's tail`, {
      details: { parameter: 'offset', value: offsetOf(start.commit), tail: offsetOf(state.lastDataCommit) },
    });
  }
  return { from: start.commit, dataCommit: start.commit };
}

/**
 * The whole commits after `point.from` that fit `bytesMax` (always at least one holding data,
 * however large, so a read always moves on), up to the head as it is now.
 */
export async function readChunk(state: StreamState, point: ReadPoint, bytesMax: number): Promise<Chunk> {
  const { feed } = state;
  const head = (await feed.head())?.commit ?? 0;
  const payloads: Uint8Array[] = [];
  let dataCommit = point.dataCommit;
  let lastCommit = point.from;
  let bytes = 0;
  let dataCommits = 0;
  let closed = state.closedAt !== undefined && state.closedAt <= point.from;
  if (point.from < head) {
    for await (const commit of feed.commits({ after: point.from })) {
      const meta = decodeCommitMeta(commit.message);
      if (!meta.empty) {
        if (dataCommits > 0 && bytes >= bytesMax) break;
        for (const record of await feed.readCommit(commit.commit)) {
          if (record.type === emptyRecordType) continue;
          payloads.push(record.payload);
          bytes += record.payload.length;
        }
        dataCommits++;
        dataCommit = commit.commit;
      }
      // A close a fork inherited is its source's, not its own: the fork starts open.
      if (meta.closed && commit.commit >= state.ownStart) closed = true;
      lastCommit = commit.commit;
    }
  }
  const upToDate = lastCommit >= head;
  return { payloads, dataCommit, lastCommit, upToDate, closed: closed && upToDate };
}

/**
 * A long-poll: the chunk at `point` if it holds data or the stream is closed; else waits up to
 * `ms` for a commit (or until `signals` abort) and reads again, until data comes, the stream
 * closes, or the time is up (an empty chunk).
 */
export async function waitForData(
  state: StreamState,
  point: ReadPoint,
  ms: number,
  bytesMax: number,
  signals: AbortSignal[],
): Promise<Chunk> {
  const deadline = Date.now() + ms;
  let chunk = await readChunk(state, point, bytesMax);
  while (chunk.payloads.length === 0 && !chunk.closed) {
    const left = deadline - Date.now();
    if (left <= 0 || !(await waitForCommit(state.feed, chunk.lastCommit, left, signals))) break;
    chunk = await readChunk(state, { from: chunk.lastCommit, dataCommit: chunk.dataCommit }, bytesMax);
  }
  return chunk;
}

/** What a live SSE read needs besides the stream. */
export interface SseOptions {
  readonly point: ReadPoint;
  /** The client's `cursor`, echoed on into each control event's cursor. */
  readonly cursor: string | undefined;
  readonly bytesMax: number;
  /** How long the connection stays open before the server ends it (the client reconnects). */
  readonly connectionMs: number;
  /** Headers every answer of the route carries. */
  readonly headers: Record<string, string>;
  /** Aborts when the server drains. */
  readonly drain: AbortSignal;
  /** Called on each pass, so that a live reader keeps the stream's TTL from running out. */
  readonly touch: () => void;
  readonly warn: (error: unknown) => void;
}

/**
 * Follows the stream over SSE: a `data` event with each chunk's data (text, or base64 for
 * binary types) and after each a `control` event (`streamNextOffset`, `streamCursor` while open,
 * `upToDate` once caught up, `streamClosed` at the end); the first pass always sends its
 * control event, so a reader at the tail learns it is caught up at once. The connection ends
 * when the stream is closed and everything was sent, after `connectionMs`, when the client
 * leaves or the server drains.
 */
export async function followOverSse(reply: FastifyReply, state: StreamState, options: SseOptions): Promise<void> {
  const raw = reply.raw;
  const stop = new AbortController();
  const signal = AbortSignal.any([stop.signal, options.drain]);
  raw.once('close', () => stop.abort());
  const lifetime = setTimeout(() => stop.abort(), options.connectionMs);
  const { contentType } = state.config;
  reply.hijack();
  raw.writeHead(200, {
    ...options.headers,
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    'x-accel-buffering': 'no',
    ...(isTextType(contentType) ? {} : { [dsHeader.sseDataEncoding]: 'base64' }),
  });
  const write = async (text: string) => {
    if (!raw.write(text)) await Promise.race([once(raw, 'drain'), once(raw, 'close')]);
  };
  let point = options.point;
  try {
    for (let first = true; !signal.aborted; first = false) {
      options.touch();
      const chunk = await readChunk(state, point, options.bytesMax);
      const hasData = chunk.payloads.length > 0;
      if (hasData || first || chunk.closed) {
        const control = {
          streamNextOffset: nextOffsetOf(chunk),
          ...(chunk.closed ? { streamClosed: true } : { streamCursor: responseCursor(options.cursor, Date.now()) }),
          ...(chunk.upToDate ? { upToDate: true } : {}),
        };
        await write(`${hasData ? sseDataEvent(contentType, chunk.payloads) : ''}${sseControlEvent(control)}`);
      }
      if (chunk.closed) break;
      point = { from: chunk.lastCommit, dataCommit: chunk.dataCommit };
      if (chunk.upToDate && !(await waitForCommit(state.feed, point.from, options.connectionMs, [signal]))) break;
    }
  } catch (error) {
    // The status went out with the first event; a failure (the stream deleted under the
    // reader, say) ends the connection, and the client's reconnect gets its status.
    if (!signal.aborted) options.warn(error);
  } finally {
    clearTimeout(lifetime);
    if (!raw.writableEnded) raw.end();
  }
}
