/**
 * What a Durable Streams fork inherits (docs/http.md, forks on the compatibility route): its
 * configuration from the request and its source (the Content-Type and the lifetime when the
 * request leaves them out), the point it is forked at, and the records a sub-offset carries
 * over from the source's next data commit.
 *
 * A fork is the source's feed forked at a commit (`store.forkFeed`, sharing its sealed history),
 * then one commit of its own: its `create`, holding the sub-offset's part of the source's next
 * commit and the PUT's body. So offsets of the source up to the fork point are the fork's too.
 */
import { type AppendRecord, StreamStackError } from '@streamstack/engine';
import type { ForkRequest, Lifetime } from './durable-stream-protocol.js';
import { isJsonType, mediaTypeOf, offsetOf } from './durable-stream-protocol.js';
import { decodeCommitMeta, emptyRecordType, type StreamConfig, type StreamState } from './durable-stream-state.js';

/**
 * The configuration of a fork of `source`: the Content-Type asked for must be the source's
 * (`CONTENT_TYPE_MISMATCH`), and is the source's when left out; a fork asking for no lifetime
 * takes the source's TTL or expiry; the offset left out is the source's tail, and one past it
 * is refused.
 */
export function forkConfig(
  source: StreamState,
  request: { readonly contentType: string | undefined; readonly lifetime: Lifetime; readonly fork: ForkRequest },
): StreamConfig {
  const { contentType, lifetime, fork } = request;
  if (contentType !== undefined && mediaTypeOf(contentType) !== mediaTypeOf(source.config.contentType)) {
    throw new StreamStackError(
      'CONTENT_TYPE_MISMATCH',
      `stream ${source.name} holds ${source.config.contentType}: a fork of it cannot hold ${contentType}`,
      { details: { stream: source.name, contentType: source.config.contentType, received: contentType } },
    );
  }
  const offset = fork.offset ?? source.lastDataCommit;
  if (offset > source.lastDataCommit) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `Stream-Fork-Offset ${offsetOf(offset)} lies beyond the tail of stream ${source.name}`,
      { details: { header: 'Stream-Fork-Offset', value: offsetOf(offset), tail: offsetOf(source.lastDataCommit) } },
    );
  }
  const ownLifetime = lifetime.ttlSeconds !== undefined || lifetime.expiresAt !== undefined;
  const { ttlSeconds, expiresAt } = ownLifetime ? lifetime : source.config;
  return {
    contentType: contentType ?? source.config.contentType,
    ...(ttlSeconds === undefined ? {} : { ttlSeconds }),
    ...(expiresAt === undefined ? {} : { expiresAt }),
    fork: { stream: source.name, offset, subOffset: fork.subOffset },
  };
}

/**
 * Checks that the fork point names data of `source` (or its start): an offset this server
 * returned is never a commit without data, so one that is was made up (`INVALID_ARGUMENT`).
 */
export async function checkForkPoint(source: StreamState, offset: number): Promise<void> {
  if (offset === 0) return;
  for await (const commit of source.feed.commits({ after: offset - 1, limit: 1 })) {
    if (!decodeCommitMeta(commit.message).empty) return;
  }
  throw new StreamStackError(
    'INVALID_ARGUMENT',
    `Stream-Fork-Offset ${offsetOf(offset)} is no offset of stream ${source.name}`,
    {
      details: { header: 'Stream-Fork-Offset', value: offsetOf(offset) },
    },
  );
}

/**
 * The records a sub-offset inherits: the first `subOffset` bytes (JSON: messages) of the
 * source's first data commit after `offset`. A sub-offset past that commit's data, or with no
 * data after the offset to count into, is refused (`INVALID_ARGUMENT`).
 */
export async function subOffsetRecords(
  source: StreamState,
  offset: number,
  subOffset: number,
): Promise<AppendRecord[]> {
  if (subOffset === 0) return [];
  let payloads: Uint8Array[] | undefined;
  for await (const commit of source.feed.commits({ after: offset })) {
    if (decodeCommitMeta(commit.message).empty) continue;
    payloads = (await source.feed.readCommit(commit.commit))
      .filter((record) => record.type !== emptyRecordType)
      .map((record) => record.payload);
    break;
  }
  const json = isJsonType(source.config.contentType);
  const available =
    payloads === undefined ? 0 : json ? payloads.length : payloads.reduce((sum, p) => sum + p.length, 0);
  if (payloads === undefined || subOffset > available) {
    const unit = json ? 'messages' : 'bytes';
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `Stream-Fork-Sub-Offset ${subOffset} passes the ${available} ${unit} of the data after Stream-Fork-Offset ${offsetOf(offset)}`,
      { details: { header: 'Stream-Fork-Sub-Offset', value: subOffset, max: available } },
    );
  }
  if (json) return payloads.slice(0, subOffset).map((payload) => ({ payload }));
  const records: AppendRecord[] = [];
  let left = subOffset;
  for (const payload of payloads) {
    if (left === 0) break;
    const taken = payload.subarray(0, Math.min(left, payload.length));
    records.push({ payload: taken });
    left -= taken.length;
  }
  return records;
}

/** True when a fork asked for now is the fork that `config` describes (an idempotent re-creation). */
export function sameFork(config: StreamConfig, asked: StreamConfig): boolean {
  const { fork } = config;
  const other = asked.fork;
  if (fork === undefined || other === undefined) return fork === other;
  return fork.stream === other.stream && fork.offset === other.offset && fork.subOffset === other.subOffset;
}
