// Part of suite `failover`: how long a replicated feed is without a writer when its writer dies.
// Two `streamstack serve` nodes of one cluster over the feed the ingest phases filled (its whole
// history: ~10^7 records by default); a producer appends through the writer, renewing its lease;
// the writer is killed -9 (or stopped with SIGSTOP, a paused process, killed after), and the
// producer asks the other node for the lease until it is granted — a takeover: fence the slots,
// lay the feed out from object storage and its slots — then appends. Timed per trial:
// - death to the first acknowledgement by the new writer (target: TTL + 500 ms);
// - the lease request that was granted to that acknowledgement: the takeover's own cost plus one
//   append (target: 150 ms). The dead node restarts over its old copy as the next standby.
import { setTimeout as sleep } from 'node:timers/promises';
import { RemoteStore } from '@streamstack/client';
import { startServe } from '../../test/support/serve-process.mjs';
import { latencySummary, temporaryDirectory } from '../workload.mjs';

const trials = Number(process.env.STREAMSTACK_BENCH_FAILOVER_TRIALS ?? 6);
const ttlMs = 1000;

/** Renews the lease every quarter TTL until stopped, as a producer keeps it. */
function keepAlive(feed, token) {
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await sleep(ttlMs / 4);
      if (!stopped) await feed.renewLease({ token, ttlMs }).catch(() => undefined);
    }
  })();
  return () => {
    stopped = true;
    return loop;
  };
}

/**
 * Runs the trials against feed `feed`, whose writer's data directory is `data` (closed), in the
 * cluster of etcd `etcd` (default prefix) over the object store the environment `env` names.
 */
export async function measureFailover(suite, { data, feed: name, etcd, env }) {
  const start = async (node, directory) => {
    const process = startServe(directory, [], { globalArgs: ['--etcd', etcd, '--etcd-node', node], env });
    return { node, directory, process, url: await process.url };
  };
  const nodes = [await start('bench-a', data), await start('bench-b', temporaryDirectory('failover-standby'))];
  const deathToAck = [];
  const grantToAck = [];
  const killed = { SIGKILL: 0, SIGSTOP: 0 };
  let writer = 0;
  let client = await RemoteStore.open(nodes[writer].url);
  try {
    let grant = await client.acquireLease(name, { holder: 'bench', ttlMs });
    let stopRenewing = keepAlive(await client.feed(name), grant.token);
    for (let trial = 0; trial < trials; trial++) {
      const feed = await client.feed(name);
      for (let n = 0; n < 20; n++)
        await feed.append([{ payload: `trial ${trial} append ${n}` }], { token: grant.token });
      const signal = trial % 2 === 0 ? 'SIGKILL' : 'SIGSTOP';
      killed[signal]++;
      const old = nodes[writer];
      const died = performance.now();
      old.process.child.kill(signal);
      const renewals = stopRenewing();
      const next = await RemoteStore.open(nodes[1 - writer].url);
      let asked;
      for (;;) {
        asked = performance.now();
        try {
          grant = await next.acquireLease(name, { holder: 'bench', ttlMs });
          break;
        } catch (error) {
          if (error?.code !== 'LEASE_HELD') throw error;
          await sleep(10);
        }
      }
      const nextFeed = await next.feed(name);
      await nextFeed.append([{ payload: `trial ${trial} first after failover` }], { token: grant.token });
      const acked = performance.now();
      deathToAck.push(acked - died);
      grantToAck.push(acked - asked);
      stopRenewing = keepAlive(nextFeed, grant.token);
      old.process.child.kill('SIGCONT');
      old.process.child.kill('SIGKILL');
      await old.process.exited;
      await renewals;
      process.stderr.write(
        `  trial ${trial + 1} (${signal}): death to first ack ${Math.round(acked - died)} ms, lease request to first ack ${Math.round(acked - asked)} ms\n`,
      );
      nodes[writer] = await start(old.node, old.directory);
      await client.close();
      client = next;
      writer = 1 - writer;
    }
    await stopRenewing();
  } finally {
    await client.close();
    for (const node of nodes) {
      node.process.child.kill('SIGCONT');
      node.process.child.kill('SIGKILL');
      await node.process.exited;
    }
  }
  const death = latencySummary(deathToAck);
  const grantSummary = latencySummary(grantToAck);
  suite.ratio(
    `failover (${killed.SIGKILL} killed -9, ${killed.SIGSTOP} paused): (TTL + 500 ms) / death to first ack, slowest trial`,
    (ttlMs + 500) / death.maxMs,
    1,
  );
  suite.ratio('failover: death to first ack, p50', death.p50Ms, undefined, 'ms');
  suite.ratio('failover: death to first ack, slowest', death.maxMs, undefined, 'ms');
  suite.ratio('failover: 150 ms / lease request to first ack, slowest trial', 150 / grantSummary.maxMs, 1);
  suite.ratio('failover: lease request (takeover) to first ack, p50', grantSummary.p50Ms, undefined, 'ms');
  suite.ratio('failover: lease request (takeover) to first ack, slowest', grantSummary.maxMs, undefined, 'ms');
}
