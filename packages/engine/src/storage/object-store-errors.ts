/**
 * How an object store's failures reach a caller: S3's answers become the errors the local store
 * gives (a missing object is `IO` with errno `ENOENT`, a range past the end `CORRUPT`, refused
 * credentials `IO` with `EACCES`), and a network failure or a 5xx after the SDK's retries is
 * `UNAVAILABLE`, always with the SDK's error as the cause and never the credentials.
 */
import { StreamStackError } from '../errors.js';

/** What a request was doing, for its error's message. */
export type Action = 'store' | 'read' | 'list' | 'delete' | 'inspect';

/** The HTTP status an S3 error came with, when it came from an answer (not from the network). */
export function s3Status(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

/** The S3 error code (`NoSuchKey`, `AccessDenied`, …); the SDK names its exceptions after them. */
export function s3Code(error: unknown): string | undefined {
  const name = (error as { name?: unknown })?.name;
  return typeof name === 'string' ? name : undefined;
}

/** A missing object: `NoSuchKey` to a GET, a bare 404 (`NotFound`) to a HEAD, which has no body. */
export function isMissingKey(error: unknown): boolean {
  const code = s3Code(error);
  return code === 'NoSuchKey' || (code !== 'NoSuchBucket' && s3Status(error) === 404);
}

export function missing(bucket: string, key: string): StreamStackError {
  return new StreamStackError('IO', `cannot read ${key} of bucket ${bucket}: no such object (ENOENT)`, {
    details: { errno: 'ENOENT', bucket, key },
  });
}

/** A read the object ended before (or ran past): `CORRUPT`, as a short local file is. */
export function objectShort(bucket: string, key: string, what: string, offset: number): StreamStackError {
  return new StreamStackError('CORRUPT', `${key} of bucket ${bucket} ${what}`, { details: { bucket, key, offset } });
}

/**
 * An S3 failure as a typed error, the SDK's error as its cause. Credentials never appear: the
 * SDK's errors carry the request's status, code and ids, not its signature.
 */
export function objectError(cause: unknown, bucket: string, key: string, what: Action): StreamStackError {
  if (cause instanceof StreamStackError) return cause;
  const status = s3Status(cause);
  const code = s3Code(cause);
  const details = {
    bucket,
    key,
    ...(code === undefined ? {} : { s3Code: code }),
    ...(status === undefined ? {} : { status }),
  };
  const doing = `cannot ${what} ${key} of bucket ${bucket}`;
  if (isMissingKey(cause))
    return new StreamStackError('IO', `${doing}: no such object (ENOENT)`, {
      cause,
      details: { ...details, errno: 'ENOENT' },
    });
  if (code === 'InvalidRange' || status === 416)
    return new StreamStackError('CORRUPT', `${doing}: the range is past the object's end`, { cause, details });
  if (status === 401 || status === 403)
    return new StreamStackError('IO', `${doing}: the object store refused the credentials or the request (EACCES)`, {
      cause,
      details: { ...details, errno: 'EACCES' },
    });
  // No status: the request never got an answer (refused or dropped connection, timeout). A 5xx
  // (or a throttling 429): the service failed. Both are worth trying again later.
  if (status === undefined || status >= 500 || status === 429) {
    const reason = cause instanceof Error ? cause.message || cause.name : String(cause);
    return new StreamStackError('UNAVAILABLE', `${doing}: the object store is unavailable (${reason})`, {
      cause,
      details: {
        ...details,
        ...(typeof (cause as NodeJS.ErrnoException)?.code === 'string'
          ? { errno: (cause as NodeJS.ErrnoException).code }
          : {}),
      },
    });
  }
  const reason = cause instanceof Error ? cause.message || code : String(cause);
  return new StreamStackError('IO', `${doing}: ${reason}`, { cause, details });
}
