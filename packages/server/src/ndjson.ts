/**
 * NDJSON in and out. A request body is parsed into records with the record line format (so
 * input errors name the line) as it arrives, within a record and a byte bound; a response
 * streams lines from an async iterable, pulling the first before any byte is sent, so an error
 * the engine raises at once still gets its status.
 * An error after the first line ends the body with an error line, `{"error": {…}}`, since the
 * status is sent by then: a reader must treat such a line as the failure it is.
 */
import { Readable } from 'node:stream';
import { type AppendRecord, parseLine, StreamStackError } from '@streamstack/engine';
import type { FastifyReply } from 'fastify';
import { errorBody, typedRequestError } from './http-errors.js';

export const ndjsonType = 'application/x-ndjson';

/** The types an NDJSON request body may come as: NDJSON's own, and JSON Lines' (the same lines). */
export const ndjsonTypes = [ndjsonType, 'application/jsonl'];

/**
 * Fatal, as the engine's line reader decodes: a replacement character would change the bytes.
 * Byte-order marks are kept here and dropped line by line below, as the engine does.
 */
const bodyDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Decodes one line as the engine does (a leading byte-order mark goes), naming it when it is not UTF-8. */
const lineDecoder = new TextDecoder('utf-8', { fatal: true });

/** Bounds on one NDJSON body while it is read. */
export interface BodyBounds {
  /** Records at most: one more fails the body at once, with the engine's batch-limit error. */
  readonly recordsMax: number;
  /** Bytes at most: one more fails the body at once with `REQUEST_TOO_LARGE`. */
  readonly bytesMax: number;
}

const unbounded: BodyBounds = { recordsMax: Number.POSITIVE_INFINITY, bytesMax: Number.POSITIVE_INFINITY };

/**
 * Parses NDJSON record lines as they arrive, with the engine's line rules (each line loses a
 * trailing CR and a leading byte-order mark; blank lines are skipped; a bad line is named by its
 * number). Chunks are decoded whole up to their last newline (per line only when that fails, to
 * name the line), so a body of tiny lines costs its records and one chunk, not its whole text
 * at once, and reading stops as soon as a bound is passed.
 */
class RecordLineParser {
  readonly records: AppendRecord[] = [];
  private number = 0;
  private bytes = 0;
  /** The pieces of a line that has not ended yet. */
  private pending: Uint8Array[] = [];

  constructor(private readonly bounds: BodyBounds) {}

  push(chunk: Uint8Array): void {
    this.bytes += chunk.length;
    if (this.bytes > this.bounds.bytesMax) {
      throw new StreamStackError('REQUEST_TOO_LARGE', `the body is larger than ${this.bounds.bytesMax} bytes`, {
        details: { bytesMax: this.bounds.bytesMax },
      });
    }
    const last = chunk.lastIndexOf(0x0a);
    if (last === -1) {
      this.pending.push(chunk);
      return;
    }
    const lines =
      this.pending.length === 0
        ? chunk.subarray(0, last + 1)
        : Buffer.concat([...this.pending, chunk.subarray(0, last + 1)]);
    this.pending = last + 1 < chunk.length ? [chunk.subarray(last + 1)] : [];
    this.parse(lines);
  }

  end(): AppendRecord[] {
    if (this.pending.length > 0) this.parse(Buffer.concat(this.pending));
    this.pending = [];
    return this.records;
  }

  /** Parses whole lines (the last one may lack its newline only at the end of the body). */
  private parse(bytes: Uint8Array): void {
    let text: string;
    try {
      text = bodyDecoder.decode(bytes);
    } catch {
      this.parseLineByLine(bytes);
      return;
    }
    for (let start = 0; start < text.length; ) {
      const newline = text.indexOf('\n', start);
      const end = newline === -1 ? text.length : newline;
      const line = text.slice(
        text.charCodeAt(start) === 0xfeff ? start + 1 : start,
        end > start && text.charCodeAt(end - 1) === 0x0d ? end - 1 : end,
      );
      this.add(parseLine(line, ++this.number));
      start = end + 1;
    }
  }

  /** The slow path for bytes that are not all UTF-8: decodes each line, so the bad one is named. */
  private parseLineByLine(bytes: Uint8Array): void {
    for (let start = 0; start < bytes.length; ) {
      const newline = bytes.indexOf(0x0a, start);
      const end = newline === -1 ? bytes.length : newline;
      const line = bytes.subarray(start, end > start && bytes[end - 1] === 0x0d ? end - 1 : end);
      const number = ++this.number;
      let text: string;
      try {
        text = lineDecoder.decode(line);
      } catch (error) {
        throw new StreamStackError(
          'INVALID_RECORD',
          `input line ${number} is not valid UTF-8 (binary payloads go in payloadBase64)`,
          { cause: error, details: { line: number } },
        );
      }
      this.add(parseLine(text, number));
      start = end + 1;
    }
  }

  private add(record: AppendRecord | undefined): void {
    if (!record) return;
    if (this.records.length >= this.bounds.recordsMax) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `a batch holds 1 to ${this.bounds.recordsMax} records; this body has more (stopped at line ${this.number})`,
        {
          details: { recordsMax: this.bounds.recordsMax, line: this.number },
        },
      );
    }
    this.records.push(record);
  }
}

