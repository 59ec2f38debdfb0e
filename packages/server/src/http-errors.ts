/**
 * One fixed HTTP status per error code (docs/http.md), and the error body: the CLI's error JSON,
 * `{"error": {"code", "message", …details}}`, so a script reads the same shape from either.
 *
 * @example
 * statusOf('SEQ_MISMATCH'); // 412
 */
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import { type ErrorCode, ioError, StreamStackError } from '@streamstack/engine';
import { canonicalHeaderName } from './route-headers.js';

/**
 * Every code the engine defines has a status here: the type is a Record over ErrorCode, so a new
 * code fails to compile until it is given one.
 */
export const errorStatuses: Readonly<Record<ErrorCode, number>> = {
  // Bad input: the request itself is wrong, and sending it again will not help.
  INVALID_ARGUMENT: 400,
  INVALID_NAME: 400,
  INVALID_RECORD: 400,
  WEBHOOK_URL_REJECTED: 400,
  RECORD_TOO_LARGE: 413,
  REQUEST_TOO_LARGE: 413,
  // A body of a type the route does not take (a cross-site page's text/plain or form POST).
  UNSUPPORTED_MEDIA_TYPE: 415,
  // Request headers past the HTTP parser's bound (answered by the clientError handler).
  HEADERS_TOO_LARGE: 431,
  // Kernel invariants that only a bug can break.
  FST_KEY_ORDER: 500,
  POSTINGS_NOT_SORTED: 500,
  NATIVE_UNAVAILABLE: 500,
  // Conflicts with the state of the store, a feed, a lease or a stream.
  LOCKED: 409,
  READ_ONLY: 409,
  FEED_EXISTS: 409,
  LEASE_HELD: 409,
  STREAM_OPEN: 409,
  STREAM_SEALED: 409,
  SUBSCRIPTION_EXISTS: 409,
  CURSOR_BEHIND: 409,
  CLAIM_NOT_HELD: 409,
  ALREADY_CLAIMED: 409,
  SUBSCRIPTION_GROUPED: 409,
  TYPE_LIMIT: 409,
  // SAME_BATCH is a conflict that a retry settles at once (sent with `Retry-After: 0`).
  SAME_BATCH: 409,
  // A Durable Streams append of another type than its stream's (the protocol answers 409).
  CONTENT_TYPE_MISMATCH: 409,
  // Failed preconditions: the fencing token, the expected seq, the append condition.
  FENCED: 412,
  LEASE_EXPIRED: 412,
  SEQ_MISMATCH: 412,
  CONDITION_FAILED: 412,
  // A feed another node of the cluster writes: 307 to the same path there (`Location`), so the
  // request, body and method unchanged, goes where it can be answered.
  NOT_OWNER: 307,
  // Things that are not there.
  FEED_NOT_FOUND: 404,
  STREAM_NOT_FOUND: 404,
  SUBSCRIPTION_NOT_FOUND: 404,
  KEY_NOT_FOUND: 404,
  NOT_FOUND: 404,
  // A cursor past the head names commits that do not exist yet.
  CURSOR_OUT_OF_RANGE: 416,
  // A cursor below the low mark names commits that existed and were trimmed for good: 410 Gone.
  TRIMMED: 410,
  COMPACTED: 410,
  // A Durable Streams stream deleted and kept only for its forks (the protocol's soft delete).
  STREAM_DELETED: 410,
  // Authentication and authorisation.
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  // The server is starting or draining, or the store was closed under the request.
  UNAVAILABLE: 503,
  CLOSED: 503,
  // The disk, or StreamStack itself.
  CORRUPT: 500,
  IO: 500,
  INTERNAL: 500,
};

/** The HTTP status for `code`. */
export function statusOf(code: ErrorCode): number {
  return errorStatuses[code] ?? 500;
}

/** The body of an error response. */
export function errorBody(error: StreamStackError): { error: Record<string, unknown> } {
  return { error: error.toJSON() };
}

/**
 * Headers an error response carries besides its status: a retry hint for SAME_BATCH (at once),
 * and for an error that names one in `details.retryAfterSeconds` (a server busy with bodies);
 * the owner's address of the same request for NOT_OWNER.
 */
export function errorHeaders(error: StreamStackError): Record<string, string> {
  if (error.code === 'SAME_BATCH') return { 'retry-after': '0' };
  const location = (error.details as { location?: unknown }).location;
  if (error.code === 'NOT_OWNER' && typeof location === 'string') return { location };
  const seconds = (error.details as { retryAfterSeconds?: unknown }).retryAfterSeconds;
  return typeof seconds === 'number' ? { 'retry-after': String(seconds) } : {};
}

