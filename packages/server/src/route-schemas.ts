/**
 * The route schemas' building blocks. A route's schema drives both fastify's validation and the
 * OpenAPI document `@fastify/swagger` serves at `/openapi.json`: path and query parameters, the
 * headers the route reads, its body, and a response for its success and for every error status
 * it can answer. Query parameters are declared as strings or string lists and parsed by
 * request-params.ts, so a bad value gets the same typed error with or without the schema.
 *
 * @example
 * schema: routeSchema({ id: 'getFeed', tag: 'feeds', summary: 'a feed', operation: 'read', params: feedParams,
 *   responses: { 200: json('the feed', feedInfo) }, errors: ['FEED_NOT_FOUND'] })
 */
import { type ErrorCode, readModesInWords } from '@streamstack/engine';
import type { Operation } from './auth.js';
import { errorStatuses } from './http-errors.js';
import { ndjsonType } from './ndjson.js';
import { type HeaderName, headerDescriptions } from './route-headers.js';

type Schema = Record<string, unknown>;
type ParameterKind = 'integer' | 'string' | 'list' | 'boolean' | 'json';

const descriptions: Record<string, string> = {
  after: 'a commit cursor: commits after this one',
  upTo: 'the last commit to read (default: the head)',
  limit: 'at most this many',
  mode: readModesInWords,
  type: 'only records of this type (repeatable: any of them)',
  tag: 'only records with this tag (repeatable: all of them)',
  plan: 'auto, index or scan',
  dedupScope: 'history or window',
  wait: 'long-poll: wait up to this many seconds for a commit after `after`',
  message: 'the commit message',
  ifNoMatchType: 'condition: refuse if a record of this type (repeatable: any of them) lies after afterPosition',
  ifNoMatchTag: 'condition: … with this tag (repeatable: all of them)',
  afterPosition: 'condition: only records after this position count (default 0)',
  fromSeq: 'from this seq on',
  filter: 'a RecordFilter as JSON ({"items": [{"types", "tags"}, …]} or one item), instead of type and tag',
  condition: 'an AppendCondition as JSON ({"failIfMatch", "after"}), instead of the ifNoMatch parameters',
  asOf: 'as of this commit',
  max: 'stop before passing this many records (whole commits)',
  offset: 'where to read from: -1 (the start), now (the tail) or an offset of 16 digits',
  live: 'long-poll or sse (absent: catch-up)',
  cursor: "the Stream-Cursor of the last answer, echoed back for the server's cache-busting",
  base: 'the first position of the history segment asked for',
  from: 'the byte offset to send from: 0 (the segment header first) or where a group starts',
  waitMs: 'long-poll: wait up to this many milliseconds for a group when there is none',
  bytesMax: 'send at most this many bytes (a larger group still goes whole)',
};

/** A querystring schema: every parameter optional, described, its kind as the docs give it. */
export function querySchema(parameters: Record<string, ParameterKind>): Schema {
  return {
    type: 'object',
    properties: Object.fromEntries(
      Object.entries(parameters).map(([name, kind]) => [
        name,
        kind === 'list'
          ? { type: 'array', items: { type: 'string' }, description: descriptions[name] }
          : { type: 'string', description: `${descriptions[name] ?? name}${kind === 'string' ? '' : ` (${kind})`}` },
      ]),
    ),
  };
}

export const conditionParameters = {
  ifNoMatchType: 'list',
  ifNoMatchTag: 'list',
  afterPosition: 'integer',
  condition: 'json',
} as const;

/** Path parameters, each a URL-encoded string (numbers among them are parsed by the route). */
export function pathSchema(parameters: Record<string, string>): Schema {
  return {
    type: 'object',
    required: Object.keys(parameters),
    properties: Object.fromEntries(
      Object.entries(parameters).map(([name, description]) => [name, { type: 'string', description }]),
    ),
  };
}

export const feedParams = pathSchema({ feed: 'the feed name' });
export const streamParams = pathSchema({ feed: 'the feed name', id: 'the stream id' });
export const subscriptionParams = pathSchema({ feed: 'the feed name', name: 'the subscription name' });
export const groupParams = pathSchema({ feed: 'the feed name', group: 'the subscription group name' });

