/**
 * Tiering sealed history to object storage, against a real S3-compatible server (versitygw on
 * 127.0.0.1): every sealed segment goes up with its summary, index and dictionaries, then
 * becomes visible through a descriptor whose block CRCs match the bytes stored; ordinals go on
 * across a reopen and are never reused; a merge publishes its segment under a new ordinal that
 * retires the ones it replaced, and a trim moves the boundary before it deletes; an object store
 * that is down never holds up an acknowledgement, and the uploads catch up once it is back.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import type { Feed, ObjectStoreOptions, Store } from '../../packages/engine/src/index.js';
import { objectStoreFromAddress } from '../../packages/engine/src/index.js';
import { descriptorReadsAtOnceMax } from '../../packages/engine/src/limits.js';
import { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import { RemoteHistory } from '../../packages/engine/src/storage/remote-history.js';
import {
  decodeBoundary,
  feedObjectPrefix,
  ordinalName,
  segmentObjectName,
} from '../../packages/engine/src/storage/segment-descriptor.js';
import { failure } from '../support/failure.js';
import { objectStoreSuite } from '../support/object-store.js';
import { call, ndjson, startServer } from '../support/server.js';
import { digestTree, openStore, temporaryDirectory } from '../support/store.js';
import { checkFeedObjects, descriptors } from '../support/tiering-check.js';

const bucket = 'tiering';
const objects = objectStoreSuite(bucket);
const serverOf = () => objects.server();
const clients: ObjectSegmentStore[] = [];

/** The store's object storage settings, under a prefix of the test's own. */
function objectStore(): ObjectStoreOptions {
  return objects.settings();
}

/** A client of the test's own over a feed's objects, to look at what the store put there. */
function feedObjects(options: ObjectStoreOptions, feed: string, directory: string): ObjectSegmentStore {
  const config = JSON.parse(fs.readFileSync(path.join(directory, 'feeds', feed, 'feed.json'), 'utf8'));
  const store = new ObjectSegmentStore({
    endpoint: options.endpoint!,
    bucket,
    prefix: `${options.prefix}${feedObjectPrefix(feed, config.tag)}`,
    region: serverOf().region,
    credentials: serverOf().credentials,
    forcePathStyle: true,
  });
  clients.push(store);
  return store;
}

/** A store tiering under a prefix of its own, with feed `name` holding `commits` commits of `ingest`. */
async function tieredFeed(name: string, commits: number) {
  const directory = temporaryDirectory();
  const options = objectStore();
  const store = await openStore(directory, { objectStore: options });
  const feed = await store.createFeed(name);
  await ingest(feed, commits);
  return { directory, options, store, feed };
}

/** Appends `commits` one-shot commits of `size` records with keys and tags: several segments' worth. */
async function ingest(feed: Feed, commits: number, size = 200, from = 0): Promise<void> {
  for (let commit = 0; commit < commits; commit++) {
    await feed.append(
      Array.from({ length: size }, (_, index) => {
        const n = from + commit * size + index;
        return {
          payload: `{"n":${n},"pad":"${'x'.repeat(n % 7 === 0 ? 300 : 40)}"}`,
          key: `k${n % 500}`,
          type: `t${n % 3}`,
          tags: [`a${n % 11}`],
        };
      }),
    );
  }
}

/**
 * Checks the feed's objects as a whole (`checkFeedObjects`: CRCs, no holes, no orphans) and each
 * live segment against its local copies: all five files, the same bytes.
 */
async function checkAgainstObjects(objects: ObjectSegmentStore, directory: string, feed: string) {
  const live = await checkFeedObjects(objects);
  const segments = objects.within('segments/');
  for (const descriptor of live) {
    expect(descriptor.files.map((file) => path.extname(file.name)).sort()).toEqual([
      '.fps',
      '.hist',
      '.idx',
      '.keys',
      '.sum',
    ]);
    for (const file of descriptor.files) {
      const { bytes } = await segments.readStart(
        segmentObjectName(descriptor.ordinal, file.name),
        Number.POSITIVE_INFINITY,
      );
      const folder = file.name.endsWith('.hist') || file.name.endsWith('.sum') ? 'history' : 'index';
      expect(new Uint8Array(fs.readFileSync(path.join(directory, 'feeds', feed, folder, file.name)))).toEqual(bytes);
    }
  }
  return live;
}

