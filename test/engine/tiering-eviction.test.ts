/**
 * A local budget for tiered history, against a real S3-compatible server (versitygw on
 * 127.0.0.1): sealed segments past `localHistoryBytesMax` are cut locally to their headers once
 * their descriptors are confirmed, and every read answers exactly as it did from the local disk —
 * RAW, dedup and latest scans, `get`, tag and type queries through the index — reading the bytes
 * back from object storage in checked blocks. It holds across a reopen and a merge; with the
 * object store down, a read of evicted history fails with a typed error and works again once it
 * is back; a damaged remote block is `CORRUPT` naming the object, never a wrong answer.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, ObjectStoreOptions, Store } from '../../packages/engine/src/index.js';
import { remotePointReadBytesMax, segmentHeaderBytes } from '../../packages/engine/src/limits.js';
import { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import { feedObjectPrefix, segmentObjectName } from '../../packages/engine/src/storage/segment-descriptor.js';
import { failure } from '../support/failure.js';
import { objectStoreSuite } from '../support/object-store.js';
import { collect, openStore, recordShapes, temporaryDirectory, text } from '../support/store.js';
import { appendShaped, descriptors } from '../support/tiering-check.js';

const bucket = 'eviction';
const objects = objectStoreSuite(bucket);
const serverOf = () => objects.server();

function objectStore(localHistoryBytesMax?: number): ObjectStoreOptions {
  return objects.settings(localHistoryBytesMax === undefined ? {} : { localHistoryBytesMax });
}

/** Appends `commits` one-shot commits of 200 records with repeated keys, types and tags. */
function ingest(feed: Feed, commits: number, from = 0): Promise<void> {
  return appendShaped(feed, commits, from, { keys: 500, tags: 11, longEvery: 7, tombstoneEvery: 0 });
}

/** Every kind of read a user makes, as comparable values. */
async function everyRead(feed: Feed) {
  const keys = ['k0', 'k7', 'k123', 'k499', 'missing'];
  return {
    raw: recordShapes(await collect(feed.read())),
    latest: recordShapes(await collect(feed.read({ mode: 'latest' }))),
    dedup: recordShapes(await collect(feed.read({ mode: 'dedup' }))),
    tagged: recordShapes(await collect(feed.read({ filter: { tags: ['a3'] }, plan: 'index' }))),
    typed: recordShapes(await collect(feed.read({ filter: { types: ['t1'] }, plan: 'index' }))),
    sparse: recordShapes(await collect(feed.read({ filter: { tags: ['a5'], types: ['t2'] }, plan: 'index' }))),
    gets: await Promise.all(keys.map(async (key) => recordShapes([(await feed.get(key))!].filter(Boolean)))),
  };
}

/** The feed's history segment files and their sizes. */
function historyFiles(directory: string, feed: string): Map<string, number> {
  const folder = path.join(directory, 'feeds', feed, 'history');
  return new Map(
    fs
      .readdirSync(folder)
      .filter((name) => name.endsWith('.hist'))
      .map((name) => [name, fs.statSync(path.join(folder, name)).size]),
  );
}

/** A store of ingested history with every segment tiered and nothing evicted, and its reads. */
async function tieredThenReopened(feedName: string, localHistoryBytesMax: number) {
  const directory = temporaryDirectory();
  const settings = objectStore();
  let store: Store = await openStore(directory, { objectStore: settings });
  let feed = await store.createFeed(feedName);
  await ingest(feed, 30);
  await feed.tiered();
  const expected = await everyRead(feed);
  await store.close();
  const budgeted = { ...settings, localHistoryBytesMax };
  store = await openStore(directory, { objectStore: budgeted });
  feed = await store.feed(feedName);
  return { directory, settings: budgeted, store, feed, expected };
}

