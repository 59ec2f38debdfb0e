/**
 * The Durable Streams protocol's vocabulary on the compatibility route (docs/http.md): header
 * names, offsets, content types, the TTL and expiry headers, `Stream-Closed`, and the
 * interval cursor that keeps CDN caches from looping. Every malformed value is refused with
 * `INVALID_ARGUMENT` naming the header or parameter.
 *
 * Offsets are commit cursors: `Stream-Next-Offset` is the number of the last commit that holds
 * data at or before the point reached, zero-padded to 16 digits, then `_` and 16 zeros
 * (`0000000000000000_0000000000000000` is the start). The second part would name a point
 * inside a commit; every append is one commit and a read returns whole commits, so an offset
 * never falls inside one and the part is always zero. Commits that hold no data (a close, an
 * empty create) never become an offset, so closing leaves the tail offset as it was. Sixteen
 * digits hold every safe integer, so the offsets sort as strings in commit order, and never
 * read `-1` or `now`. The 16-digit offsets of earlier releases (the first part alone) are still
 * taken, so a client's stored offset stays valid.
 */
import { StreamStackError } from '@streamstack/engine';
import type { QueryParams } from './request-params.js';

/** Request and response headers, lower-case as Node gives them. */
export const dsHeader = {
  nextOffset: 'stream-next-offset',
  cursor: 'stream-cursor',
  upToDate: 'stream-up-to-date',
  closed: 'stream-closed',
  seq: 'stream-seq',
  ttl: 'stream-ttl',
  expiresAt: 'stream-expires-at',
  producerId: 'producer-id',
  producerEpoch: 'producer-epoch',
  producerSeq: 'producer-seq',
  producerExpectedSeq: 'producer-expected-seq',
  producerReceivedSeq: 'producer-received-seq',
  sseDataEncoding: 'stream-sse-data-encoding',
} as const;

type Headers = Record<string, string | string[] | undefined>;

/** Digits of each part of an offset: enough for every safe integer, so string order is commit order. */
export const offsetDigits = 16;

/** The second part of every offset this server returns (see above). */
const offsetSubPart = '0'.repeat(offsetDigits);

/** The offset of the point just after commit `commit` (0: the start of the stream). */
export function offsetOf(commit: number): string {
  return `${String(commit).padStart(offsetDigits, '0')}_${offsetSubPart}`;
}

const offsetPattern = new RegExp(`^(\\d{${offsetDigits}})(?:_(\\d{${offsetDigits}}))?$`);

/**
 * The commit an offset stands after; `INVALID_ARGUMENT` naming `where` (a parameter or a header)
 * for anything but an offset this server returns (or an earlier release's 16-digit one).
 */
export function commitOfOffset(value: string, where: { parameter: string } | { header: string }): number {
  const match = offsetPattern.exec(value);
  const commit = match ? Number(match[1]) : Number.NaN;
  if (!match || !Number.isSafeInteger(commit)) {
    throw invalid(
      `${Object.values(where)[0]} must be an offset this server returned (${offsetDigits} digits, _, ${offsetDigits} digits)`,
      {
        ...where,
        value,
      },
    );
  }
  if (match[2] !== undefined && match[2] !== offsetSubPart) {
    throw invalid(`offset ${value} names a point inside a commit, which this server never returns`, {
      ...where,
      value,
    });
  }
  return commit;
}

/** Where a read starts: the stream's start (`-1` or no offset), its tail (`now`), or after a commit. */
export type ReadStart =
  | { readonly kind: 'start' }
  | { readonly kind: 'now' }
  | { readonly kind: 'after'; readonly commit: number };

/** The `offset` parameter; undefined when there is none. */
export function readStartOf(query: QueryParams): ReadStart | undefined {
  const value = query.offset;
  if (value === undefined) return undefined;
  if (Array.isArray(value)) throw invalid('offset is given more than once', { parameter: 'offset' });
  if (value === '-1') return { kind: 'start' };
  if (value === 'now') return { kind: 'now' };
  return { kind: 'after', commit: commitOfOffset(value, { parameter: 'offset' }) };
}

