/**
 * Failover of a replicated feed between two nodes (two stores, one etcd, one object store): when
 * the writer stops and its key in etcd expires, another node asked for the lease takes the feed
 * over — fences the slots, lays the feed out from the tiered history and the slots, and writes
 * on — with every acknowledged commit there exactly once and the open stream's acknowledged
 * records kept; the old writer, back, is fenced and takes the feed back only by a takeover
 * that drops nothing acknowledged. A local-durability feed cannot be taken over.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, ObjectStoreOptions, Store } from '../../packages/engine/src/index.js';
import { etcdBinary, etcdMissing } from '../support/etcd.mjs';
import { etcdForSuite, untilFree } from '../support/etcd-suite.js';
import { outcomeCode } from '../support/failure.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { objectStoreSuite } from '../support/object-store.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('failover');
const binary = etcdBinary();
const skipped = objects.missing || binary === undefined;

let prefixes = 0;
const freshPrefix = (): string => `/failover-${process.pid}-${++prefixes}/`;

/** Every record's payload, in order, read from the start. */
async function payloads(feed: Feed): Promise<string[]> {
  const found: string[] = [];
  for await (const record of feed.read({ after: 0 })) found.push(Buffer.from(record.payload).toString());
  return found;
}

/**
 * Appends 200 commits of 4 orders, each with one of `keys` keys and a shop tag (so every sealed
 * segment has a tag index and dictionaries); returns their payloads in order.
 */
async function appendKeyedOrders(feed: Feed, token: string, keys: number): Promise<string[]> {
  const written: string[] = [];
  for (let n = 0; n < 200; n++) {
    const batch = Array.from({ length: 4 }, (_, k) => `order ${n}.${k} ${'o'.repeat(200)}`);
    await feed.append(
      batch.map((payload, k) => ({ payload, key: `k${(n * 4 + k) % keys}`, tags: [`shop:${n % 5}`] })),
      { token },
    );
    written.push(...batch);
  }
  return written;
}

/** Checks that `get` finds each of `keys` keys' latest payload among `written` (as `appendKeyedOrders` keyed them). */
async function expectLatestPerKey(feed: Feed, written: readonly string[], keys: number): Promise<void> {
  for (let key = 0; key < keys; key++) {
    const last = written.findLastIndex((_, at) => at % keys === key);
    expect(Buffer.from((await feed.get(`k${key}`))?.payload ?? []).toString()).toBe(written[last]);
  }
}

