// Suite `tiered`: what tiering sealed history to object storage costs the writer, and how soon a
// sealed segment is visible remotely. The scale workload (200-byte payloads, 10% repeated, keys
// and tags drawn from 1M) is written through one-shot appends of 1,000 up to
// STREAMSTACK_BENCH_TIERED_RECORDS (default 10^7), into a store without object storage and into
// one tiering to versitygw on loopback (started here, its own folder), the two alternating for
// STREAMSTACK_BENCH_TIERED_ROUNDS rounds. Measured in the same run:
// - ingest throughput with tiering against without (target ≥ 0.9: uploads never slow the writer),
//   and the slowest append of each;
// - seal-to-visible lag p50/p99/max (a segment's last seal to its descriptor confirmed; target
//   p99 ≤ 1 s), and the time `tiered()` waits after the last append for the rest to go up;
// - requests per sealed segment (target ≤ 8) and per million records, so the cost on a billed
//   object store shows;
// - RSS of the writer at the end of each.
// Then the tiered store is reopened with a local budget of 25% of its history (the rest evicted)
// and read cold, in a process of its own as a reader would be, each phase from a fresh open (an
// empty block cache), against the untiered store read warm from its local disk:
// - a cold RAW scan of the whole history against the warm local scan (target ≥ 0.25);
// - the first record of a cold segment: a read of one record from a cursor in evicted history
//   (target ≤ 50 ms), and `get(key)` as of a commit that ends an evicted segment, its winner in
//   evicted history (target ≤ 20 ms), each beside the same reads of the untiered store, warm;
// - requests and bytes the cold reads took, and the reader's RSS.
// Then a third ingest, tiered too and served over HTTP, is followed by a follower in a process of
// its own (an empty directory, the same bucket, `follow` naming the writer's server for the
// unsealed tail):
// - its commit lag p50/p99 (each commit's arrival in the follower's `follow` against its
//   acknowledgement by the writer; targets 30 ms and 250 ms), while the writer ingests;
// - its RAW scan of the whole history it has, against the writer's byte for byte, and its rate
//   against the warm local scan; its requests per million records and its RSS.
// And a paced feed (a commit of 100 records every 20 ms, within one segment) is followed the
// same way: the commit lag the unsealed tail gives while no segment rolls and the machine is not
// saturated (at full speed on two cores, writer, follower and object server share them).
import { fork } from 'node:child_process';
import crypto from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Store } from '@streamstack/engine';
import { createServer } from '@streamstack/server';
import { startVersitygw, versitygwBinary, versitygwMissing } from '../../test/support/versitygw.mjs';
import { batchRecords, scanRate } from '../cold-reads.mjs';
import { Suite } from '../harness.mjs';
import { latencySummary, scaleWorkload, temporaryDirectory } from '../workload.mjs';

const totalRecords = Number(process.env.STREAMSTACK_BENCH_TIERED_RECORDS ?? 10_000_000);
const rounds = Number(process.env.STREAMSTACK_BENCH_TIERED_ROUNDS ?? 1);
/** The paced phase: commits of 100 records this far apart, after this many commits of 1,000. */
const pacedCommitMs = 20;
const pacedCommits = 300;
const pacedWarmupCommits = 120;
const bucket = 'bench';
const followerScript = new URL('../follower-process.mjs', import.meta.url).pathname;
const coldReadsScript = new URL('../cold-reads-process.mjs', import.meta.url).pathname;

/** Starts the follower process over a fresh directory, following `objectStore`; resolves once it found the feed. */
async function startFollower(objectStore, writerUrl) {
  const child = fork(followerScript, [temporaryDirectory('tiered-follower')], {
    env: {
      ...process.env,
      BENCH_FOLLOW_ENDPOINT: objectStore.endpoint,
      BENCH_FOLLOW_BUCKET: objectStore.bucket,
      BENCH_FOLLOW_PREFIX: objectStore.prefix,
      BENCH_FOLLOW_URL: writerUrl,
    },
  });
  const messages = [];
  const waiters = [];
  child.on('message', (message) => {
    messages.push(message);
    for (const wake of waiters.splice(0)) wake();
  });
  const next = async (type) => {
    for (;;) {
      const at = messages.findIndex((message) => message.type === type);
      if (at >= 0) return messages.splice(at, 1)[0];
      await new Promise((resolve) => waiters.push(resolve));
    }
  };
  return {
    ready: next('ready'),
    async finish(head) {
      child.send({ type: 'finish', head });
      return next('finished');
    },
  };
}