/** The media type of a Content-Type, lower-case and without parameters: what streams are matched on. */
export function mediaTypeOf(contentType: string): string {
  return contentType.split(';')[0]!.trim().toLowerCase();
}

/** JSON mode (docs/http.md): each message is one JSON value, reads are arrays of them. */
export function isJsonType(contentType: string): boolean {
  return mediaTypeOf(contentType) === 'application/json';
}

/** Streams SSE sends as text; every other type is sent base64-encoded. */
export function isTextType(contentType: string): boolean {
  const media = mediaTypeOf(contentType);
  return media.startsWith('text/') || media === 'application/json';
}

/** Longest Content-Type a stream keeps: it is stored in the stream's first commit message. */
export const contentTypeCharactersMax = 256;

const mediaTypePattern = /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*$/;

/** The request's Content-Type, checked; undefined when absent or empty. */
export function contentTypeOf(headers: Headers): string | undefined {
  const value = headers['content-type'];
  if (Array.isArray(value)) throw invalid('Content-Type is given more than once', { header: 'Content-Type' });
  if (value === undefined || value.trim() === '') return undefined;
  const trimmed = value.trim();
  if (trimmed.length > contentTypeCharactersMax || !mediaTypePattern.test(mediaTypeOf(trimmed))) {
    throw invalid('Content-Type must be a media type (type/subtype)', {
      header: 'Content-Type',
      value: trimmed.slice(0, contentTypeCharactersMax),
    });
  }
  return trimmed;
}

/** A single header value, or undefined; a repeated header is refused. */
export function singleHeader(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  if (Array.isArray(value)) throw invalid(`${name} is given more than once`, { header: name });
  return value;
}

/**
 * `Stream-Closed: true` (any case). Every other value counts as absent, as the protocol says: a
 * client that sends `false` is not refused.
 */
export function closedFlagOf(headers: Headers): boolean {
  return singleHeader(headers, dsHeader.closed)?.trim().toLowerCase() === 'true';
}

/** Decimal without a sign, a point, an exponent or leading zeros: the protocol's integers. */
export const protocolIntegerPattern = /^(0|[1-9][0-9]*)$/;

/** A protocol integer header (`Stream-TTL`, `Producer-Epoch`, `Producer-Seq`), at most 2^53 - 1. */
export function protocolInteger(text: string, header: string): number {
  const value = Number(text);
  if (!protocolIntegerPattern.test(text) || !Number.isSafeInteger(value)) {
    throw invalid(`${header} must be a non-negative decimal integer without sign or leading zeros, at most 2^53 - 1`, {
      header,
      value: text,
    });
  }
  return value;
}

const rfc3339Pattern = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/** Milliseconds since the epoch of an RFC 3339 timestamp (`Stream-Expires-At`). */
export function rfc3339Millis(text: string, header: string): number {
  const upper = text.trim().toUpperCase();
  const millis = rfc3339Pattern.test(upper) ? Date.parse(upper) : Number.NaN;
  if (!Number.isFinite(millis)) throw invalid(`${header} must be an RFC 3339 timestamp`, { header, value: text });
  return millis;
}

/** The lifetime a PUT asks for: a sliding TTL in seconds, or an absolute expiry. */
export interface Lifetime {
  readonly ttlSeconds?: number;
  readonly expiresAt?: string;
}

/** `Stream-TTL` and `Stream-Expires-At`; both at once is refused, as the protocol recommends. */
export function lifetimeOf(headers: Headers): Lifetime {
  const ttl = singleHeader(headers, dsHeader.ttl);
  const expiresAt = singleHeader(headers, dsHeader.expiresAt);
  if (ttl !== undefined && expiresAt !== undefined) {
    throw invalid('give Stream-TTL or Stream-Expires-At, not both', { header: 'Stream-TTL' });
  }
  if (ttl !== undefined) return { ttlSeconds: protocolInteger(ttl, 'Stream-TTL') };
  if (expiresAt !== undefined)
    return { expiresAt: new Date(rfc3339Millis(expiresAt, 'Stream-Expires-At')).toISOString() };
  return {};
}

