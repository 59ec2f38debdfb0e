/**
 * Object storage that misbehaves short of going away, through a proxy in front of versitygw that
 * answers every request with a 503 or a 500 of its own, or passes them on slowly: the writer goes
 * on acknowledging and its uploads catch up once the server answers again; reads of evicted
 * history and a follower's syncs fail with `UNAVAILABLE` (and say so in `feed info`) while it
 * errs, and work again after; slow answers only make things slow.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { Feed } from '../../packages/engine/src/index.js';
import { failure } from '../support/failure.js';
import { type FaultProxy, startFaultProxy } from '../support/fault-proxy.js';
import { objectStoreSuite } from '../support/object-store.js';
import { collect, openStore, recordShapes, temporaryDirectory } from '../support/store.js';
import { appendShaped } from '../support/tiering-check.js';

const objects = objectStoreSuite('faults');
const proxies: FaultProxy[] = [];
afterAll(async () => {
  for (const proxy of proxies) await proxy.close();
});

function ingest(feed: Feed, commits: number, from = 0): Promise<void> {
  return appendShaped(feed, commits, from, { keys: 300, tags: 7, longEvery: 9, tombstoneEvery: 0 });
}

describe.skipIf(objects.missing)(objects.title('Object storage answering errors or slowly'), () => {
  objects.start();

  it('keeps acknowledging, fails evicted reads and follower syncs with UNAVAILABLE, and catches up after', async () => {
    const proxy = await startFaultProxy(objects.server().endpoint);
    proxies.push(proxy);
    const settings = objects.settings({ endpoint: proxy.endpoint });
    const writerStore = await openStore(temporaryDirectory(), {
      objectStore: { ...settings, localHistoryBytesMax: 0 },
    });
    const writer = await writerStore.createFeed('events');
    await ingest(writer, 20);
    expect((await writer.tiered()).evictedSegments).toBeGreaterThan(0);
    const followerStore = await openStore(temporaryDirectory(), { objectStore: settings, follower: true });
    const follower = await followerStore.feed('events');
    const followedHead = (await follower.head())!.commit;

    for (const status of [503, 500] as const) {
      proxy.mode = { kind: 'fail', status };
      // A sync the follower's timer began before the failures may still bring what went up.
      await follower.refresh().catch(() => undefined);
      const heldHead = (await follower.head())!.commit;
      // Acknowledgements never wait for object storage: these seal segments that cannot go up.
      await ingest(writer, 10, 20 * 200);
      expect((await failure(() => collect(writer.read()))).code).toBe('UNAVAILABLE');
      expect((await failure(() => writer.tiered())).code).toBe('UNAVAILABLE');
      expect((await writer.info()).tiering).toMatchObject({ lastError: { code: 'UNAVAILABLE' } });
      expect((await writer.info()).tiering!.pendingSegments).toBeGreaterThan(0);
      expect((await failure(() => follower.refresh())).code).toBe('UNAVAILABLE');
      expect((await follower.info()).follower).toMatchObject({ lastError: { code: 'UNAVAILABLE' } });
      // The follower keeps the history it had.
      expect((await follower.head())!.commit).toBe(heldHead);
      expect(proxy.failed).toBeGreaterThan(0);
      proxy.mode = { kind: 'pass' };
      await writer.tiered();
    }

    // Slow answers: everything works, and the uploads that waited go up.
    proxy.mode = { kind: 'slow', delayMs: 150 };
    await ingest(writer, 5, 40 * 200);
    const tiering = await writer.tiered();
    expect(tiering).toMatchObject({ pendingSegments: 0, lastError: null });
    const everything = recordShapes(await collect(writer.read()));
    expect(everything).toHaveLength(45 * 200);
    const head = (await follower.refresh())!.commit;
    expect(head).toBeGreaterThan(followedHead);
    expect(recordShapes(await collect(follower.read()))).toEqual(
      recordShapes(await collect(writer.read({ upTo: head }))),
    );
    expect((await follower.info()).follower).toMatchObject({ failures: 0, lastError: null });
    proxy.mode = { kind: 'pass' };
    await followerStore.close();
    await writerStore.close();
  }, 120_000);
});
