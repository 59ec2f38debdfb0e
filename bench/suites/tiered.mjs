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
// Not measured yet, because not built yet: cold reads of evicted history and followers.
import { performance } from 'node:perf_hooks';
import { Store } from '@streamstack/engine';
import { startVersitygw, versitygwBinary, versitygwMissing } from '../../test/support/versitygw.mjs';
import { Suite } from '../harness.mjs';
import { latencySummary, scaleWorkload, temporaryDirectory } from '../workload.mjs';

const totalRecords = Number(process.env.STREAMSTACK_BENCH_TIERED_RECORDS ?? 10_000_000);
const rounds = Number(process.env.STREAMSTACK_BENCH_TIERED_ROUNDS ?? 1);
const batchRecords = 1_000;
const bucket = 'bench';

/** Writes the workload into a new store in `label`'s folder; with `objectStore`, waits for its uploads. */
async function ingest(label, objectStore) {
  const directory = temporaryDirectory(`tiered-${label}`);
  const store = await Store.open(directory, objectStore ? { objectStore } : {});
  const feed = await store.createFeed('tiered');
  const next = scaleWorkload(0x71e4);
  const appendMs = [];
  const started = performance.now();
  for (let done = 0; done < totalRecords; done += batchRecords) {
    const before = performance.now();
    await feed.append(next(Math.min(batchRecords, totalRecords - done)));
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
  await store.close();
  const result = {
    recordsPerSecond: totalRecords / seconds,
    append: latencySummary(appendMs),
    segments,
    drainMs,
    rssBytes,
    tiering,
  };
  process.stderr.write(`  ${label}: ${JSON.stringify({ ...result, tiering: undefined })}\n`);
  if (tiering) process.stderr.write(`  ${label} tiering: ${JSON.stringify(tiering)}\n`);
  return result;
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
  } finally {
    await server.stop();
  }
  return suite.finish();
}
