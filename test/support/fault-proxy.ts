/**
 * An HTTP proxy on 127.0.0.1 in front of an object store, for the tests of what a store does
 * when its object storage misbehaves short of going away: it passes requests through as they
 * are (the client's Host header too, which its signature covers), answers every request with a
 * 500 or 503 S3 error of its own, or passes them through after a delay.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type FaultMode = { kind: 'pass' } | { kind: 'fail'; status: 500 | 503 } | { kind: 'slow'; delayMs: number };

export interface FaultProxy {
  /** The proxy's URL: the endpoint a store is given. */
  readonly endpoint: string;
  /** What the proxy does from now on. */
  mode: FaultMode;
  /** Requests this says yes to are answered 503 whatever the mode (by method and path). */
  refuse: ((method: string, path: string) => boolean) | undefined;
  /** Requests answered with an error of the proxy's own so far. */
  readonly failed: number;
  close(): Promise<void>;
}

/** Starts a proxy to the server at `target` (`http://127.0.0.1:port`), passing requests through. */
export async function startFaultProxy(target: string): Promise<FaultProxy> {
  const upstream = new URL(target);
  let failed = 0;
  const proxy = {
    mode: { kind: 'pass' } as FaultMode,
    refuse: undefined as ((method: string, path: string) => boolean) | undefined,
    get failed() {
      return failed;
    },
  };
  const server = http.createServer((request, response) => {
    const refused = proxy.refuse?.(request.method ?? 'GET', request.url ?? '/') === true;
    const mode: FaultMode = refused ? { kind: 'fail', status: 503 } : proxy.mode;
    if (mode.kind === 'fail') {
      failed++;
      request.resume();
      const code = mode.status === 503 ? 'SlowDown' : 'InternalError';
      response.writeHead(mode.status, { 'content-type': 'application/xml' });
      response.end(
        `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>injected</Message></Error>`,
      );
      return;
    }
    const forward = () => {
      const outgoing = http.request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: request.method,
          path: request.url,
          headers: request.headers,
        },
        (answer) => {
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(response);
        },
      );
      outgoing.on('error', () => response.destroy());
      request.pipe(outgoing);
    };
    if (mode.kind === 'slow') setTimeout(forward, mode.delayMs);
    else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(proxy, {
    endpoint: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}
