/** Schemas of the subscription routes (routes-subscriptions.ts). */

import { feedParams, json, jsonBody, ndjson, querySchema, routeSchema, subscriptionParams } from './route-schemas.js';
import * as models from './schema-models.js';
import { cursorField } from './schemas-feeds.js';

const errors = ['INVALID_NAME', 'FEED_NOT_FOUND', 'SUBSCRIPTION_NOT_FOUND'] as const;
const cursorBody = jsonBody({ required: ['cursor'], properties: { cursor: cursorField } });

export const create = routeSchema({
  id: 'createSubscription',
  tag: 'subscriptions',
  summary: 'create a subscription',
  operation: 'read',
  params: feedParams,
  body: jsonBody({
    required: ['name'],
    properties: {
      name: { type: 'string', 'x-error-code': 'INVALID_NAME', description: 'follows the rules of feed names' },
      after: cursorField,
    },
  }),
  responses: { 201: json('the new subscription', models.subscriptionInfo) },
  errors: [
    'INVALID_NAME',
    'FEED_NOT_FOUND',
    'SUBSCRIPTION_EXISTS',
    'CURSOR_OUT_OF_RANGE',
    'TRIMMED',
    'COMPACTED',
    'READ_ONLY',
  ],
});

export const list = routeSchema({
  id: 'listSubscriptions',
  tag: 'subscriptions',
  summary: 'every subscription with its cursor and lag',
  operation: 'read',
  params: feedParams,
  responses: { 200: ndjson('the subscriptions', 'SubscriptionInfo') },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND'],
});

export const info = routeSchema({
  id: 'getSubscription',
  tag: 'subscriptions',
  summary: 'a subscription: cursor, times, lag',
  operation: 'read',
  params: subscriptionParams,
  responses: { 200: json('the subscription', models.subscriptionInfo) },
  errors,
});

export const remove = routeSchema({
  id: 'deleteSubscription',
  tag: 'subscriptions',
  summary: 'delete a subscription',
  operation: 'read',
  params: subscriptionParams,
  responses: { 200: json('deleted', models.subscriptionDeleted) },
  errors: [...errors, 'READ_ONLY'],
});

export const poll = routeSchema({
  id: 'pollSubscription',
  tag: 'subscriptions',
  summary: 'whole commits from the saved cursor',
  operation: 'read',
  params: subscriptionParams,
  query: querySchema({ max: 'integer' }),
  responses: { 200: json('the commits and the cursor to advance to', models.polled) },
  errors: [...errors, 'TRIMMED', 'COMPACTED'],
});

export const advance = routeSchema({
  id: 'advanceSubscription',
  tag: 'subscriptions',
  summary: 'save a cursor, forward only',
  operation: 'read',
  params: subscriptionParams,
  body: cursorBody,
  responses: { 200: json('the subscription', models.subscriptionInfo) },
  errors: [...errors, 'CURSOR_OUT_OF_RANGE', 'CURSOR_BEHIND', 'READ_ONLY'],
});

export const reset = routeSchema({
  id: 'resetSubscription',
  tag: 'subscriptions',
  summary: 'move the cursor anywhere',
  operation: 'read',
  params: subscriptionParams,
  body: cursorBody,
  responses: { 200: json('the subscription', models.subscriptionInfo) },
  errors: [...errors, 'CURSOR_OUT_OF_RANGE', 'TRIMMED', 'COMPACTED', 'READ_ONLY'],
});
