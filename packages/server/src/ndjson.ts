/**
 * NDJSON in and out. A request body is parsed into records with the record line format (so
 * input errors name the line); a response streams lines from an async iterable, pulling the
 * first before any byte is sent, so an error the engine raises at once still gets its status.
 * An error after the first line ends the body with an error line, `{"error": {…}}`, since the
 * status is sent by then: a reader must treat such a line as the failure it is.
 */
import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { StreamStackError } from '@streamstack/engine';
import { errorBody, typedRequestError } from './http-errors.js';

export const ndjsonType = 'application/x-ndjson';

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
