/**
 * Forking over HTTP and from the client: `POST /v1/feeds/{feed}/fork` makes a feed holding the
 * source up to a commit; it needs read on the source and admin on the new name (as creating a
 * feed does), and a refused fork leaves no feed behind.
 */
import { describe, expect, it } from 'vitest';
import { RemoteStore } from '../../packages/client/src/index.js';
import { hashToken, type TokenGrant } from '../../packages/server/src/index.js';
import { call, ndjson, startServer } from '../support/server.js';

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('forks over HTTP', () => {
  it('forks at a commit, from a route and from the client, and refuses what it must', async () => {
    const grants: TokenGrant[] = [
      { name: 'ops', sha256: hashToken('ops'), feeds: ['*'], operations: ['admin', 'write', 'read'] },
      { name: 'reader', sha256: hashToken('reader'), feeds: ['orders'], operations: ['read'] },
    ];
    const { url } = await startServer({ tokens: grants });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'orders' }, headers: bearer('ops') });
    for (const payload of ['a', 'b', 'c'])
      await call(url, 'POST', '/v1/feeds/orders/records', { body: ndjson({ payload }), headers: bearer('ops') });

    const forked = await call(url, 'POST', '/v1/feeds/orders/fork', {
      body: { name: 'trial', at: 2 },
      headers: bearer('ops'),
    });
    expect([forked.status, forked.json]).toEqual([
      201,
      expect.objectContaining({ name: 'trial', commits: 2, fork: { feed: 'orders', at: 2 } }),
    ]);
    const read = await call(url, 'GET', '/v1/feeds/trial/records', { headers: bearer('ops') });
    expect(read.lines.map((line) => line.payload)).toEqual(['a', 'b']);

    // Reading the source is not enough to make a feed.
    const reader = await call(url, 'POST', '/v1/feeds/orders/fork', {
      body: { name: 'mine' },
      headers: bearer('reader'),
    });
    expect([reader.status, reader.json.error.code]).toEqual([403, 'FORBIDDEN']);
    const past = await call(url, 'POST', '/v1/feeds/orders/fork', {
      body: { name: 'late', at: 9 },
      headers: bearer('ops'),
    });
    expect([past.status, past.json.error.code]).toEqual([416, 'CURSOR_OUT_OF_RANGE']);
    const taken = await call(url, 'POST', '/v1/feeds/orders/fork', { body: { name: 'trial' }, headers: bearer('ops') });
    expect([taken.status, taken.json.error.code]).toEqual([409, 'FEED_EXISTS']);
    const names = (await call(url, 'GET', '/v1/feeds', { headers: bearer('ops') })).lines.map((line) => line.name);
    expect(names.sort()).toEqual(['orders', 'trial']);

    const client = await RemoteStore.open(url, { token: 'ops' });
    const copy = await (await client.feed('orders')).fork('copy');
    expect((await copy.info()).fork).toEqual({ feed: 'orders', at: 3 });
    expect((await client.forkFeed('copy', 'copy2', { at: 1 }).then((feed) => feed.info())).commits).toBe(1);
  });
});
