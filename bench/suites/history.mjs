// Suite `history`: managing a feed's history. Export (the figure: 10^7 records; set
// STREAMSTACK_BENCH_HISTORY_RECORDS to run smaller) of one feed of 200-byte records, written
// untimed as streams of 10k-record appends sealed every 100k records, to NDJSON, Arrow IPC and
// Parquet, against two limits measured in the same run: the RAW columnar scan of the same
// feed (records/s), and the disk's sequential write rate (a file of the export's size written in
// 4 MiB writes and fsync'd, through the page cache and with O_DIRECT as exports write, the
// faster counting), turned into records/s for each format by that format's bytes per record. Targets: NDJSON and Arrow at least 50% of the lower limit, Parquet 25%.
//
// An export takes seconds, so each case is timed by hand, one full export per sample (the
// median of `samples`), each into a fresh directory removed afterwards, outside the timing;
// every export's record count is checked, so a fast wrong answer fails the suite.
//
// Retention by age, on the same feed once the exports are done: the store's clock moves an hour
// between its commits (one per sealed 100k-record stream), so its history spans a known time
// range; `setRetention({ maxAgeMs })` of half that range and `trim()` remove the older half. The
// figures: disk bytes before and after (`feed.diskUse()`'s `bytes`, with the rebuilt dictionaries
// on disk), the trim's wall time, how long after the trim `get` and a dedup read answer again
// (they wait for the key and fingerprint dictionaries to be rebuilt over the kept history: that
// rebuild is O(kept history), the known cost of trimming under whole-history dictionaries), and
// the event loop's largest delay from the trim's start to the rebuild's end, against the
// issue's limit of 50 ms for background history work.
//
// Merging compaction, on the feed retention left: `compact()` joins its sealed segments; the
// figures are its rate (records rewritten per second, the merged segments' index files and
// dictionaries built included: the rewrite's worker builds them before the switch-over), segments
// before and after, bytes on disk before and after, and the event loop's largest delay while it
// runs (limit 50 ms). The merged
// feed's RAW scan must still count every record kept, and `get` must answer the same.
//
// Key compaction, on a feed of its own (`keys`) of the same size: each key updated 10 times
// (records/10 keys, each update a 200-byte JSON state with a type and three tags, the updates of
// a key spread across the whole history), compacted up to its head. The figures: its rate
// (records read and rewritten per second), disk bytes after / before (`feed.diskUse()`'s `bytes`,
// target ≤ 15%), records left, and the event loop's largest delay while it runs (limit 50 ms).
// Every key's latest value must read back the same.
//
// Beside each event-loop figure, the largest delay an idle Node process saw over the same
// window: the machine's own stalls (stolen time on a virtual machine, the kernel's writeback),
// which the store's figure includes but no code in the store causes.
//
// STREAMSTACK_BENCH_HISTORY_CASES (default `export,retention,merge,keys`) runs a part of the suite;
// its figures go to a results file of their own (`history-export.json`), so a partial run never
// replaces a full run's `history.json`.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadKernels, Store } from '@streamstack/engine';
import { Suite } from '../harness.mjs';
import { makeRecords, temporaryDirectory } from '../workload.mjs';

const recordCount = Number(process.env.STREAMSTACK_BENCH_HISTORY_RECORDS ?? 10_000_000);
const batchRecords = 10_000;
const streamRecords = 100_000;
/** Timed samples per case (full exports or scans); the median counts. */
const samples = Number(process.env.STREAMSTACK_BENCH_HISTORY_SAMPLES ?? 3);
/** The disk baseline writes in pieces of this many bytes, then fsyncs. */
const diskWriteBytes = 4 * 1024 * 1024;
const targets = { ndjson: 0.5, arrow: 0.5, parquet: 0.25 };
const allCases = ['export', 'retention', 'merge', 'keys'];
const cases = new Set((process.env.STREAMSTACK_BENCH_HISTORY_CASES ?? allCases.join(',')).split(','));
/** The suite's name, and its results file's: a partial run's names the cases it ran. */
const suiteName = allCases.every((name) => cases.has(name))
  ? 'history'
  : `history-${allCases.filter((name) => cases.has(name)).join('-')}`;
