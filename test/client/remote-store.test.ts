import { describe, expect, it } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/index.js';
import { RemoteStore, StreamStackError as ClientStreamStackError } from '../../packages/client/src/index.js';
import { hashToken } from '../../packages/server/src/index.js';
import { startServer } from '../support/server.js';
import { openStore, text } from '../support/store.js';

describe('the client', () => {
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
    await expect(reader.append([{ payload: 'b' }])).rejects.toMatchObject({ code: 'FORBIDDEN', details: { operation: 'write', feed: 'orders' } });
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