describe.skipIf(objects.missing)(objects.title('Tiering sealed history to object storage'), () => {
  objects.start();
  afterAll(() => {
    for (const client of clients.splice(0)) client.close();
  });

  it('uploads every sealed segment with its derived files, then its descriptor; ordinals go on after a reopen', async () => {
    const directory = temporaryDirectory();
    const options = objectStore();
    let store: Store = await openStore(directory, { objectStore: options });
    let feed = await store.createFeed('orders');
    await ingest(feed, 30);
    const tiered = await feed.tiered();
    const sealed = (await feed.diskUse()).historySegments - 1;
    expect(sealed).toBeGreaterThanOrEqual(3);
    expect(tiered).toMatchObject({ remoteSegments: sealed, pendingSegments: 0, failures: 0, lastError: null });
    expect(await feed.diskUse()).toMatchObject({ remoteBytes: tiered.remoteBytes, notUploadedBytes: 0 });
    expect(tiered.remoteBytes).toBeGreaterThan(sealed * 60 * 1024);
    // Every byte that went up is counted as remote: nothing was uploaded twice or left out.
    expect(tiered.remoteBytes).toBe(tiered.uploadedBytes);
    // Every segment sealed in this process had its seal-to-visible lag noted.
    const lag = tiered.visibleLagMs;
    expect(lag.count).toBe(sealed);
    expect(0 <= lag.p50 && lag.p50 <= lag.p99 && lag.p99 <= lag.max).toBe(true);
    expect((await feed.info()).tiering?.remoteSegments).toBe(sealed);

    const objects = feedObjects(options, 'orders', directory);
    let found = await descriptors(objects);
    expect(found.map((descriptor) => descriptor.ordinal)).toEqual(Array.from({ length: sealed }, (_, at) => at + 1));
    // Consecutive segments, from the first position, each named for its base.
    expect(found[0]!.base).toBe(1);
    for (let at = 1; at < found.length; at++) expect(found[at]!.base).toBe(found[at - 1]!.lastPosition + 1);
    expect(new Set(found.map((descriptor) => descriptor.writer)).size).toBe(1);
    expect(await checkAgainstObjects(objects, directory, 'orders')).toHaveLength(found.length);
    // A reader elsewhere finds the same segments by walking the descriptors: the boundary (none
    // yet), each ordinal, and the next one's 404, then the boundary again. No LIST. Several
    // ordinals at once once it has found a few in a row, so a few past the end cost a 404 too.
    const remote = new RemoteHistory(objects);
    const readStart = ObjectSegmentStore.prototype.readStart;
    let inFlight = 0;
    let inFlightMax = 0;
    const spy = vi.spyOn(ObjectSegmentStore.prototype, 'readStart').mockImplementation(async function (
      this: ObjectSegmentStore,
      ...args
    ) {
      inFlightMax = Math.max(inFlightMax, ++inFlight);
      try {
        return await readStart.apply(this, args);
      } finally {
        inFlight--;
      }
    });
    const first = await remote.refresh().finally(() => spy.mockRestore());
    expect(first.live).toEqual(found);
    expect(inFlightMax).toBeGreaterThan(1);
    expect(first.requests).toBeGreaterThanOrEqual(found.length + 3);
    expect(first.requests).toBeLessThan(found.length + 3 + descriptorReadsAtOnceMax);

    // After a reopen, new segments take the next ordinals and the old descriptors stay as they were.
    await store.close();
    store = await openStore(directory, { objectStore: options });
    feed = await store.feed('orders');
    await ingest(feed, 20, 200, 6000);
    await feed.tiered();
    const again = await descriptors(objects);
    expect(again.slice(0, found.length)).toEqual(found);
    expect(again.length).toBe((await feed.diskUse()).historySegments - 1);
    expect(again.map((descriptor) => descriptor.ordinal)).toEqual(
      Array.from({ length: again.length }, (_, at) => at + 1),
    );
    expect(new Set(again.map((descriptor) => descriptor.writer)).size).toBe(1);
    found = again;
    expect(await checkAgainstObjects(objects, directory, 'orders')).toHaveLength(found.length);
    // The walk goes on from where it stopped: only the new ordinals cost a request each.
    const second = await remote.refresh();
    expect(second.live).toEqual(found);
    expect(second.requests).toBeGreaterThanOrEqual(found.length - first.live.length + 3);
    expect(second.requests).toBeLessThan(found.length - first.live.length + 3 + descriptorReadsAtOnceMax);
    expect((await remote.refresh()).requests).toBe(3);
    await store.close();
  });

  it('a merge publishes a new ordinal that retires the replaced ones; a trim moves the boundary, then deletes', async () => {
    const { directory, options, store, feed } = await tieredFeed('merged', 30);
    await feed.tiered();
    const objects = feedObjects(options, 'merged', directory);
    const before = await descriptors(objects);

    const merge = await feed.compact();
    expect(merge.merges.length).toBeGreaterThan(0);
    await feed.tiered();
    const after = await descriptors(objects);
    const walker = new RemoteHistory(objects);
    expect((await walker.refresh()).live).toEqual(await checkFeedObjects(objects));
    // Every descriptor stays (ordinals have no holes); the merged segments come after them.
    expect(after.slice(0, before.length)).toEqual(before);
    const added = after.slice(before.length);
    const replaced = new Set(added.flatMap((descriptor) => descriptor.replaces));
    expect(replaced.size).toBeGreaterThan(1);
    for (const ordinal of replaced) expect(ordinal).toBeLessThanOrEqual(before.length);
    const segmentNames = await objects.within('segments/').list();
    for (const descriptor of before) {
      const held = segmentNames.filter((name) => name.startsWith(`${ordinalName(descriptor.ordinal)}-`));
      // A replaced segment's files are gone; one kept has all five.
      expect(held.length).toBe(replaced.has(descriptor.ordinal) ? 0 : 5);
    }
    expect(await checkAgainstObjects(objects, directory, 'merged')).toHaveLength(
      after.filter((descriptor) => !replaced.has(descriptor.ordinal)).length,
    );

    const live = after.filter((descriptor) => !replaced.has(descriptor.ordinal)).sort((a, b) => a.base - b.base);
    const trim = await feed.trim({ before: live[1]!.firstCommit, force: true });
    expect(trim.segmentsRemoved).toBeGreaterThan(0);
    const settled = await feed.tiered();
    expect(settled.retiringSegments).toBe(0);
    const boundary = decodeBoundary((await objects.readStart('boundary', Number.POSITIVE_INFINITY)).bytes, 'boundary');
    expect(boundary.lowPosition).toBe((await feed.info()).lowPosition);
    const remaining = await descriptors(objects);
    // The walker, which saw the history before the trim, starts again from the new boundary.
    const trimmedView = await walker.refresh();
    expect(trimmedView.live).toEqual(await checkFeedObjects(objects));
    expect(trimmedView.live[0]!.base).toBe(boundary.lowPosition);
    expect(trimmedView.boundary).toEqual(boundary);
    // From the boundary's ordinal on, every ordinal has its descriptor (a reader walks them by
    // GET), and none below it is left.
    const ordinals = remaining.map((descriptor) => descriptor.ordinal);
    expect(ordinals[0]).toBe(boundary.lowOrdinal);
    expect(ordinals).toEqual(Array.from({ length: ordinals.length }, (_, at) => boundary.lowOrdinal + at));
    // A descriptor's files are there exactly when its segment is live: not replaced, not trimmed.
    const names = await objects.within('segments/').list();
    for (const descriptor of remaining) {
      const liveSegment = !replaced.has(descriptor.ordinal) && descriptor.lastPosition >= boundary.lowPosition;
      const held = names.filter((name) => name.startsWith(`${ordinalName(descriptor.ordinal)}-`));
      expect(held.length).toBe(liveSegment ? 5 : 0);
    }
    const described = new Set(remaining.map((descriptor) => ordinalName(descriptor.ordinal)));
    for (const name of names) expect(described.has(name.slice(0, 16))).toBe(true);
    expect(
      remaining
        .filter((descriptor) => descriptor.lastPosition >= boundary.lowPosition && !replaced.has(descriptor.ordinal))
        .map((descriptor) => descriptor.base)
        .sort((a, b) => a - b)[0],
    ).toBe(boundary.lowPosition);
    await store.close();
  });

  it('an object store that is down delays uploads, never an acknowledgement; they catch up once it is back', async () => {
    const { directory, options, store, feed } = await tieredFeed('outage', 5);
    await feed.tiered();
    const before = (await feed.info()).tiering!.remoteSegments;

    await serverOf().halt();
    try {
      await ingest(feed, 25, 200, 1000);
      expect((await feed.info()).records).toBe(6000);
      const waited = await failure(() => feed.tiered());
      expect(waited.code).toBe('UNAVAILABLE');
      const info = (await feed.info()).tiering!;
      expect(info.failures).toBeGreaterThan(0);
      expect(info.lastError?.code).toBe('UNAVAILABLE');
      expect(info.pendingSegments).toBeGreaterThan(0);
      expect(info.pendingBytes).toBeGreaterThan(info.pendingSegments * 1024);
      expect((await feed.diskUse()).notUploadedBytes).toBe(info.pendingBytes);
      expect(info.remoteSegments).toBe(before);
    } finally {
      await serverOf().resume();
    }
    // The background retry gets there on its own; `tiered` waits for it.
    let settled: Awaited<ReturnType<Feed['tiered']>> | undefined;
    for (let attempt = 0; attempt < 100 && !settled; attempt++) {
      settled = await feed.tiered().catch(() => undefined);
      if (!settled) await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(settled).toMatchObject({ pendingSegments: 0, lastError: null });
    expect(settled!.remoteSegments).toBe((await feed.diskUse()).historySegments - 1);
    expect(await checkAgainstObjects(feedObjects(options, 'outage', directory), directory, 'outage')).toHaveLength(
      settled!.remoteSegments,
    );
    await store.close();
  });

  it('verify checks the remote copies: a damaged or missing object is CORRUPT, naming it', async () => {
    const { directory, options, store, feed } = await tieredFeed('checked', 20);
    const { remoteSegments } = await feed.tiered();
    await store.close();

    // A read-only store with object storage uploads nothing and verifies both copies.
    let reader = await openStore(directory, { objectStore: options, readOnly: true });
    const [sound] = await reader.verify('checked');
    expect(sound).toMatchObject({ ok: true, remoteSegments, problems: [] });
    expect((await failure(async () => (await reader.feed('checked')).tiered())).code).toBe('READ_ONLY');
    await reader.close();

    const objects = feedObjects(options, 'checked', directory);
    const [first, second] = await checkFeedObjects(objects);
    const segments = objects.within('segments/');
    const damaged = segmentObjectName(first!.ordinal, first!.files.find((file) => file.name.endsWith('.hist'))!.name);
    const { bytes } = await segments.readStart(damaged, Number.POSITIVE_INFINITY);
    const flipped = bytes.slice();
    flipped[Math.floor(flipped.length / 2)]! ^= 0xff;
    await segments.put(damaged, flipped);
    const removed = segmentObjectName(second!.ordinal, second!.files.find((file) => file.name.endsWith('.keys'))!.name);
    await segments.delete(removed);

    reader = await openStore(directory, { objectStore: options, readOnly: true });
    const [unsound] = await reader.verify('checked');
    await reader.close();
    expect(unsound!.ok).toBe(false);
    expect(unsound!.problems).toEqual([
      expect.objectContaining({
        code: 'CORRUPT',
        file: segments.prefix + damaged,
        message: expect.stringContaining('CRC'),
      }),
      expect.objectContaining({
        code: 'CORRUPT',
        file: segments.prefix + removed,
        message: expect.stringContaining('missing'),
      }),
    ]);
    // Without object storage, verify checks the local copies only, which are sound.
    const local = await openStore(directory, { readOnly: true });
    expect((await local.verify('checked'))[0]).toMatchObject({ ok: true });
    expect((await local.verify('checked'))[0]!.remoteSegments).toBeUndefined();
    await local.close();
  });

  it('the server shows tiering in feed info, disk use and /metrics', async () => {
    const options = objectStore();
    const { url } = await startServer({ storeOptions: { objectStore: options } });
    expect((await call(url, 'POST', '/v1/feeds', { body: { name: 'served' } })).status).toBe(201);
    for (let batch = 0; batch < 30; batch++) {
      const lines = Array.from({ length: 200 }, (_, at) => ({
        payload: `served ${batch}/${at} ${'q'.repeat(80)}`,
        key: `k${at}`,
      }));
      expect((await call(url, 'POST', '/v1/feeds/served/records', { body: ndjson(...lines) })).status).toBeLessThan(
        300,
      );
    }
    const sealed = (await call(url, 'GET', '/v1/feeds/served/disk')).json.historySegments - 1;
    expect(sealed).toBeGreaterThan(1);
    // Uploads run in the background: wait until the feed's info says they are done.
    let info: { tiering: { remoteSegments: number; pendingSegments: number } } | undefined;
    for (let attempt = 0; attempt < 100; attempt++) {
      info = (await call(url, 'GET', '/v1/feeds/served')).json;
      if (info?.tiering.pendingSegments === 0 && info.tiering.remoteSegments === sealed) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(info?.tiering).toMatchObject({ remoteSegments: sealed, pendingSegments: 0 });
    const disk = (await call(url, 'GET', '/v1/feeds/served/disk')).json;
    expect(disk.notUploadedBytes).toBe(0);
    expect(disk.remoteBytes).toBeGreaterThan(0);
    const metrics = (await call(url, 'GET', '/metrics')).text;
    expect(metrics).toContain(`streamstack_tiering{feed="served",count="remote_segments"} ${sealed}`);
    expect(metrics).toMatch(/streamstack_tiering\{feed="served",count="requests"\} [1-9]/);
    expect(metrics).not.toContain(serverOf().credentials.secretAccessKey);
  });

  it('refuses bad object store settings before touching the directory, and a store without them is not tiered', async () => {
    const directory = temporaryDirectory();
    const plain = await openStore(directory);
    const feed = await plain.createFeed('plain');
    expect((await feed.info()).tiering).toBeUndefined();
    expect((await failure(() => feed.tiered())).code).toBe('INVALID_ARGUMENT');
    await plain.close();
    const digest = digestTree(directory);
    for (const bad of [
      { bucket: 'No_Such' },
      { bucket: 'ok-bucket', prefix: '/abs/' },
      { bucket: 'ok-bucket', prefix: 'no-slash' },
      { bucket: 'ok-bucket', endpoint: 'ftp://example' },
      { bucket: 'ok-bucket', endpoint: 'http://user:secret@example' },
      { bucket: 'ok-bucket', extra: 1 } as unknown as ObjectStoreOptions,
    ]) {
      const refused = await failure(() => openStore(directory, { objectStore: bad as ObjectStoreOptions }));
      expect(refused.code).toBe('INVALID_ARGUMENT');
      expect(refused.message).not.toContain('secret');
    }
    expect(digestTree(directory)).toBe(digest);
    expect(objectStoreFromAddress('s3://streams/prod', { endpoint: 'http://127.0.0.1:1' })).toEqual({
      bucket: 'streams',
      prefix: 'prod/',
      endpoint: 'http://127.0.0.1:1',
    });
    expect(objectStoreFromAddress('s3://streams')).toEqual({ bucket: 'streams', prefix: '' });
    expect(() => objectStoreFromAddress('http://streams')).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });
});
