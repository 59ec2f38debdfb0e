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
  | 'SEQ_MISMATCH'
  // Reading.
  | 'CURSOR_OUT_OF_RANGE'
  | 'SUBSCRIPTION_EXISTS'
  | 'SUBSCRIPTION_NOT_FOUND'
  | 'CURSOR_BEHIND'
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

  constructor(
    code: ErrorCode,
    message: string,
    options: { cause?: unknown; details?: Record<string, unknown> } = {},
  ) {
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

/**
 * Checks an invariant StreamStack itself keeps (not a user's input): a failure is a bug, reported
 * as `INTERNAL`. Used in pairs around the disk: once before bytes are written, once after they
 * are read back.
 */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new StreamStackError('INTERNAL', `internal invariant broken: ${message}`);
}

/**
 * An operating-system failure (`EROFS`, `ENOSPC`, `EACCES`, …) as a typed `IO` error: the OS
 * code goes into `details.errno` (with the path and system call when Node gave them), so callers
 * can tell a full disk from a read-only one without parsing messages. A StreamStackError passes
 * through unchanged.
 */
export function ioError(cause: unknown, what: string): StreamStackError {
  if (cause instanceof StreamStackError) return cause;
  const system = cause as NodeJS.ErrnoException;
  const errno = typeof system?.code === 'string' ? system.code : undefined;
  const reason = errno ? ioReasons[errno] ?? errno : cause instanceof Error ? cause.message : String(cause);
  return new StreamStackError('IO', `${what}: ${reason}`, {
    cause,
    details: {
      ...(errno ? { errno } : {}),
      ...(typeof system?.path === 'string' ? { path: system.path } : {}),
      ...(typeof system?.syscall === 'string' ? { syscall: system.syscall } : {}),
    },
  });
}

const ioReasons: Record<string, string> = {
  EROFS: 'the file system is read-only (EROFS)',
  ENOSPC: 'the disk is full (ENOSPC)',
  EDQUOT: 'the disk quota is exhausted (EDQUOT)',
  EACCES: 'permission denied (EACCES)',
  EPERM: 'operation not permitted (EPERM)',
  EIO: 'the disk reported an I/O error (EIO)',
  EMFILE: 'too many open files (EMFILE)',
  ENOENT: 'no such file or directory (ENOENT)',
};
