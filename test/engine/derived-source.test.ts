/**
 * Derived files name the segment they were built from. A key dictionary (`.keys`), fingerprint
 * dictionary (`.fps`), index file (`.idx`) or summary (`.sum`) with the right base and record
 * count but built from another segment — another feed's, or a copy from before a key compaction
 * rewrote the segment — is not used: reads stay exact, a read-write open rebuilds it and reports
 * it, and `verify` reports it before then. `verify` also checks every derived head against its
 * segment, and what it says is rebuilt on the next read-write open is rebuilt there. Files of the
 * format before the source fingerprint are derived too: rebuilt on open, not migrated.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { type Feed, Store } from '../../packages/engine/src/index.js';
import { collect, openStore, temporaryDirectory, text } from '../support/store.js';

/** Records written: 4,000 in commits of 40, in several 64 KiB segments. */
const commitsWritten = 100;
const recordsPerCommit = 40;

/**
 * Two feeds of one shape: every record has the same byte length in both, so their segments have
 * the same bases and record counts, but keys and fingerprints (and so dedup and `get`) differ.
 * Stream ids are random UUIDs, as in production.
 */
const variants = {
  a: { keys: 97, fingerprints: 300 },
  b: { keys: 61, fingerprints: 170 },
} as const;
type Variant = keyof typeof variants;

interface Written {
  readonly position: number;
  readonly payload: string;
  readonly key: string;
  readonly version: number;
  readonly fingerprint: string;
}

const pad = (n: number, width: number) => String(n).padStart(width, '0');

function recordOf(variant: Variant, n: number): Omit<Written, 'position'> {
  const shape = variants[variant];
  return {
    payload: `${variant}-payload-${pad(n, 6)}-${'.'.repeat(100 + (n % 90))}`,
    key: `${variant}${pad(n % shape.keys, 4)}`,
    // Versions go up and down, so a key's winner is often not its last record.
    version: (n * 37) % 100,
    fingerprint: `${variant}${pad(n % shape.fingerprints, 7)}`,
  };
}

async function buildFeed(directory: string, variant: Variant): Promise<Written[]> {
  const store = await openStore(directory);
  const feed = await store.createFeed('f');
  const written: Written[] = [];
  for (let commit = 0; commit < commitsWritten; commit++) {
    const batch = Array.from({ length: recordsPerCommit }, (_, index) =>
      recordOf(variant, commit * recordsPerCommit + index),
    );
    await feed.append(batch.map((record) => ({ ...record, fingerprint: Buffer.from(record.fingerprint) })));
    for (const record of batch) written.push({ ...record, position: written.length + 1 });
  }
  await store.close();
  return written;
}

/** What dedup reads: the first record of each fingerprint, in position order. */
function dedupModel(written: readonly Written[]): number[] {
  const seen = new Set<string>();
  return written
    .filter((record) => !seen.has(record.fingerprint) && seen.add(record.fingerprint))
    .map((record) => record.position);
}

/** What `get` answers for every key: its highest version, then its latest position. */
function getModel(written: readonly Written[]): Map<string, number> {
  const winners = new Map<string, Written>();
  for (const record of written) {
    const best = winners.get(record.key);
    if (!best || record.version > best.version || (record.version === best.version && record.position > best.position))
      winners.set(record.key, record);
  }
  return new Map([...winners].map(([key, record]) => [key, record.position]));
}

async function dedupRead(feed: Feed): Promise<number[]> {
  return (await collect(feed.read({ mode: 'dedup' }))).map((record) => record.position);
}

async function getAll(feed: Feed, keys: Iterable<string>, written: readonly Written[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const key of keys) {
    const record = await feed.get(key);
    expect(record, key).toBeDefined();
    expect(text(record!.payload), key).toBe(written[record!.position - 1].payload);
    out.set(key, record!.position);
  }
  return out;
}

const indexDirectory = (directory: string) => path.join(directory, 'feeds', 'f', 'index');
const historyDirectory = (directory: string) => path.join(directory, 'feeds', 'f', 'history');

/** The problems `verify` finds, from a read-only store that opens nothing read-write. */
async function verifyReadOnly(directory: string) {
  const store = await Store.open(directory, { readOnly: true });
  try {
    return (await store.verify('f'))[0].problems;
  } finally {
    await store.close();
  }
}

