/**
 * Writer leases kept in etcd (`Store.open(dir, { coordination })`), against a real etcd server:
 * a grant is one transaction that creates the feed's writer key and raises its epoch; a second
 * node is refused while the key lives; a grant lost in etcd stops writes at once; an etcd wiped
 * empty never hands out an epoch already used; nodes racing for a lease get exactly one writer
 * per epoch.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RemoteLease } from '../../packages/engine/src/coordinator/writing/etcd-leases.js';
import { type Store, StreamStackError } from '../../packages/engine/src/index.js';
import { hashToken } from '../../packages/server/src/index.js';
import { etcdBinary, etcdMissing, startEtcd } from '../support/etcd.mjs';
import { eventually } from '../support/etcd-suite.js';
import { outcomeCode } from '../support/failure.js';
import { call, startServer } from '../support/server.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const binary = etcdBinary();

interface Etcd {
  readonly endpoint: string;
  halt(): Promise<void>;
  resume(): Promise<void>;
  wipe(): Promise<void>;
  stop(): Promise<void>;
}

const encode = (text: string): string => Buffer.from(text).toString('base64');

/** A key's value in etcd, read straight through its gateway: undefined when absent. */
async function etcdValue(endpoint: string, key: string): Promise<string | undefined> {
  const response = await fetch(`${endpoint}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: encode(key) }),
  });
  const answer = (await response.json()) as { kvs?: { value: string }[] };
  const value = answer.kvs?.[0]?.value;
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString();
}

async function etcdDelete(endpoint: string, key: string): Promise<void> {
  const response = await fetch(`${endpoint}/v3/kv/deleterange`, {
    method: 'POST',
    body: JSON.stringify({ key: encode(key) }),
  });
  expect(response.ok).toBe(true);
}

let prefixes = 0;
/** A key prefix no other test uses: each test is its own cluster within the one etcd. */
const freshPrefix = (): string => `/test-${process.pid}-${++prefixes}/`;

describe.skipIf(binary === undefined)(
  binary === undefined ? `etcd leases (skipped: ${etcdMissing})` : 'etcd leases',
  () => {
    let etcd: Etcd;
    beforeAll(async () => {
      etcd = (await startEtcd(binary)) as Etcd;
    }, 30_000);
    afterAll(async () => {
      await etcd?.stop();
    });

    async function node(prefix: string, name: string): Promise<Store> {
      return openStore(temporaryDirectory(), { coordination: { etcd: etcd.endpoint, prefix, node: name } });
    }

    /** Two nodes of a cluster of their own, each with a feed `orders`; closed when the test's `using` ends. */
    async function twoNodes() {
      const prefix = freshPrefix();
      const stores = [await node(prefix, 'node-a'), await node(prefix, 'node-b')] as const;
      const feedA = await stores[0].createFeed('orders');
      const feedB = await stores[1].createFeed('orders');
      return {
        prefix,
        feedA,
        feedB,
        async [Symbol.asyncDispose]() {
          for (const store of stores) await store.close();
        },
      };
    }

    it('a grant writes the writer key and raises the epoch; another node is refused while it lives', async () => {
      await using nodes = await twoNodes();
      const { prefix, feedA, feedB } = nodes;

      const grant = await feedA.acquireLease({ holder: 'ingest-1', ttlMs: 2000 });
      expect(grant.epoch).toBe(1);
      const record = JSON.parse((await etcdValue(etcd.endpoint, `${prefix}feeds/orders/writer`)) ?? '{}');
      expect(record).toEqual({ holder: 'ingest-1', node: 'node-a', url: null, epoch: 1, token: grant.token });
      expect(await etcdValue(etcd.endpoint, `${prefix}feeds/orders/epoch`)).toBe('1');

      const refusal = await feedB.acquireLease({ holder: 'ingest-2' }).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(StreamStackError);
      expect((refusal as StreamStackError).code).toBe('LEASE_HELD');
      expect((refusal as StreamStackError).message).toContain('node-a');
      // The refusal changed nothing in etcd.
      expect(await etcdValue(etcd.endpoint, `${prefix}feeds/orders/epoch`)).toBe('1');
      // A one-shot append without a token on the other node is refused too, once its watch saw the key.
      await eventually(async () => (await outcomeCode(feedB.append([{ payload: 'x' }]))) === 'LEASE_HELD');

      // The holder writes under its token; a release frees the feed for the other node at once.
      await feedA.append([{ payload: 'a1' }], { token: grant.token });
      await feedA.releaseLease({ token: grant.token });
      expect(await etcdValue(etcd.endpoint, `${prefix}feeds/orders/writer`)).toBeUndefined();
      const next = await feedB.acquireLease({ holder: 'ingest-2', ttlMs: 2000 });
      expect(next.epoch).toBe(2);
    });

    it('a grant that expires in etcd frees the feed for another node, under a higher epoch', async () => {
      await using nodes = await twoNodes();
      const { feedA, feedB } = nodes;
      const grant = await feedA.acquireLease({ holder: 'ingest-1', ttlMs: 1000 });
      // Not renewed: the local lease ends at 1 s, etcd's key at its TTL (a second, or etcd's minimum).
      const started = Date.now();
      await eventually(
        async () => (await outcomeCode(feedB.acquireLease({ holder: 'ingest-2', ttlMs: 5000 }))) === 'none',
        10_000,
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
      expect(await outcomeCode(feedA.append([{ payload: 'late' }], { token: grant.token }))).toBe('FENCED');
    });

    it('a grant lost in etcd stops writes at once, and a renewal says so', async () => {
      const prefix = freshPrefix();
      await using store = await node(prefix, 'node-a');
      const feed = await store.createFeed('orders');
      const grant = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 60_000 });
      const stream = await feed.openStream({ token: grant.token });
      await stream.append([{ payload: 'one' }], { token: grant.token });

      // An operator (or etcd's own expiry) deletes the key: the watch reports it within moments,
      // and writes are refused from then on although the local lease still has a minute to run.
      await etcdDelete(etcd.endpoint, `${prefix}feeds/orders/writer`);
      await eventually(async () => (await feed.info()).lease === null);
      expect(await outcomeCode(stream.append([{ payload: 'two' }], { token: grant.token }))).toBe('FENCED');
      expect(await outcomeCode(feed.append([{ payload: 'three' }], { token: grant.token }))).toBe('FENCED');
      expect(await outcomeCode(feed.renewLease({ token: grant.token, ttlMs: 60_000 }))).toBe('FENCED');
      // Nothing after the loss was acknowledged: the stream holds the one record written before it.
      expect(await stream.info()).toMatchObject({ state: 'open', records: 1 });

      // The feed can be taken again, under a new epoch.
      const again = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 60_000 });
      expect(again.epoch).toBe(grant.epoch + 1);
    });

    it('renewals keep the grant alive in etcd past its TTL, with the same and with another TTL', async () => {
      await using nodes = await twoNodes();
      const { feedA, feedB } = nodes;
      const grant = await feedA.acquireLease({ holder: 'ingest-1', ttlMs: 2000 });
      const started = Date.now();
      // Renewals every 300 ms leave a busy machine more than a second and a half to spare.
      for (let round = 0; round < 4 || Date.now() - started < 3000; round++) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        // Alternate between the grant's own TTL (a keep-alive) and a longer one (a new etcd lease).
        await feedA.renewLease({ token: grant.token, ttlMs: round % 2 === 0 ? 2000 : 3000 });
      }
      expect(Date.now() - started).toBeGreaterThan(2000);
      expect(await outcomeCode(feedB.acquireLease({ holder: 'ingest-2' }))).toBe('LEASE_HELD');
      await feedA.append([{ payload: 'still mine' }], { token: grant.token });
    });

    it('renewals of one grant with different TTLs at once never lose it', async () => {
      await using nodes = await twoNodes();
      const { feedA, feedB } = nodes;
      // The local grant outlives the rounds however slowly a busy machine runs them; only the
      // etcd side is renewed below.
      const grant = await feedA.acquireLease({ holder: 'ingest-1', ttlMs: 30_000 });
      const remote = (feedA as unknown as { writer: { lease: { remote: RemoteLease } } }).writer.lease.remote;
      // As a takeover's timer renews beside the feed's own renewal: keep-alives (the grant's
      // own TTL) and moves to a new etcd lease (any other), all in flight together.
      for (let round = 0; round < 20; round++)
        await Promise.all([30_000, 3000, 30_000, 2000, 3000, 30_000].map((ttlMs) => remote.renew(grant.token, ttlMs)));
      expect(remote.lostReason(grant.token)).toBeUndefined();
      expect(await outcomeCode(feedB.acquireLease({ holder: 'ingest-2' }))).toBe('LEASE_HELD');
      await feedA.append([{ payload: 'still mine' }], { token: grant.token });
    });

    it('an etcd wiped empty never hands out an epoch already used', async () => {
      const prefix = freshPrefix();
      const directory = temporaryDirectory();
      let store = await openStore(directory, { coordination: { etcd: etcd.endpoint, prefix, node: 'node-a' } });
      let feed = await store.createFeed('orders');
      let token = '';
      for (let round = 0; round < 3; round++) {
        ({ token } = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 5000 }));
        await feed.append([{ payload: `r${round}` }], { token });
        await feed.releaseLease({ token });
      }
      await store.close();

      await etcd.wipe();
      expect(await etcdValue(etcd.endpoint, `${prefix}feeds/orders/epoch`)).toBeUndefined();
      store = await openStore(directory, { coordination: { etcd: etcd.endpoint, prefix, node: 'node-a' } });
      feed = await store.feed('orders');
      const grant = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 5000 });
      expect(grant.epoch).toBe(4);
      expect(await etcdValue(etcd.endpoint, `${prefix}feeds/orders/epoch`)).toBe('4');
      await store.close();
    }, 30_000);

    it('a lease live in the local log holds after a restart only if etcd still has it', async () => {
      const prefix = freshPrefix();
      const directory = temporaryDirectory();
      const options = { coordination: { etcd: etcd.endpoint, prefix, node: 'node-a' } };
      let store = await openStore(directory, options);
      let feed = await store.createFeed('orders');
      const kept = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 60_000 });
      await store.close();
      store = await openStore(directory, options);
      feed = await store.feed('orders');
      await feed.append([{ payload: 'after restart' }], { token: kept.token });
      await feed.renewLease({ token: kept.token, ttlMs: 60_000 });
      await store.close();

      // Taken over in etcd while the node was down: the local lease is dead when it comes back.
      await etcdDelete(etcd.endpoint, `${prefix}feeds/orders/writer`);
      store = await openStore(directory, options);
      feed = await store.feed('orders');
      expect(await outcomeCode(feed.append([{ payload: 'stale' }], { token: kept.token }))).toBe('FENCED');
      expect((await feed.info()).lease).toBeNull();
      await store.close();
    });

    it('two nodes racing for one lease 100 times: exactly one writer per epoch, epochs never repeat', async () => {
      await using nodes = await twoNodes();
      const { prefix } = nodes;
      const feeds = [nodes.feedA, nodes.feedB];
      const epochs: number[] = [];
      for (let round = 0; round < 100; round++) {
        const outcomes = await Promise.allSettled(
          feeds.map((feed, index) => feed.acquireLease({ holder: `racer-${index}`, ttlMs: 5000 })),
        );
        const winners = outcomes.flatMap((outcome, index) =>
          outcome.status === 'fulfilled' ? [{ index, grant: outcome.value }] : [],
        );
        expect(winners).toHaveLength(1);
        for (const outcome of outcomes) {
          if (outcome.status === 'rejected') expect((outcome.reason as StreamStackError).code).toBe('LEASE_HELD');
        }
        const [winner] = winners;
        if (!winner) continue;
        epochs.push(winner.grant.epoch);
        await feeds[winner.index]?.releaseLease({ token: winner.grant.token });
      }
      expect(epochs).toHaveLength(100);
      // Each round's epoch is above the last: no epoch was granted twice, none went back.
      for (let index = 1; index < epochs.length; index++) expect(epochs[index]).toBeGreaterThan(epochs[index - 1] ?? 0);
      expect(await etcdValue(etcd.endpoint, `${prefix}feeds/orders/epoch`)).toBe(String(epochs.at(-1)));
    }, 60_000);

    it('etcd down: a grant is refused UNAVAILABLE and changes nothing; writes stop when the lease ends', async () => {
      const prefix = freshPrefix();
      await using store = await node(prefix, 'node-a');
      const feed = await store.createFeed('orders');
      const grant = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 1500 });
      await etcd.halt();
      try {
        expect(await outcomeCode(feed.renewLease({ token: grant.token, ttlMs: 1500 }))).toBe('UNAVAILABLE');
        // The grant made before the outage still writes until its local expiry, then never again.
        await feed.append([{ payload: 'during' }], { token: grant.token });
        await new Promise((resolve) => setTimeout(resolve, 1600));
        expect(await outcomeCode(feed.append([{ payload: 'late' }], { token: grant.token }))).toBe('LEASE_EXPIRED');
        expect(await outcomeCode(feed.acquireLease({ holder: 'ingest-2' }))).toBe('UNAVAILABLE');
        expect((await feed.info()).lease).toBeNull();
      } finally {
        await etcd.resume();
      }
      // Back up: the watch reconnects and grants work again.
      const next = await feed.acquireLease({ holder: 'ingest-2', ttlMs: 5000 });
      expect(next.epoch).toBeGreaterThan(grant.epoch);
    }, 30_000);

    it('after etcd restarts, the watch comes back: a grant lost then is still noticed at once', async () => {
      const prefix = freshPrefix();
      await using store = await node(prefix, 'node-a');
      const feed = await store.createFeed('orders');
      const grant = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 60_000 });
      await etcd.halt();
      await etcd.resume();
      // The store's watch broke with the restart; its key survived (etcd keeps its data).
      await feed.append([{ payload: 'after the restart' }], { token: grant.token });
      await etcdDelete(etcd.endpoint, `${prefix}feeds/orders/writer`);
      await eventually(async () => (await feed.info()).lease === null, 10_000);
      expect(await outcomeCode(feed.append([{ payload: 'lost' }], { token: grant.token }))).toBe('FENCED');
    }, 30_000);

    it('lists the cluster: every node with its address, and who writes each leased feed; never a token', async () => {
      const prefix = freshPrefix();
      await using first = await node(prefix, 'node-a');
      const second = await node(prefix, 'node-b');
      await first.advertise('http://10.0.0.1:4437');
      const orders = await (await first.createFeed('orders')).acquireLease({ holder: 'ingest-1' });
      const invoices = await (await second.createFeed('invoices')).acquireLease({ holder: 'billing' });

      const cluster = await second.cluster();
      const ordersListed = {
        feed: 'orders',
        holder: 'ingest-1',
        node: 'node-a',
        url: 'http://10.0.0.1:4437',
        epoch: orders.epoch,
        head: null,
      };
      expect(cluster.node).toBe('node-b');
      expect(
        cluster.nodes.map(({ node, url }) => ({ node, url })).sort((a, b) => a.node.localeCompare(b.node)),
      ).toEqual([
        { node: 'node-a', url: 'http://10.0.0.1:4437' },
        { node: 'node-b', url: null },
      ]);
      expect(cluster.feeds.sort((a, b) => a.feed.localeCompare(b.feed))).toEqual([
        // A writer's node names where it served when it took the lease: B serves nothing.
        // Nothing committed yet: no head hinted.
        { feed: 'invoices', holder: 'billing', node: 'node-b', url: null, epoch: invoices.epoch, head: null },
        ordersListed,
      ]);
      expect(JSON.stringify(cluster)).not.toContain(orders.token);

      // Over HTTP, a token sees the leases of the feeds it covers only.
      const server = await startServer({
        directory: temporaryDirectory(),
        storeOptions: { coordination: { etcd: etcd.endpoint, prefix, node: 'node-c' } },
        tokens: [
          { name: 'reader', sha256: hashToken('reader-secret'), feeds: ['orders'], operations: ['read'] },
          { name: 'ops', sha256: hashToken('ops-secret'), feeds: ['*'], operations: ['read'] },
        ],
      });
      const scoped = await call(server.url, 'GET', '/v1/cluster', {
        headers: { authorization: 'Bearer reader-secret' },
      });
      expect(scoped.status).toBe(200);
      expect(scoped.json.feeds).toEqual([ordersListed]);
      const whole = await call(server.url, 'GET', '/v1/cluster', { headers: { authorization: 'Bearer ops-secret' } });
      expect(whole.json.feeds).toHaveLength(2);
      expect(whole.json.nodes.map((entry: { node: string }) => entry.node).sort()).toEqual([
        'node-a',
        'node-b',
        'node-c',
      ]);

      // A node that closes leaves the list at once (its key's etcd lease is revoked).
      await second.close();
      expect((await first.cluster()).nodes.map(({ node }) => node).sort()).toEqual(['node-a', 'node-c']);
    });

    it('GET /v1/cluster on a server without --etcd is a typed refusal', async () => {
      const server = await startServer();
      const answer = await call(server.url, 'GET', '/v1/cluster');
      expect(answer.status).toBe(400);
      expect(answer.json.error.code).toBe('INVALID_ARGUMENT');
    });

    it('bad coordination settings are refused before the directory is touched', async () => {
      const directory = temporaryDirectory();
      for (const coordination of [
        { etcd: 'not a url' },
        { etcd: 'ftp://127.0.0.1:1' },
        { etcd: [] as string[] },
        { etcd: etcd.endpoint, prefix: 'no-slash' },
        { etcd: etcd.endpoint, node: '' },
      ]) {
        expect(await outcomeCode(openStore(directory, { coordination }))).toBe('INVALID_ARGUMENT');
      }
      expect(await outcomeCode(openStore(directory, { coordination: { etcd: etcd.endpoint }, readOnly: true }))).toBe(
        'INVALID_ARGUMENT',
      );
      const { freePort } = await import('../support/versitygw.mjs');
      const unreachable = `http://127.0.0.1:${await freePort()}`;
      expect(await outcomeCode(openStore(directory, { coordination: { etcd: unreachable } }))).toBe('UNAVAILABLE');
      const fs = await import('node:fs');
      expect(fs.readdirSync(directory)).toEqual([]);
    }, 30_000);
  },
);
