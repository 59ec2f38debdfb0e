/**
 * Schemas of the feed, lease, history and export routes (routes-feeds.ts, routes-export.ts).
 * Body fields are typed as the engine takes them; a field of another type gets the code the
 * engine gave it before (a feed name `INVALID_NAME`, a cursor `CURSOR_OUT_OF_RANGE`).
 */

import { readModes } from '@streamstack/engine';
import { feedParams, headerSchema, json, jsonBody, ndjson, routeSchema } from './route-schemas.js';
import * as models from './schema-models.js';

/** A commit cursor in a body: any other value is refused as the engine refuses a bad cursor. */
export const cursorField = { type: 'integer', 'x-error-code': 'CURSOR_OUT_OF_RANGE' };
const feedName = {
  type: 'string',
  'x-error-code': 'INVALID_NAME',
  description: "1 to 128 characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
};
const retentionBody = {
  type: 'object',
  properties: { maxAgeMs: { type: 'integer' }, maxRecords: { type: 'integer' }, maxBytes: { type: 'integer' } },
  description: 'what history to keep ({} keeps all)',
};
const ttlMs = { type: ['integer', 'null'], description: 'how long the lease lasts without a renewal, in milliseconds' };
const fencing = headerSchema(['SS-Fencing-Token'], ['SS-Fencing-Token']);

export const createFeed = routeSchema({
  id: 'createFeed',
  tag: 'feeds',
  summary: 'create a feed',
  operation: 'admin',
  body: jsonBody({
    required: ['name'],
    properties: {
      name: feedName,
      retention: retentionBody,
      durability: {
        type: 'string',
        enum: ['local', 'replicated'],
        description: 'replicated: acknowledged once also in object storage (the server needs --object-store)',
      },
    },
  }),
  responses: { 201: json('the new feed', models.feedInfo) },
  errors: ['INVALID_NAME', 'FEED_EXISTS', 'READ_ONLY', 'INVALID_ARGUMENT'],
});

export const forkFeed = routeSchema({
  id: 'forkFeed',
  tag: 'feeds',
  summary: 'fork a feed at a commit into a new feed that shares its sealed history',
  description: 'Needs read on the feed forked and admin on the new name, as creating a feed does.',
  operation: 'read',
  params: feedParams,
  body: jsonBody({
    required: ['name'],
    properties: {
      name: feedName,
      at: {
        type: 'integer',
        'x-error-code': 'CURSOR_OUT_OF_RANGE',
        description: 'the last commit the fork holds (default: the head)',
      },
    },
  }),
  responses: { 201: json('the new feed', models.feedInfo) },
  errors: [
    'INVALID_NAME',
    'FEED_NOT_FOUND',
    'FEED_EXISTS',
    'CURSOR_OUT_OF_RANGE',
    'TRIMMED',
    'COMPACTED',
    'READ_ONLY',
    'INVALID_ARGUMENT',
  ],
});

export const listFeeds = routeSchema({
  id: 'listFeeds',
  tag: 'feeds',
  summary: 'every feed the token may read',
  operation: 'read',
  responses: { 200: ndjson('the feeds', 'FeedInfo') },
});

