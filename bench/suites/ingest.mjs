// Suite `ingest`: durable ingest, each batch durable before the next, on StreamStack (stream
// appends with their seals, and one-shot appends), better-sqlite3 (WAL, synchronous=FULL, one transaction per
// batch), lmdb (sync on, one transaction per batch) and a raw baseline (the framed batch written
// into a preallocated file, then fdatasync). Also: plain appends against fallocate against
// zero-filled preallocation, and group commit: 8, 64 and 256 concurrent one-shot appenders
// against one, their latency against the machine's fsync time, and the CPU each commit costs.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { loadKernels, Store } from '@streamstack/engine';
import { quantile, Suite, timedConcurrent } from '../harness.mjs';
import { makeRecords, openLmdbStore, openSqlite, temporaryDirectory } from '../workload.mjs';

const batchSizes = [1, 10, 100, 1000];
/** Bytes of the raw baseline's preallocated file; it wraps around when full. */
const rawFileBytes = 256 * 1024 * 1024;
/** Seconds each concurrent-appender run takes. */
const concurrentSeconds = 3;
/** Concurrent one-shot appenders of one record: the group commit's load. */
const appenderCounts = [1, 8, 64, 256];
/** The load whose targets the issue sets: throughput against one appender, p99 latency. */
const appenders = 64;
/** Seconds of single durable writes that give the machine's fsync time. */
const fsyncSeconds = 2;
/** A stream is sealed once it holds this many records… */
const streamRecordsMax = 100_000;
/** …or this many batches, whichever comes first. */
const streamBatchesMax = 1_000;

const encoder = new TextEncoder();

/** Frames a batch the simplest way: per record, header + key + type + payload, CRCs by kernel. */
function frameBatch(kernels, records) {
  const encoded = records.map((record) => ({
    key: encoder.encode(record.key),
    type: encoder.encode(record.type),
    payload: encoder.encode(record.payload),
  }));
  const total = encoded.reduce(
    (sum, record) => sum + 8 + 2 + record.key.length + record.type.length + record.payload.length,
    8,
  );
  const buffer = new Uint8Array(total);
  const view = new DataView(buffer.buffer);
  const offsets = new Uint32Array(encoded.length + 1);
  let at = 0;
  encoded.forEach((record, index) => {
    offsets[index] = at;
    const length = 2 + record.key.length + record.type.length + record.payload.length;
    view.setUint32(at, length, true);
    buffer[at + 8] = record.key.length;
    buffer[at + 9] = record.type.length;
    buffer.set(record.key, at + 10);
    buffer.set(record.type, at + 10 + record.key.length);
    buffer.set(record.payload, at + 10 + record.key.length + record.type.length);
    at += 8 + length;
  });
  offsets[encoded.length] = at;
  view.setUint32(at, 0x8000_0000, true); // the commit marker: an empty control frame
  kernels.frameChecksumsWrite(buffer.subarray(0, at), offsets.subarray(0, encoded.length));
  return buffer;
}

/** A file of `bytes`, preallocated as `mode` says: 'none', 'fallocate' or 'zeros'. */
function preparedFile(directory, mode, bytes) {
  const file = path.join(directory, `raw-${mode}.bin`);
  if (mode === 'fallocate') execFileSync('fallocate', ['-l', String(bytes), file]);
  else if (mode === 'zeros') {
    const fd = fs.openSync(file, 'w');
    const chunk = Buffer.alloc(1024 * 1024);
    for (let at = 0; at < bytes; at += chunk.length) fs.writeSync(fd, chunk, 0, chunk.length, at);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
  } else fs.writeFileSync(file, '');
  return fs.openSync(file, 'r+');
}

/** The machine's fsync time: single one-page durable writes into a preallocated file (ms, sorted). */
async function fsyncTimes(kernels) {
  const fd = preparedFile(temporaryDirectory('fsync'), 'zeros', 16 * 1024 * 1024);
  const page = new Uint8Array(4096).fill(7);
  const times = [];
  const deadline = performance.now() + fsyncSeconds * 1000;
  for (let offset = 0; performance.now() < deadline; offset = (offset + page.length) % (16 * 1024 * 1024)) {
    const begun = performance.now();
    await kernels.writeDurable(fd, offset, [page]);
    times.push(performance.now() - begun);
  }
  fs.closeSync(fd);
  return times.sort((a, b) => a - b);
}

