import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { Store, storeFormatVersion } from '../../packages/engine/src/index.js';
import type { StreamStackServer } from '../../packages/server/src/index.js';
import { call, ndjson, readEvents, startServer } from '../support/server.js';

/** Waits until the server counts `count` live reads open (long-polls and SSE together). */
async function liveReadersReach(server: StreamStackServer, count: number): Promise<void> {
  for (let tries = 0; tries < 500; tries++) {
    const { values } = await server.metrics.liveReaders.get();
    if (values.reduce((sum, value) => sum + value.value, 0) >= count) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`the server never had ${count} live reads open`);
}

describe('operating the server', () => {
  it('exports Prometheus metrics: appends, bytes, commits, request latency and subscription lag', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'abc' }, { payload: 'de' }) });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'f' }) });
    await call(url, 'POST', '/v1/feeds/f/subscriptions', { body: { name: 's' } });
    const metrics = await call(url, 'GET', '/metrics');
    expect(metrics.headers.get('content-type')).toMatch(/text\/plain/);
    expect(metrics.text).toContain('streamstack_appended_records_total{feed="f",kind="one-shot"} 3');
    expect(metrics.text).toContain('streamstack_appended_bytes_total{feed="f"} 6');
    expect(metrics.text).toContain('streamstack_commits_total{feed="f"} 2');
    expect(metrics.text).toContain('streamstack_subscription_lag_commits{feed="f",subscription="s"} 2');
    expect(metrics.text).toMatch(
      /streamstack_http_request_duration_seconds_count\{method="POST",route="\/v1\/feeds\/:feed\/records",status="201"\} 2/,
    );
    expect(metrics.text).toMatch(/streamstack_group_commits\{feed="f",count="groups"\} [1-9]/);
  });

  it('says on /health which kernels it runs on and the store format it reads', async () => {
    for (const kernels of ['native', 'ts'] as const) {
      const { url } = await startServer({ storeOptions: { kernels } });
      const health = await call(url, 'GET', '/health');
      expect(health.status).toBe(200);
      expect(health.json).toEqual({
        ok: true,
        version: expect.stringMatching(/^\d+\.\d+\.\d+/),
        kernels,
        storeFormat: storeFormatVersion,
      });
    }
  });

  it('serves an OpenAPI document naming the routes', async () => {
    const { url } = await startServer();
    const document = (await call(url, 'GET', '/openapi.json')).json;
    expect(document.openapi).toMatch(/^3\./);
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining([
        '/v1/feeds',
        '/v1/feeds/{feed}/records',
        '/v1/feeds/{feed}/streams/{id}/seal',
        '/v1/feeds/{feed}/subscriptions/{name}/poll',
      ]),
    );
    expect(
      document.paths['/v1/feeds/{feed}/records'].get.parameters.map((parameter: { name: string }) => parameter.name),
    ).toEqual(expect.arrayContaining(['after', 'mode', 'type', 'wait']));
  });

  it('refuses a body over the limit with 413', async () => {
    const { url } = await startServer({ bodyLimit: 1024 });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    const big = await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'x'.repeat(2000) }) });
    expect([big.status, big.json.error.code]).toEqual([413, 'REQUEST_TOO_LARGE']);
  });

  it('drains on close: live reads end, requests in flight finish, new connections are refused, and the store is closed', async () => {
    const { url, server, directory } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    const longPoll = call(url, 'GET', '/v1/feeds/f/records?after=0&wait=60');
    const sse = readEvents(url, '/v1/feeds/f/records?after=0', () => false);
    await liveReadersReach(server, 2);
    // In flight: the request has begun (its head is read) and its body is still on the way
    // when close starts, so it must be finished rather than cut off.
    let finishBody!: () => void;
    const bodyHeld = new Promise<void>((resolve) => (finishBody = resolve));
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(new TextEncoder().encode('{"payload":"la'));
        await bodyHeld;
        controller.enqueue(new TextEncoder().encode('st"}\n'));
        controller.close();
      },
    });
    const inFlight = fetch(`${url}/v1/feeds/f/records`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body,
      duplex: 'half',
    } as RequestInit);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const started = Date.now();
    const closed = server.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    finishBody();
    await closed;
    expect(Date.now() - started).toBeLessThan(10_000);
    expect((await inFlight).status).toBe(201);
    expect((await longPoll).status).toBe(200);
    expect((await sse).status).toBe(200);
    await expect(call(url, 'GET', '/v1/feeds/f')).rejects.toThrow();
    // The lock is released: the directory opens again, with the last append in it.
    const store = await Store.open(directory);
    expect((await store.feedInfo('f')).commits).toBe(1);
    await store.close();
  });

  it('answers 503 UNAVAILABLE to a request that arrives on an open connection while draining', async () => {
    const { url, server } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    const socket = net.connect(Number(new URL(url).port), '127.0.0.1');
    let received = '';
    socket.on('data', (chunk) => (received += String(chunk)));
    const socketClosed = new Promise((resolve) => socket.on('close', resolve));
    // An append whose body is half sent keeps the connection busy across the start of the drain;
    // the request behind it on the same connection then arrives while draining.
    const body = '{"payload":"last"}\n';
    socket.write(
      `POST /v1/feeds/f/records HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-ndjson\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    const closed = server.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    socket.write(`${body.slice(5)}GET /v1/feeds/f HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    await closed;
    await socketClosed;
    const statuses = [...received.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((match) => match[1]);
    expect(statuses).toEqual(['201', '503']);
    expect(received).toContain('{"error":{"code":"UNAVAILABLE","message":"the server is shutting down"}}');
  });
});
