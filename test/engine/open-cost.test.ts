/**
 * Opening a feed costs the active segment, not the history: finished segments are known from
 * their summaries and their index files' heads, and none of their data is read until a query
 * needs it. Summaries are derived: missing, damaged or misplaced ones are rebuilt byte for byte.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Feed } from '../../packages/engine/src/index.js';
import { commitPagesCachedMax } from '../../packages/engine/src/limits.js';
import { bytesReadDuring } from '../support/file-reads.js';
import { collect, openStore, temporaryDirectory, text } from '../support/store.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** A feed of many sealed 64 KiB segments: tagged, typed, keyed records, some repeated. */
async function buildFeed(directory: string): Promise<void> {
  const store = await openStore(directory);
  const feed = await store.createFeed('f');
  const { token } = await feed.acquireLease({ holder: 'p' });
  for (let commit = 0; commit < 60; commit++) {
    const records = Array.from({ length: 40 }, (_, index) => {
      const n = commit * 40 + index;
      return {
        payload: n % 10 === 3 ? 'a repeated payload'.repeat(20) : `record ${n} ${'.'.repeat(n % 150)}`,
        key: `k${n % 500}`,
        version: n,
        type: `t${n % 3}`,
        tags: [`tag-${n % 7}`, `user-${n % 101}`],
      };
    });
    if (commit % 2 === 0) {
      await feed.append(records, { token });
    } else {
      const stream = await feed.openStream({ token });
      await stream.append(records, { token });
      await stream.seal({ token });
    }
  }
  await store.close();
}

/** Everything a reader sees: every record, a filtered read, gets and latest. */
async function readEverything(feed: Feed): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const record of feed.read())
    out.push([record.position, record.commit, text(record.payload), record.key, record.type, record.tags]);
  for await (const record of feed.read({ filter: { tags: ['user-5'] }, plan: 'index' }))
    out.push(['user-5', record.position]);
  for await (const record of feed.read({ mode: 'latest' })) out.push(['latest', record.position]);
  for await (const record of feed.read({ mode: 'dedup' })) out.push(['dedup', record.position]);
  for (const key of ['k0', 'k250', 'k499', 'absent']) out.push(['get', key, (await feed.get(key))?.position]);
  out.push(
    (await collect(feed.commits())).map((commit) => [
      commit.commit,
      commit.stream,
      commit.records,
      commit.firstPosition,
    ]),
  );
  return out;
}

const historyDirectory = (directory: string) => path.join(directory, 'feeds', 'f', 'history');

