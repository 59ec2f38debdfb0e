/**
 * A stream's bytes as records and back (docs/http.md, Durable Streams compatibility).
 *
 * Byte streams (every type but `application/json`): an append's body is stored as records of
 * at most `dsRecordBytesMax` bytes each, in order, and a read returns the records' payloads
 * back to back, so the bytes come back exactly as they went in.
 *
 * JSON streams: an append's body must be JSON; an array is flattened one level (each element is
 * a message), any other value is one message; an empty array is refused on append and creates
 * an empty stream on PUT. Each message is stored as one record holding its JSON text
 * (re-serialised, so insignificant whitespace goes), and a read returns `[` the messages `]`.
 *
 * SSE sends text streams' data as text and every other type base64-encoded, each line of the
 * payload on its own `data:` line, so no payload can end an event or start one.
 */
import { type AppendRecord, StreamStackError } from '@streamstack/engine';
import { isJsonType, isTextType } from './durable-stream-protocol.js';

/**
 * Bytes of a byte stream's record at most: a large body becomes several records of one commit,
 * so no single record nears the engine's limit (a quarter of a segment) and a read's budget is
 * reached in steps of this size.
 */
export const dsRecordBytesMax = 1024 * 1024;

/** The records one append (or a PUT's body) stores; none for an empty body or a JSON `[]`. */
export function recordsOfBody(contentType: string, body: Buffer, forCreate: boolean): AppendRecord[] {
  // No body at all: a create without initial data (an append without one is refused before).
  if (body.length === 0) return [];
  if (!isJsonType(contentType)) {
    const records: AppendRecord[] = [];
    for (let start = 0; start < body.length; start += dsRecordBytesMax)
      records.push({ payload: body.subarray(start, start + dsRecordBytesMax) });
    return records;
  }
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (error) {
    throw new StreamStackError('INVALID_RECORD', `the body is not valid JSON: ${(error as Error).message}`, {
      details: { field: 'body' },
    });
  }
  if (!Array.isArray(value)) return [{ payload: JSON.stringify(value) }];
  if (value.length === 0 && !forCreate) {
    throw new StreamStackError('INVALID_RECORD', 'an append of an empty JSON array adds nothing: it is refused', {
      details: { field: 'body' },
    });
  }
  return value.map((message) => ({ payload: JSON.stringify(message) }));
}

/** The body of a read: the payloads back to back, or for JSON a JSON array of the messages. */
export function readBody(contentType: string, payloads: readonly Uint8Array[]): Buffer {
  if (!isJsonType(contentType)) return Buffer.concat(payloads);
  const parts: Buffer[] = [Buffer.from('[')];
  payloads.forEach((payload, index) => {
    if (index > 0) parts.push(Buffer.from(','));
    parts.push(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength));
  });
  parts.push(Buffer.from(']'));
  return Buffer.concat(parts);
}

/** One SSE `data` event holding `payloads`: text for text streams, base64 for the rest. */
export function sseDataEvent(contentType: string, payloads: readonly Uint8Array[]): string {
  const body = readBody(contentType, payloads);
  const text = isTextType(contentType) ? body.toString('utf8') : body.toString('base64');
  // CR, LF and CRLF all end an SSE line: each line of the payload gets its own `data:` line.
  return `event: data\n${text
    .split(/\r\n|\r|\n/)
    .map((line) => `data:${line}`)
    .join('\n')}\n\n`;
}

/** One SSE `control` event. */
export function sseControlEvent(control: Record<string, unknown>): string {
  return `event: control\ndata:${JSON.stringify(control)}\n\n`;
}