describe.skipIf(skipped)(
  skipped ? `failover (skipped: ${objects.missing ? 'no versitygw' : etcdMissing})` : 'failover',
  () => {
    objects.start();
    const etcdOf = etcdForSuite();

    /** A node of cluster `prefix` over the object store `settings`, with data directory `data`. */
    function node(settings: ObjectStoreOptions, prefix: string, name: string, data = temporaryDirectory()) {
      return openStore(data, {
        objectStore: settings,
        coordination: { etcd: etcdOf().endpoint, prefix, node: name },
        // Small segments: the history spans several, some tiered, some only in slots.
        segmentBytes: 64 * 1024,
      });
    }

    it('another node takes a stopped writer over: every acknowledged commit and open-stream record, once', async () => {
      const prefix = freshPrefix();
      const settings = objects.settings();
      const dataA = temporaryDirectory();
      const open = (name: string, data: string) => node(settings, prefix, name, data);
      const storeA = await open('node-a', dataA);
      const feedA = await storeA.createFeed('orders', { durability: 'replicated' });
      // A long TTL while it writes, however slowly a busy machine runs; a short one before it stops.
      const grantA = await feedA.acquireLease({ holder: 'ingest', ttlMs: 30_000 });
      const written: string[] = [];
      // Enough commits to fill several segments: some are uploaded, the newest only in slots.
      for (let n = 0; n < 300; n++) {
        const batch = Array.from({ length: 4 }, (_, k) => `order ${n}.${k} ${'o'.repeat(200)}`);
        await feedA.append(
          batch.map((payload) => ({ payload, key: `k${n % 13}`, type: 'placed', tags: [`shop:${n % 5}`] })),
          { token: grantA.token },
        );
        written.push(...batch);
      }
      await feedA.tiered();
      // A stream left open: its two acknowledged batches must survive the writer.
      const stream = await feedA.openStream({ token: grantA.token, message: 'nightly' });
      await stream.append([{ payload: 'open 1' }, { payload: 'open 2' }], { token: grantA.token });
      await stream.append([{ payload: 'open 3' }], { token: grantA.token });
      const headA = (await feedA.info()).head?.commit;
      // Renewed as a producer would, to a short TTL: the takeover below waits for it to run out.
      await feedA.renewLease({ token: grantA.token, ttlMs: 2000 });
      // The writer stops as a crash would: its grant is neither renewed nor released.
      await storeA.close();

      const storeB = await open('node-b', temporaryDirectory());
      // While the old grant lives in etcd, the feed is not free.
      expect(await outcomeCode(storeB.takeOver('orders', { holder: 'ingest' }))).toBe('LEASE_HELD');
      await untilFree(storeB, 'orders');
      // Two producers ask at once: one takeover runs, the other finds the lease held.
      const asked = await Promise.allSettled([
        storeB.takeOver('orders', { holder: 'ingest', ttlMs: 2000 }),
        storeB.takeOver('orders', { holder: 'ingest-2', ttlMs: 2000 }),
      ]);
      const granted = asked.filter((outcome) => outcome.status === 'fulfilled');
      expect(granted).toHaveLength(1);
      const refused = asked.find((outcome) => outcome.status === 'rejected') as PromiseRejectedResult;
      expect((refused.reason as { code?: string }).code).toBe('LEASE_HELD');
      const taken = (granted[0] as PromiseFulfilledResult<Awaited<ReturnType<Store['takeOver']>>>).value;
      expect(taken.grant.epoch).toBeGreaterThan(grantA.epoch);
      expect(taken.head).toBe(headA);
      expect(taken.activeStream).toBe(stream.id);
      expect(taken.slots.historyGroups).toBeGreaterThan(0);
      expect(taken.slots.walGroups).toBeGreaterThan(0);
      expect(taken.droppedCommits).toBe(0);

      const feedB = await storeB.feed('orders');
      expect(await payloads(feedB)).toEqual(written);
      // The new owner seals the stream it inherited: its acknowledged records become a commit.
      const inherited = await feedB.stream(stream.id);
      const sealed = await inherited.seal({ token: taken.grant.token });
      expect(sealed.commit).toBe((headA ?? 0) + 1);
      await feedB.append([{ payload: 'after failover' }], { token: taken.grant.token });
      expect((await payloads(feedB)).slice(written.length)).toEqual(['open 1', 'open 2', 'open 3', 'after failover']);
      // Tag and key reads work over the restored history.
      let shop3 = 0;
      for await (const _ of feedB.read({ after: 0, filter: { tags: ['shop:3'] } })) shop3++;
      expect(shop3).toBe(written.length / 5);
      const headB = (await feedB.info()).head?.commit ?? 0;
      await feedB.releaseLease({ token: taken.grant.token });

      // The old writer comes back: its copy is fenced off, and asking it for the lease takes the
      // feed back over, laid out again, without dropping anything acknowledged.
      const reopened = await open('node-a', dataA);
      const oldFeed = await reopened.feed('orders');
      expect(await outcomeCode(oldFeed.append([{ payload: 'zombie' }]))).toBe('FENCED');
      const back = await reopened.acquireLease('orders', { holder: 'ingest', ttlMs: 2000 });
      expect(back.epoch).toBeGreaterThan(taken.grant.epoch);
      const again = await reopened.feed('orders');
      expect((await again.info()).head?.commit).toBe(headB);
      expect(await payloads(again)).toEqual([...written, 'open 1', 'open 2', 'open 3', 'after failover']);
      expect(await outcomeCode(oldFeed.append([{ payload: 'old handle' }]))).toBe('FENCED');
      await reopened.close();
      await storeB.close();
    }, 120_000);

    it('a node with a copy of the feed takes it over from that copy: only what differs is fetched, and a damaged file never comes with it', async () => {
      const prefix = freshPrefix();
      const settings = objects.settings();
      const dataA = temporaryDirectory();
      const dataB = temporaryDirectory();
      const storeA = await node(settings, prefix, 'node-a', dataA);
      const feedA = await storeA.createFeed('orders', { durability: 'replicated' });
      const grantA = await feedA.acquireLease({ holder: 'ingest', ttlMs: 30_000 });
      const written = await appendKeyedOrders(feedA, grantA.token, 97);
      await feedA.tiered();
      await feedA.renewLease({ token: grantA.token, ttlMs: 1000 });
      await storeA.close();

      // A node without a copy fetches every file of the tiered history.
      const storeB = await node(settings, prefix, 'node-b', dataB);
      await untilFree(storeB, 'orders');
      const toB = await storeB.takeOver('orders', { holder: 'ingest', ttlMs: 1000 });
      expect(toB.history.filesReused).toBe(0);
      expect(toB.history.requests).toBeGreaterThan(20);
      const feedB = await storeB.feed('orders');
      await feedB.append([{ payload: 'at b' }], { token: toB.grant.token });
      await storeB.close();

      // The old writer's copy holds every tiered file as it uploaded it, but one, damaged here
      // once its feed is open and the lease is free (an open would build a damaged file again).
      const storeA2 = await node(settings, prefix, 'node-a', dataA);
      await storeA2.feed('orders');
      await untilFree(storeA2, 'orders');
      const index = path.join(dataA, 'feeds', 'orders', 'index');
      const tagIndexes = fs.readdirSync(index).filter((name) => name.endsWith('.idx'));
      expect(tagIndexes.length).toBeGreaterThan(1);
      const damaged = tagIndexes[0] as string;
      const fetched = fs.readFileSync(path.join(dataB, 'feeds', 'orders', 'index', damaged));
      const bytes = fs.readFileSync(path.join(index, damaged));
      expect(bytes).toEqual(fetched);
      bytes[bytes.length >> 1] = (bytes[bytes.length >> 1] as number) ^ 0x40;
      fs.writeFileSync(path.join(index, damaged), bytes);
      const toA = await storeA2.takeOver('orders', { holder: 'ingest', ttlMs: 30_000 });
      expect(toA.history.filesRefused).toBe(1);
      expect(toA.history.filesReused).toBeGreaterThan(tagIndexes.length);
      expect(toA.history.bytesReused).toBeGreaterThan(0);
      // Only the descriptors and the damaged file: far fewer requests than a layout from nothing.
      expect(toA.history.requests).toBeLessThan(toB.history.requests / 2);
      // The damaged file was fetched in its place; the rest read as they did.
      expect(fs.readFileSync(path.join(index, damaged))).toEqual(fetched);
      const feedA2 = await storeA2.feed('orders');
      expect(await payloads(feedA2)).toEqual([...written, 'at b']);
      await expectLatestPerKey(feedA2, written, 97);
      let shop2 = 0;
      for await (const _ of feedA2.read({ after: 0, filter: { tags: ['shop:2'] } })) shop2++;
      expect(shop2).toBe(written.length / 5);
      await feedA2.releaseLease({ token: toA.grant.token });
      await storeA2.close();
    }, 120_000);

    it('sealed segments that only slots hold are written back, and their dictionaries built after the open', async () => {
      const prefix = freshPrefix();
      const proxy = await startFaultProxy(objects.server().endpoint);
      try {
        // Object storage takes the slots but no segment: the sealed segments stay only in slots.
        proxy.refuse = (method, url) =>
          method === 'PUT' && (url.includes('/segments/') || url.includes('/descriptors/'));
        const settings = objects.settings();
        const storeA = await node({ ...settings, endpoint: proxy.endpoint }, prefix, 'node-a');
        const feedA = await storeA.createFeed('orders', { durability: 'replicated' });
        const grantA = await feedA.acquireLease({ holder: 'ingest', ttlMs: 30_000 });
        const written = await appendKeyedOrders(feedA, grantA.token, 53);
        expect((await feedA.diskUse()).historySegments).toBeGreaterThan(2);
        await feedA.renewLease({ token: grantA.token, ttlMs: 1000 });
        await storeA.close();
        proxy.refuse = undefined;

        const storeB = await node(settings, prefix, 'node-b');
        await untilFree(storeB, 'orders');
        const taken = await storeB.takeOver('orders', { holder: 'ingest', ttlMs: 30_000 });
        expect(taken.history.filesReused).toBe(0);
        const feedB = await storeB.feed('orders');
        // Acknowledged without waiting for the dictionaries of what came back from the slots.
        await feedB.append([{ payload: 'after' }], { token: taken.grant.token });
        // A lookup waits for them, and finds every key's latest record.
        await expectLatestPerKey(feedB, written, 53);
        expect(await payloads(feedB)).toEqual([...written, 'after']);
        // Reported as built after the open, every dictionary of them; none before it.
        const dictionaries = feedB.indexRebuilds.filter(
          (rebuild) => rebuild.file.endsWith('.keys') || rebuild.file.endsWith('.fps'),
        );
        expect(dictionaries.length).toBeGreaterThanOrEqual(4);
        for (const rebuild of dictionaries) expect(rebuild.reason).toMatch(/built after the open/);
        await feedB.releaseLease({ token: taken.grant.token });
        await storeB.close();
      } finally {
        await proxy.close();
      }
    }, 120_000);

    it('subscriptions carry over a takeover: each commit is delivered once, and the old writer moves none', async () => {
      const prefix = freshPrefix();
      const settings = objects.settings();
      const dataA = temporaryDirectory();
      const storeA = await node(settings, prefix, 'node-a', dataA);
      const feedA = await storeA.createFeed('orders', { durability: 'replicated' });
      const grantA = await feedA.acquireLease({ holder: 'ingest', ttlMs: 30_000 });
      for (let n = 0; n < 20; n++) await feedA.append([{ payload: `order ${n}` }], { token: grantA.token });
      const billing = await feedA.createSubscription('billing');
      await feedA.createSubscription('gone');
      await (await feedA.subscription('gone')).delete();
      const delivered: string[] = [];
      // The consumer takes a first batch and advances past it: acknowledged only once etcd has it.
      const first = await billing.poll({ max: 3 });
      for (const commit of first.commits)
        for (const record of commit.records) delivered.push(Buffer.from(record.payload).toString());
      await billing.advance(first.cursor);
      const cursorBefore = (await billing.info()).cursor;
      // A short TTL before the writer stops, so the takeover waits little for it.
      await feedA.renewLease({ token: grantA.token, ttlMs: 1000 });
      await storeA.close();

      const storeB = await node(settings, prefix, 'node-b');
      await untilFree(storeB, 'orders');
      const taken = await storeB.takeOver('orders', { holder: 'ingest', ttlMs: 2000 });
      const feedB = await storeB.feed('orders');
      expect((await feedB.subscriptions()).map((listed) => listed.name)).toEqual(['billing']);
      const carried = await feedB.subscription('billing');
      expect((await carried.info()).cursor).toBe(cursorBefore);
      // The consumer goes on at the new writer: the rest, once, in order.
      for (;;) {
        const batch = await carried.poll({ max: 5 });
        if (batch.commits.length === 0) break;
        for (const commit of batch.commits)
          for (const record of commit.records) delivered.push(Buffer.from(record.payload).toString());
        await carried.advance(batch.cursor);
      }
      expect(delivered).toEqual(Array.from({ length: 20 }, (_, n) => `order ${n}`));

      // The old writer, back, moves no cursor: the feed has a newer writer.
      const reopened = await node(settings, prefix, 'node-a', dataA);
      const stale = await (await reopened.feed('orders')).subscription('billing');
      expect(await outcomeCode(stale.advance(cursorBefore + 1))).toBe('FENCED');
      expect((await carried.info()).cursor).toBe((await feedB.info()).head?.commit);
      await feedB.releaseLease({ token: taken.grant.token });
      await reopened.close();
      await storeB.close();
    }, 60_000);

    it('subscription groups carry over a takeover: claims, counts and settled work, and the old writer changes none', async () => {
      const prefix = freshPrefix();
      const settings = objects.settings();
      const dataA = temporaryDirectory();
      const storeA = await node(settings, prefix, 'node-a', dataA);
      const feedA = await storeA.createFeed('jobs', { durability: 'replicated' });
      const grantA = await feedA.acquireLease({ holder: 'ingest', ttlMs: 30_000 });
      for (let n = 0; n < 6; n++) await feedA.append([{ payload: `job ${n}` }], { token: grantA.token });
      const groupA = await feedA.subscriptionGroup('workers', { ackTimeoutMs: 60_000, maxDeliveries: 3 });
      const claimed = await groupA.claim({ worker: 'w1', max: 3 });
      expect(claimed.map((claim) => claim.commit.commit)).toEqual([1, 2, 3]);
      await groupA.ack(1, { worker: 'w1' });
      await groupA.nack(2, { worker: 'w1', reason: 'later' });
      const before = await groupA.info();
      // A short TTL before the writer stops, so the takeover waits little for it.
      await feedA.renewLease({ token: grantA.token, ttlMs: 1000 });
      await storeA.close();

      const storeB = await node(settings, prefix, 'node-b');
      await untilFree(storeB, 'jobs');
      const taken = await storeB.takeOver('jobs', { holder: 'ingest', ttlMs: 2000 });
      const feedB = await storeB.feed('jobs');
      const groupB = await feedB.existingSubscriptionGroup('workers');
      const after = await groupB.info();
      expect({ ...after, lag: undefined }).toEqual({ ...before, lag: undefined });
      // The claim w1 still holds is its to settle at the new writer; the one given back goes again.
      await groupB.ack(3, { worker: 'w1' });
      expect(await groupB.claim({ worker: 'w2', max: 10 })).toMatchObject([
        { commit: { commit: 2 }, delivery: 2, reason: 'later' },
        { commit: { commit: 4 } },
        { commit: { commit: 5 } },
        { commit: { commit: 6 } },
      ]);

      // The old writer, back, changes nothing of the group: the feed has a newer writer.
      const reopened = await node(settings, prefix, 'node-a', dataA);
      const stale = await (await reopened.feed('jobs')).existingSubscriptionGroup('workers');
      expect(await outcomeCode(stale.claim({ worker: 'w3' }))).toBe('FENCED');
      await feedB.releaseLease({ token: taken.grant.token });
      await reopened.close();
      await storeB.close();
    }, 60_000);

    it('a local-durability feed is refused: only its writer disk held its acknowledged writes', async () => {
      const prefix = freshPrefix();
      const settings = objects.settings();
      const storeA = await node(settings, prefix, 'node-a');
      await storeA.createFeed('clicks');
      await (await storeA.feed('clicks')).append([{ payload: 'c' }]);
      // Its feed.json goes up with its first segment: fill one.
      const clicks = await storeA.feed('clicks');
      for (let n = 0; n < 200; n++) await clicks.append([{ payload: `click ${n} ${'c'.repeat(400)}` }]);
      await clicks.tiered();
      const storeB = await node(settings, prefix, 'node-b');
      expect(await outcomeCode(storeB.takeOver('clicks', { holder: 'x' }))).toBe('INVALID_ARGUMENT');
      expect(await outcomeCode(storeB.takeOver('nothing-here', { holder: 'x' }))).toBe('FEED_NOT_FOUND');
      // Bad input is refused before etcd or object storage is asked, and leaves nothing behind.
      expect(await outcomeCode(storeB.takeOver('clicks', { holder: '' }))).toBe('INVALID_ARGUMENT');
      expect(await outcomeCode(storeB.takeOver('clicks', { holder: 'x', ttlMs: -1 }))).toBe('INVALID_ARGUMENT');
      expect(await outcomeCode(storeB.takeOver('../etc', { holder: 'x' }))).toBe('INVALID_NAME');
      expect(await storeB.feedNames()).toEqual([]);
      expect((await storeB.cluster()).feeds).toEqual([]);
      await storeA.close();
      await storeB.close();
    }, 60_000);
  },
);