describe('opening a feed', () => {
  it('reads no data of finished segments, only their summaries and index heads', async () => {
    const directory = temporaryDirectory();
    await buildFeed(directory);
    const segments = fs
      .readdirSync(historyDirectory(directory))
      .filter((name) => name.endsWith('.hist'))
      .sort();
    expect(segments.length).toBeGreaterThanOrEqual(5);
    const active = path.join(historyDirectory(directory), segments[segments.length - 1]);

    let expected: unknown[] = [];
    const read = await bytesReadDuring(async () => {
      const store = await openStore(directory);
      const feed = await store.feed('f');
      expect(feed.summaryRebuilds).toEqual([]);
      expect(feed.indexRebuilds).toEqual([]);
      await store.close();
    });
    for (const name of segments.slice(0, -1)) {
      // The header (48 bytes) and the header of its last commit frame (8 bytes), which its
      // summary must name: a summary of another segment is not trusted.
      expect(read.get(path.join(historyDirectory(directory), name)) ?? 0, name).toBeLessThanOrEqual(48 + 8);
    }
    // The active segment is read from its checkpoint's last group on (the zeros after its written
    // bytes, to find a torn write), not its commit frames before; its runs are not read again.
    const activeBytes = fs.readFileSync(active);
    let written = activeBytes.length;
    while (written > 0 && activeBytes[written - 1] === 0) written--;
    expect(read.get(active)).toBeGreaterThanOrEqual(activeBytes.length - written);
    expect(read.get(active)).toBeLessThan(activeBytes.length - written + written / 2);
    const indexBytes = [...read].filter(([file]) => file.endsWith('.idx')).reduce((sum, [, count]) => sum + count, 0);
    const indexFileBytes = fs
      .readdirSync(path.join(directory, 'feeds', 'f', 'index'))
      .reduce((sum, name) => sum + fs.statSync(path.join(directory, 'feeds', 'f', 'index', name)).size, 0);
    expect(indexBytes).toBeLessThan(indexFileBytes / 4);

    // And what it reads is what a feed opened by reading every byte reads.
    const store = await openStore(directory);
    expected = await readEverything(await store.feed('f'));
    await store.close();
    for (const name of fs.readdirSync(historyDirectory(directory)).filter((entry) => entry.endsWith('.sum'))) {
      fs.rmSync(path.join(historyDirectory(directory), name));
    }
    const rescanned = await openStore(directory);
    const feed = await rescanned.feed('f');
    expect(feed.summaryRebuilds.length).toBe(segments.length - 1);
    expect(await readEverything(feed)).toEqual(expected);
    await rescanned.close();
  });

  it('rebuilds a summary that is missing, damaged in any byte, cut, extended, misplaced or left half-written', async () => {
    const directory = temporaryDirectory();
    await buildFeed(directory);
    const names = fs
      .readdirSync(historyDirectory(directory))
      .filter((entry) => entry.endsWith('.sum'))
      .sort();
    expect(names.length).toBeGreaterThanOrEqual(4);
    const original = new Map(
      names.map((name) => [name, fs.readFileSync(path.join(historyDirectory(directory), name))]),
    );
    let store = await openStore(directory);
    const expected = await readEverything(await store.feed('f'));
    await store.close();

    const target = names[1];
    const file = path.join(historyDirectory(directory), target);
    const bytes = original.get(target)!;
    const variants: [string, () => void][] = [
      ['deleted', () => fs.rmSync(file)],
      [
        'deleted, a half-written one left',
        () => (fs.rmSync(file), fs.writeFileSync(`${file}.tmp`, bytes.subarray(0, 20))),
      ],
      ['empty', () => fs.writeFileSync(file, Buffer.alloc(0))],
      ['cut by one byte', () => fs.writeFileSync(file, bytes.subarray(0, bytes.length - 1))],
      ['a byte appended', () => fs.writeFileSync(file, Buffer.concat([bytes, Buffer.alloc(1)]))],
      ["another segment's summary", () => fs.writeFileSync(file, original.get(names[0])!)],
    ];
    // Every byte of the fixed header and then every seventh byte, each with one bit flipped.
    for (let at = 0; at < bytes.length; at += at < 48 ? 1 : 7) {
      variants.push([
        `byte ${at} flipped`,
        () => {
          const damaged = Buffer.from(bytes);
          damaged[at] ^= 0x01;
          fs.writeFileSync(file, damaged);
        },
      ]);
    }
    for (const [what, damage] of variants) {
      damage();
      store = await openStore(directory);
      const feed = await store.feed('f');
      expect(
        feed.summaryRebuilds.map((rebuild) => rebuild.file),
        what,
      ).toEqual([file]);
      if (what !== 'deleted' && !what.startsWith('deleted,'))
        expect(feed.summaryRebuilds[0].reason, what).not.toMatch(/missing/);
      await store.close();
      // Rebuilt on open, written in the background, on disk once the store closed.
      expect(fs.readFileSync(file).equals(bytes), `${what}: the rebuilt summary is byte-identical`).toBe(true);
      expect(fs.existsSync(`${file}.tmp`), what).toBe(false);
    }
    store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.summaryRebuilds).toEqual([]);
    expect(await readEverything(feed)).toEqual(expected);
    expect((await store.verify('f'))[0].problems).toEqual([]);
    await store.close();
  }, 120_000);

  it('verify reports a summary that disagrees with its segment', async () => {
    const directory = temporaryDirectory();
    await buildFeed(directory);
    const names = fs
      .readdirSync(historyDirectory(directory))
      .filter((entry) => entry.endsWith('.sum'))
      .sort();
    fs.copyFileSync(path.join(historyDirectory(directory), names[0]), path.join(historyDirectory(directory), names[2]));
    const store = await openStore(directory, { readOnly: true });
    const [report] = await store.verify('f');
    expect(report.problems).toEqual([
      expect.objectContaining({ code: 'INDEX', file: path.join(historyDirectory(directory), names[2]) }),
    ]);
    await store.close();
  });
});

