/**
 * Requests to a StreamStack server over node:http with keep-alive connections (or a fetch the
 * caller gives): JSON and NDJSON bodies, query parameters, the bearer token, and failures rebuilt
 * as the `StreamStackError` the server sent (same code, message and details), so code that
 * catches embedded errors catches remote ones unchanged.
 *
 * Not the global fetch by default: under concurrent appends it costs the client four to eight
 * times the CPU of node:http per request (web streams, abort signals, a body stream per request;
 * `pnpm bench server` measures it), and a producer's CPU is what its appends wait on.
 */
import http from 'node:http';
import https from 'node:https';
import { type ErrorCode, StreamStackError } from '@streamstack/protocol';

export type QueryInput = Record<string, string | number | boolean | readonly string[] | undefined>;

export interface RequestOptions {
  readonly query?: QueryInput;
  /** A JSON body. */
  readonly json?: unknown;
  /** An NDJSON body: one JSON value per line. */
  readonly lines?: readonly unknown[];
  readonly headers?: Record<string, string | undefined>;
  readonly signal?: AbortSignal;
}

export interface TransportOptions {
  /** A bearer token, for a server with a token file. */
  readonly token?: string;
  /** A fetch to send requests with, instead of node:http. */
  readonly fetch?: typeof fetch;
}

/** What the transport reads of an answer: a fetch `Response` has it, and so does `httpAnswer`. */
export interface Answer {
  readonly ok: boolean;
  readonly status: number;
  /** The body as it arrives, or null when there is none. */
  readonly body: AsyncIterable<Uint8Array> | null;
  text(): Promise<string>;
  json(): Promise<unknown>;
}

interface SendInit {
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
  readonly signal?: AbortSignal;
}

/** The answer of a node:http response: the body read on demand, once. */
function httpAnswer(response: http.IncomingMessage): Answer {
  const status = response.statusCode ?? 0;
  // A reader sees a failed body through its own listener; one that stopped reading (an aborted
  // read) has nothing to hear, and an 'error' no one listens for would crash the process.
  response.on('error', () => {});
  // Events rather than `for await`: a small answer is one chunk, and the async iterator's
  // machinery would cost more than reading it.
  const text = () =>
    new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      response.once('error', reject);
      response.once('close', () => {
        if (!response.complete)
          reject(new StreamStackError('UNAVAILABLE', 'the connection closed before the answer was complete'));
      });
    });
  return {
    ok: status >= 200 && status < 300,
    status,
    body: response,
    text,
    json: async () => JSON.parse(await text()) as unknown,
  };
}

/**
 * One request over node:http(s) through `agent`; resolves once the response's head arrived. An
 * abort destroys the request only while its answer is still arriving: node's own `signal`
 * option also destroys, after the whole answer arrived, the kept-alive socket that went back to
 * the pool, with no one there to hear the error. A complete answer is in memory, and the reader
 * stops at the abort itself.
 */
