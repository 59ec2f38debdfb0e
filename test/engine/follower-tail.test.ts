/**
 * A follower's unsealed tail, against a real S3-compatible server (versitygw) and the writer's
 * own HTTP server: with `follow`, a follower reads the commits of the writer's active segment —
 * never uploaded while it is active — within moments of their seal, every read equal to the
 * writer's; it goes on across segment rolls, a writer restart and its own; its `follow` delivers
 * each commit once; and what it reads is always a prefix of the writer's history. Segments the
 * writer finished but cannot upload (its object storage failing) come through the tail too, so
 * the follower is never held back by uploads, and takes them from object storage once they are
 * there. The route refuses bad input with typed errors.
 */
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { followerSegmentsReplacedInPlaceMax } from '../../packages/engine/src/limits.js';
import { createServer, type StreamStackServer } from '../../packages/server/src/index.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { freePort, objectStoreSuite } from '../support/object-store.js';
import { openStore, temporaryDirectory } from '../support/store.js';
import { appendShaped, readsUpTo } from '../support/tiering-check.js';

const keys = ['k0', 'k89', 'k299', 'missing'];

const objects = objectStoreSuite('follower-tail');

function ingest(feed: Feed, commits: number, from = 0): Promise<void> {
  return appendShaped(feed, commits, from, { keys: 300, tags: 11, longEvery: 7, tombstoneEvery: 89 });
}

