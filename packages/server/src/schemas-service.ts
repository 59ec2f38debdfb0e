/** Schemas of the routes about the server itself (server.ts): health, metrics, and the cluster it is a node of. */

import { json, routeSchema } from './route-schemas.js';
import * as models from './schema-models.js';

export const health = routeSchema({
  id: 'health',
  tag: 'service',
  summary: 'the server is up',
  responses: { 200: json('up', models.health) },
});

export const metrics = routeSchema({
  id: 'metrics',
  tag: 'service',
  summary: 'Prometheus metrics',
  description:
    'With a token file, only the series of the feeds the token covers; the process-wide ones only for a token over every feed (*).',
  operation: 'admin',
  responses: {
    200: { description: 'the Prometheus text format', content: { 'text/plain': { schema: { type: 'string' } } } },
  },
});

export const cluster = routeSchema({
  id: 'cluster',
  tag: 'service',
  summary: 'the cluster this server is a node of',
  description:
    'Its nodes (each with the address it serves at) and who writes each leased feed, under which epoch, read from etcd now. With a token file, only the feeds the token covers. 400 INVALID_ARGUMENT when the server runs without --etcd.',
  operation: 'read',
  responses: { 200: json('the cluster', models.clusterInfo) },
  errors: ['INVALID_ARGUMENT', 'UNAVAILABLE'],
});
