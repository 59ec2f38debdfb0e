// Suite `scale`: do StreamStack's costs stay flat as the history grows? A realistic workload —
// 200-byte payloads of which 10% repeat a recent one, keys drawn from 1M, 8 types, one tag each
// drawn from 1M — is written through streams of 100,000 records (every append and every seal
// timed, the seals inside the throughput) and again through one-shot appends of 1,000, up to
// STREAMSTACK_BENCH_SCALE_RECORDS (the figure: 10^7). Measured in the same run:
// - throughput for each successive million records, append and seal latency p50/p99/max, and
//   the event loop's largest delay, on both paths;
// - in a fresh process after closing, at 1M and at the full size: open time, first get, first
//   RAW batch, first whole-history dedup batch, RSS after open and after 10,000 random gets;
// - RAW scan rates with 10% and 90% repeated payloads against unique payloads;
// - 2M one-record commits from 64 concurrent appenders against 200,000: open time and RSS, and
//   their columnar scan against the large commits' (batches span small commits);
// - the raw baseline: the same records framed and fdatasync'd into a preallocated file in
//   batches of 1,000, and per seal, the time to write and fsync that seal's own bytes.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { loadKernels, Store } from '@streamstack/engine';
import { Suite } from '../harness.mjs';
import { keyCount, latencySummary, temporaryDirectory, scaleWorkload as workload } from '../workload.mjs';

const totalRecords = Number(process.env.STREAMSTACK_BENCH_SCALE_RECORDS ?? 10_000_000);
const commitsMany = Number(process.env.STREAMSTACK_BENCH_SCALE_COMMITS ?? 2_000_000);
const commitsFew = Math.floor(commitsMany / 10);
const streamRecords = 100_000;
const batchRecords = 1_000;
const probeGets = 10_000;
const scanRecords = 200_000;
const concurrentAppenders = 64;
const probe = fileURLToPath(new URL('../scale-probe.mjs', import.meta.url));