export const feedInfo = routeSchema({
  id: 'getFeed',
  tag: 'feeds',
  summary: "a feed's info: head, counts, lease, active stream, low mark, retention, horizon",
  operation: 'read',
  params: feedParams,
  responses: { 200: json('the feed', models.feedInfo) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND'],
});

export const diskUse = routeSchema({
  id: 'getFeedDiskUse',
  tag: 'feeds',
  summary: 'what the feed takes on disk',
  operation: 'read',
  params: feedParams,
  responses: { 200: json('files and bytes', models.diskUse) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND'],
});

export const acquireLease = routeSchema({
  id: 'acquireLease',
  tag: 'leases',
  summary: 'acquire the lease',
  operation: 'lease',
  params: feedParams,
  anyNode: true,
  body: jsonBody({
    required: ['holder'],
    properties: { holder: { type: 'string', description: 'who holds it (for people reading FeedInfo)' }, ttlMs },
  }),
  responses: { 201: json('the grant: its token is the fencing token', models.leaseGrant) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'LEASE_HELD', 'READ_ONLY', 'FENCED', 'UNAVAILABLE'],
});

export const takeOver = routeSchema({
  id: 'takeOver',
  tag: 'leases',
  summary: 'take a replicated feed over from the writer that held it',
  description:
    "This node becomes the feed's writer: the lease is taken in etcd, the slots fenced, and the feed laid out from object storage and its slots. Needs a server of a cluster (--etcd) with an object store. POST /lease does the same when this node has no writable copy.",
  operation: 'lease',
  params: feedParams,
  anyNode: true,
  body: jsonBody({
    required: ['holder'],
    properties: { holder: { type: 'string', description: 'who holds the new grant' }, ttlMs },
  }),
  responses: { 201: json('the grant, and what was restored', models.takeoverResult) },
  errors: ['INVALID_NAME', 'INVALID_ARGUMENT', 'FEED_NOT_FOUND', 'LEASE_HELD', 'FENCED', 'UNAVAILABLE', 'CORRUPT'],
});

export const renewLease = routeSchema({
  id: 'renewLease',
  tag: 'leases',
  summary: 'renew the lease of SS-Fencing-Token',
  operation: 'lease',
  params: feedParams,
  headers: fencing,
  body: jsonBody({ properties: { ttlMs } }),
  responses: { 200: json('the renewed grant', models.leaseGrant) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'FENCED', 'LEASE_EXPIRED', 'READ_ONLY'],
});

export const releaseLease = routeSchema({
  id: 'releaseLease',
  tag: 'leases',
  summary: 'release the lease of SS-Fencing-Token',
  operation: 'lease',
  params: feedParams,
  headers: fencing,
  responses: { 200: json('released', models.released) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'FENCED', 'LEASE_EXPIRED', 'READ_ONLY'],
});

export const retention = routeSchema({
  id: 'getRetention',
  tag: 'history',
  summary: 'the retention policy, low mark and what holds it back',
  operation: 'read',
  params: feedParams,
  responses: { 200: json('how retention stands', models.retentionInfo) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND'],
});

export const setRetention = routeSchema({
  id: 'setRetention',
  tag: 'history',
  summary: 'set the retention policy ({} keeps all)',
  operation: 'admin',
  params: feedParams,
  body: jsonBody(retentionBody),
  responses: { 200: json('how retention stands now', models.retentionInfo) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'READ_ONLY'],
});

export const trim = routeSchema({
  id: 'trimHistory',
  tag: 'history',
  summary: 'trim whole history segments',
  operation: 'admin',
  params: feedParams,
  body: jsonBody({
    properties: {
      before: { ...cursorField, description: 'trim commits before this one (default: as the policy says)' },
      force: { type: 'boolean' },
    },
  }),
  responses: { 200: json('what was removed', models.trimResult) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'CURSOR_OUT_OF_RANGE', 'READ_ONLY'],
});

export const compact = routeSchema({
  id: 'compactHistory',
  tag: 'history',
  summary: 'merge adjacent sealed history segments (every read stays as it was)',
  operation: 'admin',
  params: feedParams,
  body: jsonBody({ properties: {} }),
  responses: { 200: json('the merges', models.mergeResult) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'READ_ONLY'],
});

export const compactKeys = routeSchema({
  id: 'compactKeys',
  tag: 'history',
  summary: 'key compaction up to a horizon commit',
  operation: 'admin',
  params: feedParams,
  body: jsonBody({
    required: ['horizon'],
    properties: {
      horizon: cursorField,
      force: { type: 'boolean' },
      keyless: { type: 'string', enum: ['keep', 'drop'] },
    },
  }),
  responses: { 200: json('what the compaction did', models.keyCompactionResult) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'CURSOR_OUT_OF_RANGE', 'TRIMMED', 'READ_ONLY'],
});

export const exportRange = routeSchema({
  id: 'exportRange',
  tag: 'history',
  summary:
    'export a range as NDJSON, Arrow IPC or Parquet files with a manifest, into a directory under the export directory',
  operation: 'admin',
  params: feedParams,
  body: jsonBody({
    required: ['format', 'to'],
    properties: {
      format: { type: 'string', enum: ['ndjson', 'arrow', 'parquet'] },
      to: {
        type: 'string',
        description: 'a directory under the server’s --exports directory: segments of [A-Za-z0-9._-], no . or ..',
      },
      after: cursorField,
      upTo: cursorField,
      mode: { type: ['string', 'null'], enum: [...readModes, null] },
    },
  }),
  responses: { 200: json('the manifest', models.exportManifest) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'CURSOR_OUT_OF_RANGE', 'TRIMMED', 'COMPACTED'],
});

export const verifyFeed = routeSchema({
  id: 'verifyFeed',
  tag: 'feeds',
  summary: "check the feed's CRCs, chain, manifests and WAL; repairs nothing",
  operation: 'admin',
  params: feedParams,
  responses: { 200: json('the report', models.verifyReport) },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND'],
});

export const verifyAll = routeSchema({
  id: 'verifyAllFeeds',
  tag: 'feeds',
  summary: 'verify every feed',
  operation: 'admin',
  responses: { 200: ndjson('the reports', 'verify report') },
});
