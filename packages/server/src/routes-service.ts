/**
 * The routes about the server itself rather than a feed: the OpenAPI document, the Prometheus
 * metrics (filtered to a token's feeds), the health check an operator tries first, and the
 * cluster the server is a node of (filtered the same way).
 */
import { createRequire } from 'node:module';
import { type Store, storeFormatVersion } from '@streamstack/engine';
import type { FastifyInstance } from 'fastify';
import { type Authorizer, coversFeed } from './auth.js';
import { filterMetricsText, type ServerMetrics } from './metrics.js';
import * as serviceSchemas from './schemas-service.js';

/** The version of this package, from its package.json (shipped beside `dist`). */
const serverVersion: string = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

/** The routes about the server itself: the OpenAPI document, the metrics and the health check. */
export function addServiceRoutes(
  app: FastifyInstance,
  store: Store,
  metrics: ServerMetrics,
  auth: Authorizer | undefined,
): void {
  // The document leaves itself out: it is what a client is generated from, not a call it makes.
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  app.get(
    '/metrics',
    { schema: serviceSchemas.metrics, config: auth ? { operation: 'admin', scope: 'any' } : {} },
    async (request, reply) => {
      const text = await metrics.registry.metrics();
      const grant = request.grant;
      // Without tokens the server is local-only and everything is shown; a token sees its feeds.
      const visible =
        grant === undefined
          ? text
          : filterMetricsText(text, (feed) => coversFeed(grant, feed), coversFeed(grant, undefined));
      return reply.type(metrics.registry.contentType).send(visible);
    },
  );
  // Every node can answer for the whole cluster: the list comes from etcd, not from this node.
  app.get(
    '/v1/cluster',
    { schema: serviceSchemas.cluster, config: { operation: 'read', scope: 'any' } },
    async (request) => {
      const cluster = await store.cluster();
      const grant = request.grant;
      // A token sees the leases of the feeds it covers, as the feed list shows it only those.
      return grant === undefined
        ? cluster
        : { ...cluster, feeds: cluster.feeds.filter(({ feed }) => coversFeed(grant, feed)) };
    },
  );
  // What an operator checks first: that the server answers, which kernels it runs on (the native
  // ones, or the TypeScript twins after the native module failed to load) and which store format.
  app.get('/health', { schema: serviceSchemas.health }, async () => ({
    ok: true,
    version: serverVersion,
    kernels: store.kernels.name,
    storeFormat: storeFormatVersion,
  }));
}
