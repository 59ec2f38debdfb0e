/**
 * A follower as a user starts one on another machine: `streamstack --follower --object-store …`
 * over an empty directory, in a process of its own, reads the feeds a writer tiers there, line
 * for line what the writer reads over the same commits, and refuses writes with a typed error; a
 * follower's HTTP server serves the same reads and answers a write with 409 `READ_ONLY`.
 */
import { describe, expect, it } from 'vitest';
import type { Feed } from '../../packages/engine/src/index.js';
import { cli, cliAsync } from '../support/cli.js';
import { objectStoreSuite } from '../support/object-store.js';
import { call, ndjson, startServer } from '../support/server.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('cli-follower');

/** A writer's feed with several tiered segments; returns it with its settings' prefix. */
async function tieredWriter(feedName: string) {
  const settings = objects.settings();
  const store = await openStore(temporaryDirectory(), { objectStore: settings });
  const feed = await store.createFeed(feedName);
  for (let commit = 0; commit < 20; commit++)
    await feed.append(
      Array.from({ length: 150 }, (_, index) => {
        const n = commit * 150 + index;
        return { payload: `{"n":${n},"text":"${'z'.repeat(40)}"}`, key: `k${n % 90}`, tags: [`t${n % 4}`] };
      }),
    );
  await feed.tiered();
  return { store, feed, prefix: settings.prefix! };
}

/** The writer's record lines over its commits up to `upTo`, as parsed objects. */
async function writerLines(feed: Feed, upTo: number, mode: 'raw' | 'latest' = 'raw') {
  const text = Buffer.concat(await collect(feed.readLines({ upTo, mode }))).toString('utf8');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line));
}

describe.skipIf(objects.missing)(objects.title('streamstack --follower'), () => {
  objects.start();

  it('reads in a process of its own what the writer tiered, and refuses writes', async () => {
    const { store, feed, prefix } = await tieredWriter('orders');
    const data = temporaryDirectory();
    const env = { ...objects.environment(prefix), STREAMSTACK_FOLLOWER: '1' };
    const info = cli(data, ['feed', 'info', 'orders'], '', env);
    expect(info.status).toBe(0);
    const head = (info.lines[0]!.head as { commit: number }).commit;
    expect(head).toBeGreaterThan(10);
    expect(head).toBeLessThanOrEqual(20);
    const listed = cli(data, ['feed', 'list'], '', env);
    expect(listed.lines.map((line) => line.feed)).toContain('orders');

    const read = cli(data, ['read', 'orders'], '', env);
    expect(read.status).toBe(0);
    expect(read.lines).toEqual(await writerLines(feed, head));
    const latest = cli(data, ['read', 'orders', '--mode', 'latest'], '', env);
    expect(latest.lines).toEqual(await writerLines(feed, head, 'latest'));

    // verify checks the copy and reads every record back from object storage.
    const verified = cli(data, ['verify', 'orders', '--quiet'], '', env);
    expect(verified.lines[0]).toMatchObject({ feed: 'orders', ok: true, commits: head, problems: [] });

    const refused = cli(data, ['append', 'orders'], '{"payload":"x"}\n', env);
    expect(refused.status).not.toBe(0);
    expect(JSON.parse(refused.stderr.trim().split('\n').at(-1)!).error).toMatchObject({ code: 'READ_ONLY' });
    expect(refused.stderr).not.toContain(objects.server().credentials.secretAccessKey);

    // --follower without object storage is a usage error, and touches nothing.
    const lone = cli(temporaryDirectory(), ['--follower', 'read', 'orders'], '', {});
    expect(lone.status).toBe(2);
    await store.close();
  });

  it('serves the writer’s tiered history over HTTP and answers a write with 409 READ_ONLY', async () => {
    const { store, feed, prefix } = await tieredWriter('served');
    const { url } = await startServer({
      storeOptions: { objectStore: objects.settings({ prefix }), follower: true },
    });
    const info = (await call(url, 'GET', '/v1/feeds/served')).json;
    const head = info.head.commit as number;
    expect(info.follower).toMatchObject({ failures: 0, lastError: null });
    expect(info.follower.syncs).toBeGreaterThanOrEqual(1);
    const metrics = (await call(url, 'GET', '/metrics')).text;
    expect(metrics).toMatch(/streamstack_follower\{[^}]*count="syncs"[^}]*\} [1-9]/);
    const read = await call(url, 'GET', '/v1/feeds/served/records?after=0');
    expect(read.status).toBe(200);
    expect(read.lines).toEqual(await writerLines(feed, head));
    const write = await call(url, 'POST', '/v1/feeds/served/records', { body: ndjson({ payload: 'x' }) });
    expect(write.status).toBe(409);
    expect(write.json.error).toMatchObject({ code: 'READ_ONLY', follower: true });
    await store.close();
  });

  it('with --follow reads the writer’s unsealed tail from its server, in one command', async () => {
    const settings = objects.settings();
    const writer = await startServer({ storeOptions: { objectStore: settings } });
    const made = await call(writer.url, 'POST', '/v1/feeds', { body: { name: 'live' } });
    expect(made.status).toBe(201);
    for (let commit = 0; commit < 3; commit++) {
      const appended = await call(writer.url, 'POST', '/v1/feeds/live/records', {
        body: ndjson(
          ...Array.from({ length: 50 }, (_, index) => ({ payload: `c${commit}-${index}`, key: `k${index}` })),
        ),
      });
      expect(appended.status).toBe(201);
    }
    // Nothing is tiered yet (the active segment is never uploaded) but the feed's name, which
    // the writer's first tiering pass publishes soon after the feed is made.
    const env = { ...objects.environment(settings.prefix!), STREAMSTACK_FOLLOWER: '1' };
    const data = temporaryDirectory();
    for (let tries = 0; (await cliAsync(data, ['feed', 'info', 'live'], env)).status !== 0; tries++) {
      expect(tries).toBeLessThan(100);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const read = await cliAsync(data, ['--follow', writer.url, 'read', 'live'], env);
    expect(read.status, read.stderr).toBe(0);
    expect(read.lines.map((line) => line.payload)).toEqual(
      [0, 1, 2].flatMap((commit) => Array.from({ length: 50 }, (_, index) => `c${commit}-${index}`)),
    );
    const info = (await cliAsync(data, ['--follow', writer.url, 'feed', 'info', 'live'], env)).lines[0] as {
      follower: { tail: { url: string } };
    };
    expect(info.follower.tail.url).toBe(`${writer.url}/`);
    // --follow is for a follower: alone it is a usage error.
    const lone = cli(temporaryDirectory(), ['--follow', writer.url, 'read', 'live'], '', {});
    expect(lone.status).toBe(2);
  });
});