/** What a PUT's fork headers ask for (docs/http.md, forks on the compatibility route). */
export interface ForkRequest {
  /** The source stream's name. */
  readonly source: string;
  /** The commit the fork inherits through (`Stream-Fork-Offset`); undefined: the source's tail. */
  readonly offset: number | undefined;
  /** Bytes (JSON: messages) of the source's next data commit inherited too; 0: none. */
  readonly subOffset: number;
}

/** The roots a `Stream-Forked-From` path may start with: the route's full path, or the path relative to `/ds`. */
const forkSourceRoots = ['/ds/v1/stream/', '/v1/stream/'];

/**
 * The fork a PUT asks for, or undefined for a plain creation. `Stream-Forked-From` is the
 * source's path on this server; the offset and sub-offset need it, and a sub-offset past 0
 * needs an offset to count from.
 */
export function forkRequestOf(headers: Headers): ForkRequest | undefined {
  const from = singleHeader(headers, 'stream-forked-from');
  const offset = singleHeader(headers, 'stream-fork-offset');
  const sub = singleHeader(headers, 'stream-fork-sub-offset');
  if (from === undefined) {
    if (offset !== undefined || sub !== undefined) {
      throw invalid('Stream-Fork-Offset and Stream-Fork-Sub-Offset are only for a fork: they need Stream-Forked-From', {
        header: offset === undefined ? 'Stream-Fork-Sub-Offset' : 'Stream-Fork-Offset',
      });
    }
    return undefined;
  }
  const subOffset = sub === undefined ? 0 : protocolInteger(sub.trim(), 'Stream-Fork-Sub-Offset');
  if (subOffset > 0 && offset === undefined) {
    throw invalid('Stream-Fork-Sub-Offset counts from Stream-Fork-Offset: give both', {
      header: 'Stream-Fork-Sub-Offset',
    });
  }
  return {
    source: forkSourceName(from.trim()),
    offset: offset === undefined ? undefined : commitOfOffset(offset.trim(), { header: 'Stream-Fork-Offset' }),
    subOffset,
  };
}

/** The stream a `Stream-Forked-From` path names (percent-decoded, as the route's own paths are). */
function forkSourceName(path: string): string {
  const root = forkSourceRoots.find((candidate) => path.startsWith(candidate));
  const encoded = root === undefined ? '' : path.slice(root.length).split('?')[0]!;
  let name = '';
  try {
    name = decodeURIComponent(encoded);
  } catch {
    // A malformed escape is refused below, as a path that names no stream.
  }
  if (name.length === 0) {
    throw invalid(
      `Stream-Forked-From must be a stream's path on this server (${forkSourceRoots.join('{name} or ')}{name})`,
      {
        header: 'Stream-Forked-From',
        value: path.slice(0, contentTypeCharactersMax),
      },
    );
  }
  return name;
}

/** The protocol's cursor epoch (2024-10-09T00:00:00Z) and interval: cursors count intervals. */
const cursorEpochMs = Date.UTC(2024, 9, 9);
const cursorIntervalMs = 20_000;
/** A client's cursor that is not behind moves on by 1 to 3,600 seconds of jitter. */
const cursorJitterSecondsMax = 3600;

/**
 * The `Stream-Cursor` of a live response: the current interval, or, when the client's cursor is
 * not behind it, that cursor moved on by a random jitter, so cursors only grow and a cached
 * empty answer is never served to the same URL forever. A cursor that is no number is ignored.
 */
export function responseCursor(
  clientCursor: string | undefined,
  now: number,
  random: () => number = Math.random,
): string {
  const current = Math.floor((now - cursorEpochMs) / cursorIntervalMs);
  const given = clientCursor !== undefined && /^\d{1,15}$/.test(clientCursor) ? Number(clientCursor) : undefined;
  if (given === undefined || given < current) return String(current);
  const jitterSeconds = 1 + Math.floor(random() * cursorJitterSecondsMax);
  return String(given + Math.max(1, Math.ceil((jitterSeconds * 1000) / cursorIntervalMs)));
}

function invalid(message: string, details: Record<string, unknown>): StreamStackError {
  return new StreamStackError('INVALID_ARGUMENT', message, { details });
}