/** A headers schema of `names`, those in `required` required; the route still checks each value. */
export function headerSchema(names: readonly HeaderName[], required: readonly HeaderName[] = []): Schema {
  return {
    type: 'object',
    ...(required.length > 0 ? { required: [...required] } : {}),
    properties: Object.fromEntries(
      names.map((name) => [name, { type: 'string', description: headerDescriptions[name] }]),
    ),
  };
}

/**
 * The error body every error answer has (http-errors.ts): the code, a message, and the code's
 * details beside them. `codes` narrows `code` to what the status can carry on the route.
 */
export function errorSchema(codes: readonly ErrorCode[]): Schema {
  return {
    type: 'object',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['code', 'message'],
        properties: {
          code: { type: 'string', enum: [...codes] },
          message: { type: 'string' },
        },
        additionalProperties: true,
        description: 'the code, a message, and details of the code (a field, a parameter, a reason…)',
      },
    },
  };
}

/** A JSON response. */
export function json(description: string, schema: Schema, headers?: Schema): Schema {
  return { description, ...(headers ? { headers } : {}), content: { 'application/json': { schema } } };
}

/** An NDJSON response, streamed: `line` says what one line holds. */
export function ndjson(description: string, line: string, headers?: Schema): Schema {
  return {
    description: `${description}: NDJSON, one ${line} a line; a failure after the status ends the body with one {"error": {…}} line`,
    ...(headers ? { headers } : {}),
    content: { [ndjsonType]: { schema: { type: 'string' } } },
  };
}

/** An answer without a body. */
export function empty(description: string, headers?: Schema): Schema {
  return { description, type: 'null', ...(headers ? { headers } : {}) };
}

/** A JSON request body; `nullable` when the route also takes none (an absent body is `{}`). */
export function jsonBody(schema: Schema): Schema {
  return { content: { 'application/json': { schema: { ...schema, type: ['object', 'null'] } } } };
}

/**
 * An NDJSON request body of record lines. Its lines are parsed and checked as they arrive
 * (ndjson.ts), so the schema only documents the wire form: the validator skips it.
 */
export const recordsBody: Schema = {
  description:
    'NDJSON (application/x-ndjson, or application/jsonl), one record a line: {"payload" | "payloadBase64", "key"?, "version"?, "tombstone"?, "type"?, "tags"?, "fingerprint" | "fingerprintBase64"?, "timestamp"?}',
  content: { [ndjsonType]: { schema: { type: 'string' } }, 'application/jsonl': { schema: { type: 'string' } } },
};

/** Codes that any route can answer: guards, URL decoding, draining, and faults of the disk or a bug. */
const everyRouteCodes: readonly ErrorCode[] = [
  'INVALID_ARGUMENT',
  'FORBIDDEN',
  'HEADERS_TOO_LARGE',
  'UNAVAILABLE',
  'CLOSED',
  'CORRUPT',
  'IO',
  'INTERNAL',
];
/** Codes that a route taking a body can answer besides: the body's size and type. */
const bodyCodes: readonly ErrorCode[] = ['REQUEST_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE'];

/** The header of a redirect to a feed's writer (NOT_OWNER). */
const redirectHeaders: Schema = {
  location: {
    description: "the same request at the node that writes the feed (the error body's url)",
    schema: { type: 'string' },
  },
};

/** Responses for `codes`, one per status, each listing its codes. */
export function errorResponses(
  codes: readonly ErrorCode[],
  statusOf: (code: ErrorCode) => number = (code) => errorStatuses[code],
): Record<string, Schema> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of new Set(codes)) {
    const status = statusOf(code);
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return Object.fromEntries(
    [...byStatus]
      .sort(([a], [b]) => a - b)
      .map(([status, list]) => [
        String(status),
        json(`an error: ${list.join(', ')}`, errorSchema(list), status === 307 ? redirectHeaders : undefined),
      ]),
  );
}