describe('a feed of many small commits', () => {
  /** One-record commits (the event-store pattern) in 512 KiB segments: several summary pages each. */
  async function buildSmallCommits(directory: string, commits: number): Promise<string[]> {
    const store = await openStore(directory, { segmentBytes: 512 * 1024 });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const streams: string[] = [];
    for (let at = 0; at < commits; at += 100) {
      const written = await Promise.all(
        Array.from({ length: Math.min(100, commits - at) }, (_, index) =>
          feed.append(
            [
              {
                payload: `event ${at + index}`,
                key: `k${(at + index) % 997}`,
                type: 'e',
                tags: [`t${(at + index) % 13}`],
              },
            ],
            { token },
          ),
        ),
      );
      streams.push(...written.map((commit) => commit.stream));
    }
    await store.close();
    return streams;
  }

  it("keeps only the active segment's commits in memory, and reads the others a page at a time", async () => {
    const directory = temporaryDirectory();
    const total = 25_500;
    const streams = await buildSmallCommits(directory, total);
    const segments = fs.readdirSync(historyDirectory(directory)).filter((name) => name.endsWith('.hist'));
    expect(segments.length).toBeGreaterThanOrEqual(3);

    let store = await openStore(directory, { segmentBytes: 512 * 1024 });
    let feed = await store.feed('f');
    const list = feed.writer.published.commits;
    expect(feed.summaryRebuilds).toEqual([]);
    // Opening read no commit records of finished segments.
    expect(list.pagesRead).toBe(0);
    const activeCommits = list.segments().at(-1)!.commits;
    expect(list.heldCommits).toBe(activeCommits);
    expect(list.heldCommits).toBeLessThan(total / 2);
    // The active segment's full pages are held encoded, its newest commits as records.
    expect(activeCommits).toBeGreaterThan(1024);

    // Every commit, in order; the pages read stay within the cache's bound.
    const listed = await collect(feed.commits());
    expect(listed.map((commit) => commit.commit)).toEqual(Array.from({ length: total }, (_, index) => index + 1));
    expect(listed.map((commit) => commit.stream)).toEqual(streams);
    expect(list.pagesRead).toBeGreaterThan(3);
    expect(list.pagesCached).toBeLessThanOrEqual(commitPagesCachedMax);
    const pages = await collect(feed.commits({ after: 5000, limit: 3 }));
    expect(pages.map((commit) => commit.commit)).toEqual([5001, 5002, 5003]);

    // A stream sealed long ago is found through its summary's stream table; an unknown one is not.
    expect(await (await feed.stream(streams[17])).info()).toMatchObject({ state: 'sealed', commit: { commit: 18 } });
    expect(await (await feed.stream(streams[total - 1])).info()).toMatchObject({
      state: 'sealed',
      commit: { commit: total },
    });
    await expect(feed.stream('no-such-stream')).rejects.toMatchObject({ code: 'STREAM_NOT_FOUND' });
    // Lag sums run bytes from the summaries' page tables and the held commits.
    const runBytes = (from: number) => {
      let sum = 0;
      for (let commit = from + 1; commit <= total; commit++) sum += list.at(commit).runBytes;
      return sum;
    };
    for (const cursor of [0, 1, 1023, 1024, 1025, 7000, 19_999, total - 1, total])
      expect(feed.reads.lag(cursor).bytes, `lag from ${cursor}`).toBe(runBytes(cursor));
    const expected = await readEverything(feed);
    await store.close();

    // The same answers from a feed that read every segment (no summaries), which it then writes.
    for (const name of fs.readdirSync(historyDirectory(directory)).filter((entry) => entry.endsWith('.sum')))
      fs.rmSync(path.join(historyDirectory(directory), name));
    store = await openStore(directory, { segmentBytes: 512 * 1024 });
    feed = await store.feed('f');
    expect(feed.summaryRebuilds.length).toBe(segments.length - 1);
    expect(await readEverything(feed)).toEqual(expected);
    // Once the rebuilt summaries are on disk, their segments' commits are let go.
    await feed.writer.idle();
    expect(feed.writer.published.commits.heldCommits).toBe(activeCommits);
    expect(await readEverything(feed)).toEqual(expected);
    await store.close();
  }, 120_000);
});