/** Fastify's own request errors (body limits, bad JSON, unknown content types) as typed errors. */
export function typedRequestError(error: unknown): StreamStackError {
  if (error instanceof StreamStackError) return error;
  const failure = error as { statusCode?: number; code?: string; message?: string; validation?: unknown };
  const message = failure?.message ?? String(error);
  if (Array.isArray(failure?.validation)) return validationError(error as ValidationFailure);
  if (failure?.statusCode === 413) return new StreamStackError('REQUEST_TOO_LARGE', message, { cause: error });
  if (failure?.statusCode === 404) return new StreamStackError('NOT_FOUND', message, { cause: error });
  if (failure?.statusCode === 415)
    return new StreamStackError('UNSUPPORTED_MEDIA_TYPE', message, {
      cause: error,
      details: failure.code ? { reason: failure.code } : {},
    });
  // An operating-system failure (its code an errno name, `ENOSPC`) is `IO`, as the CLI reports it.
  if (
    error instanceof Error &&
    typeof failure.code === 'string' &&
    /^E[A-Z0-9]+$/.test(failure.code) &&
    failure.statusCode === undefined
  ) {
    return ioError(error, 'a system call failed');
  }
  if (typeof failure?.statusCode === 'number' && failure.statusCode >= 400 && failure.statusCode < 500) {
    return new StreamStackError('INVALID_ARGUMENT', message, {
      cause: error,
      details: failure.code ? { reason: failure.code } : {},
    });
  }
  return new StreamStackError('INTERNAL', `unexpected error (a bug in streamstack): ${message}`, { cause: error });
}

interface SchemaError {
  readonly keyword: string;
  readonly instancePath: string;
  readonly params: { missingProperty?: string };
  readonly parentSchema?: { properties?: Record<string, Record<string, unknown>> } & Record<string, unknown>;
}

type ValidationFailure = Error & { validation: SchemaError[]; validationContext?: string; code?: string };

/**
 * A request the route schema refused, with the code the schema names for the property
 * (`x-error-code`, schema-validation.ts), else `INVALID_ARGUMENT`; a missing header has the
 * message and details the route's own check gave it before the schema did.
 */
function validationError(failure: ValidationFailure): StreamStackError {
  const [first] = failure.validation;
  const part = failure.validationContext ?? 'request';
  const property = first?.params.missingProperty ?? first?.instancePath.split('/').filter(Boolean).join('.');
  const propertySchema =
    first?.params.missingProperty === undefined
      ? first?.parentSchema
      : first.parentSchema?.properties?.[first.params.missingProperty];
  const named = propertySchema?.['x-error-code'];
  const code = typeof named === 'string' && named in errorStatuses ? (named as ErrorCode) : 'INVALID_ARGUMENT';
  if (part === 'headers' && first?.params.missingProperty !== undefined) {
    const header = canonicalHeaderName(first.params.missingProperty);
    return new StreamStackError(code, `this request needs the ${header} header`, {
      cause: failure,
      details: { header },
    });
  }
  const where = part === 'body' ? 'field' : part === 'headers' ? 'header' : 'parameter';
  return new StreamStackError(code, failure.message, {
    cause: failure,
    details: { reason: failure.code ?? 'FST_ERR_VALIDATION', ...(property ? { [where]: property } : {}) },
  });
}

/** What Node's HTTP parser refused, as a typed error (the parser's reason in `details.reason`). */
export function typedClientError(error: Error & { code?: string }): StreamStackError {
  const reason = error.code ?? 'HPE_UNKNOWN';
  if (reason === 'HPE_HEADER_OVERFLOW') {
    return new StreamStackError('HEADERS_TOO_LARGE', 'the request headers are larger than the server reads', {
      details: { reason },
    });
  }
  if (reason === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return new StreamStackError('UNAVAILABLE', 'the request did not arrive in time; send it again', {
      details: { reason },
    });
  }
  return new StreamStackError('INVALID_ARGUMENT', `the request is not valid HTTP/1.1: ${error.message}`, {
    details: { reason },
  });
}

/**
 * fastify's clientErrorHandler: a request Node's HTTP parser refused (headers too large, broken
 * chunked encoding, an unknown method) gets the error shape, written raw since no request
 * object exists, then the connection closes (the parser cannot find the next request on it).
 */
export function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  // A reset connection, or one whose answer has started, has nobody to read another answer.
  const started = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (error.code === 'ECONNRESET' || !socket.writable || started) {
    socket.destroy();
    return;
  }
  const typed = typedClientError(error);
  const status = statusOf(typed.code);
  const body = JSON.stringify(errorBody(typed));
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