/** The store's clock moves this far between commits, so the history spans a known time range. */
const commitSpacingMs = 3_600_000;
/** The limit on the event loop's delay while background history work runs. */
const eventLoopDelayMsMax = 50;

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/**
 * Times `fn` `samples` times and returns the median. `cleanUp` (removing what a sample wrote)
 * runs after each sample, outside the timing: deleting gigabytes of files is not part of the
 * export or the write being measured, and timed it was about a fifth of an NDJSON export's
 * time at 10^7 records.
 */
async function timed(fn, cleanUp = () => undefined) {
  const seconds = [];
  let result;
  for (let sample = 0; sample < samples; sample++) {
    const started = performance.now();
    result = await fn();
    seconds.push((performance.now() - started) / 1000);
    await cleanUp();
  }
  return { seconds: median(seconds), result };
}

const kernels = loadKernels();

/**
 * Writes `bytes` bytes sequentially to a new `file` and fsyncs it: what the disk can take. Through
 * the page cache (`buffered`), or with `O_DIRECT` from aligned memory (`direct`, the native
 * kernels' `writeDirect`, as exports write), which on a virtual machine can be several times
 * faster; the disk's rate is the faster of the two. The caller removes the file, outside the
 * timing, as it removes each export's files.
 */
async function diskWrite(file, bytes, way) {
  const piece = Buffer.alloc(diskWriteBytes, 0x61);
  const direct = way === 'direct';
  const fd = fs.openSync(
    file,
    direct ? fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_DIRECT : 'w',
  );
  try {
    for (let written = 0; written < bytes; written += piece.length) {
      const length = Math.min(piece.length, bytes - written);
      if (direct) await kernels.writeDirect(fd, written, [piece.subarray(0, length)]);
      else fs.writeSync(fd, piece, 0, length);
    }
    if (direct) fs.ftruncateSync(fd, bytes);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The event loop's largest delay from now until `stop()`, and beside it the largest delay an
 * idle Node process on the same machine saw meanwhile: the machine's own stalls (a virtual
 * machine's stolen time, the kernel's writeback), which no code in the store causes or avoids.
 * Both are reported; the limit applies to the store's own figure. The idle process is started
 * before this process's watch begins: spawning it holds this event loop for tens of
 * milliseconds (fork and exec of a process of this size), a cost of the measurement, not of the
 * work measured.
 */
async function watchDelays() {
  const idle = spawn(
    process.execPath,
    [
      '-e',
      "const h = require('node:perf_hooks').monitorEventLoopDelay({ resolution: 10 }); h.enable(); process.stdout.write('ready\\n'); process.stdin.resume(); process.stdin.on('end', () => { h.disable(); process.stdout.write(String(h.max / 1e6)); });",
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  let output = '';
  const exited = new Promise((resolve) => idle.on('close', resolve));
  await new Promise((resolve, reject) => {
    idle.stdout.on('data', (chunk) => {
      output += chunk;
      if (output.includes('ready\n')) resolve();
    });
    idle.on('error', reject);
    void exited.then(() => reject(new Error('the idle process exited before it was ready')));
  });
  output = output.slice(output.indexOf('ready\n') + 'ready\n'.length);
  const own = monitorEventLoopDelay({ resolution: 10 });
  own.enable();
  return {
    async stop() {
      own.disable();
      idle.stdin.end();
      await exited;
      return { ownMs: own.max / 1e6, p99Ms: own.percentile(99) / 1e6, machineMs: Number(output) };
    },
  };
}

export async function run() {
  const suite = new Suite(suiteName);
  const directory = temporaryDirectory('history');
  let now = Date.parse('2026-01-01T00:00:00Z');
  const store = await Store.open(path.join(directory, 'data'), { clock: () => now });
  if (!['export', 'retention', 'merge'].some((name) => cases.has(name))) {
    // Key compaction writes a feed of its own: the export feed is not needed.
    if (cases.has('keys')) await compactKeys(suite, store);
    await store.close();
    suite.finish();
    return;
  }
  const feed = await store.createFeed('bench');
  process.stderr.write(`  writing ${recordCount} records (untimed)\n`);
  for (let start = 0; start < recordCount; start += streamRecords) {
    const { token } = await feed.acquireLease({ holder: 'bench' });
    const stream = await feed.openStream({ token });
    const end = Math.min(recordCount, start + streamRecords);
    for (let at = start; at < end; at += batchRecords)
      await stream.append(makeRecords(at, Math.min(batchRecords, end - at)), { token });
    await stream.seal({ token });
    await feed.releaseLease({ token });
    now += commitSpacingMs;
  }

  // The scan and the exports are timed on a settled feed: the untimed writes leave dictionary
  // and index builds of their last segments running in the background for minutes at 10^7
  // records, and timed beside them the limit and the exports measured those builds as much as
  // themselves (a RAW scan at 0.7M records/s instead of 2M).
  await feed.writer.idle();
  for await (const batch of feed.readColumns({ limit: 1 })) void batch;
  const scan = await timed(async () => {
    let rows = 0;
    for await (const batch of feed.readColumns()) rows += batch.length;
    if (rows !== recordCount) throw new Error(`the RAW scan read ${rows} records, not ${recordCount}`);
  });
  const scanRate = recordCount / scan.seconds;
  process.stderr.write(`  RAW columnar scan: ${(scanRate / 1e6).toFixed(2)}M records/s\n`);
  suite.ratio('RAW columnar scan', scanRate, undefined, 'records/s');

  for (const format of cases.has('export') ? ['ndjson', 'arrow', 'parquet'] : []) {
    let exportBytes = 0;
    let run = 0;
    const to = () => path.join(directory, `export-${format}-${run}`);
    const exported = await timed(
      async () => {
        const manifest = await feed.export({ format, to: to() });
        if (manifest.records !== recordCount)
          throw new Error(`the ${format} export wrote ${manifest.records} records, not ${recordCount}`);
        exportBytes = manifest.files.reduce((total, file) => total + file.bytes, 0);
      },
      () => {
        fs.rmSync(to(), { recursive: true, force: true });
        run++;
      },
    );
    const baseline = path.join(directory, 'disk-baseline');
    const removeBaseline = () => fs.rmSync(baseline, { force: true });
    const buffered = await timed(async () => diskWrite(baseline, exportBytes, 'buffered'), removeBaseline);
    const direct = kernels.directWrites
      ? await timed(async () => diskWrite(baseline, exportBytes, 'direct'), removeBaseline)
      : buffered;
    const disk = direct.seconds < buffered.seconds ? direct : buffered;
    const exportRate = recordCount / exported.seconds;
    const diskRate = exportBytes / disk.seconds;
    // The disk's rate in this format's records: how fast it takes files of this size.
    const diskRecordRate = recordCount / disk.seconds;
    const limit = Math.min(scanRate, diskRecordRate);
    process.stderr.write(
      `  ${format}: ${(exportRate / 1e6).toFixed(3)}M records/s, ${(exportBytes / recordCount).toFixed(0)} bytes/record; ` +
        `disk ${(exportBytes / buffered.seconds / 1e6).toFixed(0)} MB/s buffered, ${(exportBytes / direct.seconds / 1e6).toFixed(0)} MB/s direct\n`,
    );
    suite.ratio(`${format} export`, exportRate, undefined, 'records/s');
    suite.ratio(`${format} export bytes per record`, exportBytes / recordCount, undefined, 'B');
    suite.ratio(`disk sequential write (${format}-sized file, the faster way)`, diskRate / 1e6, undefined, 'MB/s');
    suite.ratio(
      `disk sequential write through the page cache (${format}-sized file)`,
      exportBytes / buffered.seconds / 1e6,
      undefined,
      'MB/s',
    );
    suite.ratio(`${format} export / min(RAW scan, disk write in records/s)`, exportRate / limit, targets[format]);
  }
  if (cases.has('retention')) await retentionByAge(suite, feed);
  if (cases.has('merge')) await mergeSegments(suite, feed);
  if (cases.has('keys')) await compactKeys(suite, store);
  suite.ratio('records', recordCount, undefined, 'records');
  await store.close();
  suite.finish();
}

/**
 * Retention by age on `feed` (its commits `commitSpacingMs` apart, the clock past the last): keeps
 * the younger half of the time range, and reports what the trim and the rebuild after it cost.
 */
async function retentionByAge(suite, feed) {
  // Every derived file is on disk first, so the bytes before are the feed's settled size.
  await feed.writer.idle();
  await feed.get('k1');
  const before = await feed.info();
  const beforeDisk = await feed.diskUse();
  const commits = before.commits;
  const maxAgeMs = Math.floor((commits * commitSpacingMs) / 2);
  const delays = await watchDelays();
  const started = performance.now();
  await feed.setRetention({ maxAgeMs });
  const result = await feed.trim();
  const trimmed = performance.now();
  const winner = await feed.get('k1');
  const getAnswered = performance.now();
  let dedupFirst;
  for await (const record of feed.read({ mode: 'dedup', limit: 1 })) dedupFirst = record;
  const dedupAnswered = performance.now();
  await feed.writer.idle();
  const delay = await delays.stop();
  const after = await feed.info();
  const afterDisk = await feed.diskUse();
  // A fast wrong answer fails the suite: the older half went, and lookups answer from what is kept.
  if (after.lowMark <= before.lowMark || after.lowMark - 1 > commits / 2 + 1) {
    throw new Error(`retention by age kept commits from ${after.lowMark} of ${commits}, not the younger half`);
  }
  if (!winner || winner.position < after.lowPosition)
    throw new Error(`get answered ${winner?.position} below the low position ${after.lowPosition}`);
  if (dedupFirst?.position !== after.lowPosition)
    throw new Error(`the dedup read began at ${dedupFirst?.position}, not at the low position ${after.lowPosition}`);
  const kept = after.records - after.lowPosition + 1;
  const trimMs = trimmed - started;
  const getMs = getAnswered - trimmed;
  const dedupMs = dedupAnswered - trimmed;
  const delayMaxMs = delay.ownMs;
  process.stderr.write(
    `  retention by age: ${beforeDisk.bytes} → ${afterDisk.bytes} bytes on disk (${result.segmentsRemoved} segments, ` +
      `${result.recordsRemoved} records removed, ${kept} kept); trim ${trimMs.toFixed(0)} ms; get answered ${getMs.toFixed(0)} ms ` +
      `and dedup ${dedupMs.toFixed(0)} ms after it; event loop max delay ${delayMaxMs.toFixed(1)} ms (p99 ${delay.p99Ms.toFixed(1)} ms; an idle process ${delay.machineMs.toFixed(1)} ms)\n`,
  );
  suite.ratio('retention by age: disk bytes before', beforeDisk.bytes, undefined, 'B');
  suite.ratio('retention by age: disk bytes after', afterDisk.bytes, undefined, 'B');
  suite.ratio('retention by age: bytes after / before', afterDisk.bytes / beforeDisk.bytes);
  suite.ratio('retention by age: records kept', kept, undefined, 'records');
  suite.ratio('retention by age: trim wall time', trimMs, undefined, 'ms');
  suite.ratio('retention by age: get answers again after the trim', getMs, undefined, 'ms');
  suite.ratio('retention by age: dedup answers again after the trim', dedupMs, undefined, 'ms');
  suite.ratio(
    'retention by age: dictionary rebuild rate (kept records / dedup wait)',
    kept / (dedupMs / 1000),
    undefined,
    'records/s',
  );
  suite.ratio('retention by age: event loop largest delay, trim and rebuild', delayMaxMs, undefined, 'ms');
  suite.ratio(
    "retention by age: an idle process's largest delay meanwhile (the machine's stalls)",
    delay.machineMs,
    undefined,
    'ms',
  );
  suite.ratio(
    `retention by age: ${eventLoopDelayMsMax} ms / event loop's largest delay`,
    eventLoopDelayMsMax / delayMaxMs,
    1,
  );
}

/** Merging compaction of `feed`'s sealed segments: its rate, what it saves, and the event loop. */
async function mergeSegments(suite, feed) {
  await feed.writer.idle();
  // The two newest segments are never merged: with fewer than four there is nothing to join.
  if ((await feed.diskUse()).historySegments < 4) {
    process.stderr.write(
      `  merge: skipped, ${(await feed.diskUse()).historySegments} history segments (run at a larger size)\n`,
    );
    return;
  }
  const expected = await feed.get('k1');
  const before = await feed.info();
  const beforeDisk = await feed.diskUse();
  const kept = before.records - before.lowPosition + 1;
  const delays = await watchDelays();
  const started = performance.now();
  const result = await feed.compact();
  const seconds = (performance.now() - started) / 1000;
  await feed.writer.idle();
  const delay = await delays.stop();
  const afterDisk = await feed.diskUse();
  const merged = result.merges.reduce((sum, merge) => sum + merge.records, 0);
  let rows = 0;
  for await (const batch of feed.readColumns()) rows += batch.length;
  if (rows !== kept) throw new Error(`after merging, the RAW scan read ${rows} records, not ${kept}`);
  const winner = await feed.get('k1');
  if (winner?.position !== expected?.position)
    throw new Error(`after merging, get answered ${winner?.position}, not ${expected?.position}`);
  if (result.putOff || result.merges.length === 0) throw new Error('the merge did nothing');
  const delayMaxMs = delay.ownMs;
  process.stderr.write(
    `  merge: ${beforeDisk.historySegments} → ${afterDisk.historySegments} history segments, ${merged} records rewritten in ${seconds.toFixed(1)} s ` +
      `(${(merged / seconds / 1e3).toFixed(0)}k records/s); ${beforeDisk.bytes} → ${afterDisk.bytes} bytes on disk; event loop max delay ${delayMaxMs.toFixed(1)} ms (an idle process ${delay.machineMs.toFixed(1)} ms)\n`,
  );
  suite.ratio('merge: records rewritten per second', merged / seconds, undefined, 'records/s');
  suite.ratio('merge: history segments before', beforeDisk.historySegments, undefined, 'segments');
  suite.ratio('merge: history segments after', afterDisk.historySegments, undefined, 'segments');
  suite.ratio('merge: disk bytes after / before', afterDisk.bytes / beforeDisk.bytes);
  suite.ratio('merge: event loop largest delay', delayMaxMs, undefined, 'ms');
  suite.ratio(
    "merge: an idle process's largest delay meanwhile (the machine's stalls)",
    delay.machineMs,
    undefined,
    'ms',
  );
  suite.ratio(`merge: ${eventLoopDelayMsMax} ms / event loop's largest delay`, eventLoopDelayMsMax / delayMaxMs, 1);
}

/** Updates of `keyCount` keys, `updatesPerKey` each, spread over the history: record n updates key n % keyCount. */
function keyedUpdates(start, count, keyCount) {
  const records = new Array(count);
  for (let i = 0; i < count; i++) {
    const n = start + i;
    const key = n % keyCount;
    const head = `{"account":${key},"update":${Math.floor(n / keyCount)},"balance":${(n * 7919) % 100_000},"note":"`;
    records[i] = {
      payload: `${head + 'x'.repeat(Math.max(0, 198 - head.length))}"}`,
      key: `account-${key}`,
      type: types[n % types.length],
      tags: [`region:${key % 16}`, `tier:${key % 3}`, `batch:${Math.floor(n / streamRecords)}`],
    };
  }
  return records;
}

const types = ['opened', 'deposit', 'withdrawal', 'transfer', 'fee', 'interest', 'hold', 'release'];

/** Key compaction of a feed where every key was updated 10 times: rate, bytes left, event loop. */
async function compactKeys(suite, store) {
  const updatesPerKey = 10;
  const keyCount = Math.floor(recordCount / updatesPerKey);
  const feed = await store.createFeed('keys');
  process.stderr.write(`  writing ${recordCount} keyed updates, ${keyCount} keys (untimed)\n`);
  for (let start = 0; start < recordCount; start += streamRecords) {
    const { token } = await feed.acquireLease({ holder: 'bench' });
    const stream = await feed.openStream({ token });
    const end = Math.min(recordCount, start + streamRecords);
    for (let at = start; at < end; at += batchRecords)
      await stream.append(keyedUpdates(at, Math.min(batchRecords, end - at), keyCount), { token });
    await stream.seal({ token });
    await feed.releaseLease({ token });
  }
  await feed.writer.idle();
  const probes = [0, Math.floor(keyCount / 2), keyCount - 1].map((key) => `account-${key}`);
  const expected = await Promise.all(probes.map((key) => feed.get(key)));
  const beforeDisk = await feed.diskUse();
  const delays = await watchDelays();
  const started = performance.now();
  const result = await feed.compactKeys({ horizon: (await feed.info()).commits });
  const seconds = (performance.now() - started) / 1000;
  await feed.writer.idle();
  const delay = await delays.stop();
  const afterDisk = await feed.diskUse();
  if (result.putOff || result.segmentsCompacted === 0)
    throw new Error(`the key compaction did nothing: ${JSON.stringify(result)}`);
  const answers = await Promise.all(probes.map((key) => feed.get(key)));
  for (const [index, answer] of answers.entries()) {
    if (answer?.position !== expected[index]?.position)
      throw new Error(
        `after key compaction, get(${probes[index]}) answered ${answer?.position}, not ${expected[index]?.position}`,
      );
  }
  let latest = 0;
  for await (const batch of feed.readColumns({ mode: 'latest' })) latest += batch.length;
  if (latest !== keyCount)
    throw new Error(`after key compaction, the latest read found ${latest} keys, not ${keyCount}`);
  let left = 0;
  for await (const batch of feed.readColumns()) left += batch.length;
  const delayMaxMs = delay.ownMs;
  process.stderr.write(
    `  key compaction: ${result.recordsBefore} → ${result.recordsAfter} records in ${result.segmentsCompacted} segments, ${seconds.toFixed(1)} s ` +
      `(${(result.recordsBefore / seconds / 1e3).toFixed(0)}k records/s); ${beforeDisk.bytes} → ${afterDisk.bytes} bytes on disk ` +
      `(${((100 * afterDisk.bytes) / beforeDisk.bytes).toFixed(1)}%); ${left} records left in the feed; event loop max delay ${delayMaxMs.toFixed(1)} ms (an idle process ${delay.machineMs.toFixed(1)} ms)\n`,
  );
  suite.ratio('key compaction: records compacted per second', result.recordsBefore / seconds, undefined, 'records/s');
  suite.ratio('key compaction: records left / written', left / recordCount);
  suite.ratio('key compaction: 0.15 / (disk bytes after / before)', 0.15 / (afterDisk.bytes / beforeDisk.bytes), 1);
  suite.ratio('key compaction: event loop largest delay', delayMaxMs, undefined, 'ms');
  suite.ratio(
    "key compaction: an idle process's largest delay meanwhile (the machine's stalls)",
    delay.machineMs,
    undefined,
    'ms',
  );
  suite.ratio(
    `key compaction: ${eventLoopDelayMsMax} ms / event loop's largest delay`,
    eventLoopDelayMsMax / delayMaxMs,
    1,
  );
}
