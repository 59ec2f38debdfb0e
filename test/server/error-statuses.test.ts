import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/index.js';
import { typedRequestError } from '../../packages/server/src/http-errors.js';
import { errorBody, errorHeaders, errorStatuses, statusOf } from '../../packages/server/src/index.js';

/** Every code StreamStack declares, read from its source in the protocol package (the union is a type, gone at run time). */
function declaredCodes(): string[] {
  const source = fs.readFileSync('packages/protocol/src/errors.ts', 'utf8');
  const union = source.slice(
    source.indexOf('export type ErrorCode ='),
    source.indexOf(';', source.indexOf('export type ErrorCode =')),
  );
  return [...union.matchAll(/\|\s*'([A-Z_]+)'/g)].map((match) => match[1]!);
}

describe('HTTP statuses of error codes', () => {
  it('gives every engine error code one status, and names no code the engine lacks', () => {
    const codes = declaredCodes();
    expect(codes.length).toBeGreaterThan(30);
    for (const code of codes) expect(errorStatuses, code).toHaveProperty(code);
    expect(Object.keys(errorStatuses).sort()).toEqual([...codes].sort());
    for (const status of Object.values(errorStatuses))
      expect([307, 400, 401, 403, 404, 409, 410, 412, 413, 415, 416, 431, 500, 503]).toContain(status);
  });

  it('maps codes as docs/http.md lists them', () => {
    const expected: Record<string, number> = {
      INVALID_ARGUMENT: 400,
      INVALID_RECORD: 400,
      INVALID_NAME: 400,
      UNAUTHENTICATED: 401,
      FORBIDDEN: 403,
      FEED_NOT_FOUND: 404,
      STREAM_NOT_FOUND: 404,
      SUBSCRIPTION_NOT_FOUND: 404,
      KEY_NOT_FOUND: 404,
      NOT_OWNER: 307,
      LEASE_HELD: 409,
      STREAM_OPEN: 409,
      SAME_BATCH: 409,
      FEED_EXISTS: 409,
      SEQ_MISMATCH: 412,
      FENCED: 412,
      CONDITION_FAILED: 412,
      RECORD_TOO_LARGE: 413,
      REQUEST_TOO_LARGE: 413,
      UNSUPPORTED_MEDIA_TYPE: 415,
      HEADERS_TOO_LARGE: 431,
      TRIMMED: 410,
      CURSOR_OUT_OF_RANGE: 416,
      UNAVAILABLE: 503,
      CLOSED: 503,
      CORRUPT: 500,
      IO: 500,
      INTERNAL: 500,
    };
    for (const [code, status] of Object.entries(expected)) expect(statusOf(code as never), code).toBe(status);
  });

  it('tells a SAME_BATCH client to retry at once, and keeps the CLI error shape', () => {
    const sameBatch = new StreamStackError('SAME_BATCH', 'a matching record is in the same group', {
      details: { retryable: true },
    });
    expect(errorHeaders(sameBatch)).toEqual({ 'retry-after': '0' });
    expect(errorHeaders(new StreamStackError('CONDITION_FAILED', 'x'))).toEqual({});
    // A redirect to a feed's writer goes to the address its details name, when they name one.
    const location = 'http://10.0.0.2:4437/v1/feeds/orders/records?after=3';
    expect(errorHeaders(new StreamStackError('NOT_OWNER', 'x', { details: { location } }))).toEqual({ location });
    expect(errorHeaders(new StreamStackError('NOT_OWNER', 'x', { details: { url: null } }))).toEqual({});
    expect(errorBody(sameBatch)).toEqual({
      error: { code: 'SAME_BATCH', message: 'a matching record is in the same group', retryable: true },
    });
  });

  it('types failures that are not StreamStackErrors: system errors as IO, fastify request errors by status, the rest INTERNAL', () => {
    const full = Object.assign(new Error('no space'), { code: 'ENOSPC', syscall: 'write' });
    expect(typedRequestError(full)).toMatchObject({ code: 'IO', details: { errno: 'ENOSPC', syscall: 'write' } });
    expect(
      typedRequestError(Object.assign(new Error('too big'), { statusCode: 413, code: 'FST_ERR_CTP_BODY_TOO_LARGE' }))
        .code,
    ).toBe('REQUEST_TOO_LARGE');
    expect(
      typedRequestError(
        Object.assign(new Error('bad json'), { statusCode: 400, code: 'FST_ERR_CTP_INVALID_JSON_BODY' }),
      ),
    ).toMatchObject({ code: 'INVALID_ARGUMENT', details: { reason: 'FST_ERR_CTP_INVALID_JSON_BODY' } });
    expect(typedRequestError(new TypeError('oops')).code).toBe('INTERNAL');
  });
});
