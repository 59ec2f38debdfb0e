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
// - each phase alternates local and replicated runs for STREAMSTACK_BENCH_FAILOVER_ROUNDS rounds
//   (default 3; the records split among them) and reports the median of the rounds' ratios: on two
//   cores shared with the object server, one run's ratio swings by half;
// - object requests per commit and per million records of the replicated runs; etcd requests
//   per commit are none (a lease is taken and renewed, commits never ask etcd);
// - the slowest append of each run, and a lease grant in etcd against one in the local log;
// - failover over the replicated feed so filled (`failover-time.mjs`): death of the writer to the
//   first acknowledgement by the new one, and the takeover's own part of it.
import { performance } from 'node:perf_hooks';
import { Store } from '@streamstack/engine';
import { etcdBinary, etcdMissing, startEtcd } from '../../test/support/etcd.mjs';
import { startVersitygw, versitygwBinary, versitygwMissing } from '../../test/support/versitygw.mjs';
import { Suite, timedConcurrent } from '../harness.mjs';
import { latencySummary, scaleWorkload, temporaryDirectory } from '../workload.mjs';
import { measureFailover } from './failover-time.mjs';

const totalRecords = Number(process.env.STREAMSTACK_BENCH_FAILOVER_RECORDS ?? 10_000_000);
const concurrentSeconds = Number(process.env.STREAMSTACK_BENCH_FAILOVER_SECONDS ?? 10);
/** Local and replicated runs alternate this many times; each ratio is the median of the rounds'. */
const rounds = Number(process.env.STREAMSTACK_BENCH_FAILOVER_ROUNDS ?? 3);
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
    const data = temporaryDirectory('failover');
    const store = await Store.open(data, {
      objectStore,
      coordination: { etcd: etcd.endpoint, node: 'bench' },
    });
    try {
      const local = await store.createFeed('local');
      const replicated = await store.createFeed('replicated', { durability: 'replicated' });
      const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)];
      for (const batch of [1000, 100]) {
        const records = batch === 1000 ? totalRecords : Math.floor(totalRecords / 10);
        const perRound = Math.ceil(records / rounds / batch) * batch;
        process.stderr.write(`  ${records} records in batches of ${batch}, local and replicated in ${rounds} rounds\n`);
        const runs = [];
        for (let round = 0; round < rounds; round++) {
          const off = await ingest(local, perRound, batch, 0x5eed + batch + round);
          const on = await ingest(replicated, perRound, batch, 0x5eed + batch + round);
          runs.push({ off, on, ratio: on.recordsPerSecond / off.recordsPerSecond });
        }
        const all = (side, pick) => runs.map((run) => pick(run[side]));
        const requests = runs.reduce((sum, run) => sum + run.on.requests, 0);
        const commits = runs.reduce((sum, run) => sum + run.on.commits, 0);
        suite.ratio(
          `batch ${batch}: replicated / local ingest (median of rounds)`,
          median(runs.map((run) => run.ratio)),
        );
        suite.ratio(
          `batch ${batch}: local ingest`,
          median(all('off', (r) => r.recordsPerSecond)),
          undefined,
          'records/s',
        );
        suite.ratio(
          `batch ${batch}: replicated ingest`,
          median(all('on', (r) => r.recordsPerSecond)),
          undefined,
          'records/s',
        );
        suite.ratio(`batch ${batch}: replicated append p50`, median(all('on', (r) => r.append.p50Ms)), undefined, 'ms');
        suite.ratio(
          `batch ${batch}: slowest append, local`,
          Math.max(...all('off', (r) => r.append.maxMs)),
          undefined,
          'ms',
        );
        suite.ratio(
          `batch ${batch}: slowest append, replicated`,
          Math.max(...all('on', (r) => r.append.maxMs)),
          undefined,
          'ms',
        );
        suite.ratio(`batch ${batch}: object requests per commit`, requests / commits, undefined, 'requests');
        suite.ratio(
          `batch ${batch}: object requests per million records`,
          (requests * 1e6) / (perRound * rounds),
          undefined,
          'requests',
        );
      }

      const concurrent = { local: [], replicated: [] };
      const next = scaleWorkload(0xc0c0);
      for (let round = 0; round < rounds; round++) {
        for (const [label, feed] of [
          ['local', local],
          ['replicated', replicated],
        ]) {
          const before = (await feed.info()).replication;
          const result = await timedConcurrent(concurrentSeconds, producers, () => feed.append(next(1)));
          const after = (await feed.info()).replication;
          concurrent[label].push({ ...result, requests: after && before ? after.requests - before.requests : 0 });
        }
      }
      const ratios = concurrent.replicated.map((on, round) => on.perSecond / concurrent.local[round].perSecond);
      suite.ratio(
        `${producers} producers, 1 record each: replicated / local appends per second (median)`,
        median(ratios),
      );
      suite.ratio(
        `${producers} producers: local appends`,
        median(concurrent.local.map((r) => r.perSecond)),
        undefined,
        'appends/s',
      );
      suite.ratio(
        `${producers} producers: replicated appends`,
        median(concurrent.replicated.map((r) => r.perSecond)),
        undefined,
        'appends/s',
      );
      const appendsDone = concurrent.replicated.reduce((sum, r) => sum + r.latencies.length, 0);
      const putRequests = concurrent.replicated.reduce((sum, r) => sum + r.requests, 0);
      suite.ratio(
        `${producers} producers: replicated appends per object request`,
        appendsDone / Math.max(1, putRequests),
        undefined,
        'appends',
      );
      suite.ratio(
        `${producers} producers: slowest append, replicated`,
        Math.max(...concurrent.replicated.map((r) => r.latencies.at(-1) ?? 0)),
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
    process.stderr.write('  failover of the replicated feed between two serve processes\n');
    await measureFailover(suite, {
      data,
      feed: 'replicated',
      etcd: etcd.endpoint,
      env: {
        STREAMSTACK_OBJECT_STORE: `s3://${bucket}/failover`,
        STREAMSTACK_OBJECT_STORE_ENDPOINT: server.endpoint,
        AWS_ACCESS_KEY_ID: server.credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: server.credentials.secretAccessKey,
        AWS_REGION: server.region,
      },
    });
  } finally {
    await etcd.stop();
    await server.stop();
  }
  return suite.finish();
}
