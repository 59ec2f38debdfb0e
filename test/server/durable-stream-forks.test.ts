/**
 * Forks on the Durable Streams compatibility route beyond what the conformance suite checks
 * (docs/http.md): a fork's state and a soft delete live in the commits and survive a restart, a
 * soft-deleted source whose forks went while the server was down is deleted when next asked
 * for, a fork shares its source's feed history, forking needs read access to the source, and
 * offsets of earlier releases are still taken.
 */
import { describe, expect, it } from 'vitest';
import { hashToken } from '../../packages/server/src/index.js';
import { durableStreamCall, startServer } from '../support/server.js';

const ds = durableStreamCall;
const text = { 'content-type': 'text/plain' };
const forkOf = (source: string, more: Record<string, string> = {}) => ({
  'stream-forked-from': `/ds/v1/stream/${source}`,
  ...more,
});

describe('forks on the compatibility route', () => {
  it('keep a fork open, its producers fresh and its data whole across a restart, while its source stays closed', async () => {
    const first = await startServer();
    await ds(first.url, 'PUT', 'talk', { headers: text, body: 'hello ' });
    const producer = { ...text, 'producer-id': 'p', 'producer-epoch': '0', 'producer-seq': '0' };
    expect((await ds(first.url, 'POST', 'talk', { headers: producer, body: 'world' })).status).toBe(200);
    await ds(first.url, 'POST', 'talk', { headers: { 'stream-closed': 'true' } });
    const created = await ds(first.url, 'PUT', 'branch', { headers: forkOf('talk', { 'stream-ttl': '3600' }) });
    expect(created.status).toBe(201);
    await first.server.close();

    const second = await startServer({ directory: first.directory });
    const head = await ds(second.url, 'HEAD', 'branch');
    expect([head.status, head.headers.get('stream-closed'), head.headers.get('stream-ttl')]).toEqual([
      200,
      null,
      '3600',
    ]);
    expect(head.headers.get('stream-next-offset')).toBe(created.headers.get('stream-next-offset'));
    // The source's producer state was not inherited: seq 0 again is new data on the fork.
    expect((await ds(second.url, 'POST', 'branch', { headers: producer, body: '!' })).status).toBe(200);
    expect((await ds(second.url, 'GET', 'branch?offset=-1')).text).toBe('hello world!');
    expect((await ds(second.url, 'HEAD', 'talk')).headers.get('stream-closed')).toBe('true');
    // The same fork PUT is idempotent after the restart: its origin came back from its commit.
    expect((await ds(second.url, 'PUT', 'branch', { headers: forkOf('talk', { 'stream-ttl': '3600' }) })).status).toBe(
      200,
    );
    // The fork is a feed forked from the source's: it shares the source's history.
    const info = await (await second.store.feed('ds.branch')).info();
    expect(info.fork).toEqual({ feed: 'ds.talk', at: 2 });
  });

  it('keep a soft delete across a restart, and delete the source for good once its forks went while the server was down', async () => {
    const first = await startServer();
    await ds(first.url, 'PUT', 'root', { headers: text, body: 'r' });
    await ds(first.url, 'PUT', 'leaf', { headers: forkOf('root') });
    expect((await ds(first.url, 'DELETE', 'root')).status).toBe(204);
    const gone = await ds(first.url, 'GET', 'root?offset=-1');
    expect([gone.status, gone.json.error.code]).toEqual([410, 'STREAM_DELETED']);
    await first.server.close();

    const second = await startServer({ directory: first.directory });
    expect((await ds(second.url, 'HEAD', 'root')).status).toBe(410);
    expect((await ds(second.url, 'PUT', 'root', { headers: text })).status).toBe(409);
    // The fork goes behind the route's back (the engine's own delete), so no cascade runs.
    await second.store.deleteFeed('ds.leaf');
    await second.server.close();

    const third = await startServer({ directory: first.directory });
    expect((await ds(third.url, 'HEAD', 'root')).status).toBe(404);
    expect(await third.store.feedNames()).toEqual([]);
    expect((await ds(third.url, 'PUT', 'root', { headers: text, body: 'new' })).status).toBe(201);
  });

  it('need read access to the source: a token that may create only the fork is refused, with nothing made', async () => {
    const grants = [
      { name: 'all', sha256: hashToken('all-secret'), feeds: ['*'], operations: ['admin', 'read', 'write'] as const },
      {
        name: 'branch',
        sha256: hashToken('branch-secret'),
        feeds: ['ds.branch'],
        operations: ['admin', 'read'] as const,
      },
    ];
    const { url, store } = await startServer({ tokens: grants });
    const as = (token: string) => ({ authorization: `Bearer ${token}` });
    expect((await ds(url, 'PUT', 'secret', { headers: { ...text, ...as('all-secret') }, body: 'x' })).status).toBe(201);
    const refused = await ds(url, 'PUT', 'branch', { headers: { ...forkOf('secret'), ...as('branch-secret') } });
    expect([refused.status, refused.json.error.code]).toEqual([403, 'FORBIDDEN']);
    expect(await store.feedNames()).toEqual(['ds.secret']);
    expect((await ds(url, 'PUT', 'branch', { headers: { ...forkOf('secret'), ...as('all-secret') } })).status).toBe(
      201,
    );
  });

  it('take the 16-digit offsets of earlier releases and refuse a point inside a commit, for reads and forks alike', async () => {
    const { url } = await startServer();
    const created = await ds(url, 'PUT', 'log', { headers: text, body: 'ab' });
    const offset = created.headers.get('stream-next-offset')!;
    expect(offset).toMatch(/^\d{16}_0{16}$/);
    await ds(url, 'POST', 'log', { headers: text, body: 'cd' });
    const legacy = offset.slice(0, 16);
    expect((await ds(url, 'GET', `log?offset=${legacy}`)).text).toBe('cd');
    expect((await ds(url, 'GET', `log?offset=${offset}`)).text).toBe('cd');
    const inside = `${legacy}_0000000000000001`;
    const read = await ds(url, 'GET', `log?offset=${inside}`);
    expect([read.status, read.json.error.code, read.json.error.parameter]).toEqual([400, 'INVALID_ARGUMENT', 'offset']);
    const fork = await ds(url, 'PUT', 'f', { headers: forkOf('log', { 'stream-fork-offset': inside }) });
    expect([fork.status, fork.json.error.header]).toEqual([400, 'Stream-Fork-Offset']);
    expect((await ds(url, 'PUT', 'f', { headers: forkOf('log', { 'stream-fork-offset': legacy }) })).status).toBe(201);
    expect((await ds(url, 'GET', 'f?offset=-1')).text).toBe('ab');
  });

  it('refuse a source path that names no stream of this server, and a fork offset that names no data', async () => {
    const { url, store } = await startServer();
    await ds(url, 'PUT', 'empty-start', { headers: text });
    await ds(url, 'POST', 'empty-start', { headers: text, body: 'x' });
    for (const from of [
      'v1/stream/empty-start',
      'http://elsewhere/v1/stream/empty-start',
      '/ds/v1/stream/',
      '/other/x',
    ]) {
      const refused = await ds(url, 'PUT', 'f', { headers: { 'stream-forked-from': from } });
      expect([refused.status, refused.json.error.header], from).toEqual([400, 'Stream-Forked-From']);
    }
    // Commit 1 is the creation without data: no offset this server returns names it.
    const made = await ds(url, 'PUT', 'f', {
      headers: forkOf('empty-start', { 'stream-fork-offset': '0000000000000001_0000000000000000' }),
    });
    expect([made.status, made.json.error.header]).toEqual([400, 'Stream-Fork-Offset']);
    expect(await store.feedNames()).toEqual(['ds.empty-start']);
  });

  it('answer a repeated fork PUT as the fork it made, after its source grew and after its source was deleted', async () => {
    const { url } = await startServer();
    await ds(url, 'PUT', 'src', { headers: text, body: 'one' });
    expect((await ds(url, 'PUT', 'copy', { headers: forkOf('src') })).status).toBe(201);
    await ds(url, 'POST', 'src', { headers: text, body: 'two' });
    // Without an offset, the repeat asks for the fork as it was made, not at the tail now.
    expect((await ds(url, 'PUT', 'copy', { headers: forkOf('src') })).status).toBe(200);
    const tail = (await ds(url, 'HEAD', 'src')).headers.get('stream-next-offset')!;
    expect((await ds(url, 'PUT', 'copy', { headers: forkOf('src', { 'stream-fork-offset': tail }) })).status).toBe(409);
    expect((await ds(url, 'DELETE', 'src')).status).toBe(204);
    expect((await ds(url, 'HEAD', 'src')).status).toBe(410);
    expect((await ds(url, 'PUT', 'copy', { headers: forkOf('src') })).status).toBe(200);
    expect((await ds(url, 'PUT', 'copy', { headers: forkOf('src', { 'stream-ttl': '60' }) })).status).toBe(409);
    const another = await ds(url, 'PUT', 'another', { headers: forkOf('src') });
    expect([another.status, another.json.error.code]).toEqual([409, 'STREAM_DELETED']);
    expect((await ds(url, 'GET', 'copy?offset=-1')).text).toBe('one');
  });

  it('treat a fork cut short before its own creation commit as no stream, and make it again on the next PUT', async () => {
    const { url, store } = await startServer({});
    await ds(url, 'PUT', 'src', { headers: { ...text, 'stream-ttl': '3600' }, body: 'kept' });
    await ds(url, 'POST', 'src', { headers: text, body: ' more' });
    // What a crash between the engine's fork and the route's creation commit leaves behind.
    await store.forkFeed('ds.src', 'ds.half', { at: 1 });
    expect((await ds(url, 'GET', 'half?offset=-1')).status).toBe(404);
    expect((await ds(url, 'HEAD', 'half')).status).toBe(404);
    const made = await ds(url, 'PUT', 'half', {
      headers: forkOf('src', { 'stream-fork-offset': '0000000000000001_0000000000000000', 'stream-ttl': '5' }),
    });
    expect(made.status).toBe(201);
    const head = await ds(url, 'HEAD', 'half');
    expect([head.headers.get('stream-ttl'), (await ds(url, 'GET', 'half?offset=-1')).text]).toEqual(['5', 'kept']);
    // A plain PUT does not take over a fork cut short either: it starts an empty stream.
    await store.forkFeed('ds.src', 'ds.plain', { at: 2 });
    expect((await ds(url, 'PUT', 'plain', { headers: text })).status).toBe(201);
    expect((await ds(url, 'GET', 'plain?offset=-1')).text).toBe('');
    expect((await (await store.feed('ds.plain')).info()).fork).toBeUndefined();
  });
});
