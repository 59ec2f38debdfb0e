/** Schemas of the subscription group routes (routes-groups.ts). */

import { feedParams, groupParams, json, jsonBody, ndjson, routeSchema } from './route-schemas.js';
import * as models from './schema-models.js';
import { cursorField } from './schemas-feeds.js';

const errors = ['INVALID_NAME', 'FEED_NOT_FOUND', 'SUBSCRIPTION_NOT_FOUND'] as const;
const worker = { type: 'string', description: 'names the worker: what it claims only it may ack or nack' };
const commitField = {
  type: 'integer',
  minimum: 1,
  'x-error-code': 'INVALID_ARGUMENT',
  description: 'a commit the worker claimed',
};

export const put = routeSchema({
  id: 'putSubscriptionGroup',
  tag: 'subscription groups',
  summary: 'create a subscription group, or change its options',
  description:
    'Creates the group when there is none (its cursor is the subscription of the same name, which must be free), else applies the options given. The token must also be allowed to write the dead-letter feed.',
  operation: 'write',
  params: groupParams,
  body: jsonBody({
    properties: {
      ackTimeoutMs: { type: 'integer', description: 'how long a worker holds what it claimed (default 30000)' },
      maxDeliveries: { type: 'integer', description: 'deliveries of one commit before it is parked (default 5)' },
      orderedBy: { type: 'string', enum: ['commit', 'key'], 'x-error-code': 'INVALID_ARGUMENT' },
      deadLetter: { type: 'string', description: 'the feed parked work goes to (default <feed>.<group>.parked)' },
      after: cursorField,
    },
  }),
  responses: { 200: json('the group', models.groupInfo) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'SUBSCRIPTION_EXISTS', 'CURSOR_OUT_OF_RANGE', 'TRIMMED', 'READ_ONLY'],
});

export const list = routeSchema({
  id: 'listSubscriptionGroups',
  tag: 'subscription groups',
  summary: 'every subscription group with its counts and lag',
  operation: 'read',
  params: feedParams,
  responses: { 200: ndjson('the groups', 'SubscriptionGroupInfo') },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'READ_ONLY'],
});

export const info = routeSchema({
  id: 'getSubscriptionGroup',
  tag: 'subscription groups',
  summary: 'a subscription group: options, cursor, counts, lag',
  operation: 'read',
  params: groupParams,
  responses: { 200: json('the group', models.groupInfo) },
  errors: [...errors, 'READ_ONLY'],
});

export const remove = routeSchema({
  id: 'deleteSubscriptionGroup',
  tag: 'subscription groups',
  summary: 'delete a subscription group and its cursor',
  operation: 'write',
  params: groupParams,
  responses: { 200: json('deleted', models.groupDeleted) },
  errors: [...errors, 'READ_ONLY'],
});

export const claim = routeSchema({
  id: 'claimGroupWork',
  tag: 'subscription groups',
  summary: 'claim commits for a worker, waiting up to waitMs for work (long-poll)',
  operation: 'read',
  params: groupParams,
  body: jsonBody({
    required: ['worker'],
    properties: {
      worker,
      max: {
        type: 'integer',
        minimum: 1,
        'x-error-code': 'INVALID_ARGUMENT',
        description: 'commits at most (default 1)',
      },
      waitMs: {
        type: 'integer',
        minimum: 0,
        'x-error-code': 'INVALID_ARGUMENT',
        description: 'how long to wait for work (default 0)',
      },
    },
  }),
  responses: { 200: json('the claims, none when no work came', models.groupClaims) },
  errors: [...errors, 'TRIMMED', 'COMPACTED', 'READ_ONLY'],
});

export const ack = routeSchema({
  id: 'ackGroupWork',
  tag: 'subscription groups',
  summary: 'acknowledge a claimed commit: it is settled for good',
  operation: 'read',
  params: groupParams,
  body: jsonBody({ required: ['worker', 'commit'], properties: { worker, commit: commitField } }),
  responses: { 200: json('acknowledged', models.groupAcked) },
  errors: [...errors, 'CLAIM_NOT_HELD', 'READ_ONLY'],
});

export const nack = routeSchema({
  id: 'nackGroupWork',
  tag: 'subscription groups',
  summary: 'give a claimed commit back, with a reason: redelivered, or parked once its deliveries are spent',
  operation: 'read',
  params: groupParams,
  body: jsonBody({
    required: ['worker', 'commit'],
    properties: {
      worker,
      commit: commitField,
      reason: { type: 'string', description: 'kept, and written with parked work' },
    },
  }),
  responses: { 200: json('what became of the commit', models.nackResult) },
  errors: [...errors, 'CLAIM_NOT_HELD', 'READ_ONLY'],
});

export const reset = routeSchema({
  id: 'resetSubscriptionGroup',
  tag: 'subscription groups',
  summary: 'forget every claim and start again after a cursor',
  operation: 'write',
  params: groupParams,
  body: jsonBody({ required: ['cursor'], properties: { cursor: cursorField } }),
  responses: { 200: json('the group', models.groupInfo) },
  errors: [...errors, 'CURSOR_OUT_OF_RANGE', 'TRIMMED', 'READ_ONLY'],
});