function httpSend(agent: http.Agent, url: string, init: SendInit): Promise<Answer> {
  const headers =
    init.body === undefined
      ? init.headers
      : { ...init.headers, 'content-length': String(Buffer.byteLength(init.body)) };
  const request = (url.startsWith('https:') ? https.request : http.request)(url, {
    method: init.method,
    headers,
    agent,
  });
  const { signal } = init;
  return new Promise((resolve, reject) => {
    request.on('error', reject);
    if (signal?.aborted) {
      request.destroy(signal.reason as Error);
      return;
    }
    let answer: http.IncomingMessage | undefined;
    if (signal) {
      const onAbort = () => {
        if (!answer?.complete) request.destroy(signal.reason as Error);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      request.once('close', () => signal.removeEventListener('abort', onAbort));
    }
    request.once('response', (response) => {
      answer = response;
      resolve(httpAnswer(response));
    });
    request.end(init.body);
  });
}

/** True for the `UNAVAILABLE` of a server that could not be reached at all. */
function isUnreachable(error: unknown): boolean {
  return error instanceof StreamStackError && error.code === 'UNAVAILABLE' && error.details.unreachable === true;
}

/** The typed error an error body describes. */
export function errorFromBody(body: unknown, status: number): StreamStackError {
  const error = (body as { error?: Record<string, unknown> } | null)?.error;
  if (!error || typeof error.code !== 'string') {
    return new StreamStackError('INTERNAL', `the server answered ${status} without an error body`, {
      details: { status },
    });
  }
  const { code, message, ...details } = error;
  return new StreamStackError(code as ErrorCode, typeof message === 'string' ? message : code, { details });
}

const decoder = new TextDecoder();
const newline = 0x0a;
const carriageReturn = 0x0d;
/** How an error line starts; a record line starts with its feed (`{"feed":`). */
const errorLineStart = Buffer.from('{"error":');

/**
 * Where the error line among whole `lines` starts, and its typed error; undefined when there is
 * none. The server ends a body it cannot finish with one, so it can only be the last line, and
 * a record line never holds a raw newline.
 */
function errorLineOf(lines: Uint8Array, status: number): { start: number; error: StreamStackError } | undefined {
  const bytes = Buffer.from(lines.buffer, lines.byteOffset, lines.byteLength);
  const start = bytes.lastIndexOf(newline, bytes.length - 2) + 1;
  if (!bytes.subarray(start, start + errorLineStart.length).equals(errorLineStart)) return undefined;
  const line = JSON.parse(decoder.decode(bytes.subarray(start))) as Record<string, unknown>;
  if (line.error === undefined || Object.keys(line).length !== 1) return undefined;
  return { start, error: errorFromBody(line, status) };
}

/**
 * How many `NOT_OWNER` redirects one request follows. One is the rule (this node to the feed's
 * writer); a second happens when the feed moved while the first was on its way; past three, the
 * nodes disagree about the owner, and the error is the caller's.
 */
const redirectsMax = 3;

/** The feed a request path names (`/v1/feeds/<feed>/…`), as it is written in the path. */
function feedOfPath(path: string): string | undefined {
  return /^\/v1\/feeds\/([^/?]+)/.exec(path)?.[1];
}

export class Transport {
  /** Keeps connections open between requests (the server's `Keep-Alive` hint bounds their idle time). */
  private readonly agents: { http?: http.Agent; https?: https.Agent } = {};
  /**
   * Where each feed's requests go when a node of a cluster named its writer (a `NOT_OWNER`
   * redirect): straight there from then on, until that address stops answering.
   */
  private readonly owners = new Map<string, string>();

  constructor(
    readonly baseUrl: string,
    private readonly options: TransportOptions = {},
  ) {}

  /** Closes the idle connections; requests in flight finish. */
  close(): void {
    this.agents.http?.destroy();
    this.agents.https?.destroy();
  }

  /** The keep-alive agent for `url`'s scheme. */
  private agentFor(url: string): http.Agent {
    if (url.startsWith('https:')) return (this.agents.https ??= new https.Agent({ keepAlive: true }));
    return (this.agents.http ??= new http.Agent({ keepAlive: true }));
  }

  /** The URL of `path` with `query` (arrays become repeated parameters), at `base` (the server given by default). */
  url(path: string, query: QueryInput = {}, base: string = this.baseUrl): string {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value === undefined) continue;
      if (Array.isArray(value)) for (const item of value) search.append(name, item);
      else search.append(name, String(value));
    }
    const text = search.toString();
    return `${base}${path}${text === '' ? '' : `?${text}`}`;
  }

  /** The node a feed's requests go to: its writer's, once a redirect named it. */
  ownerOf(feed: string): string | undefined {
    return this.owners.get(feed);
  }

  /**
   * Sends a request; a non-2xx answer throws its typed error, a failed connection `UNAVAILABLE`.
   * A `NOT_OWNER` answer (a node of a cluster that does not write the feed) is followed to the
   * node it names, and remembered for the feed's next requests; when that node stops
   * answering, the next request asks the server given again (which may take the feed over).
   */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Answer> {
    const feed = feedOfPath(path);
    let base = (feed === undefined ? undefined : this.owners.get(feed)) ?? this.baseUrl;
    for (let redirects = 0; ; redirects++) {
      try {
        return await this.sendTo(base, method, path, options);
      } catch (error) {
        if (feed !== undefined && base !== this.baseUrl && isUnreachable(error)) this.owners.delete(feed);
        const url = (error as StreamStackError).details?.url;
        const redirected =
          error instanceof StreamStackError && error.code === 'NOT_OWNER' && typeof url === 'string' && url !== '';
        if (!redirected || feed === undefined || redirects >= redirectsMax) throw error;
        base = url.replace(/\/+$/, '');
        if (base === this.baseUrl) this.owners.delete(feed);
        else this.owners.set(feed, base);
      }
    }
  }

  /** One request to the server at `base`. */
  private async sendTo(base: string, method: string, path: string, options: RequestOptions): Promise<Answer> {
    const headers: Record<string, string> = {};
    if (this.options.token !== undefined) headers.authorization = `Bearer ${this.options.token}`;
    for (const [name, value] of Object.entries(options.headers ?? {})) if (value !== undefined) headers[name] = value;
    let body: string | undefined;
    if (options.lines !== undefined) {
      headers['content-type'] = 'application/x-ndjson';
      body = options.lines.map((line) => `${JSON.stringify(line)}\n`).join('');
    } else if (options.json !== undefined) {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.json);
    }
    const init = {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
      ...(options.signal ? { signal: options.signal } : {}),
    };
    const url = this.url(path, options.query, base);
    let response: Answer;
    try {
      response =
        this.options.fetch === undefined
          ? await httpSend(this.agentFor(url), url, init)
          : // A redirect is this transport's to follow: fetch would drop the token on the way.
            ((await this.options.fetch(url, { ...init, redirect: 'manual' })) as unknown as Answer);
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw new StreamStackError(
        'UNAVAILABLE',
        `cannot reach ${base}: ${(error as Error).cause instanceof Error ? ((error as Error).cause as Error).message : (error as Error).message}`,
        { cause: error, details: { url: base, unreachable: true } },
      );
    }
    if (!response.ok) {
      const text = await response.text();
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      throw errorFromBody(parsed, response.status);
    }
    return response;
  }

  /** A request whose answer is one JSON object. */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.send(method, path, options);
    return (await response.json()) as T;
  }

  /**
   * A request whose answer is NDJSON, as its bytes arrive, in chunks of whole lines. An error
   * line (the server's way to fail after the status was sent) throws its typed error.
   */
  async *lineChunks(path: string, options: RequestOptions = {}): AsyncGenerator<Uint8Array> {
    const response = await this.send('GET', path, options);
    if (!response.body) return;
    let pending: Uint8Array = new Uint8Array(0);
    try {
      for await (const chunk of response.body) {
        const bytes = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
        const end = bytes.lastIndexOf(newline) + 1;
        pending = bytes.subarray(end);
        if (end === 0) continue;
        yield* this.linesBefore(bytes.subarray(0, end), response.status, options.signal);
      }
      // The body ended without a newline after its last line: it is handed out with one.
      if (pending.length > 0)
        yield* this.linesBefore(Buffer.concat([pending, Uint8Array.of(newline)]), response.status, options.signal);
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw error;
    }
  }

  /** Whole `lines`, then the error of an error line among them, which ends them. */
  private *linesBefore(lines: Uint8Array, status: number, signal: AbortSignal | undefined): Generator<Uint8Array> {
    const failed = errorLineOf(lines, status);
    const records = failed ? lines.subarray(0, failed.start) : lines;
    signal?.throwIfAborted();
    if (records.length > 0) yield records;
    if (failed) throw failed.error;
  }

  /**
   * A request whose answer is NDJSON, line by line as it arrives. An error line (the server's
   * way to fail after the status was sent) throws its typed error. Each chunk of whole lines is
   * decoded to text once and split there: a decode and a copy per line cost a full read about
   * as much as parsing its JSON.
   */
  async *lines(path: string, options: RequestOptions = {}): AsyncGenerator<Record<string, unknown>> {
    for await (const chunk of this.lineChunks(path, options)) {
      const text = decoder.decode(chunk);
      // A chunk of `lineChunks` ends with a newline, so every line found here is whole.
      for (let start = 0; start < text.length; ) {
        const found = text.indexOf('\n', start);
        const end = found === -1 ? text.length : found;
        const last = end > start && text.charCodeAt(end - 1) === carriageReturn ? end - 1 : end;
        const line = last > start ? (JSON.parse(text.slice(start, last)) as Record<string, unknown>) : undefined;
        start = end + 1;
        if (line === undefined) continue;
        // Lines already received are not handed out after an abort, as the embedded reads stop.
        options.signal?.throwIfAborted();
        yield line;
      }
    }
  }
}
