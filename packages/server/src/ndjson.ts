/**
 * NDJSON in and out. A request body is parsed into records with the record line format (so
 * input errors name the line); a response streams lines from an async iterable, pulling the
 * first before any byte is sent, so an error the engine raises at once still gets its status.
 * An error after the first line ends the body with an error line, `{"error": {…}}`, since the
 * status is sent by then: a reader must treat such a line as the failure it is.
 */
import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { parseLine, readRecordLines, StreamStackError, type AppendRecord } from '@streamstack/engine';
import { errorBody, typedRequestError } from './http-errors.js';

export const ndjsonType = 'application/x-ndjson';

/** The types an NDJSON request body may come as: NDJSON's own, and JSON Lines' (the same lines). */
export const ndjsonTypes = [ndjsonType, 'application/jsonl'];

/**
 * Fatal, as the engine's line reader decodes: a replacement character would change the bytes.
 * Byte-order marks are kept here and dropped line by line below, as the engine does.
 */
const bodyDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The records of an NDJSON request body, which fastify hands over whole: decoded once and split
 * into lines, where the engine's `readRecordLines` (made for streams) copies and decodes each
 * line on its own through an async generator, at 2.5 times the cost (0.75 ms against 0.3 ms for
 * 100 records, a tenth of what the server spends on such a request). Same result, line numbers
 * and errors: a body that is not UTF-8 goes through
 * `readRecordLines`, which names the line; each line, like there, loses a trailing CR and a
 * leading byte-order mark.
 */
export async function recordsOfBody(body: Buffer): Promise<AppendRecord[]> {
  let text: string;
  try {
    text = bodyDecoder.decode(body);
  } catch {
    return readRecordLines([body]);
  }
  const records: AppendRecord[] = [];
  let number = 0;
  for (let start = 0; start < text.length; ) {
    const newline = text.indexOf('\n', start);
    const end = newline === -1 ? text.length : newline;
    const line = text.slice(text.charCodeAt(start) === 0xfeff ? start + 1 : start, end > start && text.charCodeAt(end - 1) === 0x0d ? end - 1 : end);
    number++;
    const record = parseLine(line, number);
    if (record) records.push(record);
    start = end + 1;
  }
  return records;
}

/** Sends each value of `lines` as one line, after its first value (or its first error). */
export async function sendLines(reply: FastifyReply, lines: AsyncIterable<unknown> | Iterable<unknown>): Promise<FastifyReply> {
  const iterator = (Symbol.asyncIterator in lines ? lines[Symbol.asyncIterator]() : (lines as Iterable<unknown>)[Symbol.iterator]()) as AsyncIterator<unknown>;
  const first = await iterator.next();
  async function* text(): AsyncGenerator<string> {
    try {
      for (let next = first; !next.done; next = await iterator.next()) yield `${JSON.stringify(next.value)}\n`;
    } catch (error) {
      const typed = error instanceof StreamStackError ? error : typedRequestError(error);
      yield `${JSON.stringify(errorBody(typed))}\n`;
    } finally {
      await iterator.return?.();
    }
  }
  return reply.type(ndjsonType).send(Readable.from(text(), { objectMode: false }));
}