/** A sealed segment in the middle of the feed whose derived files both feeds have. */
function middleSegment(directory: string): string {
  const names = fs
    .readdirSync(indexDirectory(directory))
    .filter((name) => name.endsWith('.keys'))
    .sort();
  expect(names.length).toBeGreaterThanOrEqual(6);
  return names[Math.floor(names.length / 2)].slice(0, -'.keys'.length);
}

/** A derived file's base and record count, as its head holds them (both formats: bytes 12 to 28). */
function baseAndCount(file: string): [bigint, bigint] {
  const bytes = fs.readFileSync(file);
  return [bytes.readBigUInt64LE(12), bytes.readBigUInt64LE(20)];
}

describe('derived files of another segment', () => {
  it('a key and a fingerprint dictionary from another feed, same base and count: reads exact, verify reports, a read-write open rebuilds', async () => {
    const directory = temporaryDirectory();
    const other = temporaryDirectory();
    const written = await buildFeed(directory, 'a');
    await buildFeed(other, 'b');
    const stem = middleSegment(directory);
    const swapped: string[] = [];
    for (const extension of ['.keys', '.fps']) {
      const mine = path.join(indexDirectory(directory), stem + extension);
      const theirs = path.join(indexDirectory(other), stem + extension);
      // The same segment range in both feeds, different contents.
      expect(baseAndCount(theirs)).toEqual(baseAndCount(mine));
      expect(fs.readFileSync(theirs).equals(fs.readFileSync(mine))).toBe(false);
      fs.copyFileSync(theirs, mine);
      swapped.push(mine);
    }

    const problems = await verifyReadOnly(directory);
    for (const file of swapped)
      expect(
        problems.filter((problem) => problem.file === file && problem.code === 'INDEX'),
        file,
      ).toHaveLength(1);

    // A read-only store does not trust them either.
    const readOnly = await Store.open(directory, { readOnly: true });
    const seen = await readOnly.feed('f');
    expect(await dedupRead(seen)).toEqual(dedupModel(written));
    expect(await getAll(seen, getModel(written).keys(), written)).toEqual(getModel(written));
    await readOnly.close();

    const store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.indexRebuilds.map((rebuild) => rebuild.file).sort()).toEqual([...swapped].sort());
    expect(feed.indexRebuilds.every((rebuild) => /another segment/.test(rebuild.reason))).toBe(true);
    expect(await dedupRead(feed)).toEqual(dedupModel(written));
    expect(await getAll(feed, getModel(written).keys(), written)).toEqual(getModel(written));
    expect((await store.verify('f'))[0].problems).toEqual([]);
    await store.close();
  }, 120_000);

  it('an index file and a summary from another feed, same base and count, are not trusted', async () => {
    const directory = temporaryDirectory();
    const other = temporaryDirectory();
    const written = await buildFeed(directory, 'a');
    await buildFeed(other, 'b');
    const stem = middleSegment(directory);
    const index = path.join(indexDirectory(directory), `${stem}.idx`);
    const summary = path.join(historyDirectory(directory), `${stem}.sum`);
    const originalSummary = fs.readFileSync(summary);
    fs.copyFileSync(path.join(indexDirectory(other), `${stem}.idx`), index);
    fs.copyFileSync(path.join(historyDirectory(other), `${stem}.sum`), summary);
    // The other summary passes the checks a summary had: base, base commit and capacity.
    expect(fs.readFileSync(summary).subarray(12, 36).equals(originalSummary.subarray(12, 36))).toBe(true);

    const problems = await verifyReadOnly(directory);
    expect(problems.some((problem) => problem.file === index && problem.code === 'INDEX')).toBe(true);
    expect(problems.some((problem) => problem.file === summary && problem.code === 'INDEX')).toBe(true);

    const store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.summaryRebuilds.map((rebuild) => rebuild.file)).toEqual([summary]);
    expect(feed.indexRebuilds.map((rebuild) => rebuild.file)).toEqual([index]);
    const records = await collect(feed.read());
    expect(records.map((record) => [record.position, text(record.payload), record.key])).toEqual(
      written.map((record) => [record.position, record.payload, record.key]),
    );
    await store.close();
    // Rebuilt byte for byte, and nothing left to report.
    expect(fs.readFileSync(summary).equals(originalSummary)).toBe(true);
    expect(await verifyReadOnly(directory)).toEqual([]);
  }, 120_000);

  it('a key and a fingerprint dictionary from before a key compaction rewrote their segment are rebuilt', async () => {
    const directory = temporaryDirectory();
    const written = await buildFeed(directory, 'a');
    const before = new Map(
      fs
        .readdirSync(indexDirectory(directory))
        .filter((name) => name.endsWith('.keys') || name.endsWith('.fps'))
        .map((name) => [
          path.join(indexDirectory(directory), name),
          fs.readFileSync(path.join(indexDirectory(directory), name)),
        ]),
    );

    let store = await openStore(directory);
    let feed = await store.feed('f');
    // A horizon at the end of the first segment: it alone is rewritten, in place, so its new
    // files cover the same positions (a wider compaction merges segments, and counts tell).
    const [, firstCount] = baseAndCount(path.join(indexDirectory(directory), `${'1'.padStart(16, '0')}.keys`));
    expect(Number(firstCount) % recordsPerCommit).toBe(0);
    const result = await feed.compactKeys({ horizon: Number(firstCount) / recordsPerCommit });
    expect(result.segmentsCompacted).toBe(1);
    expect(result.recordsAfter).toBeLessThan(result.recordsBefore);
    await store.close();
    // The dictionaries of segments the compaction rewrote in place: the same positions (base and
    // count), so only what they were built from tells the stale copies apart.
    const stale = new Map(
      [...before].filter(
        ([file, bytes]) =>
          fs.existsSync(file) &&
          !fs.readFileSync(file).equals(bytes) &&
          baseAndCount(file).join() === [bytes.readBigUInt64LE(12), bytes.readBigUInt64LE(20)].join(),
      ),
    );
    expect([...stale.keys()].map((file) => path.basename(file)).sort()).toEqual([
      '0000000000000001.fps',
      '0000000000000001.keys',
    ]);
    store = await openStore(directory);
    feed = await store.feed('f');
    const expectedDedup = await dedupRead(feed);
    const expectedGets = await getAll(feed, getModel(written).keys(), written);
    await store.close();
    for (const [file, bytes] of stale) fs.writeFileSync(file, bytes);

    const problems = await verifyReadOnly(directory);
    for (const file of stale.keys())
      expect(
        problems.filter((problem) => problem.file === file && problem.code === 'INDEX'),
        file,
      ).toHaveLength(1);
    store = await openStore(directory);
    feed = await store.feed('f');
    expect(feed.indexRebuilds.map((rebuild) => rebuild.file).sort()).toEqual([...stale.keys()].sort());
    expect(await dedupRead(feed)).toEqual(expectedDedup);
    expect(await getAll(feed, getModel(written).keys(), written)).toEqual(expectedGets);
    expect((await store.verify('f'))[0].problems).toEqual([]);
    await store.close();
  }, 120_000);
});