export async function run() {
  const kernels = loadKernels();
  const suite = new Suite('ingest');
  const rates = {};

  // Preallocation: the same raw 10-record batches, into a growing file, an fallocated one, and
  // a zero-filled one.
  const preallocationDirectory = temporaryDirectory('prealloc');
  const preallocationBatch = frameBatch(kernels, makeRecords(0, 10));
  const preallocationBytes = 64 * 1024 * 1024;
  for (const mode of ['none', 'fallocate', 'zeros']) {
    const fd = preparedFile(preallocationDirectory, mode, preallocationBytes);
    let offset = 0;
    const entry = await suite.measure(
      `preallocation ${mode}, 10-record batches`,
      async () => {
        await kernels.writeDurable(fd, offset, [preallocationBatch]);
        offset = (offset + preallocationBatch.length) % (preallocationBytes - preallocationBatch.length);
      },
      { async: true, items: 10 },
    );
    rates[`prealloc-${mode}`] = entry.itemsPerSecond;
  }
  suite.ratio('zero-filled / plain appends', rates['prealloc-zeros'] / rates['prealloc-none']);
  suite.ratio('zero-filled / fallocate', rates['prealloc-zeros'] / rates['prealloc-fallocate']);

  for (const size of batchSizes) {
    // Fresh records for every batch (ids keep growing), as a real producer sends them; every
    // peer pays the same for making them.
    let next = 0;
    const nextBatch = () => makeRecords((next += size), size);

    const rawDirectory = temporaryDirectory('raw');
    const rawFd = preparedFile(rawDirectory, 'zeros', rawFileBytes);
    let rawOffset = 0;
    rates[`raw-${size}`] = (
      await suite.measure(
        `raw baseline, batch ${size}`,
        async () => {
          const framed = frameBatch(kernels, nextBatch());
          if (rawOffset + framed.length > rawFileBytes) rawOffset = 0;
          await kernels.writeDurable(rawFd, rawOffset, [framed]);
          rawOffset += framed.length;
        },
        { async: true, items: size },
      )
    ).itemsPerSecond;
    fs.closeSync(rawFd);

    const store = await Store.open(temporaryDirectory('streamstack'));
    const feed = await store.createFeed('ingest');
    const { token } = await feed.acquireLease({ holder: 'bench', ttlMs: 24 * 3600 * 1000 });
    // A stream is not readable until it is sealed, so the seals are inside the timing: a stream
    // is sealed every `streamRecordsMax` records or `streamBatchesMax` batches, whichever first,
    // by the append that fills it.
    const sealEvery = Math.min(streamRecordsMax, streamBatchesMax * size);
    let stream = await feed.openStream({ token });
    let inStream = 0;
    rates[`stream-${size}`] = (
      await suite.measure(
        `streamstack stream append, batch ${size}, seals included`,
        async () => {
          await stream.append(nextBatch(), { token });
          inStream += size;
          if (inStream >= sealEvery) {
            await stream.seal({ token });
            stream = await feed.openStream({ token });
            inStream = 0;
          }
        },
        { async: true, items: size },
      )
    ).itemsPerSecond;
    await stream.seal({ token });
    // Closing waits for the seals' index work; the one-shot case gets a store of its own, as each
    // peer does, so that it measures its own work only.
    await store.close();
    const oneShotStore = await Store.open(temporaryDirectory('streamstack-oneshot'));
    const oneShotFeed = await oneShotStore.createFeed('ingest');
    // The first append creates the feed's first segment; the stream case paid that before its
    // timing too (its lease and stream).
    await oneShotFeed.append(nextBatch());
    rates[`oneshot-${size}`] = (
      await suite.measure(
        `streamstack one-shot append, batch ${size}`,
        async () => {
          await oneShotFeed.append(nextBatch());
        },
        { async: true, items: size },
      )
    ).itemsPerSecond;
    await oneShotStore.close();

    const sqlite = openSqlite(temporaryDirectory('sqlite'));
    const insert = sqlite.prepare('INSERT INTO records (key, type, payload) VALUES (?, ?, ?)');
    const insertBatch = sqlite.transaction((records) => {
      for (const record of records) insert.run(record.key, record.type, Buffer.from(record.payload));
    });
    rates[`sqlite-${size}`] = (
      await suite.measure(
        `better-sqlite3, batch ${size}`,
        async () => {
          insertBatch(nextBatch());
        },
        { async: true, items: size },
      )
    ).itemsPerSecond;
    sqlite.close();

    const lmdb = openLmdbStore(temporaryDirectory('lmdb'));
    let lmdbKey = 0;
    rates[`lmdb-${size}`] = (
      await suite.measure(
        `lmdb, batch ${size}`,
        async () => {
          const records = nextBatch();
          await lmdb.transaction(() => {
            for (const record of records) lmdb.put(++lmdbKey, record);
          });
        },
        { async: true, items: size },
      )
    ).itemsPerSecond;
    await lmdb.close();

    for (const mode of ['stream', 'oneshot']) {
      const label = mode === 'stream' ? 'stream append' : 'one-shot append';
      const rate = rates[`${mode}-${size}`];
      suite.ratio(`${label} / better-sqlite3 at batch ${size}`, rate / rates[`sqlite-${size}`], size >= 10 ? 2 : 1);
      suite.ratio(`${label} / lmdb at batch ${size}`, rate / rates[`lmdb-${size}`], size >= 10 ? 2 : undefined);
      // One-shot appends of 100 records cost a commit each, a tenth of a 1,000-record one's.
      const rawTarget = size < 10 ? undefined : mode === 'oneshot' && size === 100 ? 0.7 : 0.8;
      suite.ratio(`${label} / raw baseline at batch ${size}`, rate / rates[`raw-${size}`], rawTarget);
    }
  }

  // What one commit of a 1,000-record one-shot append costs the CPU, each durable before the next.
  {
    const store = await Store.open(temporaryDirectory('oneshot-cpu'));
    const feed = await store.createFeed('oneshot-cpu');
    let next = 0;
    await feed.append(makeRecords((next += 1000), 1000)); // creates the feed's first segment
    const run = await timedConcurrent(concurrentSeconds, 1, () => feed.append(makeRecords((next += 1000), 1000)));
    await store.close();
    suite.ratio('one-shot batch 1000: main-thread CPU per record', run.mainThreadMicros / 1000, undefined, 'µs');
    suite.ratio('one-shot batch 1000: slowest append', run.latencies[run.latencies.length - 1], undefined, 'ms');
  }

  // Group commit: concurrent one-shot appenders of one record each, against one, and their
  // latency against the fsync time of this machine, measured in the same run.
  const fsyncs = await fsyncTimes(kernels);
  const fsyncMs = quantile(fsyncs, 0.5);
  suite.ratio('fsync time (one 4 KiB durable write), median', fsyncMs, undefined, 'ms');
  const store = await Store.open(temporaryDirectory('group'));
  const feed = await store.createFeed('group');
  let id = 0;
  // A new feed's first append creates its first history segment (preallocated, zero-filled and
  // synced): a one-time cost, reported on its own rather than as the slowest of the runs.
  const firstBegun = performance.now();
  await feed.append(makeRecords(++id, 1));
  suite.ratio('first append of a new feed (creates its segment)', performance.now() - firstBegun, undefined, 'ms');
  const runs = {};
  for (const count of appenderCounts) {
    const before = feed.groupCommitStats();
    runs[count] = await timedConcurrent(concurrentSeconds, count, () => feed.append(makeRecords(++id, 1)));
    const after = feed.groupCommitStats();
    const groups = after.groups - before.groups;
    const run = runs[count];
    suite.cases.push({
      name: `one-shot, ${count} appender${count === 1 ? '' : 's'} of 1 record`,
      opsPerSecond: run.perSecond,
      itemsPerSecond: run.perSecond,
      relativeMarginPercent: 0,
      samples: run.latencies.length,
    });
    const label = `${count} appender${count === 1 ? '' : 's'}`;
    suite.ratio(
      `${label}: commits per fsync (group size)`,
      (after.requests - before.requests) / groups,
      undefined,
      'commits',
    );
    suite.ratio(
      `${label}: groups written behind one in flight`,
      (100 * (after.pipelined - before.pipelined)) / groups,
      undefined,
      '%',
    );
    suite.ratio(`${label}: main-thread CPU per commit`, run.mainThreadMicros, undefined, 'µs');
    suite.ratio(`${label}: process CPU per commit`, run.processMicros, undefined, 'µs');
    suite.ratio(`${label}: latency p50`, quantile(run.latencies, 0.5), undefined, 'ms');
    suite.ratio(`${label}: latency p99`, quantile(run.latencies, 0.99), undefined, 'ms');
    suite.ratio(`${label}: slowest append`, run.latencies[run.latencies.length - 1], undefined, 'ms');
    if (count > 1)
      suite.ratio(`${label} / 1 appender`, run.perSecond / runs[1].perSecond, count === appenders ? 20 : undefined);
  }
  await store.close();
  suite.ratio(
    `3 × fsync time / p99 latency at ${appenders} appenders`,
    (3 * fsyncMs) / quantile(runs[appenders].latencies, 0.99),
    1,
  );

  return suite.finish();
}