/**
 * Writes the workload into a new store in `label`'s folder; with `objectStore`, waits for its
 * uploads; with `follow`, a follower process follows it meanwhile, and its commit lags (each
 * commit's arrival there against its acknowledgement here) and whole-history scan are measured.
 */
async function ingest(label, objectStore, follow = false) {
  const directory = temporaryDirectory(`tiered-${label}`);
  const store = await Store.open(directory, objectStore ? { objectStore } : {});
  const feed = await store.createFeed('tiered');
  // The follower reads the unsealed tail from the writer's own server, as `--follow URL` does.
  const server = follow ? await createServer({ store, logger: false }) : undefined;
  const follower = server ? await startFollower(objectStore, await server.listen({ port: 0 })) : undefined;
  await follower?.ready;
  const next = scaleWorkload(0x71e4);
  const appendMs = [];
  const acknowledgedAt = [];
  const started = performance.now();
  for (let done = 0; done < totalRecords; done += batchRecords) {
    const before = performance.now();
    const commit = await feed.append(next(Math.min(batchRecords, totalRecords - done)));
    acknowledgedAt[commit.commit] = Date.now();
    appendMs.push(performance.now() - before);
  }
  const seconds = (performance.now() - started) / 1000;
  let drainMs = 0;
  let tiering;
  if (objectStore) {
    const before = performance.now();
    tiering = await feed.tiered();
    drainMs = performance.now() - before;
  }
  const rssBytes = process.memoryUsage().rss;
  const segments = (await feed.diskUse()).historySegments;
  const commits = (await feed.info()).commits;
  let followed;
  if (follower) {
    // The follower has what was tiered, and the active segment's commits from the writer's server.
    const finished = await follower.finish(commits);
    const tieredHead = finished.head;
    const lags = [];
    for (let at = 0; at < finished.arrivals.length; at += 2)
      lags.push(finished.arrivals[at + 1] - acknowledgedAt[finished.arrivals[at]]);
    const hash = crypto.createHash('sha256');
    for await (const chunk of feed.readLines({ after: 0, upTo: tieredHead })) hash.update(chunk);
    followed = {
      lag: latencySummary(lags),
      commits: lags.length,
      tieredHead,
      sameScan: hash.digest('hex') === finished.digest,
      scanRecordsPerSecond: finished.records / (finished.scanMs / 1000),
      rssBytes: finished.rssBytes,
      requests: finished.requests,
    };
    process.stderr.write(`  ${label} follower: ${JSON.stringify(followed)}\n`);
  }
  if (server) await server.close();
  else await store.close();
  const result = {
    directory,
    commits,
    recordsPerSecond: totalRecords / seconds,
    append: latencySummary(appendMs),
    segments,
    drainMs,
    rssBytes,
    tiering,
    followed,
  };
  process.stderr.write(`  ${label}: ${JSON.stringify({ ...result, tiering: undefined, directory: undefined })}\n`);
  if (tiering) process.stderr.write(`  ${label} tiering: ${JSON.stringify(tiering)}\n`);
  return result;
}

/**
 * A feed that commits every `pacedCommitMs` (100 records each) within one segment, followed by
 * a follower process through the writer's server: the lag of a commit while no segment rolls and
 * the writer leaves the machine room, which is what the unsealed tail itself costs.
 */
async function pacedLag(objectStore) {
  const store = await Store.open(temporaryDirectory('tiered-paced'), { objectStore });
  const server = await createServer({ store, logger: false });
  const url = await server.listen({ port: 0 });
  const feed = await store.createFeed('tiered');
  const next = scaleWorkload(0x9ace);
  // Past the small first segments (they grow to full size), then tiered, so no roll comes soon.
  for (let commit = 0; commit < pacedWarmupCommits; commit++) await feed.append(next(batchRecords));
  await feed.tiered();
  const follower = await startFollower(objectStore, url);
  await follower.ready;
  // The follower copies the segment's tail so far in steps of 8 MiB first: the lag measured is
  // the steady one, after that.
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  const acknowledgedAt = new Map();
  const segmentsBefore = (await feed.diskUse()).historySegments;
  for (let commit = 0; commit < pacedCommits; commit++) {
    const written = await feed.append(next(100));
    acknowledgedAt.set(written.commit, Date.now());
    await new Promise((resolve) => setTimeout(resolve, pacedCommitMs));
  }
  const rolled = (await feed.diskUse()).historySegments !== segmentsBefore;
  const finished = await follower.finish((await feed.head()).commit);
  const lags = [];
  for (let at = 0; at < finished.arrivals.length; at += 2) {
    const acknowledged = acknowledgedAt.get(finished.arrivals[at]);
    if (acknowledged !== undefined) lags.push(finished.arrivals[at + 1] - acknowledged);
  }
  await server.close();
  const lag = latencySummary(lags);
  process.stderr.write(`  paced follower: ${JSON.stringify({ lag, rolled })}\n`);
  return { lag, rolled };
}

