/**
 * The failover drill: two `streamstack serve` nodes of one cluster (etcd, versitygw), a
 * replicated feed, producers appending through the writer's server. At a random moment the
 * writer is killed -9, or paused past its lease's TTL and resumed once the other node took over
 * (a zombie); the producer asks the other node for the lease, which takes the feed over, and
 * writes on there. The dead node comes back as the standby of the next run, with its old copy.
 *
 * Checked after every run: every acknowledged append is in the new writer's history exactly
 * once, each producer's in the order acknowledged; slot numbers are contiguous from the new
 * writer's fences to its newest slot; epochs only go
 * up; no group stored past a fence is of an epoch below it (nothing of a fenced writer lands);
 * a follower of the cluster (a third process) holds a prefix of the writer's history, and the
 * head hints move its tail to the new writer; a consumer of a named subscription, polling at the
 * writer before the failure and at the new one after, is handed every commit exactly once.
 * `STREAMSTACK_DRILL_RUNS` sets the number of runs (50 here; `pnpm soak` runs 1,000).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { RemoteStore } from '../../packages/client/src/index.js';
import { objectStoreSettings as engineObjectSettings } from '../../packages/engine/src/api/object-store-options.js';
import { publishedFeedConfig } from '../../packages/engine/src/coordinator/opening/follower-mirror.js';
import { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import type { SlotObject } from '../../packages/engine/src/storage/slot-object.js';
import { etcdBinary, etcdMissing } from '../support/etcd.mjs';
import { etcdForSuite } from '../support/etcd-suite.js';
import { objectStoreSuite } from '../support/object-store.js';
import { startServe } from '../support/serve-process.mjs';
import { allSlots } from '../support/slots.js';

type ServeProcess = ReturnType<typeof startServe>;

import { temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('failover-drill');
const binary = etcdBinary();
const skipped = objects.missing || binary === undefined;
const runs = Number(process.env.STREAMSTACK_DRILL_RUNS ?? 50);
const producers = 4;
const ttlMs = 1000;
const feedName = 'orders';

interface Node {
  readonly name: string;
  readonly data: string;
  process: ServeProcess;
  url: string;
}

/** Every slot of the feed (see `allSlots`). */
async function feedSlots(objectStore: ObjectSegmentStore): Promise<SlotObject[]> {
  const published = await publishedFeedConfig(objectStore, feedName);
  if (!published) throw new Error('the feed was never published');
  return allSlots(objectStore, feedName, published.tag);
}

/**
 * Polls subscription `audit` of `feed` up to `batches` times, as a consumer does: each batch's
 * payloads handled (added to `delivered`), then the cursor advanced past it.
 */
async function consume(
  feed: Awaited<ReturnType<Awaited<ReturnType<typeof RemoteStore.open>>['feed']>>,
  delivered: string[],
  batches: number,
): Promise<void> {
  const subscription = await feed.subscription('audit');
  for (let batch = 0; batch < batches; batch++) {
    const polled = await subscription.poll({ max: 200 });
    if (polled.commits.length === 0) return;
    for (const commit of polled.commits)
      for (const record of commit.records) delivered.push(Buffer.from(record.payload).toString());
    await subscription.advance(polled.cursor);
  }
}

/** Renews the lease of `token` at `feed`'s server every quarter TTL, as a producer would, until stopped. */
function keepAlive(
  feed: { renewLease(options: { token: string; ttlMs?: number }): Promise<unknown> },
  token: string,
): { stop(): Promise<void> } {
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await sleep(ttlMs / 4);
      if (!stopped) await feed.renewLease({ token, ttlMs }).catch(() => undefined);
    }
  })();
  return {
    stop() {
      stopped = true;
      return loop;
    },
  };
}

