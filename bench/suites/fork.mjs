// Suite `fork`: forks of a large feed. A feed of STREAMSTACK_BENCH_FORK_RECORDS records of the
// scale workload (10M by default: 200-byte payloads, 10% repeated, keys from 1M, 8 types, a tag
// each), written in one-shot commits of 1,000; then, on the store reopened:
// - forks at three points — the middle of the history, inside the last sealed segment, the head —
//   each timed from the call to the fork being open and readable (target: ≤ 100 ms), then until a
//   key lookup answers (the fork builds the index and dictionaries of the segment it cuts after
//   it opens, and lookups wait for them); the fork's own bytes, those not shared with the source,
//   are counted once the store is closed and every file the forks build is on disk (target: ≤ 1%
//   of the source's bytes on disk). Each fork is made on a settled store (`feed.settled()`); one
//   made right after the store opens, while the source checks its files, is reported too;
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
  const forks = [];
  try {
    const feed = await store.feed('source');
    const head = (await feed.head()).commit;
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
    // Right after the open, the source checks its dictionaries whole in the background: a fork
    // made then shares the machine with that work. Reported, then everything settles first.
    const early = performance.now();
    const unsettled = await feed.fork('fork-unsettled', { at: points[0][1] - 1 });
    suite.ratio(
      'fork right after the store opens, the source unsettled: ms',
      performance.now() - early,
      undefined,
      ' ms',
    );
    await unsettled.settled();
    await store.deleteFeed('fork-unsettled');
    await feed.settled();
    for (const [label, at] of points) {
      const started = performance.now();
      const fork = await feed.fork(`fork-${label.replaceAll(' ', '-')}`, { at });
      await fork.head();
      const ms = performance.now() - started;
      if (ms > slowest.ms) slowest = { ms, at: label };
      await fork.get('k0');
      const indexedMs = performance.now() - started;
      suite.ratio(`fork at the ${label} (commit ${at}): ms to open and readable`, ms, undefined, ' ms');
      suite.ratio(`fork at the ${label}: 100 ms / time (target ≥ 1)`, 100 / ms, 1);
      suite.ratio(`fork at the ${label}: ms until a key lookup answers`, indexedMs, undefined, ' ms');
      forks.push({ label, name: fork.name });
      await fork.settled();
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
  // Counted once every file the forks build after opening is on disk (the store closed).
  const sourceBytes = diskBytes(path.join(directory, 'feeds', 'source')).all;
  for (const { label, name } of forks) {
    const bytes = diskBytes(path.join(directory, 'feeds', name)).own;
    suite.ratio(`fork at the ${label}: own bytes, % of the source's`, (bytes / sourceBytes) * 100, undefined, '%');
    suite.ratio(
      `fork at the ${label}: 1% of the source / own bytes (target ≥ 1)`,
      (sourceBytes * 0.01) / Math.max(bytes, 1),
      1,
    );
  }
  suite.finish();
}
