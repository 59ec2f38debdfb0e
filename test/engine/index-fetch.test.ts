/**
 * Index fetches coalesce their reads: hits whose manifest entries (and then payloads) lie near
 * each other, in one commit or in many small ones of a segment, are read with one positional
 * read per stretch, not one each — and a damaged payload in a stretch is still `CORRUPT`,
 * naming its place.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { isStreamStackError, limits } from '../../packages/engine/src/index.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

const records = 2000;
/** A stretch of hits, fewer than a run read whole would take. */
const near = Array.from({ length: Math.min(8, limits.fetchRunHitsMin - 1) }, (_, n) => 500 + n);
/** Hits far apart: far more than the coalescing gap between their entries and payloads. */
const far = [100, 1900];

function payloadOf(n: number): string {
  return `record ${n} ${'p'.repeat(40)}`;
}

/** Small segments: the commit of hits lies in a sealed segment, behind the newest. */
const segmentBytes = 256 * 1024;

async function feedWithHits(directory: string) {
  const store = await openStore(directory, { segmentBytes });
  const feed = await store.createFeed('f');
  await feed.append(
    Array.from({ length: records }, (_, n) => ({
      payload: payloadOf(n),
      tags: near.includes(n) ? ['near'] : far.includes(n) ? ['far'] : [`other:${n % 7}`],
    })),
  );
  for (let commit = 0; commit < 4; commit++)
    await feed.append(Array.from({ length: 1000 }, (_, n) => ({ payload: `later ${commit}/${n} ${'q'.repeat(100)}` })));
  await store.close();
}

async function readTag(
  feed: Awaited<ReturnType<Awaited<ReturnType<typeof openStore>>['feed']>>,
  tag: string,
): Promise<string[]> {
  const out: string[] = [];
  for await (const record of feed.read({ filter: { tags: [tag] }, plan: 'index' })) out.push(text(record.payload));
  return out;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('index fetches', () => {
  it('read nearby hits with one read for their entries and one for their payloads', async () => {
    const directory = temporaryDirectory();
    await feedWithHits(directory);
    const store = await openStore(directory, { segmentBytes });
    const feed = await store.feed('f');
    // A first read loads what the index keeps on disk; the reads counted are the fetch's own.
    expect(await readTag(feed, 'far')).toEqual(far.map(payloadOf));
    const reads = vi.spyOn(fs, 'readSync');
    expect(await readTag(feed, 'near')).toEqual(near.map(payloadOf));
    expect(reads).toHaveBeenCalledTimes(2);
    reads.mockClear();
    expect(await readTag(feed, 'far')).toEqual(far.map(payloadOf));
    expect(reads).toHaveBeenCalledTimes(2 * far.length);
    await store.close();
  });

  it('fetch the sparse hits of many small commits together, and still batch them one commit to an array', async () => {
    const directory = temporaryDirectory();
    const writing = await openStore(directory, { segmentBytes });
    const written = await writing.createFeed('f');
    const commits = 40;
    for (let commit = 0; commit < commits; commit++)
      await written.append([
        { payload: `before ${commit}` },
        { payload: `spread ${commit}`, tags: ['spread'] },
        { payload: `after ${commit}` },
      ]);
    // Later commits fill the segment, so the hits lie in sealed history, read from its file.
    for (let commit = 0; commit < 4; commit++)
      await written.append(
        Array.from({ length: 1000 }, (_, n) => ({ payload: `later ${commit}/${n} ${'q'.repeat(100)}` })),
      );
    await writing.close();
    const store = await openStore(directory, { segmentBytes });
    const feed = await store.feed('f');
    const expected = Array.from({ length: commits }, (_, commit) => `spread ${commit}`);
    expect(await readTag(feed, 'spread')).toEqual(expected);
    const reads = vi.spyOn(fs, 'readSync');
    expect(await readTag(feed, 'spread')).toEqual(expected);
    // One read for each group's entries and one for its payloads, not two for every commit.
    expect(reads.mock.calls.length).toBeLessThan(commits);
    expect(reads.mock.calls.length).toBeLessThanOrEqual(2 * Math.ceil(commits / limits.fetchSparseHitsMax));
    reads.mockRestore();
    const batches: { commit: number; payload: string }[][] = [];
    for await (const batch of feed.readBatches({ filter: { tags: ['spread'] }, plan: 'index' }))
      batches.push(batch.map((record) => ({ commit: record.commit!, payload: text(record.payload) })));
    expect(batches.map((batch) => batch.map((record) => record.payload))).toEqual(expected.map((payload) => [payload]));
    expect(new Set(batches.map((batch) => batch[0].commit)).size).toBe(commits);
    await store.close();
  });

  it('still reports a damaged payload in a coalesced stretch as CORRUPT', async () => {
    const directory = temporaryDirectory();
    await feedWithHits(directory);
    const [file] = fs
      .readdirSync(directory, { recursive: true })
      .map((name) => path.join(directory, String(name)))
      .filter((name) => name.endsWith('.hist'))
      .sort();
    const bytes = fs.readFileSync(file);
    const target = bytes.indexOf(Buffer.from(payloadOf(near[3])));
    expect(target).toBeGreaterThan(0);
    bytes[target + 2] ^= 0x20;
    fs.writeFileSync(file, bytes);
    const store = await openStore(directory, { segmentBytes });
    const feed = await store.feed('f');
    const failure = await readTag(feed, 'near').catch((error: unknown) => error);
    expect(isStreamStackError(failure, 'CORRUPT'), JSON.stringify(failure)).toBe(true);
    expect((failure as Error).message).toContain(path.basename(file));
    await store.close();
  });
});
