/** Schemas of the write path: streams and one-shot appends (routes-write.ts). */

import {
  conditionParameters,
  feedParams,
  headerSchema,
  json,
  jsonBody,
  ndjson,
  querySchema,
  recordsBody,
  routeSchema,
  streamParams,
} from './route-schemas.js';
import * as models from './schema-models.js';

const fencing = headerSchema(['SS-Fencing-Token'], ['SS-Fencing-Token']);
const writeErrors = [
  'INVALID_NAME',
  'FEED_NOT_FOUND',
  'STREAM_NOT_FOUND',
  'FENCED',
  'LEASE_EXPIRED',
  'STREAM_SEALED',
  'READ_ONLY',
] as const;

export const openStream = routeSchema({
  id: 'openStream',
  tag: 'streams',
  summary: 'open a stream under SS-Fencing-Token',
  operation: 'write',
  params: feedParams,
  headers: fencing,
  body: jsonBody({ properties: { message: { type: 'string', description: 'the message its commit will have' } } }),
  responses: { 201: json('the new stream', models.openedStream) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'FENCED', 'LEASE_EXPIRED', 'STREAM_OPEN', 'READ_ONLY'],
});

export const streamInfo = routeSchema({
  id: 'getStream',
  tag: 'streams',
  summary: "a stream's state: open (with its records), sealed (with its commit), aborted…",
  operation: 'read',
  params: streamParams,
  responses: { 200: json('the stream', models.streamInfo) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'STREAM_NOT_FOUND'],
});

export const appendBatch = routeSchema({
  id: 'appendBatch',
  tag: 'streams',
  summary: 'append one batch under SS-Fencing-Token, at SS-Expected-Seq if given',
  operation: 'write',
  params: streamParams,
  headers: headerSchema(['SS-Fencing-Token', 'SS-Expected-Seq'], ['SS-Fencing-Token']),
  body: recordsBody,
  responses: { 200: json('the seqs the batch got', models.appended) },
  errors: [...writeErrors, 'INVALID_RECORD', 'RECORD_TOO_LARGE', 'SEQ_MISMATCH', 'SAME_BATCH', 'TYPE_LIMIT'],
});

export const streamRecords = routeSchema({
  id: 'readStreamRecords',
  tag: 'streams',
  summary: "one stream's records, sealed or open",
  operation: 'read',
  params: streamParams,
  query: querySchema({ fromSeq: 'integer' }),
  responses: { 200: ndjson('the records', 'record line') },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'STREAM_NOT_FOUND'],
});

export const seal = routeSchema({
  id: 'sealStream',
  tag: 'streams',
  summary: 'seal the stream into one commit, if the condition holds',
  operation: 'write',
  params: streamParams,
  headers: fencing,
  query: querySchema({ message: 'string', ...conditionParameters }),
  responses: { 200: json('the commit', models.commit) },
  errors: [...writeErrors, 'CONDITION_FAILED'],
});

export const abort = routeSchema({
  id: 'abortStream',
  tag: 'streams',
  summary: 'abort the stream: nothing of it is published',
  operation: 'write',
  params: streamParams,
  headers: fencing,
  responses: { 200: json('aborted', models.aborted) },
  errors: writeErrors,
});

export const appendOneShot = routeSchema({
  id: 'appendRecords',
  tag: 'appends',
  summary: 'one-shot append: one commit of its own, if the condition holds',
  description: 'SS-Fencing-Token is needed while a lease is live.',
  operation: 'write',
  params: feedParams,
  headers: headerSchema(['SS-Fencing-Token']),
  query: querySchema({ message: 'string', ...conditionParameters }),
  body: recordsBody,
  responses: { 201: json('the commit', models.commit) },
  errors: [
    'INVALID_NAME',
    'FEED_NOT_FOUND',
    'INVALID_RECORD',
    'RECORD_TOO_LARGE',
    'TYPE_LIMIT',
    'FENCED',
    'LEASE_HELD',
    'LEASE_EXPIRED',
    'CONDITION_FAILED',
    'READ_ONLY',
  ],
});
