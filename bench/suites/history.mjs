// Suite `history`: managing a feed's history. Export (the figure: 10^7 records; set
// STREAMSTACK_BENCH_HISTORY_RECORDS to run smaller) of one feed of 200-byte records, written
// untimed as streams of 10k-record appends sealed every 100k records, to NDJSON, Arrow IPC and
// Parquet, against two limits measured in the same run: the RAW columnar scan of the same
// feed (records/s), and the disk's sequential write rate (a file of the export's size written in
// 4 MiB writes and fsync'd), turned into records/s for each format by that format's bytes per
// record. Targets: NDJSON and Arrow at least 50% of the lower limit, Parquet 25%.
//
// An export takes seconds, so each case is timed by hand, one full export per sample (the
// median of `samples`), each into a fresh directory removed afterwards; every export's record
// count is checked, so a fast wrong answer fails the suite. Retention and compaction figures are
// to join these.
import fs from 'node:fs';
import path from 'node:path';
import { Store } from '@streamstack/engine';
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

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function timed(fn) {
  const seconds = [];
  let result;
  for (let sample = 0; sample < samples; sample++) {
    const started = performance.now();
    result = await fn();
    seconds.push((performance.now() - started) / 1000);
  }
  return { seconds: median(seconds), result };
}

/** Writes `bytes` bytes sequentially to a new file and fsyncs it: what the disk can take. */
function diskWrite(directory, bytes) {
  const file = path.join(directory, 'disk-baseline');
  const piece = Buffer.alloc(diskWriteBytes, 0x61);
  const fd = fs.openSync(file, 'w');
  try {
    for (let written = 0; written < bytes; written += piece.length) fs.writeSync(fd, piece, 0, Math.min(piece.length, bytes - written));
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
    fs.rmSync(file);
  }
}

export async function run() {
  const suite = new Suite('history');
  const directory = temporaryDirectory('history');
  const store = await Store.open(path.join(directory, 'data'));
  const feed = await store.createFeed('bench');
  process.stderr.write(`  writing ${recordCount} records (untimed)\n`);
  for (let start = 0; start < recordCount; start += streamRecords) {
    const { token } = await feed.acquireLease({ holder: 'bench' });
    const stream = await feed.openStream({ token });
    const end = Math.min(recordCount, start + streamRecords);
    for (let at = start; at < end; at += batchRecords) await stream.append(makeRecords(at, Math.min(batchRecords, end - at)), { token });
    await stream.seal({ token });
    await feed.releaseLease({ token });
  }

  // The first read waits for the derived indexes to be built: that is not the scan's cost.
  for await (const batch of feed.readColumns({ limit: 1 })) void batch;
  const scan = await timed(async () => {
    let rows = 0;
    for await (const batch of feed.readColumns()) rows += batch.length;
    if (rows !== recordCount) throw new Error(`the RAW scan read ${rows} records, not ${recordCount}`);
  });
  const scanRate = recordCount / scan.seconds;
  process.stderr.write(`  RAW columnar scan: ${(scanRate / 1e6).toFixed(2)}M records/s\n`);
  suite.ratio('RAW columnar scan', scanRate, undefined, 'records/s');

  for (const format of ['ndjson', 'arrow', 'parquet']) {
    let exportBytes = 0;
    let run = 0;
    const exported = await timed(async () => {
      const to = path.join(directory, `export-${format}-${run++}`);
      const manifest = await feed.export({ format, to });
      if (manifest.records !== recordCount) throw new Error(`the ${format} export wrote ${manifest.records} records, not ${recordCount}`);
      exportBytes = manifest.files.reduce((total, file) => total + file.bytes, 0);
      fs.rmSync(to, { recursive: true, force: true });
    });
    const disk = await timed(async () => diskWrite(directory, exportBytes));
    const exportRate = recordCount / exported.seconds;
    const diskRate = exportBytes / disk.seconds;
    // The disk's rate in this format's records: how fast it takes files of this size.
    const diskRecordRate = recordCount / disk.seconds;
    const limit = Math.min(scanRate, diskRecordRate);
    process.stderr.write(
      `  ${format}: ${(exportRate / 1e6).toFixed(3)}M records/s, ${(exportBytes / recordCount).toFixed(0)} bytes/record; disk ${(diskRate / 1e6).toFixed(0)} MB/s\n`,
    );
    suite.ratio(`${format} export`, exportRate, undefined, 'records/s');
    suite.ratio(`${format} export bytes per record`, exportBytes / recordCount, undefined, 'B');
    suite.ratio(`disk sequential write (${format}-sized file)`, diskRate / 1e6, undefined, 'MB/s');
    suite.ratio(`${format} export / min(RAW scan, disk write in records/s)`, exportRate / limit, targets[format]);
  }
  suite.ratio('records', recordCount, undefined, 'records');
  await store.close();
  suite.finish();
}
