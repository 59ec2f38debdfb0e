/** The request headers the routes read, for their schemas and for error messages that name them. */

/**
 * Headers the routes read, by their canonical names; each is a string on the wire and parsed
 * by the route, so that a malformed value gets the route's own typed error.
 */
export const headerDescriptions = {
  'SS-Fencing-Token': 'the lease token (POST …/lease answers it)',
  'SS-Expected-Seq': 'the seq the batch’s first record must get (SEQ_MISMATCH otherwise): makes a retried append safe',
  'Last-Event-ID': 'with Accept: text/event-stream, resume after this commit (a reconnect); wins over `after`',
  'Stream-TTL': 'seconds the stream lives after its last read or write (not with Stream-Expires-At)',
  'Stream-Expires-At': 'when the stream expires, an RFC 3339 time (not with Stream-TTL)',
  'Stream-Closed': '`true` closes the stream (with this request’s data, if any)',
  'Stream-Seq': 'a writer sequence that must grow byte by byte from append to append (409 SEQ_MISMATCH otherwise)',
  'Producer-Id': 'an idempotent producer’s id (with Producer-Epoch and Producer-Seq)',
  'Producer-Epoch': 'the producer’s epoch, a non-negative integer',
  'Producer-Seq': 'the producer’s seq in its epoch, a non-negative integer from 0',
  'If-None-Match': 'an ETag of an earlier read: 304 when the answer would be the same',
  'Stream-Forked-From':
    'creates a fork of the stream at this path (/ds/v1/stream/{name}, or /v1/stream/{name} relative to /ds)',
  'Stream-Fork-Offset': "the source's offset the fork inherits through (default: its tail)",
  'Stream-Fork-Sub-Offset': "bytes (JSON: messages) of the source's next append the fork inherits too (default 0)",
} as const;

export type HeaderName = keyof typeof headerDescriptions;

/** The canonical name of a header given in lower case (fastify's keys), for error messages. */
export function canonicalHeaderName(name: string): string {
  return (
    (Object.keys(headerDescriptions) as string[]).find((canonical) => canonical.toLowerCase() === name.toLowerCase()) ??
    name
  );
}
