/**
 * Many nodes, many feeds: on a node of a cluster, a request for a feed another node writes is
 * answered with a typed redirect there (`NOT_OWNER`, 307, `Location`), before its body is read;
 * the client package follows it and sends the feed's next requests straight to the owner. Taking
 * the lease is answered by any node. When the owner dies, the client asks the node it was given
 * again, which takes the feed over once the writer's key has expired.
 */
import { describe, expect, it } from 'vitest';
import { RemoteStore } from '../../packages/client/src/index.js';
import type { ObjectStoreOptions } from '../../packages/engine/src/index.js';
import { hashToken } from '../../packages/server/src/index.js';
import { etcdBinary, etcdMissing } from '../support/etcd.mjs';
import { etcdForSuite, untilFree } from '../support/etcd-suite.js';
import { outcomeCode } from '../support/failure.js';
import { objectStoreSuite } from '../support/object-store.js';
import { ndjson, startServer } from '../support/server.js';

const objects = objectStoreSuite('cluster-redirect');
const binary = etcdBinary();
const skipped = objects.missing || binary === undefined;

describe.skipIf(skipped)(
  skipped ? `cluster redirects (skipped: ${objects.missing ? 'no versitygw' : etcdMissing})` : 'cluster redirects',
  () => {
    objects.start();
    const etcdOf = etcdForSuite();

    /** A node of cluster `prefix`: a server over a store with etcd and object store `objectStore`. */
    function node(prefix: string, name: string, objectStore: ObjectStoreOptions) {
      return startServer({
        storeOptions: {
          objectStore,
          coordination: { etcd: etcdOf().endpoint, prefix, node: name },
        },
      });
    }

    it('a request for a feed written elsewhere is redirected there, and the client follows', async () => {
      const prefix = `/redirect-${process.pid}-1/`;
      const settings = objects.settings();
      const a = await node(prefix, 'node-a', settings);
      const b = await node(prefix, 'node-b', settings);
      await a.store.advertise(a.url);
      await b.store.advertise(b.url);

      const atA = await RemoteStore.open(a.url);
      await atA.createFeed('orders', { durability: 'replicated' });
      const grant = await atA.acquireLease('orders', { holder: 'ingest', ttlMs: 1000 });
      await (await atA.feed('orders')).append([{ payload: 'first' }], { token: grant.token });
      // B's watch of etcd learns the writer key.
      const deadline = Date.now() + 5000;
      while (!b.store.ownerElsewhere('orders')) {
        if (Date.now() > deadline) throw new Error('node-b never saw the writer key of orders');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(b.store.ownerElsewhere('orders')).toMatchObject({ node: 'node-a', url: a.url, epoch: grant.epoch });
      expect(a.store.ownerElsewhere('orders')).toBeUndefined();

      // The raw answer: 307 to the same path and query at A, the owner named in a typed body.
      // An append is answered before its body is read: B stores nothing.
      const raw = await fetch(`${b.url}/v1/feeds/orders/records?after=0`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-ndjson', 'ss-fencing-token': grant.token },
        body: ndjson({ payload: 'sent to b' }),
        redirect: 'manual',
      });
      expect(raw.status).toBe(307);
      expect(raw.headers.get('location')).toBe(`${a.url}/v1/feeds/orders/records?after=0`);
      expect(await raw.json()).toEqual({
        error: {
          code: 'NOT_OWNER',
          message: expect.stringContaining('node-a'),
          feed: 'orders',
          node: 'node-a',
          url: a.url,
          epoch: grant.epoch,
          location: `${a.url}/v1/feeds/orders/records?after=0`,
        },
      });
      expect(await b.store.feedNames()).toEqual([]);
      // Reads are redirected too: a copy at another node than the writer's would be stale.
      const read = await fetch(`${b.url}/v1/feeds/orders`, { redirect: 'manual' });
      expect(read.status).toBe(307);
      // Taking the lease is B's to answer: held, naming the owner.
      const lease = await fetch(`${b.url}/v1/feeds/orders/lease`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ holder: 'other' }),
        redirect: 'manual',
      });
      expect(lease.status).toBe(409);
      expect(((await lease.json()) as { error: { code: string; node: string } }).error).toMatchObject({
        code: 'LEASE_HELD',
        node: 'node-a',
      });
      // The cluster, from either node, names the writer's address.
      const listed = (await (await RemoteStore.open(b.url)).cluster()).feeds;
      expect(listed).toHaveLength(1);
      expect(listed[0]).toMatchObject({
        feed: 'orders',
        holder: 'ingest',
        node: 'node-a',
        url: a.url,
        epoch: grant.epoch,
      });

      // The client package follows the redirect: a producer given B writes and reads at A.
      const atB = await RemoteStore.open(b.url);
      const feedViaB = await atB.feed('orders');
      await feedViaB.append([{ payload: 'via b' }], { token: grant.token });
      const payloads: string[] = [];
      for await (const record of feedViaB.read({ after: 0 })) payloads.push(Buffer.from(record.payload).toString());
      expect(payloads).toEqual(['first', 'via b']);
      expect((await (await a.store.feed('orders')).info()).head?.commit).toBe(2);
      expect(await b.store.feedNames()).toEqual([]);
      // Its next requests for the feed go straight to A: B's requests metric counts none of them.
      const before = await b.server.metrics.registry.getSingleMetricAsString(
        'streamstack_http_request_duration_seconds',
      );
      await feedViaB.info();
      const after = await b.server.metrics.registry.getSingleMetricAsString(
        'streamstack_http_request_duration_seconds',
      );
      expect(after).toBe(before);

      // A dies: its server stops answering, its grant is neither renewed nor released.
      await a.server.close();
      // The remembered owner is unreachable: the client says so, then asks B again, which still
      // redirects while A's key lives, and answers itself once it expired.
      expect(await outcomeCode(feedViaB.info())).toBe('UNAVAILABLE');
      await untilFree(b.store, 'orders');
      expect(b.store.ownerElsewhere('orders')).toBeUndefined();
      const taken = await atB.acquireLease('orders', { holder: 'ingest', ttlMs: 2000 });
      expect(taken.epoch).toBeGreaterThan(grant.epoch);
      const afterTakeover = await atB.feed('orders');
      await afterTakeover.append([{ payload: 'after a died' }], { token: taken.token });
      expect((await afterTakeover.info()).head?.commit).toBe(3);
      await afterTakeover.releaseLease({ token: taken.token });
    }, 60_000);

    it('a node that serves no address is still named (NOT_OWNER without Location); a token learns nothing of feeds it does not cover', async () => {
      const prefix = `/redirect-${process.pid}-2/`;
      const settings = objects.settings();
      const a = await node(prefix, 'node-a', settings);
      const b = await node(prefix, 'node-b', settings);
      // A never advertises: its writer key carries no address.
      await b.store.advertise(b.url);
      const feedA = await a.store.createFeed('silent', { durability: 'replicated' });
      const grant = await feedA.acquireLease({ holder: 'ingest', ttlMs: 2000 });
      const deadline = Date.now() + 5000;
      while (!b.store.ownerElsewhere('silent')) {
        if (Date.now() > deadline) throw new Error('node-b never saw the writer key of silent');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const raw = await fetch(`${b.url}/v1/feeds/silent`, { redirect: 'manual' });
      expect(raw.status).toBe(307);
      expect(raw.headers.get('location')).toBeNull();
      // A token that does not cover the feed learns nothing of where it lives: 403, not 307.
      const guarded = await startServer({
        storeOptions: { coordination: { etcd: etcdOf().endpoint, prefix, node: 'node-c' }, objectStore: settings },
        tokens: [{ name: 'reader', sha256: hashToken('reader-secret'), feeds: ['other'], operations: ['read'] }],
      });
      while (!guarded.store.ownerElsewhere('silent')) await new Promise((resolve) => setTimeout(resolve, 20));
      const hidden = await fetch(`${guarded.url}/v1/feeds/silent`, {
        headers: { authorization: 'Bearer reader-secret' },
        redirect: 'manual',
      });
      expect(hidden.status).toBe(403);
      expect(await hidden.text()).not.toContain('node-a');
      const atB = await RemoteStore.open(b.url);
      const failure = await atB.feed('silent').then(
        () => undefined,
        (error: unknown) => error as { code?: string; details?: Record<string, unknown> },
      );
      expect(failure?.code).toBe('NOT_OWNER');
      expect(failure?.details).toMatchObject({ node: 'node-a', url: null, epoch: grant.epoch });
      await feedA.releaseLease({ token: grant.token });
    }, 30_000);
  },
);