export interface RouteDoc {
  /** The operationId: what a generated client names the call. */
  readonly id: string;
  readonly tag: string;
  readonly summary: string;
  readonly description?: string;
  /** What a token must allow (auth.ts); none: the route is open to all. */
  readonly operation?: Operation;
  readonly params?: Schema;
  readonly query?: Schema;
  readonly headers?: Schema;
  readonly body?: Schema;
  /** Success answers by status. */
  readonly responses: Record<number, Schema>;
  /** The codes the route raises itself; the ones every route can answer are added. */
  readonly errors?: readonly ErrorCode[];
  /** The route's statuses where they differ from http-errors.ts (the Durable Streams protocol's). */
  readonly statusOf?: (code: ErrorCode) => number;
  /**
   * True for a feed's route that any node of a cluster answers (taking the lease); a feed's
   * other routes are redirected to its writer's node (`NOT_OWNER`, owner-redirect.ts).
   */
  readonly anyNode?: boolean;
}

/** A route's schema: validation, and its operation in the OpenAPI document. */
export function routeSchema(doc: RouteDoc): Schema {
  const codes: ErrorCode[] = [...everyRouteCodes, ...(doc.errors ?? [])];
  const namesFeed = (doc.params as { properties?: Record<string, unknown> } | undefined)?.properties?.feed;
  if (namesFeed !== undefined && !doc.anyNode) codes.push('NOT_OWNER');
  if (doc.operation) codes.push('UNAUTHENTICATED', 'FORBIDDEN');
  if (doc.body) codes.push(...bodyCodes);
  return {
    operationId: doc.id,
    tags: [doc.tag],
    summary: doc.summary,
    ...(doc.description ? { description: doc.description } : {}),
    // Bearer tokens are checked when the server has a token file; the scope is the operation.
    security: doc.operation ? [{ bearer: [doc.operation] }] : [],
    ...(doc.operation ? { 'x-streamstack-operation': doc.operation } : {}),
    ...(doc.params ? { params: doc.params } : {}),
    ...(doc.query ? { querystring: doc.query } : {}),
    ...(doc.headers ? { headers: doc.headers } : {}),
    ...(doc.body ? { body: doc.body } : {}),
    response: {
      ...Object.fromEntries(Object.entries(doc.responses).map(([status, schema]) => [status, schema])),
      ...errorResponses(codes, doc.statusOf),
    },
  };
}

/** The security scheme the document declares: the token file's bearer tokens, scoped by operation. */
export const bearerScheme = {
  type: 'http' as const,
  scheme: 'bearer',
  description:
    'A token of the token file (streamstack serve --tokens FILE). Its scopes are operations: read, write, lease, admin, each on some feeds. A server without a token file checks nothing (and listens on loopback only).',
};

type DocumentOperation = {
  operationId?: string;
  requestBody?: { required?: boolean; content: Record<string, { schema?: { required?: unknown[] } }> };
};

/**
 * What `@fastify/swagger` gets wrong for this server, put right: it marks every request body
 * required, and suffixes the operationId of a HEAD route with `-head` (for a HEAD it adds to a
 * GET, which the document leaves out here; the Durable Streams HEAD is a call of its own).
 *
 * A body is required when it holds records (NDJSON) or names fields the route cannot go without;
 * JSON bodies without required fields and a Durable Stream's bytes (an empty create, a close
 * alone) may be left out.
 */
export function finishDocument<T extends { paths?: object }>(document: T): T {
  for (const methods of Object.values(document.paths ?? {}) as Record<string, unknown>[]) {
    for (const [method, operation] of Object.entries(methods ?? {}) as [string, DocumentOperation][]) {
      if (method === 'head' && operation.operationId?.endsWith('-head'))
        operation.operationId = operation.operationId.slice(0, -'-head'.length);
      const body = operation.requestBody;
      if (!body) continue;
      const required = Object.entries(body.content).some(
        ([type, media]) =>
          type === ndjsonType || (type === 'application/json' && (media.schema?.required?.length ?? 0) > 0),
      );
      body.required = required;
    }
  }
  return document;
}
