/**
 * The bounds the HTTP server enforces on its own, beside the engine's (`limits.ts` there), each
 * with its unit last and the reason for it.
 */

/**
 * Longest segment of an export name, in characters: most file systems refuse a name past 255
 * bytes (NAME_MAX), and the name's characters are ASCII, so one character is one byte. A longer
 * segment is refused as bad input before the file system answers it with an I/O error.
 */
export const exportSegmentCharactersMax = 255;

/**
 * Longest export name, in characters: the directory is created under the export directory, and
 * a path past 1,024 bytes nears PATH_MAX (4,096 on Linux, 1,024 on macOS) once the export
 * directory's own path is in front of it.
 */
export const exportNameCharactersMax = 1024;

/**
 * NDJSON request-body bytes parsed at once across all requests, at least one body limit: each
 * body in flight holds its parsed records (about its own size for large records, bounded by the
 * batch limit for tiny ones), so this bounds what concurrent large bodies cost together, where
 * four 60 MB bodies of tiny lines took 750 MB before bodies were parsed as streams.
 */
export const ndjsonBodyBytesInFlightMax = 256 * 1024 * 1024;

/**
 * Longest wait for room among the bodies in flight, in milliseconds, before a request is
 * answered 503 `UNAVAILABLE` with `Retry-After`: long enough for a large body or two ahead of
 * it to be parsed, short enough that a client hears back before its own timeouts.
 */
export const ndjsonBodyWaitMsMax = 10_000;

/** Seconds a request refused for want of room among the bodies in flight is told to wait. */
export const ndjsonBodyRetryAfterSeconds = 1;
