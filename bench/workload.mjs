// Shared by the write and read suites: the records of the benchmark workload, temporary data
// directories, and the peers (better-sqlite3, lmdb) set up with durability equal to StreamStack's.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { open as openLmdb } from 'lmdb';

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
