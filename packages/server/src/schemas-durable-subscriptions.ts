/**
 * Schemas of the Durable Streams subscription routes (routes-durable-subscriptions.ts). Bodies
 * are taken as bytes and parsed by the routes (the compatibility route takes every body as it
 * is), so they are documented, not validated here.
 */

import type { ErrorCode } from '@streamstack/engine';
import { statusOf as serverStatusOf } from './http-errors.js';
import { empty, json, pathSchema, routeSchema } from './route-schemas.js';

/** Where the protocol's statuses differ from the server's: a stale wake is a conflict (409). */
export function subscriptionStatusOf(code: ErrorCode): number {
  return code === 'FENCED' ? 409 : serverStatusOf(code);
}

const tag = 'durable-streams subscriptions';
const params = pathSchema({ id: 'the subscription id (no /)' });
const anyObject = { type: 'object', additionalProperties: true };
const jsonText = (description: string, properties: Record<string, unknown>) => ({
  description,
  content: { 'application/json': { schema: { type: 'object', properties } } },
});
const wakeFields = {
  wake_id: { type: 'string' },
  generation: { type: 'integer' },
  acks: {
    type: 'array',
    items: { type: 'object', properties: { stream: { type: 'string' }, offset: { type: 'string' } } },
  },
  done: { type: 'boolean' },
};
const lookupErrors: ErrorCode[] = ['INVALID_NAME', 'SUBSCRIPTION_NOT_FOUND'];
const acknowledged = json('applied', {
  type: 'object',
  properties: { ok: { type: 'boolean' }, next_wake: { type: 'boolean' } },
});

export const jwks = routeSchema({
  id: 'durableStreamsJwks',
  tag,
  summary: 'the public keys webhook deliveries are signed with (a JWK Set)',
  responses: { 200: { description: 'the JWK Set', content: { 'application/jwk-set+json': { schema: anyObject } } } },
  statusOf: subscriptionStatusOf,
});

export const put = routeSchema({
  id: 'putDurableStreamsSubscription',
  tag,
  summary: 'create a subscription, or find it as asked',
  description:
    'The body: {"type": "webhook" | "pull-wake", "pattern"?, "streams"?, "webhook": {"url"}, "wake_stream", "lease_ttl_ms"?, "description"?}. Existing streams are linked at their tails.',
  operation: 'admin',
  params,
  body: jsonText('the subscription', {
    type: { type: 'string' },
    pattern: { type: 'string' },
    streams: { type: 'array', items: { type: 'string' } },
    webhook: { type: 'object', properties: { url: { type: 'string' } } },
    wake_stream: { type: 'string' },
    lease_ttl_ms: { type: 'integer' },
    description: { type: 'string' },
  }),
  responses: { 200: json('it exists as asked', anyObject), 201: json('created', anyObject) },
  errors: [...lookupErrors, 'INVALID_ARGUMENT', 'WEBHOOK_URL_REJECTED', 'SUBSCRIPTION_EXISTS'],
  statusOf: subscriptionStatusOf,
});

export const get = routeSchema({
  id: 'getDurableStreamsSubscription',
  tag,
  summary: 'a subscription: its configuration, linked streams with their acked offsets, status',
  operation: 'admin',
  params,
  responses: { 200: json('the subscription', anyObject) },
  errors: lookupErrors,
  statusOf: subscriptionStatusOf,
});

export const remove = routeSchema({
  id: 'deleteDurableStreamsSubscription',
  tag,
  summary: 'delete a subscription (its wakes in flight are fenced)',
  operation: 'admin',
  params,
  responses: { 204: empty('deleted') },
  errors: lookupErrors,
  statusOf: subscriptionStatusOf,
});

export const addStreams = routeSchema({
  id: 'addDurableStreamsSubscriptionStreams',
  tag,
  summary: 'link streams explicitly, each at its tail',
  operation: 'admin',
  params,
  body: jsonText('the streams', { streams: { type: 'array', items: { type: 'string' } } }),
  responses: { 204: empty('linked') },
  errors: [...lookupErrors, 'INVALID_ARGUMENT'],
  statusOf: subscriptionStatusOf,
});

export const removeStream = routeSchema({
  id: 'removeDurableStreamsSubscriptionStream',
  tag,
  summary: 'remove an explicit link (a glob link that still matches stays)',
  operation: 'admin',
  params: pathSchema({ id: 'the subscription id (no /)', '*': 'the stream path, URL-encoded' }),
  responses: { 204: empty('removed') },
  errors: lookupErrors,
  statusOf: subscriptionStatusOf,
});

/** A wake's acks, by the token the wake handed out: a webhook's callback and a pull-wake's ack are one shape. */
function wakeAcks(id: string, summary: string) {
  return routeSchema({
    id,
    tag,
    summary,
    params,
    body: jsonText('the acks', wakeFields),
    responses: { 200: acknowledged },
    errors: [...lookupErrors, 'INVALID_ARGUMENT', 'FENCED'],
    statusOf: subscriptionStatusOf,
  });
}

export const callback = wakeAcks(
  'durableStreamsWebhookCallback',
  "a webhook's callback for its wake: acks, and done ends the wake (Authorization: Bearer <callback_token>)",
);

export const claim = routeSchema({
  id: 'claimDurableStreamsSubscription',
  tag,
  summary: "claim a pull-wake subscription's wake for a worker",
  operation: 'read',
  params,
  body: jsonText('the worker', { worker: { type: 'string' } }),
  responses: { 200: json('the wake, its token and streams', anyObject), 204: empty('nothing is pending') },
  errors: [...lookupErrors, 'INVALID_ARGUMENT', 'ALREADY_CLAIMED'],
  statusOf: subscriptionStatusOf,
});

export const ack = wakeAcks(
  'ackDurableStreamsSubscription',
  'ack a claimed wake (a heartbeat; done ends it) (Authorization: Bearer <claim token>)',
);

export const release = routeSchema({
  id: 'releaseDurableStreamsSubscription',
  tag,
  summary: 'give a claimed wake back unacknowledged (Authorization: Bearer <claim token>)',
  params,
  body: jsonText('the wake', { wake_id: wakeFields.wake_id, generation: wakeFields.generation }),
  responses: { 204: empty('released') },
  errors: [...lookupErrors, 'FENCED'],
  statusOf: subscriptionStatusOf,
});
