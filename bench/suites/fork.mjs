// Suite `fork`: forks of a large feed. A feed of STREAMSTACK_BENCH_FORK_RECORDS records of the
// scale workload (10M by default: 200-byte payloads, 10% repeated, keys from 1M, 8 types, a tag
// each), written in one-shot commits of 1,000; then, on the store reopened:
// - forks at three points — the middle of the history, inside the last sealed segment, the head —
//   each timed from the call to the fork being open and readable (targets: ≤ 100 ms, and the
//   fork's own bytes, those not shared with the source, ≤ 1% of the source's bytes on disk);
// - a RAW columnar scan of the middle fork against the same scan of the source up to the same
//   commit, in alternating rounds (target: the fork reads at the source's speed, ≥ 0.9×).
// The slowest fork is reported too.
import fs from 'node:fs';
import path from 'node:path';
import { Store } from '@streamstack/engine';
import { Suite } from '../harness.mjs';
import { scaleWorkload, temporaryDirectory } from '../workload.mjs';

const totalRecords = Number(process.env.STREAMSTACK_BENCH_FORK_RECORDS ?? 10_000_000);
const batchRecords = 1_000;
const scanRounds = 3;

/** Bytes of the files under `directory`, and of those no other feed holds (one link). */
function diskBytes(directory) {
  let all = 0;
  let own = 0;
  const walk = (at) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const file = path.join(at, entry.name);
      if (entry.isDirectory()) walk(file);
      else {
        const stats = fs.statSync(file);
        all += stats.blocks * 512;
        if (stats.nlink === 1) own += stats.blocks * 512;
      }
    }
  };
  walk(directory);
  return { all, own };
}

async function scan(feed, upTo) {
  const started = performance.now();
  let rows = 0;
  for await (const batch of feed.readColumns({ upTo })) rows += batch.length;
  return { rows, recordsPerSecond: rows / ((performance.now() - started) / 1000) };
}

export async function run() {
  const suite = new Suite('fork');
  const directory = temporaryDirectory('fork');
  let store = await Store.open(directory);
  const next = scaleWorkload(0xf0);
  const source = await store.createFeed('source');
  for (let written = 0; written < totalRecords; written += batchRecords) {
    await source.append(next(batchRecords));
    if ((written + batchRecords) % 1_000_000 === 0)
      process.stderr.write(`  fork: ${(written + batchRecords) / 1e6}M records\n`);
  }
  await store.close();
  store = await Store.open(directory);
  try {
    const feed = await store.feed('source');
    const head = (await feed.head()).commit;
    const sourceBytes = diskBytes(path.join(directory, 'feeds', 'source')).all;
    const segments = fs
      .readdirSync(path.join(directory, 'feeds', 'source', 'history'))
      .filter((name) => name.endsWith('.hist'));
    suite.ratio('source: records', totalRecords, undefined, '');
    suite.ratio('source: history segments', segments.length, undefined, '');
    let slowest = { ms: 0, at: 0 };
    const points = [
      ['middle', Math.floor(head / 2)],
      ['last sealed segment', head - Math.floor(head / (segments.length * 2))],
      ['head', head],
    ];
    for (const [label, at] of points) {
      const started = performance.now();
      const fork = await feed.fork(`fork-${label.replaceAll(' ', '-')}`, { at });
      await fork.head();
      const ms = performance.now() - started;
      if (ms > slowest.ms) slowest = { ms, at: label };
      const bytes = diskBytes(path.join(directory, 'feeds', fork.name)).own;
      suite.ratio(`fork at the ${label} (commit ${at}): ms to open and readable`, ms, undefined, ' ms');
      suite.ratio(`fork at the ${label}: 100 ms / time (target ≥ 1)`, 100 / ms, 1);
      suite.ratio(`fork at the ${label}: own bytes, % of the source's`, (bytes / sourceBytes) * 100, undefined, '%');
      suite.ratio(
        `fork at the ${label}: 1% of the source / own bytes (target ≥ 1)`,
        (sourceBytes * 0.01) / Math.max(bytes, 1),
        1,
      );
    }
    const middle = await store.feed('fork-middle');
    const at = points[0][1];
    const ratios = [];
    for (let round = 0; round < scanRounds; round++) {
      const first = round % 2 === 0 ? await scan(feed, at) : await scan(middle);
      const second = round % 2 === 0 ? await scan(middle) : await scan(feed, at);
      const [ofSource, ofFork] = round % 2 === 0 ? [first, second] : [second, first];
      if (ofSource.rows !== ofFork.rows)
        throw new Error(`the fork read ${ofFork.rows} records, the source ${ofSource.rows}`);
      ratios.push(ofFork.recordsPerSecond / ofSource.recordsPerSecond);
      suite.ratio(`RAW scan, round ${round + 1}: fork records/s`, ofFork.recordsPerSecond, undefined, '/s');
    }
    ratios.sort((a, b) => a - b);
    suite.ratio('RAW scan of the middle fork / the source up to the same commit (median)', ratios[1], 0.9);
    suite.ratio(`slowest fork (at the ${slowest.at}), ms`, slowest.ms, undefined, ' ms');
  } finally {
    await store.close();
  }
  suite.finish();
}
