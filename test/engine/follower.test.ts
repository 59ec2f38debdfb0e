/**
 * Followers, against a real S3-compatible server (versitygw on 127.0.0.1): a store opened with
 * `follower: true` over an empty directory and the writer's bucket reads the writer's tiered
 * history — RAW, dedup and latest scans, `get`, tag and type queries — and every read equals the
 * writer's over the same commits. It follows new segments, a trim and a key compaction; its
 * view is always a prefix of the writer's; its subscriptions are its own and deliver each commit
 * once across refreshes and restarts; it refuses writes with a typed error; after a restart
 * it resumes from its copy without fetching it again, and with the object store down it still
 * opens and answers once the store is back.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { failure } from '../support/failure.js';
import { objectStoreSuite } from '../support/object-store.js';
import { collect, openStore, recordShapes, temporaryDirectory } from '../support/store.js';
import { appendShaped, readsUpTo } from '../support/tiering-check.js';

/** The keys whose `get` is compared: some kept, some compacted or trimmed away, one never written. */
const followerKeys = ['k0', 'k7', 'k123', 'k399', 'missing', 'early-3', 'echo-late'];

const objects = objectStoreSuite('follower');

/** Appends `commits` one-shot commits of 200 records with repeated keys, types and tags. */
function ingest(feed: Feed, commits: number, from = 0): Promise<void> {
  return appendShaped(feed, commits, from, { keys: 400, tags: 13, longEvery: 5, tombstoneEvery: 97 });
}

/** The follower's reads equal the writer's over the follower's commits, and its head is the writer's last tiered commit. */
async function expectSameHistory(writer: Feed, follower: Feed): Promise<number> {
  const head = (await follower.head())?.commit ?? 0;
  const writerHead = (await writer.head())?.commit ?? 0;
  // A prefix of the writer's history: never a commit the writer does not have.
  expect(head).toBeLessThanOrEqual(writerHead);
  expect((await follower.info()).lowMark).toBe((await writer.info()).lowMark);
  expect(await readsUpTo(follower, head, followerKeys)).toEqual(await readsUpTo(writer, head, followerKeys));
  return head;
}

/** Each file under the follower's copy of `feed` with its inode: a file fetched again gets another. */
/**
 * The copy's files fetched from object storage, by name, with their inodes: the newest history
 * segment is left out, for it is the tail, which is never synced and so made anew on each start.
 */
function copyFiles(directory: string, feed: string): Map<string, number> {
  const files = new Map<string, number>();
  for (const folder of ['history', 'index']) {
    const at = path.join(directory, 'feeds', feed, folder);
    for (const name of fs.readdirSync(at)) files.set(`${folder}/${name}`, fs.statSync(path.join(at, name)).ino);
  }
  const tail = [...files.keys()]
    .filter((name) => name.endsWith('.hist'))
    .sort()
    .at(-1);
  if (tail) files.delete(tail);
  return files;
}