/** Polls until `check` holds (it throws or returns false until then), for at most `ms`. */
async function until(check: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`not reached within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const headOf = async (feed: Feed) => (await feed.head())?.commit ?? 0;

/** A writer store tiering to `settings`, served on `port`. */
async function writerOn(
  directory: string,
  settings: ReturnType<ReturnType<typeof objectStoreSuite>['settings']>,
  port: number,
): Promise<{ store: Store; server: StreamStackServer; url: string }> {
  const store = await openStore(directory, { objectStore: settings, segmentBytes: 256 * 1024 });
  const server = await createServer({ store, logger: false });
  const url = await server.listen({ port });
  return { store, server, url };
}

describe.skipIf(objects.missing)(objects.title('A follower’s unsealed tail'), () => {
  objects.start();

  it('reads the writer’s active segment at once, across rolls and restarts, always a prefix', async () => {
    const settings = objects.settings();
    const port = await freePort();
    const writerDirectory = temporaryDirectory();
    let writer = await writerOn(writerDirectory, settings, port);
    let feed = await writer.store.createFeed('orders');
    await ingest(feed, 3);
    await feed.tiered();

    const followerDirectory = temporaryDirectory();
    let followerStore = await openStore(followerDirectory, {
      objectStore: settings,
      follower: true,
      follow: { url: writer.url },
    });
    let follower = await followerStore.feed('orders');
    // Commits in the writer's active segment, which object storage does not have.
    await ingest(feed, 4, 600);
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    // A follower of object storage alone stops at the last uploaded segment, before the tail.
    const sealedOnlyStore = await openStore(temporaryDirectory(), { objectStore: settings, follower: true });
    const sealedOnly = await sealedOnlyStore.feed('orders');
    expect(await headOf(sealedOnly)).toBeLessThan(await headOf(follower));
    await sealedOnlyStore.close();
    const reached = await headOf(follower);
    expect(await readsUpTo(follower, reached, keys)).toEqual(await readsUpTo(feed, reached, keys));

    // A live follow on the follower gets each new commit once, in order, as the writer seals it.
    const live = new AbortController();
    const seen: number[] = [];
    const following = (async () => {
      try {
        for await (const batch of follower.follow({ after: await headOf(follower), signal: live.signal }))
          seen.push(batch.commit.commit);
      } catch (error) {
        if (!live.signal.aborted) throw error;
      }
    })();
    const start = await headOf(feed);
    // Enough to roll segments: the follower waits for each upload, then goes on with the tail.
    for (let round = 0; round < 6; round++) {
      await ingest(feed, 3, 2000 + round * 600);
      const head = await headOf(follower);
      expect(head).toBeLessThanOrEqual(await headOf(feed));
    }
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    await until(async () => seen.length === (await headOf(feed)) - start);
    expect(seen).toEqual(Array.from({ length: seen.length }, (_, index) => start + 1 + index));
    live.abort();
    await following;
    // Commits came through the tail into the view it had, not only with views opened anew.
    const tail = (await follower.info()).follower?.tail;
    expect(tail?.url).toBe(`${writer.url}/`);
    expect(tail?.commits).toBeGreaterThan(0);
    const caught = await headOf(follower);
    expect(await readsUpTo(follower, caught, keys)).toEqual(await readsUpTo(feed, caught, keys));

    // The writer restarts on the same address; the follower goes on with it.
    await writer.server.close();
    writer = await writerOn(writerDirectory, settings, port);
    feed = await writer.store.feed('orders');
    await ingest(feed, 2, 9000);
    await until(async () => (await headOf(follower)) === (await headOf(feed)));

    // The follower restarts: its tail is copied again, and it reads the same.
    await followerStore.close();
    followerStore = await openStore(followerDirectory, {
      objectStore: settings,
      follower: true,
      follow: { url: writer.url },
    });
    follower = await followerStore.feed('orders');
    await ingest(feed, 1, 9900);
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    const head = await headOf(follower);
    expect(await readsUpTo(follower, head, keys)).toEqual(await readsUpTo(feed, head, keys));
    await followerStore.close();
    await writer.server.close();
  }, 120_000);

  it('takes segments the writer finished but has not uploaded through the tail, then from object storage', async () => {
    const settings = objects.settings();
    // The writer reaches object storage through a proxy that can fail its requests.
    const proxy = await startFaultProxy(objects.server().endpoint);
    const writerDirectory = temporaryDirectory();
    const store = await openStore(writerDirectory, {
      objectStore: { ...settings, endpoint: proxy.endpoint },
      segmentBytes: 256 * 1024,
    });
    const server = await createServer({ store, logger: false });
    const url = await server.listen({ port: 0 });
    const feed = await store.createFeed('orders');
    await ingest(feed, 3);
    await feed.tiered();
    const remoteBefore = (await feed.tiered()).remoteSegments;
    const followerDirectory = temporaryDirectory();
    let followerStore = await openStore(followerDirectory, { objectStore: settings, follower: true, follow: { url } });
    let follower = await followerStore.feed('orders');
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    const live = new AbortController();
    const seen: number[] = [];
    const start = await headOf(follower);
    const following = (async () => {
      try {
        for await (const batch of follower.follow({ after: start, signal: live.signal }))
          seen.push(batch.commit.commit);
      } catch (error) {
        if (!live.signal.aborted) throw error;
      }
    })();

    // Uploads fail from now on: the segments the writer finishes stay local to it.
    proxy.mode = { kind: 'fail', status: 503 };
    for (let round = 0; round < 8; round++) await ingest(feed, 3, 3000 + round * 600);
    const info = await feed.info();
    expect(info.tiering!.pendingSegments).toBeGreaterThanOrEqual(3);
    expect(info.tiering!.remoteSegments).toBe(remoteBefore);
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    await until(async () => seen.length === (await headOf(feed)) - start);
    expect(seen).toEqual(Array.from({ length: seen.length }, (_, index) => start + 1 + index));
    let head = await headOf(follower);
    expect(await readsUpTo(follower, head, keys)).toEqual(await readsUpTo(feed, head, keys));
    // Object storage alone has none of it.
    const sealedOnlyStore = await openStore(temporaryDirectory(), { objectStore: settings, follower: true });
    expect(await headOf(await sealedOnlyStore.feed('orders'))).toBeLessThan(head);
    await sealedOnlyStore.close();

    // A restart copies the finished segments from the writer again.
    live.abort();
    await following;
    await followerStore.close();
    followerStore = await openStore(followerDirectory, { objectStore: settings, follower: true, follow: { url } });
    follower = await followerStore.feed('orders');
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    expect(await readsUpTo(follower, head, keys)).toEqual(await readsUpTo(feed, head, keys));

    // Uploads go through again: the follower takes those segments from object storage, and goes on.
    const pending = (await feed.info()).tiering!.pendingSegments;
    const changesBefore = (await follower.info()).follower!.changes;
    proxy.mode = { kind: 'pass' };
    const uploaded = await feed.tiered();
    expect(uploaded.pendingSegments).toBe(0);
    await follower.refresh();
    await follower.refresh();
    // The segments replace copies the view reads already: it goes on, opened anew at most
    // once every fifth such segment (or for what else changed: a merge's retirements).
    expect(pending).toBeLessThanOrEqual(followerSegmentsReplacedInPlaceMax);
    expect((await follower.info()).follower!.changes - changesBefore).toBe(0);
    await ingest(feed, 3, 9000);
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    head = await headOf(follower);
    expect(await readsUpTo(follower, head, keys)).toEqual(await readsUpTo(feed, head, keys));
    expect((await follower.info()).follower?.syncs).toBeGreaterThan(0);

    // Past the bound on segments replaced in place, the follower opens a new view.
    proxy.mode = { kind: 'fail', status: 503 };
    for (let round = 0; (await feed.info()).tiering!.pendingSegments <= followerSegmentsReplacedInPlaceMax; round++)
      await ingest(feed, 3, 20_000 + round * 600);
    await until(async () => (await headOf(follower)) === (await headOf(feed)));
    const reopenedBefore = (await follower.info()).follower!.changes;
    proxy.mode = { kind: 'pass' };
    await feed.tiered();
    await follower.refresh();
    await follower.refresh();
    expect((await follower.info()).follower!.changes - reopenedBefore).toBeGreaterThanOrEqual(1);
    head = await headOf(feed);
    await until(async () => (await headOf(follower)) === head);
    expect(await readsUpTo(follower, head, keys)).toEqual(await readsUpTo(feed, head, keys));
    await followerStore.close();
    await server.close();
    await proxy.close();
  }, 120_000);

  it('answers the tail route with typed errors for bad input, and 204 for another segment', async () => {
    const settings = objects.settings();
    const writer = await writerOn(temporaryDirectory(), settings, 0);
    const feed = await writer.store.createFeed('orders');
    await ingest(feed, 1);
    const at = (query: string) => fetch(`${writer.url}/v1/feeds/orders/history/tail?${query}`);
    const missingBase = await at('from=0');
    expect(missingBase.status).toBe(400);
    expect(((await missingBase.json()) as { error: { code: string } }).error.code).toBe('INVALID_ARGUMENT');
    expect((await at('base=1&from=0&waitMs=999999')).status).toBe(400);
    const elsewhere = await at('base=123456&from=0');
    expect(elsewhere.status).toBe(204);
    expect(elsewhere.headers.get('streamstack-tail-base')).toBe('1');
    const whole = await at('base=1&from=0');
    expect(whole.status).toBe(200);
    const end = Number(whole.headers.get('streamstack-tail-end'));
    expect((await whole.arrayBuffer()).byteLength).toBe(end);
    // An offset inside a group is not where one starts.
    const inside = await at(`base=1&from=${end - 3}`);
    expect(inside.status).toBe(400);
    // Nothing new yet: a long poll answers when the next commit is sealed.
    const waiting = at(`base=1&from=${end}&waitMs=5000`);
    await ingest(feed, 1, 200);
    const next = await waiting;
    expect(next.status).toBe(200);
    expect(Number(next.headers.get('streamstack-tail-from'))).toBe(end);
    expect(Number(next.headers.get('streamstack-tail-end'))).toBeGreaterThan(end);
    await writer.server.close();
  }, 60_000);
});