describe('verify and derived heads', () => {
  it('reports a flipped record count in a key or fingerprint dictionary head', async () => {
    const directory = temporaryDirectory();
    const written = await buildFeed(directory, 'a');
    const stem = middleSegment(directory);
    for (const extension of ['.keys', '.fps']) {
      const file = path.join(indexDirectory(directory), stem + extension);
      const original = fs.readFileSync(file);
      const damaged = Buffer.from(original);
      // The record count is the u64 at 20: flip its low bit.
      damaged[20] ^= 0x01;
      fs.writeFileSync(file, damaged);
      const problems = await verifyReadOnly(directory);
      expect(
        problems.filter((problem) => problem.file === file && problem.code === 'INDEX'),
        extension,
      ).toHaveLength(1);
      const store = await openStore(directory);
      const feed = await store.feed('f');
      expect(
        feed.indexRebuilds.map((rebuild) => rebuild.file),
        extension,
      ).toEqual([file]);
      expect(await dedupRead(feed)).toEqual(dedupModel(written));
      await store.close();
      expect(fs.readFileSync(file).equals(original), `${extension}: rebuilt byte for byte`).toBe(true);
      expect(await verifyReadOnly(directory)).toEqual([]);
    }
  }, 120_000);

  it('a key dictionary damaged in its winners section: verify reports it, the next read-write open rebuilds it, then verify is clean', async () => {
    const directory = temporaryDirectory();
    const written = await buildFeed(directory, 'a');
    const stem = middleSegment(directory);
    const file = path.join(indexDirectory(directory), `${stem}.keys`);
    const original = fs.readFileSync(file);
    // The winners are the last section, 28 bytes each: flip a byte of the first winner's
    // position, which no lookup of another key reads.
    // (Version 1 heads had no source field before the key count.)
    const descriptors = 8 + 4 + 8 + 8 + (original.readUInt32LE(8) === 1 ? 0 : 4) + 4;
    const winners = original.length - original.readUInt32LE(descriptors + 2 * 8);
    const damaged = Buffer.from(original);
    damaged[winners + 3] ^= 0x10;
    fs.writeFileSync(file, damaged);

    const before = await verifyReadOnly(directory);
    const reported = before.filter((problem) => problem.file === file && problem.code === 'INDEX');
    expect(reported).toHaveLength(1);
    expect(reported[0].message).toMatch(/next read-write open/);

    const store = await openStore(directory);
    const feed = await store.feed('f');
    // A lookup of one key reads one winner; every answer is exact meanwhile.
    expect((await feed.get(written[written.length - 1].key))?.position).toBe(
      getModel(written).get(written[written.length - 1].key),
    );
    // `verify` on a read-write store waits for the feed's background work: the whole check.
    expect((await store.verify('f'))[0].problems).toEqual([]);
    expect(feed.indexRebuilds.map((rebuild) => rebuild.file)).toEqual([file]);
    expect(await getAll(feed, getModel(written).keys(), written)).toEqual(getModel(written));
    await store.close();
    expect(fs.readFileSync(file).equals(original)).toBe(true);
    expect(await verifyReadOnly(directory)).toEqual([]);
  }, 120_000);
});

