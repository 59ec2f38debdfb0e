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
 * Request-body bytes read at once across all requests (NDJSON and Durable Stream bodies), at
 * least one body limit; the default of ServerOptions.bodyBytesInFlightMax. Each body in flight
 * holds its parsed records or its bytes (about its own size, bounded by the batch limit for
 * tiny records), so this bounds what concurrent large bodies cost together, where four 60 MB
 * bodies of tiny lines took 750 MB before bodies were parsed as streams.
 */
export const bodyBytesInFlightMaxDefault = 256 * 1024 * 1024;

/**
 * Longest wait for room among the bodies in flight, in milliseconds (the default of
 * ServerOptions.bodyWaitMs), before a request is answered 503 `UNAVAILABLE` with `Retry-After`:
 * long enough for a large body or two ahead of it to be read, short enough that a client hears
 * back before its own timeouts.
 */
export const bodyWaitMsMaxDefault = 10_000;

/** Seconds a request refused for want of room among the bodies in flight is told to wait. */
export const bodyRetryAfterSeconds = 1;

/**
 * Bytes of a feed's history tail one answer may be asked for (`bytesMax`): a follower asks for
 * less (`followerTailBytesMax`); the bound keeps one request's buffer bounded whatever it asks.
 */
export const tailBytesMax = 64 * 1024 * 1024;

/** Milliseconds a request for a feed's history tail may wait for a group (its long poll). */
export const tailWaitMsMax = 30_000;

/**
 * A Durable Streams subscription's lease, in milliseconds: the protocol's bounds (1 s to 10 min)
 * and default (30 s). It bounds how long a worker that went silent holds a wake.
 */
export const subscriptionLeaseMsMin = 1_000;
export const subscriptionLeaseMsMax = 600_000;
export const subscriptionLeaseMsDefault = 30_000;

/**
 * Longest pattern, stream path and description of a subscription, in characters; and most
 * explicit streams one links. A subscription's whole state is written as one record on every
 * change, so these keep it small (about 1 MiB at worst).
 */
export const subscriptionTextCharactersMax = 1024;
export const subscriptionStreamsMax = 1024;

/**
 * The retry schedule of a failed webhook delivery, in milliseconds: the protocol's exponential
 * backoff from 1 s up to 60 s, each wait moved by up to 20% of jitter so that many failed
 * subscriptions do not retry in step.
 */
export const webhookRetryMsMin = 1_000;
export const webhookRetryMsMax = 60_000;
export const webhookRetryJitterRatio = 0.2;
