/**
 * Requests to a StreamStack server over Node's fetch: JSON and NDJSON bodies, query parameters,
 * the bearer token, and failures rebuilt as the `StreamStackError` the server sent (same code,
 * message and details), so code that catches embedded errors catches remote ones unchanged.
 */
import { byteLines, StreamStackError, type ErrorCode } from '@streamstack/engine';

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
  /** The fetch to use (default: the global one). */
  readonly fetch?: typeof fetch;
}

/** The typed error an error body describes. */
export function errorFromBody(body: unknown, status: number): StreamStackError {
  const error = (body as { error?: Record<string, unknown> } | null)?.error;
  if (!error || typeof error.code !== 'string') {
    return new StreamStackError('INTERNAL', `the server answered ${status} without an error body`, { details: { status } });
  }
  const { code, message, ...details } = error;
  return new StreamStackError(code as ErrorCode, typeof message === 'string' ? message : code, { details });
}

const decoder = new TextDecoder();

export class Transport {
  private readonly fetch: typeof fetch;

  constructor(
    readonly baseUrl: string,
    private readonly options: TransportOptions = {},
  ) {
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /** The URL of `path` with `query` (arrays become repeated parameters). */
  url(path: string, query: QueryInput = {}): string {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value === undefined) continue;
      if (Array.isArray(value)) for (const item of value) search.append(name, item);
      else search.append(name, String(value));
    }
    const text = search.toString();
    return `${this.baseUrl}${path}${text === '' ? '' : `?${text}`}`;
  }

  /** Sends a request; a non-2xx answer throws its typed error, a failed connection `UNAVAILABLE`. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
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
    let response: Response;
    try {
      response = await this.fetch(this.url(path, options.query), { method, headers, ...(body === undefined ? {} : { body }), ...(options.signal ? { signal: options.signal } : {}) });
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw new StreamStackError('UNAVAILABLE', `cannot reach ${this.baseUrl}: ${(error as Error).cause instanceof Error ? ((error as Error).cause as Error).message : (error as Error).message}`, { cause: error, details: { url: this.baseUrl } });
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
   * A request whose answer is NDJSON, line by line as it arrives. An error line (the server's
   * way to fail after the status was sent) throws its typed error.
   */
  async *lines(path: string, options: RequestOptions = {}): AsyncGenerator<Record<string, unknown>> {
    const response = await this.send('GET', path, options);
    if (!response.body) return;
    try {
      for await (const bytes of byteLines(response.body as unknown as AsyncIterable<Uint8Array>)) {
        if (bytes.length === 0) continue;
        const line = JSON.parse(decoder.decode(bytes)) as Record<string, unknown>;
        if (line.error !== undefined && Object.keys(line).length === 1) throw errorFromBody(line, response.status);
        // Lines already received are not handed out after an abort, as the embedded reads stop.
        options.signal?.throwIfAborted();
        yield line;
      }
    } catch (error) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw error;
    }
  }
}
