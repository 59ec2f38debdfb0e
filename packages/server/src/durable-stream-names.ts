/**
 * Durable Streams names as feed names, and back (docs/http.md, Durable Streams compatibility).
 *
 * A stream name is any non-empty, well-formed string: the decoded URL path after
 * `/ds/v1/stream/`. A feed name is 1 to 128 characters of `A-Z a-z 0-9 . _ -` starting with a
 * letter or digit. A stream's feed is `ds.` followed by the name's UTF-8 bytes, each byte of
 * `A-Z a-z 0-9 . -` written as itself and every other byte (`_` included) as `_` and two
 * lowercase hex digits. `_` never stands for itself, so every feed name decodes one way, and
 * only a canonical encoding decodes at all: the two functions are inverse on their domains.
 *
 * Sizes: a byte takes one to three characters, and the prefix three of the 128, so every name
 * of at most 41 UTF-8 bytes has a feed, a name of plain `A-Z a-z 0-9 . -` one of up to 125
 * characters, and a longer name is refused with `INVALID_NAME` (the mapping stays reversible
 * rather than hashing long names).
 *
 * @example
 * streamFeedName('orders/eu-1');  // 'ds.orders_2feu-1'
 * feedStreamName('ds.orders_2feu-1'); // 'orders/eu-1'
 * feedStreamName('orders');          // undefined: not a stream's feed
 */
import { limits, StreamStackError } from '@streamstack/engine';

/** Every stream's feed name starts with this; feeds named so are the compatibility route's. */
export const streamFeedPrefix = 'ds.';

/** The longest encoding after the prefix. */
export const streamNameEncodedMax = limits.feedNameCharactersMax - streamFeedPrefix.length;

/** Bytes a stream name may always have, whatever they are: each takes at most three characters. */
export const streamNameBytesAlwaysFit = Math.floor(streamNameEncodedMax / 3);

const escapeMark = '_';
const encoder = new TextEncoder();
/** Keeps a leading byte-order mark: it is part of the name, and dropping it would merge two streams. */
const strictDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Bytes written as themselves: `A-Z a-z 0-9 . -`. */
function isPlain(byte: number): boolean {
  return (
    (byte >= 0x30 && byte <= 0x39) ||
    (byte >= 0x41 && byte <= 0x5a) ||
    (byte >= 0x61 && byte <= 0x7a) ||
    byte === 0x2e ||
    byte === 0x2d
  );
}

/** The feed that holds stream `name`; `INVALID_NAME` for an empty, malformed or too long name. */
export function streamFeedName(name: string): string {
  if (typeof name !== 'string' || name.length === 0) {
    throw new StreamStackError('INVALID_NAME', 'a stream name is a non-empty string', { details: { stream: name } });
  }
  // A lone surrogate has no UTF-8 form: it would be stored as U+FFFD and come back different.
  if (!name.isWellFormed()) {
    throw new StreamStackError('INVALID_NAME', 'a stream name must be well-formed UTF-16 (it has a lone surrogate)', {
      details: { stream: name },
    });
  }
  let encoded = '';
  for (const byte of encoder.encode(name)) {
    encoded += isPlain(byte) ? String.fromCharCode(byte) : escapeMark + byte.toString(16).padStart(2, '0');
    if (encoded.length > streamNameEncodedMax) {
      throw new StreamStackError(
        'INVALID_NAME',
        `stream name is too long: its feed name would pass ${limits.feedNameCharactersMax} characters ` +
          `(every name of up to ${streamNameBytesAlwaysFit} UTF-8 bytes fits)`,
        { details: { stream: name, max: streamNameEncodedMax } },
      );
    }
  }
  return streamFeedPrefix + encoded;
}

/**
 * The stream name a feed name stands for, or undefined when the feed is not a stream's: outside
 * the `ds.` namespace, or not the canonical encoding of any name.
 */
export function feedStreamName(feed: string): string | undefined {
  if (!feed.startsWith(streamFeedPrefix) || feed.length === streamFeedPrefix.length) return undefined;
  const encoded = feed.slice(streamFeedPrefix.length);
  const bytes: number[] = [];
  for (let i = 0; i < encoded.length; i++) {
    const code = encoded.charCodeAt(i);
    if (code === 0x5f) {
      const hex = encoded.slice(i + 1, i + 3);
      if (!/^[0-9a-f]{2}$/.test(hex)) return undefined;
      const byte = Number.parseInt(hex, 16);
      // A plain byte written escaped is not canonical: two feeds would name one stream.
      if (isPlain(byte)) return undefined;
      bytes.push(byte);
      i += 2;
    } else if (code < 0x80 && isPlain(code)) {
      bytes.push(code);
    } else {
      return undefined;
    }
  }
  try {
    return strictDecoder.decode(new Uint8Array(bytes));
  } catch {
    return undefined;
  }
}

/**
 * True for a name under `__ds`, which the protocol reserves for its control APIs
 * (routes-durable-subscriptions.ts): no stream is named so.
 */
export function isReservedName(name: string): boolean {
  return name === '__ds' || name.startsWith('__ds/');
}