describe.skipIf(objects.missing)(objects.title('Followers of a tiered feed'), () => {
  objects.start();

  it('reads what its writer tiered: every read equals the writer’s, writes are refused', async () => {
    const settings = objects.settings();
    const writerStore = await openStore(temporaryDirectory(), { objectStore: settings });
    const writer = await writerStore.createFeed('orders');
    await ingest(writer, 30);
    await writer.tiered();

    const followerDirectory = temporaryDirectory();
    const followerStore = await openStore(followerDirectory, { objectStore: settings, follower: true });
    expect(followerStore.follower).toBe(true);
    expect(await followerStore.feedNames()).toEqual(['orders']);
    const follower = await followerStore.feed('orders');
    const head = await expectSameHistory(writer, follower);
    // Everything but the active segment's commits: the sealed segments hold most of them.
    expect(head).toBeGreaterThan(20);
    // Its records come from object storage; its history files are headers only.
    expect((await follower.info()).tiering?.remoteReads.requests).toBeGreaterThan(0);

    // Its subscriptions are its own; everything else that writes is the writer's.
    expect((await (await follower.createSubscription('mine')).info()).cursor).toBe(0);
    expect(await writer.subscriptions()).toEqual([]);
    for (const write of [
      () => follower.append([{ payload: 'x' }]),
      () => follower.acquireLease({ holder: 'me' }),
      () => follower.trim({ before: 2 }),
      () => follower.compact(),
      () => followerStore.createFeed('other'),
      () => followerStore.deleteFeed('orders'),
    ]) {
      const refused = await failure(write);
      expect(refused.code).toBe('READ_ONLY');
    }
    expect((await failure(() => followerStore.feed('absent'))).code).toBe('FEED_NOT_FOUND');
    // Bad settings change nothing.
    const lone = await failure(() => openStore(temporaryDirectory(), { follower: true }));
    expect(lone.code).toBe('INVALID_ARGUMENT');
    await followerStore.close();
    await writerStore.close();
  });

  it('follows new segments, a trim and a key compaction, and resumes from its copy after a restart', async () => {
    const settings = objects.settings();
    const writerStore: Store = await openStore(temporaryDirectory(), { objectStore: settings });
    const writer = await writerStore.createFeed('events');
    // Keys and a payload first written in history a trim will cut: their winners and first
    // occurrences move (a key's to nothing, the payload's to its next occurrence).
    await writer.append(
      Array.from({ length: 10 }, (_, index) => ({
        payload: index === 0 ? 'echo' : `early ${index}`,
        key: `early-${index}`,
      })),
    );
    await ingest(writer, 12);
    await writer.tiered();
    const followerDirectory = temporaryDirectory();
    let followerStore = await openStore(followerDirectory, { objectStore: settings, follower: true });
    let follower = await followerStore.feed('events');
    const first = await expectSameHistory(writer, follower);

    // The follower's own subscription: it reads and moves on over the follower's history.
    const audit = await follower.createSubscription('audit');
    const polled = await audit.poll({ max: 1_000_000 });
    expect(polled.cursor).toBe(first);
    await audit.advance(polled.cursor);

    // A follow reads every commit once, and goes on past the view it started on.
    const stop = new AbortController();
    const followed: number[] = [];
    const following = (async () => {
      for await (const batch of follower.follow({ after: 0, signal: stop.signal })) {
        followed.push(batch.commit.commit);
        expect(batch.records.length).toBe(batch.commit.records);
      }
    })().catch((error: unknown) => {
      if (!stop.signal.aborted) throw error;
    });

    // New segments: seen once refreshed, and a read begun before goes on over its own view.
    await ingest(writer, 15, 12 * 200);
    await writer.append([{ payload: 'echo', key: 'echo-late' }]);
    await ingest(writer, 3, 27 * 200);
    await writer.tiered();
    const before = follower.read({ upTo: first });
    const firstRecord = await before.next();
    const grown = (await follower.refresh())?.commit ?? 0;
    expect(grown).toBeGreaterThan(first);
    expect(recordShapes([firstRecord.value!, ...(await collect(before))])).toEqual(
      recordShapes(await collect(writer.read({ upTo: first }))),
    );
    await expectSameHistory(writer, follower);
    await expect.poll(() => followed.at(-1), { timeout: 5000 }).toBe(grown);
    stop.abort();
    await following;
    expect(followed).toEqual(Array.from({ length: grown }, (_, index) => index + 1));

    // The subscription goes on from its cursor over the newer view, each commit once.
    const next = await (await follower.subscription('audit')).poll({ max: 1_000_000 });
    expect(next.commits.map((commit) => commit.commit.commit)).toEqual(
      Array.from({ length: grown - first }, (_, index) => first + 1 + index),
    );
    await (await follower.subscription('audit')).advance(next.cursor);

    // A trim: the follower's history starts where the writer's does.
    await writer.trim({ before: 6 });
    await writer.tiered();
    await follower.refresh();
    await expectSameHistory(writer, follower);
    expect((await follower.info()).lowMark).toBeGreaterThan(1);
    // A follower that starts after the trim builds the dictionaries uploaded before it again.
    const late = await openStore(temporaryDirectory(), { objectStore: settings, follower: true });
    await expectSameHistory(writer, await late.feed('events'));
    await late.close();

    // A key compaction rewrites sealed segments: the follower reads the rewritten ones.
    const compacted = await writer.compactKeys({ horizon: grown - 3 });
    expect(compacted.segmentsCompacted).toBeGreaterThan(0);
    await writer.tiered();
    await follower.refresh();
    await expectSameHistory(writer, follower);

    // A restart resumes from the copy: nothing already there is fetched again.
    const files = copyFiles(followerDirectory, 'events');
    await followerStore.close();
    followerStore = await openStore(followerDirectory, { objectStore: settings, follower: true });
    follower = await followerStore.feed('events');
    expect(copyFiles(followerDirectory, 'events')).toEqual(files);
    await expectSameHistory(writer, follower);
    expect(await (await follower.subscription('audit')).info()).toMatchObject({ cursor: grown });

    // With the object store down it still opens from its copy; reads of records wait for it.
    await followerStore.close();
    await objects.server().halt();
    try {
      followerStore = await openStore(followerDirectory, { objectStore: settings, follower: true });
      follower = await followerStore.feed('events');
      expect((await follower.head())?.commit).toBeGreaterThan(first);
      expect((await failure(() => collect(follower.read()))).code).toBe('UNAVAILABLE');
      // A sync that fails keeps the history the follower has, and says why.
      expect((await failure(() => follower.refresh())).code).toBe('UNAVAILABLE');
      expect((await follower.info()).follower).toMatchObject({ lastError: { code: 'UNAVAILABLE' } });
      expect((await follower.info()).follower!.failures).toBeGreaterThanOrEqual(2);
    } finally {
      await objects.server().resume();
    }
    await expectSameHistory(writer, follower);
    await follower.refresh();
    expect((await follower.info()).follower).toMatchObject({ failures: 0, lastError: null });
    await followerStore.close();
    await writerStore.close();
  });
});
