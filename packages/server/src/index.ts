/**
 * @streamstack/server: a StreamStack data directory over HTTP (docs/http.md).
 *
 * @example
 * import { Store } from '@streamstack/engine';
 * import { createServer } from '@streamstack/server';
 * const server = await createServer({ store: await Store.open('./data') });
 * console.log(await server.listen({ port: 4437 }));
 */

export type { Operation, TokenGrant } from './auth.js';
export { Authorizer, hashToken, loadTokenFile, parseTokenFile } from './auth.js';
export type { LiveSettings } from './context.js';
export { feedStreamName, streamFeedName } from './durable-stream-names.js';
export { errorBody, errorHeaders, errorStatuses, statusOf } from './http-errors.js';
export type { DurableStreamSettings } from './routes-durable-streams.js';
export { durableStreamDefaults } from './routes-durable-streams.js';
export type { ServerOptions, StreamStackServer } from './server.js';
export { bodyLimitDefault, createServer, isLoopback } from './server.js';
