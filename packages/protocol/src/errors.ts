/**
 * Every error StreamStack raises on purpose is a `StreamStackError` with a stable `code` that
 * scripts can branch on, a message for people, and the underlying `cause` when there is one.
 * The codes are a contract: add new ones, never rename or reuse one.
 *
 * @example
 * try {
 *   await feed.append(records);
 * } catch (error) {
 *   if (error instanceof StreamStackError && error.code === 'SEQ_MISMATCH') retry();
 * }
 */
export type ErrorCode =
  // Arguments and input.
  | 'INVALID_ARGUMENT'
  | 'INVALID_NAME'
  | 'INVALID_RECORD'
  | 'RECORD_TOO_LARGE'
  // Kernels.
  | 'FST_KEY_ORDER'
  | 'POSTINGS_NOT_SORTED'
  | 'NATIVE_UNAVAILABLE'
  // Store, feeds, leases, streams.
  | 'LOCKED'
  | 'READ_ONLY'
  | 'CLOSED'
  | 'FEED_NOT_FOUND'
  | 'FEED_EXISTS'
  | 'FENCED'
  | 'LEASE_HELD'
  | 'LEASE_EXPIRED'
  | 'STREAM_OPEN'
  | 'STREAM_NOT_FOUND'
  | 'STREAM_SEALED'
  // A Durable Streams stream deleted while forks of it live: kept for them, gone to everyone else.
  | 'STREAM_DELETED'
  // Durable Streams subscriptions: a webhook URL refused (server-side request forgery), and a
  // pull-wake claimed by another worker.
  | 'WEBHOOK_URL_REJECTED'
  | 'ALREADY_CLAIMED'
  | 'SEQ_MISMATCH'
  // A request for a feed at a node of a cluster that does not write it: its details name the
  // node that does (`node`, `url`, `epoch`), and over HTTP it is a 307 redirect there.
  | 'NOT_OWNER'
  // Reading.
  | 'CURSOR_OUT_OF_RANGE'
  | 'SUBSCRIPTION_EXISTS'
  | 'SUBSCRIPTION_NOT_FOUND'
  | 'CURSOR_BEHIND'
  // Subscription groups: work acknowledged or released by a worker that does not hold it, and a
  // group's own cursor moved or deleted as a plain subscription.
  | 'CLAIM_NOT_HELD'
  | 'SUBSCRIPTION_GROUPED'
  | 'KEY_NOT_FOUND'
  // History management.
  | 'TRIMMED'
  | 'COMPACTED'
  // Index and conditions.
  | 'TYPE_LIMIT'
  | 'CONDITION_FAILED'
  | 'SAME_BATCH'
  // Disk.
  | 'CORRUPT'
  | 'IO'
  // Over the network (the HTTP server and its client).
  | 'UNAUTHENTICATED'
  | 'FORBIDDEN'
  | 'NOT_FOUND'
  | 'REQUEST_TOO_LARGE'
  | 'UNAVAILABLE'
  // A request body of a type its route does not take (415), and request headers past the HTTP
  // parser's bound (431): both are answered before any route runs, so no other code says them.
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'HEADERS_TOO_LARGE'
  // An append whose Content-Type is not its stream's (the Durable Streams route).
  | 'CONTENT_TYPE_MISMATCH'
  // A broken invariant inside StreamStack itself (a bug): never expected, always reported.
  | 'INTERNAL';

export class StreamStackError extends Error {
  readonly code: ErrorCode;
  /** Structured facts about the failure (for example `expected` and `actual` of a mismatch). */
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, options: { cause?: unknown; details?: Record<string, unknown> } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StreamStackError';
    this.code = code;
    this.details = Object.freeze({ ...(options.details ?? {}) });
  }

  /** The shape the CLI and the server print: `{ code, message, ...details }`. */
  toJSON(): Record<string, unknown> {
    return { code: this.code, message: this.message, ...this.details };
  }
}

/** True when `error` is a StreamStackError, optionally with the given code. */
export function isStreamStackError(error: unknown, code?: ErrorCode): error is StreamStackError {
  return error instanceof StreamStackError && (code === undefined || error.code === code);
}