describe.skipIf(skipped)(
  skipped ? `failover drill (skipped: ${objects.missing ? 'no versitygw' : etcdMissing})` : 'failover drill',
  () => {
    objects.start();
    const etcdOf = etcdForSuite();

    it(
      `${runs} runs: writer killed -9 or paused at random under load; nothing acknowledged is lost or doubled`,
      async () => {
        const env = objects.environment('drill');
        const prefix = `/drill-${process.pid}/`;
        const start = async (name: string, data: string): Promise<Node> => {
          const process = startServe(data, [], {
            globalArgs: ['--etcd', etcdOf().endpoint, '--etcd-prefix', prefix, '--etcd-node', name],
            env,
          });
          return { name, data, process, url: await process.url };
        };
        const nodes = [await start('node-a', temporaryDirectory()), await start('node-b', temporaryDirectory())];
        // The slots are read as the servers wrote them: the same bucket and prefix as the environment's.
        const server = objects.server();
        const objectStore = new ObjectSegmentStore(
          engineObjectSettings({
            endpoint: server.endpoint,
            bucket: 'failover-drill',
            prefix: 'drill/',
            region: server.region,
            credentials: server.credentials,
          }),
        );
        let followerProcess: ServeProcess | undefined;
        try {
          let writer = 0;
          let client = await RemoteStore.open(nodes[writer]!.url);
          await client.createFeed(feedName, { durability: 'replicated' });
          let grant = await client.acquireLease(feedName, { holder: 'producer', ttlMs });
          let renewing = keepAlive(await client.feed(feedName), grant.token);
          await (await client.feed(feedName)).append([{ payload: 'before the drill' }], { token: grant.token });
          // A follower of the cluster, pointed at the first writer: the head hints in etcd move
          // its tail to each new writer.
          const follower = startServe(temporaryDirectory(), [], {
            globalArgs: [
              '--follower',
              '--follow',
              nodes[writer]!.url,
              '--etcd',
              etcdOf().endpoint,
              '--etcd-prefix',
              prefix,
              '--etcd-node',
              'follower',
            ],
            env,
          });
          followerProcess = follower;
          const followed = await (await RemoteStore.open(await follower.url)).feed(feedName);
          // A consumer of a named subscription, polling and advancing at whichever node writes.
          await (await client.feed(feedName)).createSubscription('audit');
          const delivered: string[] = [];
          const acknowledged: string[] = ['before the drill'];
          const epochs = [grant.epoch];
          const failoverMs: number[] = [];
          const takeoverMs: number[] = [];
          const modes = { kill: 0, pause: 0 };

          for (let run = 1; run <= runs; run++) {
            const mode = run % 2 === 1 ? 'kill' : 'pause';
            modes[mode]++;
            const feed = await client.feed(feedName);
            const token = grant.token;
            const acked: string[][] = Array.from({ length: producers }, () => []);
            const load = Array.from({ length: producers }, async (_, producer) => {
              for (let n = 0; ; n++) {
                const payload = `run ${run} producer ${producer} append ${n}`;
                try {
                  await feed.append([{ payload, key: `p${producer}`, tags: [`run:${run}`] }], { token });
                } catch {
                  return;
                }
                acked[producer]!.push(payload);
              }
            });
            await sleep(150 + Math.random() * 500);
            await consume(feed, delivered, 3);

            const old = nodes[writer]!;
            const killedAt = performance.now();
            old.process.child.kill(mode === 'kill' ? 'SIGKILL' : 'SIGSTOP');
            const renewals = renewing.stop();
            const standby = nodes[1 - writer]!;
            const next = await RemoteStore.open(standby.url);
            for (;;) {
              const asked = performance.now();
              try {
                grant = await next.acquireLease(feedName, { holder: 'producer', ttlMs });
                takeoverMs.push(performance.now() - asked);
                break;
              } catch (error) {
                if ((error as { code?: string }).code !== 'LEASE_HELD') throw error;
                await sleep(25);
              }
            }
            const nextFeed = await next.feed(feedName);
            renewing = keepAlive(nextFeed, grant.token);
            await nextFeed.append([{ payload: `run ${run} first after failover` }], { token: grant.token });
            failoverMs.push(performance.now() - killedAt);
            acknowledged.push(`run ${run} first after failover`);
            epochs.push(grant.epoch);

            // The zombie wakes: whatever it still acknowledges must be in the new writer's history.
            if (mode === 'pause') old.process.child.kill('SIGCONT');
            await Promise.all([...load, renewals]);
            old.process.child.kill('SIGKILL');
            await old.process.exited;
            for (const list of acked) acknowledged.push(...list);

            const history: string[] = [];
            for await (const record of nextFeed.read({ after: 0 }))
              history.push(Buffer.from(record.payload).toString());
            const seen = new Map<string, number>();
            for (const payload of history) seen.set(payload, (seen.get(payload) ?? 0) + 1);
            for (const payload of acknowledged) expect(seen.get(payload), payload).toBe(1);
            expect(new Set(history).size).toBe(history.length);
            for (const list of acked) {
              const positions = list.map((payload) => history.indexOf(payload));
              expect(positions).toEqual([...positions].sort((a, b) => a - b));
            }

            // No number is skipped from the new writer's first slot (its fences) to its newest:
            // below it, older writers' slots may be gone already, retired once their history was
            // tiered (a writer retires its own, oldest first, however many epochs lie under them).
            const slots = await feedSlots(objectStore);
            const ownFirst = slots.find((slot) => slot.epoch >= grant.epoch)?.slot ?? 0;
            const current = slots.filter((slot) => slot.slot >= ownFirst).map((slot) => slot.slot);
            expect(current.length).toBeGreaterThan(0);
            expect(current).toEqual(current.map((_, index) => ownFirst + index));
            let fencedBelow = 0;
            for (const slot of slots) {
              if (slot.kind === 'fence') fencedBelow = Math.max(fencedBelow, slot.epoch);
              else expect(slot.epoch, `slot ${slot.slot}`).toBeGreaterThanOrEqual(fencedBelow);
            }

            // The consumer goes on at the new writer: nothing it advanced past comes again.
            await consume(nextFeed, delivered, Number.POSITIVE_INFINITY);
            expect(delivered).toEqual(history);

            // The follower's history is a prefix of the writer's, and its tail reads from the new writer.
            const followedHistory: string[] = [];
            for await (const record of followed.read({ after: 0 }))
              followedHistory.push(Buffer.from(record.payload).toString());
            expect(followedHistory).toEqual(history.slice(0, followedHistory.length));
            const tailUrl = async () => new URL((await followed.info()).follower?.tail?.url ?? 'http://none').href;
            const deadline = Date.now() + 10_000;
            while ((await tailUrl()) !== new URL(standby.url).href && Date.now() < deadline) await sleep(50);
            expect(await tailUrl()).toBe(new URL(standby.url).href);

            // The dead node comes back with its old copy, as the next run's standby.
            nodes[writer] = await start(old.name, old.data);
            await client.close();
            client = next;
            writer = 1 - writer;
          }
          expect(epochs).toEqual([...epochs].sort((a, b) => a - b));
          expect(new Set(epochs).size).toBe(epochs.length);
          expect(modes.kill + modes.pause).toBe(runs);
          // The drill must have written under load: most runs acknowledged appends before the failure.
          expect(acknowledged.length).toBeGreaterThan(runs * 3);
          const sorted = [...failoverMs].sort((a, b) => a - b);
          const takeovers = [...takeoverMs].sort((a, b) => a - b);
          console.log(
            `failover drill: ${runs} runs (${modes.kill} killed, ${modes.pause} paused), ${acknowledged.length} appends acknowledged; kill-to-first-ack p50 ${Math.round(sorted[Math.floor(sorted.length / 2)]!)} ms, max ${Math.round(sorted.at(-1)!)} ms (TTL ${ttlMs} ms); the granted lease request (the takeover) p50 ${Math.round(takeovers[Math.floor(takeovers.length / 2)]!)} ms, max ${Math.round(takeovers.at(-1)!)} ms`,
          );
          await renewing.stop();
          await client.close();
        } finally {
          // Every process goes, the follower too, whether the drill passed or not.
          followerProcess?.child.kill('SIGKILL');
          for (const node of nodes) {
            node.process.child.kill('SIGCONT');
            node.process.child.kill('SIGKILL');
          }
          objectStore.close();
        }
      },
      60_000 + runs * 30_000,
    );
  },
);
