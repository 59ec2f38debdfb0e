// A fresh process that opens a feed written by the `scale` suite and measures what a user waits
// for after a restart: the open, the first get, the first RAW read batch, the first whole-history
// dedup batch, RSS after open and after random gets, the warm get median, and the rate of a full
// columnar RAW scan. Prints one JSON line.
// Usage: node bench/scale-probe.mjs <data directory> <feed> <key count> <gets>
import { Store } from '@streamstack/engine';
import { prng } from './prng.mjs';

const [directory, feedName, keyCountText, getsText] = process.argv.slice(2);
const keyCount = Number(keyCountText);
const gets = Number(getsText);
const random = prng(0x9e75);
const keyOf = () => `k${Math.floor(random() * keyCount)}`;
const mb = (bytes) => Math.round(bytes / 1e6);

let started = performance.now();
const store = await Store.open(directory);
const feed = await store.feed(feedName);
const openMs = performance.now() - started;
const rssAfterOpenMb = mb(process.memoryUsage().rss);

started = performance.now();
await feed.get(keyOf());
const firstGetMs = performance.now() - started;

const latencies = new Float64Array(gets);
let found = 0;
for (let at = 0; at < gets; at++) {
  const key = keyOf();
  const begun = performance.now();
  if (await feed.get(key)) found++;
  latencies[at] = performance.now() - begun;
}
latencies.sort();
const rssAfterGetsMb = mb(process.memoryUsage().rss);

started = performance.now();
const raw = feed.readBatches();
const firstRaw = await raw.next();
const firstRawBatchMs = performance.now() - started;
await raw.return(undefined);

// A full RAW scan in the columnar form, the fastest read: does its rate hold as history grows?
started = performance.now();
let scanned = 0;
let scannedBytes = 0;
for await (const batch of feed.readColumns()) {
  scanned += batch.length;
  for (let i = 0; i < batch.length; i++) scannedBytes += batch.payloadEnds[i] - batch.payloadStarts[i];
}
const columnsScanMs = performance.now() - started;

// Last: the first whole-history dedup read builds the fingerprint table over every record.
started = performance.now();
const dedup = feed.readBatches({ mode: 'dedup' });
const firstDedup = await dedup.next();
const firstDedupBatchMs = performance.now() - started;
await dedup.return(undefined);
const rssAfterDedupMb = mb(process.memoryUsage().rss);
const info = await feed.info();
if (scanned !== info.records) throw new Error(`the columnar scan read ${scanned} records of ${info.records}`);
await store.close();

process.stdout.write(
  `${JSON.stringify({
    records: info.records,
    commits: info.commits,
    openMs,
    firstGetMs,
    firstRawBatchMs,
    firstRawBatchRecords: firstRaw.value?.length ?? 0,
    firstDedupBatchMs,
    firstDedupBatchRecords: firstDedup.value?.length ?? 0,
    columnsScanRecords: scanned,
    columnsScanPayloadBytes: scannedBytes,
    columnsScanRecordsPerSecond: scanned / (columnsScanMs / 1000),
    getMedianUs: latencies[Math.floor(gets / 2)] * 1000,
    getP99Us: latencies[Math.floor(gets * 0.99)] * 1000,
    getsFound: found,
    rssAfterOpenMb,
    rssAfterGetsMb,
    rssAfterDedupMb,
  })}\n`,
);