/** The records of a whole NDJSON body (as the stream parser reads it in one chunk). */
export async function recordsOfBody(body: Uint8Array, bounds: BodyBounds = unbounded): Promise<AppendRecord[]> {
  const parser = new RecordLineParser(bounds);
  parser.push(body);
  return parser.end();
}

/**
 * The records of an NDJSON body read from `input` as it arrives; the first bound passed fails
 * it at once. The stream is not destroyed on failure: the caller answers the error, and Node
 * discards what is left of the body.
 */
export async function recordsOfStream(input: Readable, bounds: BodyBounds): Promise<AppendRecord[]> {
  const parser = new RecordLineParser(bounds);
  await eachChunk(input, (chunk) => parser.push(chunk));
  return parser.end();
}

/**
 * Hands each chunk of a request body to `take` as it arrives; resolves once the body has ended.
 * Listeners, not an async iterator: the iterator's promises, listeners and end-of-stream
 * watcher cost a one-record append more than parsing its line. When `take` throws, reading
 * stops there and the request is paused, not destroyed (the answer still has to go out on its
 * socket; Node discards what is left of the body). A body cut short by its client is bad input
 * (400 `INVALID_ARGUMENT`), not an I/O failure of the server's.
 */
export function eachChunk(input: Readable, take: (chunk: Uint8Array) => void): Promise<void> {
  if (input.readableEnded) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const stop = () => {
      input.off('data', onData);
      input.off('end', onEnd);
      input.off('error', onError);
      input.off('close', onClose);
    };
    const aborted = (cause?: unknown) => {
      stop();
      reject(
        new StreamStackError('INVALID_ARGUMENT', 'the request body ended before its length', {
          ...(cause === undefined ? {} : { cause }),
          details: { reason: 'body-aborted' },
        }),
      );
    };
    const onData = (chunk: Uint8Array) => {
      try {
        take(chunk);
      } catch (error) {
        stop();
        input.pause();
        reject(error);
      }
    };
    const onEnd = () => {
      stop();
      resolve();
    };
    const onError = (error: unknown) => aborted(error);
    // A close before the end is a body its client cut short (an error may not come with it).
    const onClose = () => aborted();
    input.on('data', onData);
    input.once('end', onEnd);
    input.once('error', onError);
    input.once('close', onClose);
  });
}

/**
 * A whole body as one buffer (a Durable Stream's bytes), failing with `REQUEST_TOO_LARGE` as
 * soon as it passes `bytesMax`.
 */
export async function bytesOfStream(input: Readable, bytesMax: number): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  await eachChunk(input, (chunk) => {
    bytes += chunk.length;
    if (bytes > bytesMax)
      throw new StreamStackError('REQUEST_TOO_LARGE', `the body is larger than ${bytesMax} bytes`, {
        details: { bytesMax },
      });
    chunks.push(chunk);
  });
  return Buffer.concat(chunks, bytes);
}

/** Sends each value of `lines` as one line, after its first value (or its first error). */
export function sendLines(
  reply: FastifyReply,
  lines: AsyncIterable<unknown> | Iterable<unknown>,
): Promise<FastifyReply> {
  return sendBody(reply, lines, (value) => `${JSON.stringify(value)}\n`);
}

/**
 * Sends chunks of NDJSON lines as they are (a read's lines, made by the engine straight from its
 * columns: `feed.readLines`), after the first chunk (or the first error).
 */
export function sendLineChunks(reply: FastifyReply, chunks: AsyncIterable<Uint8Array>): Promise<FastifyReply> {
  return sendBody(reply, chunks, (chunk) => chunk);
}

/**
 * Sends what `encode` makes of each value of `values`. The first two values are pulled before any
 * byte is sent: a body of one value goes out whole, with its length, and an error the engine
 * raises at once still gets its status. An error after the first value ends the body with an
 * error line.
 */
async function sendBody<T>(
  reply: FastifyReply,
  values: AsyncIterable<T> | Iterable<T>,
  encode: (value: T) => string | Uint8Array,
): Promise<FastifyReply> {
  const iterator = (
    Symbol.asyncIterator in values ? values[Symbol.asyncIterator]() : (values as Iterable<T>)[Symbol.iterator]()
  ) as AsyncIterator<T>;
  const first = await iterator.next();
  if (first.done) return reply.type(ndjsonType).send('');
  // A body that ends within its first value (a tag query, one small commit) goes out whole,
  // with its length: streaming it cost the server a pipe and chunked framing per response,
  // about a sixth of a ten-record query's CPU.
  let second: IteratorResult<T> | undefined;
  let failure: unknown;
  try {
    second = await iterator.next();
  } catch (error) {
    failure = error;
  }
  if (second?.done) return reply.type(ndjsonType).send(encode(first.value));
  async function* body(): AsyncGenerator<string | Uint8Array> {
    try {
      yield encode(first.value);
      if (second === undefined) throw failure;
      for (let next = second; !next.done; next = await iterator.next()) yield encode(next.value);
    } catch (error) {
      const typed = error instanceof StreamStackError ? error : typedRequestError(error);
      yield `${JSON.stringify(errorBody(typed))}\n`;
    } finally {
      await iterator.return?.();
    }
  }
  return reply.type(ndjsonType).send(Readable.from(body(), { objectMode: false }));
}