describe.skipIf(objects.missing)(objects.title('A local budget for tiered history'), () => {
  objects.start();

  it('evicts sealed segments past the budget and answers every read as before, from object storage', async () => {
    const { directory, settings, feed, store, expected } = await tieredThenReopened('orders', 0);
    const tiered = await feed.tiered();
    const sealed = (await feed.diskUse()).historySegments - 1;
    expect(sealed).toBeGreaterThanOrEqual(3);
    expect(tiered).toMatchObject({
      remoteSegments: sealed,
      evictedSegments: sealed,
      localHistoryBytes: 0,
      localHistoryBytesMax: 0,
    });
    // Every sealed segment is cut to its header; the active one is whole.
    const sizes = [...historyFiles(directory, 'orders').values()];
    expect(sizes.filter((size) => size === segmentHeaderBytes)).toHaveLength(sealed);

    expect(await everyRead(feed)).toEqual(expected);
    const reads = (await feed.info()).tiering!.remoteReads;
    expect(reads.misses).toBeGreaterThan(0);
    expect(reads.requests).toBeGreaterThanOrEqual(sealed);
    // Blocks, not records: a whole scan costs a few requests per segment.
    expect(reads.requests).toBeLessThan(sealed * 8);
    expect(reads.hits).toBeGreaterThan(0);

    // A reopen opens the evicted segments by their summaries and reads them remotely again.
    await store.close();
    const reopened = await openStore(directory, { objectStore: settings });
    const again = await reopened.feed('orders');
    expect((await again.info()).tiering).toMatchObject({ evictedSegments: sealed });
    // A point lookup on a cold segment fetches pieces, not blocks: one request, reaching back
    // from its entry into the run, where the payload new in that run lies.
    const lookup = await again.get('k7', { asOf: 1 });
    expect(lookup?.key).toBe('k7');
    const pointReads = (await again.info()).tiering!.remoteReads;
    expect(pointReads.requests).toBe(1);
    expect(pointReads.bytesFetched).toBeLessThanOrEqual(2 * remotePointReadBytesMax);
    expect(await everyRead(again)).toEqual(expected);
    // Verify reads the evicted runs back and checks every object's blocks: nothing to report.
    await reopened.close();
    const checker = await openStore(directory, { objectStore: settings, readOnly: true });
    const [report] = await checker.verify('orders');
    expect(report!.problems).toEqual([]);
    expect(report).toMatchObject({ ok: true, remoteSegments: sealed, records: 30 * 200 });
    await checker.close();
  });

  it('point reads of evicted history take one request each: the descriptor is kept locally, a lookup fetches its payload with its entry, a limited read reads nothing ahead', async () => {
    const directory = temporaryDirectory();
    const settings = objectStore();
    let store = await openStore(directory, { objectStore: settings });
    let feed = await store.createFeed('wide');
    // Runs of 400 records with 1 KiB payloads each: a record's payload lies before its entry in
    // the run, about 1 KiB farther back for each record after it (so beyond one 64 KiB piece).
    const payloadOf = (n: number) => `${n}:${'p'.repeat(1000)}`;
    for (let commit = 0; commit < 3; commit++)
      await feed.append(
        Array.from({ length: 400 }, (_, index) => ({
          payload: payloadOf(commit * 400 + index),
          key: `w${commit * 400 + index}`,
        })),
      );
    await feed.append([{ payload: 'last', key: 'last' }]);
    await feed.tiered();
    await store.close();
    store = await openStore(directory, { objectStore: { ...settings, localHistoryBytesMax: 0 } });
    feed = await store.feed('wide');
    expect((await feed.tiered()).evictedSegments).toBeGreaterThanOrEqual(3);
    await store.close();
    store = await openStore(directory, { objectStore: { ...settings, localHistoryBytesMax: 0 } });
    feed = await store.feed('wide');
    const requests = async () => (await feed.info()).tiering!.remoteReads.requests;

    // Record 300 of the first run: its payload lies about 100 KiB before its entry. The segment's
    // descriptor comes from the copy its upload left beside it, without a request.
    const near = await feed.get('w300', { asOf: 1 });
    expect(near && text(near.payload)).toBe(payloadOf(300));
    expect(await requests()).toBe(1);
    // Record 0 of the second run: its payload lies about 400 KiB back, past what a point read
    // fetches, so it takes a second request, and the answer is the same.
    const far = await feed.get('w400', { asOf: 2 });
    expect(far && text(far.payload)).toBe(payloadOf(400));
    expect(await requests()).toBe(3);
    await store.close();

    // The first record after a cursor: one block of its run, and nothing read ahead that the
    // read never takes.
    store = await openStore(directory, { objectStore: { ...settings, localHistoryBytesMax: 0 } });
    feed = await store.feed('wide');
    const [first] = await collect(feed.read({ after: 1, limit: 1 }));
    expect(first && text(first.payload)).toBe(payloadOf(400));
    expect(await requests()).toBe(1);
    await store.close();

    // A damaged or missing copy is not trusted: the descriptor is read from object storage.
    const folder = path.join(directory, 'feeds', 'wide', 'history');
    const copies = fs.readdirSync(folder).filter((name) => name.endsWith('.desc'));
    expect(copies.length).toBeGreaterThanOrEqual(3);
    for (const name of copies) {
      const bytes = fs.readFileSync(path.join(folder, name));
      bytes[bytes.length - 3] ^= 0x01;
      fs.writeFileSync(path.join(folder, name), bytes);
    }
    store = await openStore(directory, { objectStore: { ...settings, localHistoryBytesMax: 0 } });
    feed = await store.feed('wide');
    const again = await feed.get('w300', { asOf: 1 });
    expect(again && text(again.payload)).toBe(payloadOf(300));
    expect(await requests()).toBe(2);
    await store.close();
  });

  it('a descriptor copy that cannot be written fails nothing: the upload is done, and reads take the descriptor remotely', async () => {
    const directory = temporaryDirectory();
    const settings = objectStore();
    let store = await openStore(directory, { objectStore: settings });
    let feed = await store.createFeed('uncopied');
    // A folder where the first segment's copy goes: renaming the written copy over it fails.
    const blocked = path.join(directory, 'feeds', 'uncopied', 'history', '0000000000000001.desc');
    fs.mkdirSync(path.join(blocked, 'in-the-way'), { recursive: true });
    await ingest(feed, 10);
    const expected = await everyRead(feed);
    const tiered = await feed.tiered();
    expect(tiered).toMatchObject({ failures: 0, lastError: null, pendingSegments: 0 });
    expect(fs.statSync(blocked).isDirectory()).toBe(true);
    await store.close();
    store = await openStore(directory, { objectStore: { ...settings, localHistoryBytesMax: 0 } });
    feed = await store.feed('uncopied');
    expect((await feed.tiered()).evictedSegments).toBeGreaterThanOrEqual(2);
    expect(await everyRead(feed)).toEqual(expected);
    await store.close();
  });

  it('a merge of evicted segments reads them back; new records and a larger budget keep recent segments local', async () => {
    const { directory, settings, feed, store, expected } = await tieredThenReopened('merged', 0);
    await feed.tiered();
    const merge = await feed.compact();
    expect(merge.merges.length).toBeGreaterThan(0);
    await feed.tiered();
    expect(await everyRead(feed)).toEqual(expected);
    await store.close();

    // With a budget of two segments' room, the least recently read are evicted, the rest stay.
    const capacity = Math.max(...historyFiles(directory, 'merged').values());
    const roomy = await openStore(directory, { objectStore: { ...settings, localHistoryBytesMax: 2 * capacity } });
    const grown = await roomy.feed('merged');
    await ingest(grown, 20, 6000);
    const info = await grown.tiered();
    expect(info.localHistoryBytes).toBeLessThanOrEqual(2 * capacity);
    expect(info.localHistoryBytes).toBeGreaterThan(0);
    expect(info.evictedSegments).toBeGreaterThan(0);
    const records = await collect(grown.read());
    expect(records).toHaveLength(30 * 200 + 20 * 200);
    expect(recordShapes(records.slice(0, expected.raw.length))).toEqual(expected.raw);
    await roomy.close();
  });

  it('with the object store down, reads of evicted history fail with a typed error and work once it is back', async () => {
    const { feed, store, expected } = await tieredThenReopened('outage', 0);
    await feed.tiered();
    await serverOf().halt();
    try {
      const scan = await failure(() => collect(feed.read()));
      expect(scan.code).toBe('UNAVAILABLE');
      const lookup = await failure(() => feed.get('k7'));
      expect(lookup.code).toBe('UNAVAILABLE');
      // The writer goes on acknowledging meanwhile.
      await ingest(feed, 2, 6000);
    } finally {
      await serverOf().resume();
    }
    expect((await everyRead(feed)).raw.slice(0, expected.raw.length)).toEqual(expected.raw);
    await store.close();
  });

  it('a damaged remote block is CORRUPT naming the object, never a wrong answer', async () => {
    const { directory, settings, feed, store } = await tieredThenReopened('damaged', 0);
    await feed.tiered();
    await store.close();
    const config = JSON.parse(fs.readFileSync(path.join(directory, 'feeds', 'damaged', 'feed.json'), 'utf8'));
    const objects = new ObjectSegmentStore({
      endpoint: settings.endpoint!,
      bucket,
      prefix: `${settings.prefix}${feedObjectPrefix('damaged', config.tag)}`,
      region: serverOf().region,
      credentials: serverOf().credentials,
      forcePathStyle: true,
    });
    try {
      const first = (await descriptors(objects))[0]!;
      const name = segmentObjectName(first.ordinal, first.files.find((file) => file.name.endsWith('.hist'))!.name);
      const segments = objects.within('segments/');
      const { bytes } = await segments.readStart(name, Number.POSITIVE_INFINITY);
      // Damage throughout the segment's records, so every kind of read meets it.
      const damaged = bytes.slice();
      for (let at = segmentHeaderBytes + 100; at < damaged.length; at += 997) damaged[at]! ^= 0xff;
      await segments.put(name, damaged);

      const reopened = await openStore(directory, { objectStore: settings });
      const again = await reopened.feed('damaged');
      // A scan reads checked blocks; a point lookup and an index fetch read small pieces, whose
      // records fail their own CRCs, and are read again in checked blocks: each is CORRUPT
      // naming the object.
      for (const read of [
        () => collect(again.read()),
        () => again.get('k0', { asOf: 1 }),
        () => collect(again.read({ filter: { tags: ['a0'] }, plan: 'index', upTo: 1 })),
      ]) {
        const error = await failure(read);
        expect(error.code).toBe('CORRUPT');
        expect(error.message).toContain(name);
        expect(String(error.details?.object)).toContain(name);
      }
      await reopened.close();
    } finally {
      objects.close();
    }
  });
});
