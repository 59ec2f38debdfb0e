import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { StreamStackError as ClientStreamStackError, RemoteStore } from '../../packages/client/src/index.js';
import { StreamStackError } from '../../packages/engine/src/index.js';
import { hashToken } from '../../packages/server/src/index.js';
import { startServer } from '../support/server.js';
import { openStore, text } from '../support/store.js';

/**
 * A server that answers /health, /v1/feeds/f, and a records read whose body breaks off with an
 * error line after two records, the way the real server ends a body it cannot finish (the
 * status was sent with the first line), split into chunks that cut lines apart.
 */
async function serverEndingWithAnErrorLine(): Promise<{ url: string; close(): Promise<void> }> {
  const record = (position: number) =>
    JSON.stringify({
      feed: 'f',
      commit: position,
      stream: 's',
      seq: 1,
      position,
      timestamp: 1,
      payload: `p${position}`,
      fingerprint: 'x',
    });
  const body = `${record(1)}\n${record(2)}\n${JSON.stringify({ error: { code: 'CORRUPT', message: 'segment 3 is corrupt', file: 'x.hist', offset: 9 } })}\n`;
  const server = http.createServer((request, response) => {
    if (request.url === '/health' || request.url === '/v1/feeds/f') {
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      return;
    }
    response.writeHead(200, { 'content-type': 'application/x-ndjson' });
    for (let at = 0; at < body.length; at += 37) response.write(body.slice(at, at + 37));
    response.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

describe('the client', () => {
  it('throws the error line that ends a body, from read and from readLines, after the lines before it', async () => {
    const fake = await serverEndingWithAnErrorLine();
    const store = await RemoteStore.open(fake.url);
    try {
      const feed = await store.feed('f');
      const decoder = new TextDecoder();
      let lines = '';
      const fromLines = await (async () => {
        for await (const chunk of feed.readLines()) lines += decoder.decode(chunk);
      })().catch((error: unknown) => error);
      expect(fromLines).toMatchObject({ code: 'CORRUPT', details: { file: 'x.hist', offset: 9 } });
      expect(
        lines
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => JSON.parse(line).position),
      ).toEqual([1, 2]);
      const positions: number[] = [];
      const fromRead = await (async () => {
        for await (const record of feed.read()) positions.push(record.position);
      })().catch((error: unknown) => error);
      expect(fromRead).toMatchObject({ code: 'CORRUPT' });
      expect(positions).toEqual([1, 2]);
    } finally {
      await store.close();
      await fake.close();
    }
  });

  it('throws the engine StreamStackError class itself, which it re-exports from the protocol', async () => {
    // The client depends on @streamstack/protocol, not on the engine; one class for both is what
    // lets code written against the embedded store catch the remote store's errors unchanged.
    expect(ClientStreamStackError).toBe(StreamStackError);
    const { url } = await startServer();
    const store = await RemoteStore.open(url);
    const missing = await store.feed('absent').catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(StreamStackError);
    expect(missing).toMatchObject({ code: 'FEED_NOT_FOUND' });
    await store.close();
  });

  it('sends its bearer token, and rebuilds 401 and 403 as typed errors with their details', async () => {
    const { url } = await startServer({
      tokens: [
        { name: 'ops', sha256: hashToken('ops'), feeds: ['*'], operations: ['admin', 'read', 'write'] },
        { name: 'reader', sha256: hashToken('reader'), feeds: ['orders'], operations: ['read'] },
      ],
    });
    const ops = await RemoteStore.open(url, { token: 'ops' });
    await ops.createFeed('orders');
    await (await ops.feed('orders')).append([{ payload: 'a' }]);
    const stranger = await RemoteStore.open(url, { token: 'nobody' });
    const refused = await stranger.feed('orders').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StreamStackError);
    expect(refused).toMatchObject({ code: 'UNAUTHENTICATED' });
    const reader = await (await RemoteStore.open(url, { token: 'reader' })).feed('orders');
    expect((await reader.readCommit(1)).map((record) => text(record.payload))).toEqual(['a']);
    await expect(reader.append([{ payload: 'b' }])).rejects.toMatchObject({
      code: 'FORBIDDEN',
      details: { operation: 'write', feed: 'orders' },
    });
  });

  it('fails with UNAVAILABLE when the server cannot be reached, and with CLOSED once closed', async () => {
    const { url, server } = await startServer();
    const store = await RemoteStore.open(url);
    await server.close();
    await expect(store.feedNames()).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await expect(RemoteStore.open(url)).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await store.close();
    await expect(store.feed('f')).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('follows across a server restart, resuming after the last commit it received', async () => {
    const first = await startServer();
    const port = Number(new URL(first.url).port);
    const store = await RemoteStore.open(first.url);
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'one' }]);
    const controller = new AbortController();
    const seen: string[] = [];
    const reading = (async () => {
      for await (const { commit, records } of feed.follow({ after: 0, signal: controller.signal })) {
        seen.push(`${commit.commit}:${text(records[0]!.payload)}`);
        if (commit.commit === 3) return;
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 200));
    await first.server.close();
    // A commit made while the server is down, then the same directory served on the same port.
    const offline = await openStore(first.directory);
    await (await offline.feed('f')).append([{ payload: 'two' }]);
    await offline.close();
    const second = await startServer({ directory: first.directory, port });
    await (await (await RemoteStore.open(second.url)).feed('f')).append([{ payload: 'three' }]);
    await reading;
    controller.abort();
    expect(seen).toEqual(['1:one', '2:two', '3:three']);
  });
});
