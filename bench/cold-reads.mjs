// The cold reads of `pnpm bench tiered`: the tiered store reopened with a local budget of 25% of
// its history (the rest evicted) and read cold, each phase from a fresh open, against the
// untiered store read warm. `bench/cold-reads-process.mjs` runs them in a process of their own,
// as a reader would be: the suite's process holds the garbage of three ingests of 10^7 records,
// whose collections would be timed as the reads' own.
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Store } from '@streamstack/engine';
import { latencySummary } from './workload.mjs';

/** Records per commit of the suite's ingests: the segment based at position `base` follows commit `(base - 1) / batchRecords`. */
export const batchRecords = 1_000;

/** Reads every record of `feed` once; records per second. */
export async function scanRate(feed) {
  const started = performance.now();
  let records = 0;
  for await (const batch of feed.readBatches()) records += batch.length;
  return { records, perSecond: records / ((performance.now() - started) / 1000) };
}

/** A seeded stream of integers below `limit`, so every run asks for the same cursors and keys. */
function integers(seed) {
  let state = seed >>> 0 || 1;
  return (limit) => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) % limit;
  };
}

/**
 * Reads the tiered store (`on`) cold with 25% of its history local, against the untiered one
 * (`off`) read warm. Each phase opens the store afresh, so its block cache starts empty.
 */
export async function coldReads(on, off, objectStore) {
  const untiered = await Store.open(off.directory, { readOnly: true });
  await scanRate(await untiered.feed('tiered'));
  const warm = await scanRate(await untiered.feed('tiered'));
  await untiered.close();

  const historyBytes = (await diskUseOf(on.directory)).historyBytes;
  const budgeted = { ...objectStore, localHistoryBytesMax: Math.floor(historyBytes * 0.25) };
  const writer = await Store.open(on.directory, { objectStore: budgeted });
  const evicted = await (await writer.feed('tiered')).tiered();
  await writer.close();
  process.stderr.write(`  evicted: ${JSON.stringify({ historyBytes, ...evicted, visibleLagMs: undefined })}\n`);

  const reopen = async () => {
    const store = await Store.open(on.directory, { objectStore: budgeted, readOnly: true });
    return { store, feed: await store.feed('tiered') };
  };
  // The same point reads on the untiered store (warm, local) and on the tiered one (cold, a
  // fresh open): what evicted history adds to them.
  const localStore = await Store.open(off.directory, { readOnly: true });
  const localFeed = await localStore.feed('tiered');
  const keys = await keysToGet(localFeed, on.commits, segmentEndsOf(on.directory, on.commits));
  const local = { firstRecord: await firstRecords(localFeed, on.commits), get: await gets(localFeed, keys) };
  await localStore.close();
  let { store, feed } = await reopen();
  const firstRecord = await firstRecords(feed, on.commits);
  const firstRequests = (await feed.info()).tiering.remoteReads;
  await store.close();
  ({ store, feed } = await reopen());
  const remote = { firstRecord, get: await gets(feed, keys) };
  const getRequests = (await feed.info()).tiering.remoteReads;
  await store.close();
  ({ store, feed } = await reopen());
  const cold = await scanRate(feed);
  const scanReads = (await feed.info()).tiering.remoteReads;
  const rssBytes = process.memoryUsage().rss;
  await store.close();
  const result = {
    warm,
    cold,
    local,
    remote,
    firstRequests,
    getRequests,
    scanReads,
    rssBytes,
    evictedSegments: evicted.evictedSegments,
  };
  process.stderr.write(`  cold reads: ${JSON.stringify(result)}\n`);
  return result;
}

/**
 * Point reads of the oldest half of history (evicted, in the tiered store): the first record
 * after a cursor there, and `get(key)` of a key found there, as of the commit that ends its
 * segment, so the lookup asks dictionaries only and its winner lies in that half (as of a commit
 * inside a segment, a lookup reads the keys of that whole segment: a scan, not a point read).
 * Seeded, so both stores are asked the same; the keys are found in the untiered store, and each
 * kind of read is timed from a fresh open of the tiered one (a cold cache).
 */
async function firstRecords(feed, commits) {
  const pick = integers(0x5eed);
  const firstRecordMs = [];
  for (let probe = 0; probe < 41; probe++) {
    const before = performance.now();
    for await (const _record of feed.read({ after: 1 + pick(Math.floor(commits / 2)), limit: 1 })) break;
    firstRecordMs.push(performance.now() - before);
  }
  // The very first read after an open also sets up the object store client (its first
  // connection, the SDK's lazily loaded parts): reported on its own.
  return { ...latencySummary(firstRecordMs.slice(1)), afterOpenMs: firstRecordMs[0] };
}

/** Keys of records in the oldest half, each with the commit that ends its segment (found untimed). */
async function keysToGet(feed, commits, segmentEnds) {
  const pick = integers(0x6e75);
  const keys = [];
  for (let probe = 0; probe < 200; probe++)
    for await (const record of feed.read({ after: pick(Math.floor(commits / 2)), limit: 1 })) {
      const asOf = segmentEnds.find((end) => end >= record.commit);
      if (asOf !== undefined) keys.push({ key: record.key, asOf });
    }
  return keys;
}

/** Times `get` of each key as of its commit. */
async function gets(feed, keys) {
  const getMs = [];
  const slowest = [];
  let found = 0;
  for (const { key, asOf } of keys) {
    const requestsBefore = (await feed.info()).tiering?.remoteReads.requests ?? 0;
    const before = performance.now();
    if (await feed.get(key, { asOf })) found++;
    getMs.push(performance.now() - before);
    const requests = ((await feed.info()).tiering?.remoteReads.requests ?? 0) - requestsBefore;
    slowest.push({ ms: Math.round(getMs.at(-1) * 10) / 10, asOf, requests });
  }
  // The five slowest lookups, with the requests each made: whether a slow one waited on object
  // storage or on this process.
  slowest.sort((a, b) => b.ms - a.ms);
  process.stderr.write(`  slowest gets: ${JSON.stringify(slowest.slice(0, 5))}\n`);
  // The first lookup after an open also sets up the object store client, as the first record's
  // first read does: reported on its own, beside the lookups after it.
  return { ...latencySummary(getMs.slice(1)), afterOpenMs: getMs[0], found };
}

/**
 * The commits that end a segment in the oldest half of the tiered store's history: every commit
 * holds `batchRecords` records, so the segment based at position `base` follows commit
 * `(base - 1) / batchRecords`.
 */
function segmentEndsOf(directory, commits) {
  return fs
    .readdirSync(path.join(directory, 'feeds', 'tiered', 'history'))
    .filter((name) => name.endsWith('.hist'))
    .map((name) => (Number(name.slice(0, -'.hist'.length)) - 1) / batchRecords)
    .filter((commit) => Number.isInteger(commit) && commit >= 1 && commit <= commits / 2)
    .sort((a, b) => a - b);
}

/** The bytes of a store's history segments on disk (allocated, so a cut segment counts its header). */
async function diskUseOf(directory) {
  const folder = path.join(directory, 'feeds', 'tiered', 'history');
  let historyBytes = 0;
  for (const name of await fs.promises.readdir(folder))
    if (name.endsWith('.hist')) historyBytes += (await fs.promises.stat(path.join(folder, name))).size;
  return { historyBytes };
}
