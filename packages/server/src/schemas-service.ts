/** Schemas of the routes outside /v1 that a monitor calls (server.ts): health and metrics. */

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
