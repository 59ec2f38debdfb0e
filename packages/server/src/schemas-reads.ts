/** Schemas of the read path (routes-read.ts). */

import { feedParams, headerSchema, json, ndjson, pathSchema, querySchema, routeSchema } from './route-schemas.js';
import * as models from './schema-models.js';

const cursorErrors = ['INVALID_NAME', 'FEED_NOT_FOUND', 'CURSOR_OUT_OF_RANGE', 'TRIMMED', 'COMPACTED'] as const;

export const commits = routeSchema({
  id: 'listCommits',
  tag: 'reads',
  summary: 'commits after a cursor, oldest first',
  operation: 'read',
  params: feedParams,
  query: querySchema({ after: 'integer', limit: 'integer' }),
  responses: { 200: ndjson('the commits', 'Commit') },
  errors: cursorErrors,
});

const commitParams = pathSchema({ feed: 'the feed name', commit: 'the commit number' });

export const commit = routeSchema({
  id: 'getCommit',
  tag: 'reads',
  summary: 'one commit',
  operation: 'read',
  params: commitParams,
  responses: { 200: json('the commit', models.commit) },
  errors: cursorErrors,
});

export const commitRecords = routeSchema({
  id: 'readCommitRecords',
  tag: 'reads',
  summary: "one commit's records",
  operation: 'read',
  params: commitParams,
  responses: { 200: ndjson('the records', 'record line') },
  errors: cursorErrors,
});

const ssHead = { 'SS-Head': { type: 'string', description: 'the head commit when the answer was made' } };

export const records = routeSchema({
  id: 'readRecords',
  tag: 'reads',
  summary: 'records after a cursor, waiting up to `wait` seconds for one; with Accept: text/event-stream, a live read',
  description:
    'With Accept: text/event-stream the answer is an event stream: `retry`, then `heartbeat` events ({"commit", "position"}: the watermark), one `commit` event per commit ({"commit": Commit, "records": [record lines]}, its id the commit number), and `error` (the error JSON) if the read fails. It starts after Last-Event-ID, else `after`, else the start of the history kept.',
  operation: 'read',
  params: feedParams,
  headers: headerSchema(['Last-Event-ID']),
  query: querySchema({
    after: 'integer',
    upTo: 'integer',
    mode: 'string',
    type: 'list',
    tag: 'list',
    filter: 'json',
    limit: 'integer',
    plan: 'string',
    dedupScope: 'string',
    wait: 'integer',
  }),
  responses: {
    200: {
      description:
        'the records: NDJSON, one record line a line (a failure after the status ends the body with one {"error": {…}} line); or, asked for, an event stream',
      headers: ssHead,
      content: {
        'application/x-ndjson': { schema: { type: 'string' } },
        'text/event-stream': { schema: { type: 'string' } },
      },
    },
  },
  errors: cursorErrors,
});

export const key = routeSchema({
  id: 'getKey',
  tag: 'reads',
  summary: "a key's current record (highest version, then latest)",
  operation: 'read',
  params: pathSchema({ feed: 'the feed name', key: 'the key' }),
  query: querySchema({ asOf: 'integer' }),
  responses: { 200: json('the record line', models.recordLine) },
  errors: [...cursorErrors, 'KEY_NOT_FOUND'],
});

const tailHeaderSchemas = {
  'Streamstack-Tail-Base': { type: 'string', description: 'the base of the segment the bytes are from' },
  'Streamstack-Tail-From': { type: 'string', description: 'the offset of the first byte sent' },
  'Streamstack-Tail-End': { type: 'string', description: 'the offset just past the last byte sent (a group end)' },
  'Streamstack-Tail-Next-Base': {
    type: 'string',
    description: "set when the bytes end with the finished segment's SegmentEnd: the next segment's base",
  },
  'Streamstack-Tail-Next-Commit': {
    type: 'string',
    description: "set when the bytes end with the finished segment's SegmentEnd: the next segment's first commit",
  },
};

export const historyTail = routeSchema({
  id: 'readHistoryTail',
  tag: 'reads',
  summary: 'the durable groups of a history segment not yet in object storage, for a follower on another machine',
  description:
    "A follower (`--follower --follow URL`) copies these bytes into its own copy of the segment and reads the commits they hold. The segment based at `base` is the active one, or a finished one still whole on the writer: then its SegmentEnd comes last, and Streamstack-Tail-Next-Base and Streamstack-Tail-Next-Commit name the segment after it. 204 when the writer has no such segment here (its active segment's base in Streamstack-Tail-Base, when there is one): the follower reads it from object storage.",
  operation: 'read',
  params: feedParams,
  query: querySchema({ base: 'integer', from: 'integer', waitMs: 'integer', bytesMax: 'integer' }),
  responses: {
    200: {
      description: 'whole groups of the segment from `from` on',
      headers: tailHeaderSchemas,
      content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
    },
    204: {
      description: 'no segment based at `base` is active or whole here',
      headers: { 'Streamstack-Tail-Base': tailHeaderSchemas['Streamstack-Tail-Base'] },
    },
  },
  errors: ['INVALID_NAME', 'FEED_NOT_FOUND', 'READ_ONLY'],
});
