/**
 * Test helpers for the HTTP server: one started on port 0 over a fresh store, a small fetch
 * wrapper that returns status, headers and the body (JSON, NDJSON lines or text), and an SSE
 * reader for live reads.
 */
import { afterEach } from 'vitest';
import type { Store, StoreOptions } from '../../packages/engine/src/index.js';
import { createServer, type ServerOptions, type StreamStackServer } from '../../packages/server/src/index.js';
import { openStore, temporaryDirectory } from './store.js';

const running: StreamStackServer[] = [];
afterEach(async () => {
  for (const server of running.splice(0)) await server.close();
});

export interface TestServer {
  readonly server: StreamStackServer;
  readonly url: string;
  readonly directory: string;
  /** The store the server serves (closed with it). */
  readonly store: Store;
}

/** A server on 127.0.0.1 and a free port, over a store in a fresh directory; closed after the test. */
export async function startServer(
  options: Partial<ServerOptions> & { storeOptions?: StoreOptions; directory?: string; port?: number } = {},
): Promise<TestServer> {
  const directory = options.directory ?? temporaryDirectory();
  const store = await openStore(directory, options.storeOptions);
  const { storeOptions: _unused, directory: _directory, port, ...serverOptions } = options;
  const server = await createServer({ logger: false, ...serverOptions, store });
  running.push(server);
  // Port 0 (any free one) unless a test restarts a server where its clients already point.
  const url = await server.listen({ port: port ?? 0 });
  return { server, url, directory, store };
}

export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  /** The body as JSON (undefined when it is empty). */
  readonly json: any;
  /** The body as NDJSON lines. */
  readonly lines: any[];
}

/** One request: a string body is sent as NDJSON, an object as JSON. */
export async function call(
  url: string,
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<Answer> {
  const { body } = options;
  const headers: Record<string, string> = { ...(options.headers ?? {}) };
  if (typeof body === 'string') headers['content-type'] ??= 'application/x-ndjson';
  else if (body !== undefined) headers['content-type'] ??= 'application/json';
  const response = await fetch(`${url}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const text = await response.text();
  const isNdjson = (response.headers.get('content-type') ?? '').startsWith('application/x-ndjson');
  const lines = isNdjson
    ? text
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line))
    : [];
  let json: unknown;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json, lines };
}

/** NDJSON lines for records. */
export const ndjson = (...records: object[]): string => records.map((record) => `${JSON.stringify(record)}\n`).join('');

export interface SseEvent {
  readonly id?: string;
  readonly event: string;
  readonly data: any;
}

/**
 * Opens an SSE read and collects events until `until` says stop (or the server ends the
 * stream); the connection is closed then.
 */
export async function readEvents(
  url: string,
  path: string,
  until: (events: SseEvent[]) => boolean,
  headers: Record<string, string> = {},
): Promise<{ status: number; events: SseEvent[] }> {
  const controller = new AbortController();
  const response = await fetch(`${url}${path}`, {
    headers: { accept: 'text/event-stream', ...headers },
    signal: controller.signal,
  });
  const events: SseEvent[] = [];
  if (response.status !== 200 || !response.body) return { status: response.status, events };
  const decoder = new TextDecoder();
  let buffered = '';
  try {
    for await (const chunk of response.body) {
      buffered += decoder.decode(chunk as Uint8Array, { stream: true });
      let end: number;
      while ((end = buffered.indexOf('\n\n')) !== -1) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const fields: Record<string, string> = {};
        for (const line of block.split('\n')) {
          const colon = line.indexOf(':');
          if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 1).trimStart();
        }
        if (fields.data !== undefined)
          events.push({
            ...(fields.id === undefined ? {} : { id: fields.id }),
            event: fields.event ?? 'message',
            data: JSON.parse(fields.data),
          });
        if (until(events)) return { status: response.status, events };
      }
    }
  } finally {
    controller.abort();
  }
  return { status: response.status, events };
}

/** One request to the Durable Streams compatibility route; `json` is the body parsed, when it is JSON. */
export async function durableStreamCall(
  url: string,
  method: string,
  name: string,
  options: { headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: Headers; text: string; json: any }> {
  const response = await fetch(`${url}/ds/v1/stream/${name}`, {
    method,
    headers: options.headers ?? {},
    ...(options.body === undefined ? {} : { body: options.body }),
  });
  const text = await response.text();
  let json: any;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, text, json };
}
