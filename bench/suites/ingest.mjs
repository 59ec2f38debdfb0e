// Suite `ingest`: durable ingest, each batch durable before the next, on StreamStack (stream
// appends with their seals, and one-shot appends), better-sqlite3 (WAL, synchronous=FULL, one transaction per
// batch), lmdb (sync on, one transaction per batch) and a raw baseline (the framed batch written
// into a preallocated file, then fdatasync). Also: plain appends against fallocate against
// zero-filled preallocation, and 64 concurrent one-shot appenders against one.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { loadKernels, Store } from '@streamstack/engine';
import { Suite } from '../harness.mjs';
import { makeRecords, openLmdbStore, openSqlite, temporaryDirectory } from '../workload.mjs';

const batchSizes = [1, 10, 100, 1000];
/** Bytes of the raw baseline's preallocated file; it wraps around when full. */
const rawFileBytes = 256 * 1024 * 1024;
/** Seconds the concurrent-appender runs take. */
const concurrentSeconds = 3;
const appenders = 64;
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
  const total = encoded.reduce((sum, record) => sum + 8 + 2 + record.key.length + record.type.length + record.payload.length, 8);
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

/** Runs `workers` loops of `operation` for `seconds`; returns completed items per second. */
async function timedConcurrent(seconds, workers, operation, itemsPerOperation) {
  const deadline = performance.now() + seconds * 1000;
  let completed = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      while (performance.now() < deadline) {
        await operation(worker);
        completed++;
      }
    }),
  );
  return (completed * itemsPerOperation) / ((performance.now() - started) / 1000);
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
    const entry = await suite.measure(`preallocation ${mode}, 10-record batches`, async () => {
      await kernels.writeDurable(fd, offset, [preallocationBatch]);
      offset = (offset + preallocationBatch.length) % (preallocationBytes - preallocationBatch.length);
    }, { async: true, items: 10 });
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
    rates[`raw-${size}`] = (await suite.measure(`raw baseline, batch ${size}`, async () => {
      const framed = frameBatch(kernels, nextBatch());
      if (rawOffset + framed.length > rawFileBytes) rawOffset = 0;
      await kernels.writeDurable(rawFd, rawOffset, [framed]);
      rawOffset += framed.length;
    }, { async: true, items: size })).itemsPerSecond;
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
    rates[`stream-${size}`] = (await suite.measure(`streamstack stream append, batch ${size}, seals included`, async () => {
      await stream.append(nextBatch(), { token });
      inStream += size;
      if (inStream >= sealEvery) {
        await stream.seal({ token });
        stream = await feed.openStream({ token });
        inStream = 0;
      }
    }, { async: true, items: size })).itemsPerSecond;
    await stream.seal({ token });
    await feed.releaseLease({ token });
    rates[`oneshot-${size}`] = (await suite.measure(`streamstack one-shot append, batch ${size}`, async () => {
      await feed.append(nextBatch());
    }, { async: true, items: size })).itemsPerSecond;
    await store.close();

    const sqlite = openSqlite(temporaryDirectory('sqlite'));
    const insert = sqlite.prepare('INSERT INTO records (key, type, payload) VALUES (?, ?, ?)');
    const insertBatch = sqlite.transaction((records) => {
      for (const record of records) insert.run(record.key, record.type, Buffer.from(record.payload));
    });
    rates[`sqlite-${size}`] = (await suite.measure(`better-sqlite3, batch ${size}`, async () => {
      insertBatch(nextBatch());
    }, { async: true, items: size })).itemsPerSecond;
    sqlite.close();

    const lmdb = openLmdbStore(temporaryDirectory('lmdb'));
    let lmdbKey = 0;
    rates[`lmdb-${size}`] = (await suite.measure(`lmdb, batch ${size}`, async () => {
      const records = nextBatch();
      await lmdb.transaction(() => {
        for (const record of records) lmdb.put(++lmdbKey, record);
      });
    }, { async: true, items: size })).itemsPerSecond;
    await lmdb.close();

    for (const mode of ['stream', 'oneshot']) {
      const label = mode === 'stream' ? 'stream append' : 'one-shot append';
      const rate = rates[`${mode}-${size}`];
      suite.ratio(`${label} / better-sqlite3 at batch ${size}`, rate / rates[`sqlite-${size}`], size >= 10 ? 2 : 1);
      suite.ratio(`${label} / lmdb at batch ${size}`, rate / rates[`lmdb-${size}`], size >= 10 ? 2 : undefined);
      suite.ratio(`${label} / raw baseline at batch ${size}`, rate / rates[`raw-${size}`], size >= 10 ? 0.8 : undefined);
    }
  }

  // Group commit: 64 one-shot appenders of one record each, against one.
  const store = await Store.open(temporaryDirectory('group'));
  const feed = await store.createFeed('group');
  let id = 0;
  const single = await timedConcurrent(concurrentSeconds, 1, () => feed.append(makeRecords(++id, 1)), 1);
  const many = await timedConcurrent(concurrentSeconds, appenders, () => feed.append(makeRecords(++id, 1)), 1);
  await store.close();
  suite.cases.push(
    { name: 'one-shot, 1 appender of 1 record', opsPerSecond: single, itemsPerSecond: single, relativeMarginPercent: 0, samples: 1 },
    { name: `one-shot, ${appenders} appenders of 1 record`, opsPerSecond: many, itemsPerSecond: many, relativeMarginPercent: 0, samples: 1 },
  );
  suite.ratio(`${appenders} concurrent one-shot appenders / 1`, many / single, 20);

  return suite.finish();
}
