/**
 * The engine's side of its errors. The class and its codes live in @streamstack/protocol, which
 * the HTTP client shares, so that one `StreamStackError` class exists and `instanceof` holds
 * whichever package threw; re-exported here so every layer keeps importing from `errors.ts`.
 * What only the engine raises (broken invariants, file system failures) is built here.
 */
import { type ErrorCode, StreamStackError } from '@streamstack/protocol';

export type { ErrorCode } from '@streamstack/protocol';
export { isStreamStackError, StreamStackError } from '@streamstack/protocol';

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
  const reason = errno ? (ioReasons[errno] ?? errno) : cause instanceof Error ? cause.message : String(cause);
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

/** An error as it crosses from a worker thread: a `StreamStackError`'s code and details survive. */
export interface ErrorMessage {
  readonly code: ErrorCode;
  readonly message: string;
  readonly details: Record<string, unknown>;
}

/**
 * What a worker posts for `error`: its code, message and details when it is a
 * `StreamStackError`, else `INTERNAL` with `what` before its message (a failure we did not type
 * is a bug of ours).
 */
export function errorMessageOf(error: unknown, what: string): ErrorMessage {
  if (error instanceof StreamStackError)
    return { code: error.code, message: error.message, details: { ...error.details } };
  return {
    code: 'INTERNAL',
    message: `${what}: ${error instanceof Error ? error.message : String(error)}`,
    details: {},
  };
}

/** The error a worker's `ErrorMessage` stands for, rebuilt on the calling thread with its code. */
export function errorFromMessage(message: ErrorMessage): StreamStackError {
  return new StreamStackError(message.code, message.message, { details: message.details });
}