/**
 * A derived file as the previous format wrote it, made from the current one: version 1 index
 * files and dictionaries had no source field (4 bytes after the record count); version 2
 * summaries had no newest compacted commit (8 bytes after the highest epoch), nor the source and
 * the last commit frame (20 bytes after the run bytes), so their page and stream table offsets
 * were 28 lower, and their CRC covers what is left.
 */
function previousFormat(file: string, bytes: Buffer): Buffer {
  if (!file.endsWith('.sum')) {
    const old = Buffer.concat([bytes.subarray(0, 28), bytes.subarray(32)]);
    old.writeUInt32LE(1, 8);
    return old;
  }
  const body = Buffer.concat([bytes.subarray(0, 64), bytes.subarray(72, 80), bytes.subarray(100, bytes.length - 4)]);
  body.write('SSSUMRY2', 0, 'latin1');
  body.writeUInt32LE(2, 8);
  const pageCount = body.readUInt32LE(76);
  for (let page = 0; page < pageCount; page++)
    body.writeUInt32LE(body.readUInt32LE(84 + page * 24) - 28, 84 + page * 24);
  body.writeUInt32LE(body.readUInt32LE(80) - 28, 80);
  const crc = Buffer.alloc(4);
  crc.writeUInt32LE(zlib.crc32(body), 0);
  return Buffer.concat([body, crc]);
}

describe('derived files of the previous format version', () => {
  it('are rebuilt on open like damaged ones, byte for byte, and reads are exact', async () => {
    const directory = temporaryDirectory();
    const written = await buildFeed(directory, 'a');
    const stem = middleSegment(directory);
    const derived = [
      ...['.idx', '.keys', '.fps'].map((extension) => path.join(indexDirectory(directory), stem + extension)),
      path.join(historyDirectory(directory), `${stem}.sum`),
    ];
    const current = new Map(derived.map((file) => [file, fs.readFileSync(file)]));
    for (const [file, bytes] of current) fs.writeFileSync(file, previousFormat(file, bytes));

    const store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.indexRebuilds.map((rebuild) => rebuild.file).sort()).toEqual(
      derived.filter((file) => !file.endsWith('.sum')).sort(),
    );
    expect(feed.indexRebuilds.every((rebuild) => /unknown format version 1/.test(rebuild.reason))).toBe(true);
    expect(feed.summaryRebuilds.map((rebuild) => [rebuild.file, rebuild.reason])).toEqual([
      [derived[3], expect.stringMatching(/bad magic|unknown format version 2/)],
    ]);
    expect(await dedupRead(feed)).toEqual(dedupModel(written));
    expect(await getAll(feed, getModel(written).keys(), written)).toEqual(getModel(written));
    await store.close();
    for (const [file, bytes] of current) expect(fs.readFileSync(file).equals(bytes), file).toBe(true);
  }, 120_000);
});
