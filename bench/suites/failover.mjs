// Suite `failover`: what a cluster's writer pays for its guarantees, measured in one run against
// versitygw and etcd on loopback (both started here, in folders of their own):
// - `replicated` ingest (each group commit also a slot object in object storage before it is
//   acknowledged) as a ratio of `local` ingest, for one producer appending one-shot batches of
//   1,000 records (STREAMSTACK_BENCH_FAILOVER_RECORDS, default 10^7) and of 100 records (a
//   tenth as many records: every batch waits for its PUT), the two feeds in one store, the
//   scale workload (200-byte payloads, 10% repeated, keys and tags drawn from 1M);
// - appends per second at 64 concurrent producers of one record each, replicated against local,
//   for STREAMSTACK_BENCH_FAILOVER_SECONDS each (default 10): group commit shares one PUT among
//   the appends that wait together;
// - object requests per commit and per million records of the replicated runs; etcd requests
//   per commit are none (a lease is taken and renewed, commits never ask etcd);
// - the slowest append of each run, and a lease grant in etcd against one in the local log.
// Failover itself (a standby rebuilding the unsealed tail from the slots) is not built yet, so
// its time is not measured here.
import { performance } from 'node:perf_hooks';
import { Store } from '@streamstack/engine';
import { etcdBinary, etcdMissing, startEtcd } from '../../test/support/etcd.mjs';
import { startVersitygw, versitygwBinary, versitygwMissing } from '../../test/support/versitygw.mjs';
import { Suite, timedConcurrent } from '../harness.mjs';
import { latencySummary, scaleWorkload, temporaryDirectory } from '../workload.mjs';

const totalRecords = Number(process.env.STREAMSTACK_BENCH_FAILOVER_RECORDS ?? 10_000_000);
const concurrentSeconds = Number(process.env.STREAMSTACK_BENCH_FAILOVER_SECONDS ?? 10);
const producers = 64;
const leaseCycles = 200;
const bucket = 'failover';

/** Appends `records` in one-shot batches of `batch`, one at a time; rate, slowest append, and what replication took. */
async function ingest(feed, records, batch, seed) {
  const next = scaleWorkload(seed);
  const appendMs = [];
  const before = (await feed.info()).replication;
  const started = performance.now();
  for (let done = 0; done < records; done += batch) {
    const begun = performance.now();
    await feed.append(next(Math.min(batch, records - done)));
    appendMs.push(performance.now() - begun);
  }
  const seconds = (performance.now() - started) / 1000;
  const after = (await feed.info()).replication;
  return {
    recordsPerSecond: records / seconds,
    commits: appendMs.length,
    append: latencySummary(appendMs),
    requests: after && before ? after.requests - before.requests : 0,
  };
}

/** Lease grants and releases, one after another: the grant's latency. */
async function leaseGrants(feed) {
  const grants = [];
  for (let cycle = 0; cycle < leaseCycles; cycle++) {
    const begun = performance.now();
    const { token } = await feed.acquireLease({ holder: 'bench', ttlMs: 5000 });
    grants.push(performance.now() - begun);
    await feed.releaseLease({ token });
  }
  return latencySummary(grants);
}

export async function run() {
  const suite = new Suite('failover');
  const s3 = versitygwBinary();
  const etcdPath = etcdBinary();
  if (!s3 || !etcdPath) {
    process.stderr.write(`  skipped: ${s3 ? etcdMissing : versitygwMissing}\n`);
    return suite.finish();
  }
  const server = await startVersitygw(s3);
  const etcd = await startEtcd(etcdPath);
  try {
    await server.createBucket(bucket);
    const objectStore = {
      endpoint: server.endpoint,
      bucket,
      prefix: 'failover/',
      region: server.region,
      credentials: server.credentials,
    };
    const store = await Store.open(temporaryDirectory('failover'), {
      objectStore,
      coordination: { etcd: etcd.endpoint, node: 'bench' },
    });
    try {
      const local = await store.createFeed('local');
      const replicated = await store.createFeed('replicated', { durability: 'replicated' });
      for (const batch of [1000, 100]) {
        const records = batch === 1000 ? totalRecords : Math.floor(totalRecords / 10);
        process.stderr.write(`  ${records} records in batches of ${batch}, local then replicated\n`);
        const off = await ingest(local, records, batch, 0x5eed + batch);
        const on = await ingest(replicated, records, batch, 0x5eed + batch);
        suite.ratio(`batch ${batch}: replicated / local ingest`, on.recordsPerSecond / off.recordsPerSecond);
        suite.ratio(`batch ${batch}: local ingest`, off.recordsPerSecond, undefined, 'records/s');
        suite.ratio(`batch ${batch}: replicated ingest`, on.recordsPerSecond, undefined, 'records/s');
        suite.ratio(`batch ${batch}: replicated append p50`, on.append.p50Ms, undefined, 'ms');
        suite.ratio(`batch ${batch}: slowest append, local`, off.append.maxMs, undefined, 'ms');
        suite.ratio(`batch ${batch}: slowest append, replicated`, on.append.maxMs, undefined, 'ms');
        suite.ratio(`batch ${batch}: object requests per commit`, on.requests / on.commits, undefined, 'requests');
        suite.ratio(
          `batch ${batch}: object requests per million records`,
          (on.requests * 1e6) / records,
          undefined,
          'requests',
        );
      }

      const concurrent = {};
      for (const [label, feed] of [
        ['local', local],
        ['replicated', replicated],
      ]) {
        const next = scaleWorkload(0xc0c0);
        const before = (await feed.info()).replication;
        const result = await timedConcurrent(concurrentSeconds, producers, () => feed.append(next(1)));
        const after = (await feed.info()).replication;
        concurrent[label] = { ...result, requests: after && before ? after.requests - before.requests : 0 };
      }
      suite.ratio(
        `${producers} producers, 1 record each: replicated / local appends per second`,
        concurrent.replicated.perSecond / concurrent.local.perSecond,
      );
      suite.ratio(`${producers} producers: local appends`, concurrent.local.perSecond, undefined, 'appends/s');
      suite.ratio(
        `${producers} producers: replicated appends`,
        concurrent.replicated.perSecond,
        undefined,
        'appends/s',
      );
      const appendsDone = concurrent.replicated.perSecond * concurrentSeconds;
      suite.ratio(
        `${producers} producers: replicated appends per object request`,
        appendsDone / Math.max(1, concurrent.replicated.requests),
        undefined,
        'appends',
      );
      suite.ratio(
        `${producers} producers: slowest append, replicated`,
        concurrent.replicated.latencies.at(-1) ?? 0,
        undefined,
        'ms',
      );

      const etcdGrants = await leaseGrants(local);
      const plain = await Store.open(temporaryDirectory('failover-plain'));
      try {
        const localGrants = await leaseGrants(await plain.createFeed('plain'));
        suite.ratio('lease grant in etcd: p50', etcdGrants.p50Ms, undefined, 'ms');
        suite.ratio('lease grant in etcd: p99', etcdGrants.p99Ms, undefined, 'ms');
        suite.ratio('lease grant in the local log: p50', localGrants.p50Ms, undefined, 'ms');
      } finally {
        await plain.close();
      }
    } finally {
      await store.close();
    }
  } finally {
    await etcd.stop();
    await server.stop();
  }
  return suite.finish();
}
