/**
 * Head hints in etcd: a feed's writer on a node of a cluster puts its head as the feed's hint
 * (`feeds/<feed>/head`), coalesced to one transaction per 50 ms at most and guarded by its
 * epoch; `cluster()` lists it. A follower of the cluster hears the hints: a hint from a writer at
 * another address than its tail's moves the tail there (the feed was taken over, or the
 * follower was pointed at the wrong node); a hint past its head makes it look for new history
 * in object storage sooner than its slow poll.
 */
import { describe, expect, it } from 'vitest';
import type { Feed } from '../../packages/engine/src/index.js';
import { etcdBinary, etcdMissing } from '../support/etcd.mjs';
import { etcdForSuite, eventually } from '../support/etcd-suite.js';
import { objectStoreSuite } from '../support/object-store.js';
import { startServer } from '../support/server.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('head-hints');
const binary = etcdBinary();
const skipped = objects.missing || binary === undefined;

let prefixes = 0;
const freshPrefix = (): string => `/hints-${process.pid}-${++prefixes}/`;

const encode = (text: string): string => Buffer.from(text).toString('base64');

/** A key in etcd, read through its gateway: its value and how many times it was put (0: absent). */
async function etcdKey(endpoint: string, key: string): Promise<{ value: string | undefined; version: number }> {
  const response = await fetch(`${endpoint}/v3/kv/range`, {
    method: 'POST',
    body: JSON.stringify({ key: encode(key) }),
  });
  const kv = ((await response.json()) as { kvs?: { value: string; version: string }[] }).kvs?.[0];
  return kv
    ? { value: Buffer.from(kv.value, 'base64').toString(), version: Number(kv.version) }
    : { value: undefined, version: 0 };
}

async function etcdPut(endpoint: string, key: string, value: string): Promise<void> {
  const response = await fetch(`${endpoint}/v3/kv/put`, {
    method: 'POST',
    body: JSON.stringify({ key: encode(key), value: encode(value) }),
  });
  expect(response.ok).toBe(true);
}

const headOf = async (feed: Feed): Promise<number> => (await feed.info()).head?.commit ?? 0;

describe.skipIf(skipped)(
  skipped ? `head hints (skipped: ${objects.missing ? 'no versitygw' : etcdMissing})` : 'head hints',
  () => {
    objects.start();
    const etcdOf = etcdForSuite();

    it('the writer hints its head, coalesced and under its epoch; the cluster lists it', async () => {
      const prefix = freshPrefix();
      const { endpoint } = etcdOf();
      await using store = await openStore(temporaryDirectory(), {
        coordination: { etcd: endpoint, prefix, node: 'a' },
      });
      await store.advertise('http://10.0.0.1:4437');
      const feed = await store.createFeed('orders');
      const grant = await feed.acquireLease({ holder: 'ingest', ttlMs: 10_000 });
      const started = performance.now();
      const commits = 300;
      for (let n = 0; n < commits; n++) await feed.append([{ payload: `order ${n}` }], { token: grant.token });
      const headKey = `${prefix}feeds/orders/head`;
      await eventually(async () => JSON.parse((await etcdKey(endpoint, headKey)).value ?? '{}').commit === commits);
      const elapsedMs = performance.now() - started;
      const { value, version } = await etcdKey(endpoint, headKey);
      expect(JSON.parse(value!)).toEqual({
        epoch: grant.epoch,
        commit: commits,
        node: 'a',
        url: 'http://10.0.0.1:4437',
      });
      // Coalesced: one put per 50 ms at most, whatever the rate of commits.
      expect(version).toBeGreaterThan(0);
      expect(version).toBeLessThanOrEqual(Math.ceil(elapsedMs / 50) + 2);
      expect(version).toBeLessThan(commits);
      expect((await store.cluster()).feeds).toEqual([
        { feed: 'orders', holder: 'ingest', node: 'a', url: 'http://10.0.0.1:4437', epoch: grant.epoch, head: commits },
      ]);

      // Another node raised the epoch (as a takeover does): this writer's hints are refused.
      await etcdPut(endpoint, `${prefix}feeds/orders/epoch`, String(grant.epoch + 1));
      await feed.append([{ payload: 'after the epoch moved' }], { token: grant.token });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(JSON.parse((await etcdKey(endpoint, headKey)).value!).commit).toBe(commits);
    });

    it('a follower of the cluster moves its tail to the address the hints name, and reads what the writer has', async () => {
      const prefix = freshPrefix();
      const settings = objects.settings();
      const { endpoint } = etcdOf();
      const writer = await startServer({
        storeOptions: { objectStore: settings, coordination: { etcd: endpoint, prefix, node: 'writer' } },
      });
      await writer.store.advertise(writer.url);
      const feedW = await writer.store.createFeed('orders');
      const grant = await feedW.acquireLease({ holder: 'ingest', ttlMs: 10_000 });
      await feedW.append([{ payload: 'first' }], { token: grant.token });

      // The follower is pointed at an address where no writer answers.
      const { freePort } = await import('../support/versitygw.mjs');
      const nowhere = `http://127.0.0.1:${await freePort()}`;
      await using follower = await openStore(temporaryDirectory(), {
        follower: true,
        objectStore: settings,
        follow: { url: nowhere },
        coordination: { etcd: endpoint, prefix, node: 'follower' },
      });
      const feedF = await follower.feed('orders');
      // The writer commits: its hint names its address, and the follower's tail goes there.
      for (let n = 0; n < 5; n++) await feedW.append([{ payload: `order ${n}` }], { token: grant.token });
      const head = await headOf(feedW);
      await eventually(async () => (await headOf(feedF)) === head, 10_000);
      expect(new URL((await feedF.info()).follower?.tail?.url ?? '').href).toBe(new URL(writer.url).href);
      const payloads: string[] = [];
      for await (const record of feedF.read({ after: 0 })) payloads.push(Buffer.from(record.payload).toString());
      expect(payloads).toEqual(['first', ...Array.from({ length: 5 }, (_, n) => `order ${n}`)]);
      // The follower knows the writer from etcd (its server still answers reads from its own copy).
      expect(follower.ownerElsewhere('orders')).toMatchObject({ node: 'writer' });
      // The writer's server then closes (after the test) at once, though the follower's tail
      // leaves a connection behind that Node does not see as idle: it would wait for Node's
      // headers timeout (60 s, past the hook's limit) if the sweep did not close it.
    }, 30_000);
  },
);
