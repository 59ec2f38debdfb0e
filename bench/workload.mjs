// Shared by the write and read suites: the records of the benchmark workload, temporary data
// directories, and the peers (better-sqlite3, lmdb) set up with durability equal to StreamStack's.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { open as openLmdb } from 'lmdb';
import { prng } from './prng.mjs';

/** Bytes of each record's payload in the ingest workload (the figure). */
export const payloadBytes = 200;
/** Distinct record types in the workload. */
export const typeCount = 8;
export const types = Array.from({ length: typeCount }, (_, index) => `type-${index}`);

const directories = [];
process.on('exit', () => {
  for (const directory of directories) fs.rmSync(directory, { recursive: true, force: true });
});

export function temporaryDirectory(label) {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), `streamstack-bench-${label}-`));
  directories.push(directory);
  return directory;
}

/** `count` records starting at `start`: a 200-byte payload, a small key, one of 8 types. */
export function makeRecords(start, count) {
  const records = new Array(count);
  for (let i = 0; i < count; i++) {
    const n = start + i;
    const head = `{"id":${n},"v":"`;
    records[i] = {
      payload: `${head + 'x'.repeat(payloadBytes - head.length - 2)}"}`,
      key: `k${n % 10_000}`,
      type: types[n % typeCount],
    };
  }
  return records;
}

const channels = ['web', 'mobile', 'partner'];

/**
 * `makeRecords` with the tags an ingest service attaches to its events: one of 5,000 customers,
 * one of 12 regions and one of 3 channels, so tags repeat across records as real ones do.
 */
export function makeTaggedRecords(start, count) {
  const records = makeRecords(start, count);
  for (let i = 0; i < count; i++) {
    const n = start + i;
    records[i].tags = [`customer:${n % 5000}`, `region:${n % 12}`, `channel:${channels[n % channels.length]}`];
  }
  return records;
}

/** better-sqlite3 in WAL mode with synchronous=FULL: every commit is fsync'd. */
export function openSqlite(directory) {
  const db = new Database(path.join(directory, 'bench.sqlite'));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec('CREATE TABLE IF NOT EXISTS records (position INTEGER PRIMARY KEY, key TEXT, type TEXT, payload BLOB)');
  return db;
}

/** lmdb with sync on and no overlapping sync: a transaction resolves once it is flushed. */
export function openLmdbStore(directory) {
  return openLmdb({
    path: path.join(directory, 'bench.lmdb'),
    noSync: false,
    overlappingSync: false,
    compression: false,
  });
}

/** Keys of the scale workload are drawn from this many; tags from as many. */
export const keyCount = 1_000_000;
const tagCount = 1_000_000;
/** A repeated payload is drawn from the last this many distinct ones (overlapping polls). */
const repeatWindow = 100_000;

/**
 * The scale workload's records, batch by batch, the same in every run: 200-byte payloads of
 * which `repeatFraction` repeat a recent one, keys drawn from 1M, 8 types, one tag each drawn
 * from 1M (the `scale` and `tiered` suites).
 */
export function scaleWorkload(seed, repeatFraction = 0.1) {
  const random = prng(seed);
  const recent = [];
  let next = 0;
  return (count) => {
    const batch = new Array(count);
    for (let at = 0; at < count; at++, next++) {
      let payload;
      if (recent.length > 0 && random() < repeatFraction) payload = recent[Math.floor(random() * recent.length)];
      else {
        const head = `{"id":${next},"v":"`;
        payload = `${head + 'x'.repeat(payloadBytes - head.length - 2)}"}`;
        if (recent.length < repeatWindow) recent.push(payload);
        else recent[next % repeatWindow] = payload;
      }
      batch[at] = {
        payload,
        key: `k${Math.floor(random() * keyCount)}`,
        type: types[next % typeCount],
        tags: [`tag-${Math.floor(random() * tagCount)}`],
      };
    }
    return batch;
  };
}

/** The value at `fraction` of `sorted` (ascending). */
function percentile(sorted, fraction) {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))];
}

/** p50, p99 and the largest of `values` (milliseconds), and how many there were. */
export function latencySummary(values) {
  const sorted = Float64Array.from(values).sort();
  return {
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted[sorted.length - 1] ?? 0,
    count: sorted.length,
  };
}
