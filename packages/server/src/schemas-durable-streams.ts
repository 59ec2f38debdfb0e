/**
 * Schemas of the Durable Streams route (routes-durable-streams.ts). Bodies are a stream's own
 * bytes of its own Content-Type, so they are documented as binary and never validated; the
 * protocol's facts travel in headers, declared on each request and answer.
 */

import type { ErrorCode } from '@streamstack/engine';
import { statusOf as serverStatusOf } from './http-errors.js';
import { empty, headerSchema, pathSchema, querySchema, routeSchema } from './route-schemas.js';

/** Where the protocol's statuses differ from the server's (http-errors.ts). */
export const protocolStatuses: Partial<Record<ErrorCode, number>> = {
  // A Stream-Seq that does not grow, and a producer's seq gap, are conflicts (409), not failed preconditions.
  SEQ_MISMATCH: 409,
  // A producer epoch that another has taken over is fenced with 403.
  FENCED: 403,
};

export function protocolStatusOf(code: ErrorCode, details?: Record<string, unknown>): number {
  // A fork of a soft-deleted source is a conflict with that source's state (409); every
  // request to the soft-deleted stream itself is 410 Gone.
  if (code === 'STREAM_DELETED' && details?.source === true) return 409;
  return protocolStatuses[code] ?? serverStatusOf(code);
}

const tag = 'durable-streams';
// fastify names the wildcard `*`; the document names it `name` (server.ts renames it there).
const params = pathSchema({ '*': 'the stream name, URL-encoded (it may hold /)' });
const bytes = { type: 'string', format: 'binary' };
const anyBody = { description: "the stream's bytes, of its Content-Type", content: { '*/*': { schema: bytes } } };
const text = (description: string) => ({ type: 'string', description });
const nextOffset = { 'Stream-Next-Offset': text('the offset after the data answered: 16 digits, _, 16 digits') };
const closed = { 'Stream-Closed': text('true once the stream is closed') };
const upToDate = { 'Stream-Up-To-Date': text('true when the answer reaches the tail') };
const cursor = { 'Stream-Cursor': text('echo it as cursor= on the next live read') };
const lookupErrors: ErrorCode[] = ['INVALID_NAME', 'FEED_NOT_FOUND', 'FEED_EXISTS', 'STREAM_DELETED'];

export const preflight = routeSchema({
  id: 'durableStreamPreflight',
  tag,
  summary: 'CORS preflight (without an Origin: what the route allows)',
  params,
  responses: { 204: empty('the allowed methods and headers') },
  statusOf: protocolStatusOf,
});

export const create = routeSchema({
  id: 'createDurableStream',
  tag,
  summary: 'create a stream (or find it as asked); the body is its first data',
  operation: 'admin',
  params,
  headers: headerSchema([
    'Stream-TTL',
    'Stream-Expires-At',
    'Stream-Closed',
    'Stream-Forked-From',
    'Stream-Fork-Offset',
    'Stream-Fork-Sub-Offset',
  ]),
  body: anyBody,
  responses: {
    200: empty('the stream exists as asked', { ...nextOffset, ...closed }),
    201: empty('created', { ...nextOffset, ...closed, Location: text('the stream’s URL') }),
  },
  errors: [...lookupErrors, 'INVALID_RECORD', 'CONTENT_TYPE_MISMATCH'],
  statusOf: protocolStatusOf,
});

export const append = routeSchema({
  id: 'appendDurableStream',
  tag,
  summary: 'append the body (one commit); Stream-Closed: true closes',
  operation: 'write',
  params,
  headers: headerSchema(['Stream-Seq', 'Producer-Id', 'Producer-Epoch', 'Producer-Seq', 'Stream-Closed']),
  body: anyBody,
  responses: {
    200: empty("a producer's data was written", {
      ...nextOffset,
      ...closed,
      'Producer-Epoch': text('the epoch'),
      'Producer-Seq': text('the last seq'),
    }),
    204: empty('appended (a plain append, a duplicate, or a close alone)', { ...nextOffset, ...closed }),
  },
  errors: [...lookupErrors, 'INVALID_RECORD', 'STREAM_SEALED', 'CONTENT_TYPE_MISMATCH', 'SEQ_MISMATCH', 'FENCED'],
  statusOf: protocolStatusOf,
});

export const head = routeSchema({
  id: 'durableStreamMetadata',
  tag,
  summary: "a stream's metadata: Content-Type, tail offset, TTL or expiry, closure (does not reset a TTL)",
  operation: 'read',
  params,
  responses: {
    200: empty('the metadata', {
      ...nextOffset,
      ...closed,
      'Stream-TTL': text('seconds'),
      'Stream-Expires-At': text('an RFC 3339 time'),
    }),
  },
  errors: lookupErrors,
  statusOf: protocolStatusOf,
});

export const read = routeSchema({
  id: 'readDurableStream',
  tag,
  summary: 'read from offset: catch-up, live=long-poll or live=sse',
  description:
    'Catch-up and long-poll answer whole commits of data (a JSON stream: a JSON array of its messages). live=sse answers an event stream: `data` events (text, or base64 with Stream-SSE-Data-Encoding: base64), each followed by a `control` event ({"streamNextOffset", "streamCursor", "upToDate", "streamClosed"}).',
  operation: 'read',
  params,
  headers: headerSchema(['If-None-Match']),
  query: querySchema({ offset: 'string', live: 'string', cursor: 'string' }),
  responses: {
    200: {
      description: "the data, of the stream's Content-Type; or an event stream with live=sse",
      headers: { ...nextOffset, ...closed, ...upToDate, ...cursor, ETag: text('names the range read') },
      content: { '*/*': { schema: bytes }, 'text/event-stream': { schema: { type: 'string' } } },
    },
    204: empty('a long-poll that timed out: nothing new', { ...nextOffset, ...closed, ...upToDate, ...cursor }),
    304: empty('the read matches If-None-Match'),
  },
  errors: lookupErrors,
  statusOf: protocolStatusOf,
});

export const remove = routeSchema({
  id: 'deleteDurableStream',
  tag,
  summary: 'delete a stream and its data',
  operation: 'admin',
  params,
  responses: { 204: empty('deleted') },
  errors: lookupErrors,
  statusOf: protocolStatusOf,
});