/** The warm local RAW scan rate of an ingest's store, in records per second. */
async function warmScanRate(result) {
  const store = await Store.open(result.directory, { readOnly: true });
  try {
    const feed = await store.feed('tiered');
    await scanRate(feed);
    return (await scanRate(feed)).perSecond;
  } finally {
    await store.close();
  }
}

/**
 * Runs the cold reads (`bench/cold-reads.mjs`) in a process of their own, as a reader would
 * run them, and resolves with what they measured.
 */
function coldReads(on, off, objectStore) {
  return new Promise((resolve, reject) => {
    const child = fork(coldReadsScript, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.on('message', (message) => {
      if (message.type === 'result') resolve(message.result);
      else reject(new Error(message.error));
    });
    child.on('exit', (code) => reject(new Error(`the cold reads process exited with ${code}`)));
    child.send({
      on: { directory: on.directory, commits: on.commits },
      off: { directory: off.directory },
      objectStore,
    });
  });
}

export async function run() {
  const suite = new Suite('tiered');
  const binary = versitygwBinary();
  if (!binary) {
    process.stderr.write(`  skipped: ${versitygwMissing}\n`);
    return suite.finish();
  }
  const server = await startVersitygw(binary);
  try {
    await server.createBucket(bucket);
    // The store finds its credentials where a user's would: in the environment.
    process.env.AWS_ACCESS_KEY_ID = server.credentials.accessKeyId;
    process.env.AWS_SECRET_ACCESS_KEY = server.credentials.secretAccessKey;
    const off = [];
    const on = [];
    for (let round = 0; round < rounds; round++) {
      off.push(await ingest(`off-${round}`));
      on.push(
        await ingest(`on-${round}`, {
          endpoint: server.endpoint,
          bucket,
          prefix: `round-${round}/`,
          region: server.region,
        }),
      );
    }
    const median = (values) => values.slice().sort((a, b) => a - b)[Math.floor(values.length / 2)];
    const rate = (results) => median(results.map((result) => result.recordsPerSecond));
    suite.ratio('ingest: tiering on / off (median of rounds)', rate(on) / rate(off), 0.9);
    const last = on[on.length - 1];
    const lag = last.tiering.visibleLagMs;
    suite.ratio('seal to visible: 1000 ms / p99', 1000 / Math.max(lag.p99, 1), 1);
    suite.ratio('seal to visible: p50', lag.p50, undefined, 'ms');
    suite.ratio('seal to visible: p99', lag.p99, undefined, 'ms');
    suite.ratio('seal to visible: slowest', lag.max, undefined, 'ms');
    suite.ratio('tiered() after the last append', last.drainMs, undefined, 'ms');
    const perSegment = last.tiering.requests / Math.max(1, last.tiering.remoteSegments);
    suite.ratio('requests: 8 / per sealed segment', 8 / perSegment, 1);
    suite.ratio('requests per million records', (last.tiering.requests * 1e6) / totalRecords, undefined, 'requests');
    suite.ratio('slowest append, tiering on', last.append.maxMs, undefined, 'ms');
    suite.ratio('slowest append, tiering off', off[off.length - 1].append.maxMs, undefined, 'ms');
    suite.ratio('writer RSS, tiering on', last.rssBytes / 2 ** 20, undefined, 'MiB');
    suite.ratio('writer RSS, tiering off', off[off.length - 1].rssBytes / 2 ** 20, undefined, 'MiB');
    // A follower in a process of its own follows a third ingest, tiered like the others.
    const followedRun = await ingest(
      'follow',
      { endpoint: server.endpoint, bucket, prefix: 'follow/', region: server.region },
      true,
    );
    const followed = followedRun.followed;
    suite.ratio('follower commit lag: 30 ms / p50', 30 / Math.max(followed.lag.p50Ms, 0.01), 1);
    suite.ratio('follower commit lag: 250 ms / p99', 250 / Math.max(followed.lag.p99Ms, 0.01), 1);
    suite.ratio('follower commit lag: p50', followed.lag.p50Ms, undefined, 'ms');
    suite.ratio('follower commit lag: p99', followed.lag.p99Ms, undefined, 'ms');
    suite.ratio('follower commit lag: slowest', followed.lag.maxMs, undefined, 'ms');
    suite.ratio(
      'follower: commits it had once the uploads were done / the writer’s (1: the tail too)',
      followed.tieredHead / followedRun.commits,
      undefined,
      'ratio',
    );
    suite.ratio('follower RAW scan equals the writer’s, byte for byte', followed.sameScan ? 1 : 0, 1);
    suite.ratio(
      'follower RAW scan (all evicted) / warm local scan',
      followed.scanRecordsPerSecond / (await warmScanRate(off[off.length - 1])),
      0.25,
    );
    suite.ratio('ingest with a follower / tiering off', followedRun.recordsPerSecond / rate(off), 0.9);
    suite.ratio(
      'follower requests per million records',
      (followed.requests * 1e6) / totalRecords,
      undefined,
      'requests',
    );
    suite.ratio('follower RSS', followed.rssBytes / 2 ** 20, undefined, 'MiB');
    const paced = await pacedLag({ endpoint: server.endpoint, bucket, prefix: 'paced/', region: server.region });
    suite.ratio(
      `paced commits (${pacedCommitMs} ms apart, no roll), follower lag: 30 ms / p50`,
      30 / Math.max(paced.lag.p50Ms, 0.01),
      1,
    );
    suite.ratio(`paced commits, follower lag: 250 ms / p99`, 250 / Math.max(paced.lag.p99Ms, 0.01), 1);
    suite.ratio('paced commits, follower lag: p50', paced.lag.p50Ms, undefined, 'ms');
    suite.ratio('paced commits, follower lag: p99', paced.lag.p99Ms, undefined, 'ms');
    suite.ratio('paced commits, follower lag: slowest', paced.lag.maxMs, undefined, 'ms');
    suite.ratio('paced commits: a segment rolled meanwhile (0: none)', paced.rolled ? 1 : 0, undefined, 'ratio');
    const reads = await coldReads(last, off[off.length - 1], {
      endpoint: server.endpoint,
      bucket,
      prefix: `round-${rounds - 1}/`,
      region: server.region,
    });
    suite.ratio('cold scan (75% evicted) / warm local scan', reads.cold.perSecond / reads.warm.perSecond, 0.25);
    suite.ratio('first record of a cold segment: 50 ms / p99', 50 / Math.max(reads.remote.firstRecord.p99Ms, 0.01), 1);
    suite.ratio('first record of a cold segment: p50', reads.remote.firstRecord.p50Ms, undefined, 'ms');
    suite.ratio('first record of a cold segment: slowest', reads.remote.firstRecord.maxMs, undefined, 'ms');
    suite.ratio('first record, local warm: p99', reads.local.firstRecord.p99Ms, undefined, 'ms');
    suite.ratio('first record, the first read after an open', reads.remote.firstRecord.afterOpenMs, undefined, 'ms');
    suite.ratio('get, winner in evicted history: 20 ms / p99', 20 / Math.max(reads.remote.get.p99Ms, 0.01), 1);
    suite.ratio('get, winner in evicted history: p50', reads.remote.get.p50Ms, undefined, 'ms');
    suite.ratio('get, winner in evicted history: slowest', reads.remote.get.maxMs, undefined, 'ms');
    suite.ratio('get, the first lookup after an open', reads.remote.get.afterOpenMs, undefined, 'ms');
    suite.ratio('get, the same lookups, local warm: p50', reads.local.get.p50Ms, undefined, 'ms');
    suite.ratio('get, the same lookups, local warm: p99', reads.local.get.p99Ms, undefined, 'ms');
    suite.ratio('get: lookups that found their key', reads.remote.get.found / (reads.remote.get.count + 1), 1);
    suite.ratio(
      'first record: requests per read',
      reads.firstRequests.requests / (reads.remote.firstRecord.count + 1),
      undefined,
      'requests',
    );
    suite.ratio(
      'get: requests per lookup',
      reads.getRequests.requests / (reads.remote.get.count + 1),
      undefined,
      'requests',
    );
    suite.ratio(
      'cold scan: requests per evicted segment',
      reads.scanReads.requests / Math.max(1, reads.evictedSegments),
      undefined,
      'requests',
    );
    suite.ratio('reader RSS after the cold scan', reads.rssBytes / 2 ** 20, undefined, 'MiB');
  } finally {
    await server.stop();
  }
  return suite.finish();
}
