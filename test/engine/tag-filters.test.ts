/**
 * Every sealed segment's index file carries a Bloom filter of its tags in its head, which the
 * feed keeps from the open on: a condition or a query on a tag passes every segment that surely
 * lacks it without loading that segment's index. A uniqueness check (a fresh tag, after position
 * 0) reads no index at all, and a hundred of them in one condition are one pass.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import {
  keyFilterBitsPerKey,
  keyFilterProbes,
  tagFilterBitsPerTag,
  tagFilterProbesMax,
} from '../../packages/engine/src/limits.js';
import { utf8Concat } from '../../packages/engine/src/storage/codec.js';
import {
  filterMayHold,
  filterShapeOf,
  termFilterOf,
  termHashes,
} from '../../packages/engine/src/storage/term-filter.js';
import { bytesReadDuring } from '../support/file-reads.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Records per commit, and commits: enough for several sealed 64 KiB segments. */
const recordsPerCommit = 40;
const commits = 50;

/** The tags of record n: its commit's `batch-…` tag (one segment has it), and two that recur. */
function tagsOf(n: number): string[] {
  return [`batch-${Math.floor(n / recordsPerCommit)}`, `user-${n % 37}`, `region-${n % 5}`];
}

async function buildFeed(directory: string): Promise<void> {
  const store = await openStore(directory);
  const feed = await store.createFeed('f');
  for (let commit = 0; commit < commits; commit++) {
    await feed.append(
      Array.from({ length: recordsPerCommit }, (_, index) => {
        const n = commit * recordsPerCommit + index;
        return { payload: `record ${n} ${'.'.repeat(n % 200)}`, type: `t${n % 3}`, tags: tagsOf(n) };
      }),
    );
  }
  await store.close();
}

const indexDirectory = (directory: string) => path.join(directory, 'feeds', 'f', 'index');

/** The bytes read from index files, by file name, while `action` runs. */
async function indexReadsDuring(action: () => Promise<void>): Promise<Map<string, number>> {
  const read = await bytesReadDuring(action);
  return new Map(
    [...read].filter(([file]) => file.endsWith('.idx')).map(([file, bytes]) => [path.basename(file), bytes]),
  );
}

/** Positions of the records carrying every one of `tags`, through the index, then by a scan. */
async function positionsBothWays(feed: Feed, tags: string[]): Promise<[number[], number[]]> {
  const indexed = (await collect(feed.read({ filter: { tags }, plan: 'index' }))).map((record) => record.position);
  const scanned = (await collect(feed.read({ filter: { tags }, plan: 'scan' }))).map((record) => record.position);
  return [indexed, scanned];
}

