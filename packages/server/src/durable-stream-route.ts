/**
 * What the handlers of the Durable Streams route share (routes-durable-streams.ts and
 * durable-stream-read-route.ts): the route's path, what each handler is added with, and a
 * route's auth settings and schema.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Operation } from './auth.js';
import type { ServerContext } from './context.js';
import type { DurableStreams } from './durable-stream-registry.js';
import type { DurableStreamSettings } from './routes-durable-streams.js';

/** Every method of the protocol is on this one path, whose wildcard is the stream's name. */
export const route = '/ds/v1/stream/*';

/** What a handler of the route needs; made once per server, in the route's scope. */
export interface DurableStreamRoute {
  /** The fastify scope with the route's body parser, headers and error handler. */
  readonly scope: FastifyInstance;
  readonly ctx: ServerContext;
  /** The open streams, with their expiry sweep. */
  readonly streams: DurableStreams;
  readonly settings: DurableStreamSettings;
  /** The headers every answer carries, which an SSE answer writes itself. */
  readonly routeHeaders: Record<string, string>;
  /**
   * Checks the token's scope on the stream's feed, or on the feed of stream `name` (the hook
   * checked the operation on some feed); returns the stream's name.
   */
  readonly authorize: (request: FastifyRequest, operation: Operation, name?: string) => string;
}

/** A route's auth settings and schema. */
export function routeOptions(operation: Operation, schema: Record<string, unknown>) {
  return { config: { operation, scope: 'any' as const }, schema };
}