/** The probe, in a fresh process, of the feed in `directory` as it is now. */
function probeFeed(directory, feed) {
  const out = execFileSync(process.execPath, [probe, directory, feed, String(keyCount), String(probeGets)], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  const result = JSON.parse(out.trim().split('\n').pop());
  // Each figure is printed as it comes, so a long run that is stopped still tells something.
  process.stderr.write(`  probe: ${JSON.stringify(result)}\n`);
  return result;
}

const encoder = new TextEncoder();

/** The raw baseline's framing: per record a frame header, key, type and payload. */
function frame(kernels, records) {
  const parts = records.map((record) => [
    encoder.encode(record.key),
    encoder.encode(record.type),
    encoder.encode(record.payload),
  ]);
  const total = parts.reduce((sum, [key, type, payload]) => sum + 10 + key.length + type.length + payload.length, 0);
  const buffer = new Uint8Array(total);
  const view = new DataView(buffer.buffer);
  const offsets = new Uint32Array(parts.length);
  let at = 0;
  parts.forEach(([key, type, payload], index) => {
    offsets[index] = at;
    view.setUint32(at, 2 + key.length + type.length + payload.length, true);
    buffer[at + 8] = key.length;
    buffer[at + 9] = type.length;
    buffer.set(key, at + 10);
    buffer.set(type, at + 10 + key.length);
    buffer.set(payload, at + 10 + key.length + type.length);
    at += 10 + key.length + type.length + payload.length;
  });
  kernels.frameChecksumsWrite(buffer, offsets);
  return buffer;
}

/** Raw baseline: `records` in batches of 1,000, framed and fdatasync'd into a preallocated file. */
async function rawBaseline(kernels, records) {
  const directory = temporaryDirectory('scale-raw');
  const bytes = 256 * 1024 * 1024;
  const file = path.join(directory, 'raw.bin');
  const fd = fs.openSync(file, 'w+');
  const zeros = Buffer.alloc(1024 * 1024);
  for (let at = 0; at < bytes; at += zeros.length) fs.writeSync(fd, zeros, 0, zeros.length, at);
  fs.fsyncSync(fd);
  const next = workload(0xbad);
  let offset = 0;
  let written = 0;
  const started = performance.now();
  for (let done = 0; done < records; done += batchRecords) {
    const framed = frame(kernels, next(batchRecords));
    if (offset + framed.length > bytes) offset = 0;
    await kernels.writeDurable(fd, offset, [framed]);
    offset += framed.length;
    written += framed.length;
  }
  const seconds = (performance.now() - started) / 1000;
  fs.closeSync(fd);
  return { recordsPerSecond: records / seconds, bytesPerSecond: written / seconds, bytesPerRecord: written / records };
}

/**
 * Writes `totalRecords` into a fresh feed, by streams or one-shots; probes the feed in a fresh
 * process after the first million and at the end.
 */
async function ingest(mode) {
  const directory = temporaryDirectory(`scale-${mode}`);
  const next = workload(mode === 'stream' ? 0x5ca1e : 0x0e5);
  let store = await Store.open(directory);
  let feed = await store.createFeed('scale');
  let token =
    mode === 'stream' ? (await feed.acquireLease({ holder: 'scale', ttlMs: 24 * 3600 * 1000 })).token : undefined;
  const appendMs = [];
  const sealMs = [];
  const sealRecords = [];
  const perMillion = [];
  const probes = {};
  // The probe at 1M blocks this process while it waits for the child: its histogram is set
  // aside then and a fresh one started, so the wait is not counted as a stall.
  let delay = monitorEventLoopDelay({ resolution: 10 });
  let delayMaxMs = 0;
  delay.enable();
  let written = 0;
  let millionStarted = performance.now();
  let stream;
  let inStream = 0;
  while (written < totalRecords) {
    const batch = next(batchRecords);
    let begun = performance.now();
    if (mode === 'stream') {
      stream ??= await feed.openStream({ token });
      await stream.append(batch, { token });
      appendMs.push(performance.now() - begun);
      inStream += batch.length;
      if (inStream >= streamRecords) {
        begun = performance.now();
        await stream.seal({ token });
        sealMs.push(performance.now() - begun);
        sealRecords.push(inStream);
        stream = undefined;
        inStream = 0;
      }
    } else {
      await feed.append(batch);
      appendMs.push(performance.now() - begun);
    }
    written += batch.length;
    if (written % 1_000_000 === 0) {
      perMillion.push(1_000_000 / ((performance.now() - millionStarted) / 1000));
      process.stderr.write(
        `  ${mode}: ${written / 1e6}M records, ${Math.round(perMillion[perMillion.length - 1])} rec/s\n`,
      );
      if (written === 1_000_000 && totalRecords > 1_000_000) {
        // The fresh-process figures at 1M, on the feed exactly as it stands.
        delay.disable();
        delayMaxMs = Math.max(delayMaxMs, delay.max / 1e6);
        if (token) await feed.releaseLease({ token });
        await store.close();
        probes.at1M = probeFeed(directory, 'scale');
        store = await Store.open(directory);
        feed = await store.feed('scale');
        if (mode === 'stream') {
          token = (await feed.acquireLease({ holder: 'scale', ttlMs: 24 * 3600 * 1000 })).token;
        }
        delay = monitorEventLoopDelay({ resolution: 10 });
        delay.enable();
      }
      millionStarted = performance.now();
    }
  }
  delay.disable();
  delayMaxMs = Math.max(delayMaxMs, delay.max / 1e6);
  await store.close();
  process.stderr.write(
    `  ${mode}: append ${JSON.stringify(latencySummary(appendMs))}, seal ${JSON.stringify(latencySummary(sealMs))}, event loop max ${Math.round(delayMaxMs)} ms\n`,
  );
  probes.atEnd = probeFeed(directory, 'scale');
  fs.rmSync(directory, { recursive: true, force: true });
  return {
    perMillion,
    append: latencySummary(appendMs),
    seal: latencySummary(sealMs),
    sealRecords,
    eventLoopMaxDelayMs: delayMaxMs,
    probes,
  };
}

/** RAW scan rate (records per second, the best of 3) of a feed whose payloads repeat this often. */
async function scanRate(repeatFraction) {
  const directory = temporaryDirectory('scale-scan');
  const store = await Store.open(directory);
  const feed = await store.createFeed('scan');
  const next = workload(0x5ca9, repeatFraction);
  for (let written = 0; written < scanRecords; written += batchRecords * 10) await feed.append(next(batchRecords * 10));
  let best = 0;
  for (let round = 0; round < 3; round++) {
    let count = 0;
    const started = performance.now();
    for await (const batch of feed.readBatches()) count += batch.length;
    best = Math.max(best, count / ((performance.now() - started) / 1000));
  }
  await store.close();
  fs.rmSync(directory, { recursive: true, force: true });
  return best;
}

/** A feed of `commits` one-record commits by 64 concurrent appenders, probed in a fresh process. */
async function manyCommits(commits) {
  const directory = temporaryDirectory('scale-commits');
  const store = await Store.open(directory);
  const feed = await store.createFeed('commits');
  const next = workload(0xc0, 0.1);
  let issued = 0;
  await Promise.all(
    Array.from({ length: concurrentAppenders }, async () => {
      while (issued < commits) {
        issued++;
        await feed.append(next(1));
      }
    }),
  );
  await store.close();
  const result = probeFeed(directory, 'commits');
  fs.rmSync(directory, { recursive: true, force: true });
  return result;
}

export async function run() {
  const kernels = loadKernels();
  const suite = new Suite('scale');
  const report = { totalRecords, commitsMany, commitsFew };

  report.raw = await rawBaseline(kernels, Math.min(totalRecords, 2_000_000));
  process.stderr.write(`  raw baseline: ${Math.round(report.raw.recordsPerSecond)} rec/s\n`);
  report.stream = await ingest('stream');
  report.oneShot = await ingest('oneshot');
  report.scan = { unique: await scanRate(0), repeated10: await scanRate(0.1), repeated90: await scanRate(0.9) };
  report.commits = { few: await manyCommits(commitsFew), many: await manyCommits(commitsMany) };

  const rawSealMs = (records) => (records * report.raw.bytesPerRecord * 1000) / report.raw.bytesPerSecond;
  for (const mode of ['stream', 'oneShot']) {
    const result = report[mode];
    const label = mode === 'stream' ? 'streams of 100k (seals included)' : 'one-shot appends of 1,000';
    const curve = result.perMillion;
    const total = curve.length / curve.reduce((sum, rate) => sum + 1 / rate, 0);
    suite.cases.push({
      name: `${label}: ingest`,
      opsPerSecond: total / batchRecords,
      itemsPerSecond: total,
      relativeMarginPercent: 0,
      samples: curve.length,
    });
    if (curve.length > 1)
      suite.ratio(`${label}: last million / first million`, curve[curve.length - 1] / curve[0], 0.9);
    suite.ratio(
      `${label}: ingest / raw baseline at batch 1,000`,
      total / report.raw.recordsPerSecond,
      mode === 'stream' ? 0.25 : 0.4,
    );
    suite.ratio(`${label}: slowest append`, result.append.maxMs, undefined, 'ms (target ≤ 50)');
    suite.ratio(`${label}: 50 ms / slowest append`, 50 / result.append.maxMs, 1);
    suite.ratio(`${label}: 50 ms / event loop's largest delay`, 50 / result.eventLoopMaxDelayMs, 1);
    if (result.seal.count > 0) {
      const slowest = result.seal.maxMs;
      suite.ratio(
        `${label}: twice the raw time of a seal's bytes / slowest seal`,
        (2 * rawSealMs(streamRecords)) / slowest,
        1,
      );
    }
    const { at1M, atEnd } = result.probes;
    if (at1M && atEnd) {
      suite.ratio(`${label}: 1.5 × open at 1M / open at ${totalRecords / 1e6}M`, (1.5 * at1M.openMs) / atEnd.openMs, 1);
      suite.ratio(`${label}: 500 ms / open at ${totalRecords / 1e6}M`, 500 / atEnd.openMs, 1);
      suite.ratio(`${label}: 10 ms / first get at ${totalRecords / 1e6}M`, 10 / atEnd.firstGetMs, 1);
      suite.ratio(`${label}: 5 µs / warm get median at ${totalRecords / 1e6}M`, 5 / atEnd.getMedianUs, 1);
      suite.ratio(
        `${label}: columnar RAW scan at ${totalRecords / 1e6}M`,
        atEnd.columnsScanRecordsPerSecond,
        undefined,
        'records/s',
      );
      suite.ratio(
        `${label}: columnar RAW scan rate at ${totalRecords / 1e6}M / at 1M`,
        atEnd.columnsScanRecordsPerSecond / at1M.columnsScanRecordsPerSecond,
        0.9,
      );
      suite.ratio(
        `${label}: 1.5 × RSS at 1M / RSS at ${totalRecords / 1e6}M (after open and gets)`,
        (1.5 * at1M.rssAfterGetsMb) / atEnd.rssAfterGetsMb,
        1,
      );
      suite.ratio(
        `${label}: 400 MB / RSS at ${totalRecords / 1e6}M (after open and gets)`,
        400 / atEnd.rssAfterGetsMb,
        1,
      );
    }
  }
  suite.cases.push(
    {
      name: 'RAW scan, unique payloads',
      opsPerSecond: report.scan.unique,
      itemsPerSecond: report.scan.unique,
      relativeMarginPercent: 0,
      samples: 3,
    },
    {
      name: 'RAW scan, 10% repeated payloads',
      opsPerSecond: report.scan.repeated10,
      itemsPerSecond: report.scan.repeated10,
      relativeMarginPercent: 0,
      samples: 3,
    },
    {
      name: 'RAW scan, 90% repeated payloads',
      opsPerSecond: report.scan.repeated90,
      itemsPerSecond: report.scan.repeated90,
      relativeMarginPercent: 0,
      samples: 3,
    },
  );
  suite.ratio('RAW scan: 10% repeated / unique', report.scan.repeated10 / report.scan.unique);
  suite.ratio('RAW scan: 90% repeated / unique', report.scan.repeated90 / report.scan.unique, 0.5);
  const { few, many } = report.commits;
  suite.ratio(
    `one-record commits: 1.5 × RSS at ${commitsFew} / RSS at ${commitsMany}`,
    (1.5 * few.rssAfterGetsMb) / many.rssAfterGetsMb,
    1,
  );
  suite.ratio(
    `one-record commits: 1.5 × open at ${commitsFew} / open at ${commitsMany}`,
    (1.5 * few.openMs) / many.openMs,
    1,
  );
  suite.ratio(`one-record commits: 500 ms / open at ${commitsMany}`, 500 / many.openMs, 1);
  // A feed of one-record commits scans like one of large commits: its batches span commits.
  const largeScan = report.stream.probes.atEnd?.columnsScanRecordsPerSecond;
  suite.ratio(
    `one-record commits: columnar RAW scan of ${commitsMany}`,
    many.columnsScanRecordsPerSecond,
    undefined,
    'records/s',
  );
  if (largeScan)
    suite.ratio(
      `one-record commits: columnar RAW scan of ${commitsMany} / of the ${totalRecords / 1e6}M-record feed (streams of 100k)`,
      many.columnsScanRecordsPerSecond / largeScan,
      0.25,
    );

  const result = suite.finish();
  // The raw figures behind the ratios, for the closing notes and for comparing runs.
  const file = new URL('../results/scale.json', import.meta.url);
  fs.writeFileSync(file, `${JSON.stringify({ ...result, details: report }, null, 2)}\n`);
  return result;
}