describe('tag filters', () => {
  it('hold every term they were built from, and pass an absent one at the rate their bits allow', () => {
    const kernels = tsKernels;
    const present = Array.from({ length: 10_000 }, (_, index) => `customer:${index * 7919}`);
    const absent = Array.from({ length: 100_000 }, (_, index) => `order:${index}`);
    const { bytes, ends } = utf8Concat(present);
    const encoder = new TextEncoder();
    const passes = (filter: Uint8Array, probes: number, terms: string[]) =>
      terms.filter((term) => filterMayHold(filter, termHashes(encoder.encode(term)), probes)).length;
    // Tags: about one absent tag in 100,000 passes.
    const tagShape = filterShapeOf(present.length, tagFilterBitsPerTag, tagFilterProbesMax);
    expect(tagShape).toEqual({ bytes: (10_000 * tagFilterBitsPerTag) / 8, probes: tagFilterProbesMax });
    const tags = termFilterOf(kernels, bytes, ends, tagShape);
    expect(passes(tags, tagShape.probes, present)).toBe(present.length);
    expect(passes(tags, tagShape.probes, absent)).toBeLessThan(10);
    // Keys: about one in a hundred.
    const keyShape = filterShapeOf(present.length, keyFilterBitsPerKey, keyFilterProbes);
    const keys = termFilterOf(kernels, bytes, ends, keyShape);
    expect(passes(keys, keyFilterProbes, present)).toBe(present.length);
    const keyFalsePositives = passes(keys, keyFilterProbes, absent);
    expect(keyFalsePositives).toBeGreaterThan(300);
    expect(keyFalsePositives).toBeLessThan(2_000);
    // A filter capped at half its terms' share still holds every term, with fewer probes each, so
    // that it does not fill up: about one absent term in a hundred passes, not nearly all.
    const capped = filterShapeOf(present.length, tagFilterBitsPerTag, tagFilterProbesMax, tagShape.bytes / 2);
    expect(capped).toEqual({ bytes: tagShape.bytes / 2, probes: Math.round((tagFilterBitsPerTag / 2) * Math.LN2) });
    expect(capped.probes).toBeLessThan(tagFilterProbesMax);
    const cappedFilter = termFilterOf(kernels, bytes, ends, capped);
    expect(passes(cappedFilter, capped.probes, present)).toBe(present.length);
    const cappedFalsePositives = passes(cappedFilter, capped.probes, absent);
    expect(cappedFalsePositives).toBeGreaterThan(passes(tags, tagShape.probes, absent));
    expect(cappedFalsePositives).toBeLessThan(2_000);
    // No terms: the smallest filter, which holds nothing.
    const emptyShape = filterShapeOf(0, tagFilterBitsPerTag, tagFilterProbesMax);
    expect(emptyShape.bytes).toBe(8);
    const empty = termFilterOf(kernels, new Uint8Array(0), new Uint32Array(0), emptyShape);
    expect(passes(empty, emptyShape.probes, absent)).toBe(0);
  });

  describe('on a feed of several sealed segments, opened afresh', () => {
    let directory: string;
    let store: Store;
    let feed: Feed;
    let indexFiles: string[];

    async function reopen(): Promise<void> {
      store = await openStore(directory);
      feed = await store.feed('f');
    }

    afterEach(async () => {
      await store.close();
    });

    async function setUp(): Promise<void> {
      directory = temporaryDirectory();
      await buildFeed(directory);
      indexFiles = fs.readdirSync(indexDirectory(directory)).filter((name) => name.endsWith('.idx'));
      expect(indexFiles.length).toBeGreaterThanOrEqual(4);
      await reopen();
      expect(feed.indexRebuilds).toEqual([]);
    }

    it('answer a uniqueness check, one tag or a hundred, without reading any index', async () => {
      await setUp();
      const head = (await feed.info()).records;
      const reads = await indexReadsDuring(async () => {
        await feed.append([{ payload: 'one', tags: ['order:1'] }], {
          condition: { failIfMatch: { tags: ['order:1'] }, after: 0 },
        });
        const tags = Array.from({ length: 100 }, (_, index) => `order:${index + 2}`);
        await feed.append(
          tags.map((tag) => ({ payload: tag, tags: [tag] })),
          { condition: { failIfMatch: { items: tags.map((tag) => ({ tags: [tag] })) }, after: 0 } },
        );
      });
      expect([...reads]).toEqual([]);
      expect((await feed.info()).records).toBe(head + 101);
      // The tags are taken now: the same check fails, naming the record, still from the tail.
      await expect(
        feed.append([{ payload: 'again', tags: ['order:50'] }], {
          condition: { failIfMatch: { tags: ['order:50'] }, after: 0 },
        }),
      ).rejects.toMatchObject({ code: 'CONDITION_FAILED', details: { position: head + 50 } });
    });

    it('load only the index of the segment that holds a tag, and answer as a scan does', async () => {
      await setUp();
      // batch-3's records lie in one early segment; a condition on it fails there.
      const reads = await indexReadsDuring(async () => {
        await expect(
          feed.append([{ payload: 'late' }], { condition: { failIfMatch: { tags: ['batch-3'] }, after: 0 } }),
        ).rejects.toMatchObject({ code: 'CONDITION_FAILED', details: { position: 3 * recordsPerCommit + 1 } });
      });
      expect(reads.size).toBe(1);
      // Reads by tag give what a scan gives, for tags in one segment, in all, and in none.
      const cases = [['batch-3'], ['batch-48'], ['user-5'], ['user-5', 'region-0'], ['user-5', 'batch-20'], ['nobody']];
      let empty = 0;
      for (const tags of cases) {
        const [indexed, scanned] = await positionsBothWays(feed, tags);
        expect(indexed, tags.join(',')).toEqual(scanned);
        if (scanned.length === 0) empty++;
      }
      // Both kinds of answer were reached: some tags match records, some match none.
      expect(empty).toBeGreaterThanOrEqual(1);
      expect(empty).toBeLessThan(cases.length);
      // A type no segment holds, with a tag every one does, loads nothing either.
      const typeReads = await indexReadsDuring(async () => {
        expect(await collect(feed.read({ filter: { types: ['absent'], tags: ['region-1'] }, plan: 'index' }))).toEqual(
          [],
        );
      });
      expect([...typeReads]).toEqual([]);
    });

    it('are rebuilt with the index file when it is of the format before them', async () => {
      await setUp();
      const expected = await positionsBothWays(feed, ['user-7', 'region-2']);
      await store.close();
      // Version 2 files had no tag filter: the head fails its check, and the file is rebuilt.
      const target = path.join(indexDirectory(directory), indexFiles.sort()[1]);
      const bytes = fs.readFileSync(target);
      expect(bytes.readUInt32LE(8)).toBe(3);
      bytes.writeUInt32LE(2, 8);
      fs.writeFileSync(target, bytes);
      await reopen();
      expect(feed.indexRebuilds.map((rebuild) => [path.basename(rebuild.file), rebuild.reason])).toEqual([
        [path.basename(target), expect.stringContaining('unknown format version 2')],
      ]);
      expect(fs.readFileSync(target).readUInt32LE(8)).toBe(3);
      expect(await positionsBothWays(feed, ['user-7', 'region-2'])).toEqual(expected);
    });
  });
});
