// Deleting a feed: typed, durable, crash-safe. The feed's directory is renamed to a tombstone
// (synced), then removed; an open finishes the removal of any tombstone a crash left, and never
// lists one as a feed. Handles of a deleted feed fail with FEED_NOT_FOUND, and the name is free.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Feed, type Store, StreamStackError } from '../../packages/engine/src/index.js';
import { collect, digestTree, openStore, temporaryDirectory, text } from '../support/store.js';

const deleted = { code: 'FEED_NOT_FOUND', details: { feed: 'f', deleted: true } };

/** The entries of the data directory's `feeds/`, tombstones included. */
function feedEntries(directory: string): string[] {
  return fs.readdirSync(path.join(directory, 'feeds')).sort();
}

async function feedWithRecords(store: Store, name: string, count: number): Promise<Feed> {
  const feed = await store.createFeed(name);
  for (let at = 0; at < count; at += 50) {
    await feed.append(
      Array.from({ length: Math.min(50, count - at) }, (_, index) => ({
        payload: `${name}:${at + index}`,
        key: `k${(at + index) % 7}`,
      })),
    );
  }
  return feed;
}

/** The error `call` throws (undefined when it returns). */
function thrown(call: () => unknown): unknown {
  try {
    call();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** What a promise settled to: its value, or the code of its typed error. */
async function outcome<T>(promise: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; code: string }> {
  try {
    return { ok: true, value: await promise };
  } catch (error) {
    if (!(error instanceof StreamStackError)) throw error;
    return { ok: false, code: error.code };
  }
}

describe('deleting a feed', () => {
  it('removes the feed and its files; the name can be created again, empty', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    await feedWithRecords(store, 'f', 400);
    await feedWithRecords(store, 'g', 10);
    expect(await store.feedNames()).toEqual(['f', 'g']);
    await store.deleteFeed('f');
    expect(await store.feedNames()).toEqual(['g']);
    expect(feedEntries(directory)).toEqual(['g']);
    await expect(store.feed('f')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
    await expect(store.feedInfo('f')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
    // The other feed is untouched.
    expect((await collect((await store.feed('g')).read())).length).toBe(10);

    const again = await store.createFeed('f');
    expect(await again.info()).toMatchObject({ commits: 0, records: 0, head: null, epoch: 0 });
    expect(await collect(again.read())).toEqual([]);
    expect(await again.get('k1')).toBeUndefined();
    const commit = await again.append([{ payload: 'new' }]);
    expect(commit).toMatchObject({ commit: 1, firstPosition: 1 });
    await store.close();

    const reopened = await openStore(directory);
    expect(await reopened.feedNames()).toEqual(['f', 'g']);
    expect((await collect((await reopened.feed('f')).read())).map((record) => text(record.payload))).toEqual(['new']);
    expect((await reopened.verify()).every((result) => result.ok)).toBe(true);
    await reopened.close();
  });

  it('refuses an unknown name, a bad name, and a read-only store, changing nothing', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    await feedWithRecords(store, 'f', 3);
    await expect(store.deleteFeed('nope')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND', details: { feed: 'nope' } });
    for (const name of ['', '../f', '.deleted-f-1', 'a/b'])
      await expect(store.deleteFeed(name)).rejects.toMatchObject({ code: 'INVALID_NAME' });
    await store.close();
    const before = digestTree(directory);
    const reader = await openStore(directory, { readOnly: true });
    await expect(reader.deleteFeed('f')).rejects.toMatchObject({ code: 'READ_ONLY' });
    await reader.close();
    expect(digestTree(directory)).toBe(before);
    const closed = await openStore(directory);
    await closed.close();
    await expect(closed.deleteFeed('f')).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('lets writes already submitted settle, then fails every call on old handles with FEED_NOT_FOUND', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await feedWithRecords(store, 'f', 5);
    const subscription = await feed.createSubscription('s');
    const { token } = await feed.acquireLease({ holder: 'h' });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'open' }], { token });
    const following = outcome(collect(feed.follow({ after: 0 })));
    // Submitted before the deletion: each is written (and acknowledged) before the feed goes.
    const appends = Array.from({ length: 20 }, (_, index) =>
      outcome(feed.append([{ payload: `late ${index}` }], { token })),
    );
    const batch = outcome(stream.append([{ payload: 'batch' }], { token }));
    await store.deleteFeed('f');
    expect((await Promise.all(appends)).every((result) => result.ok)).toBe(true);
    expect((await batch).ok).toBe(true);
    expect(await following).toMatchObject({ ok: false, code: 'FEED_NOT_FOUND' });

    await expect(feed.append([{ payload: 'after' }], { token })).rejects.toMatchObject(deleted);
    await expect(feed.info()).rejects.toMatchObject(deleted);
    await expect(feed.head()).rejects.toMatchObject(deleted);
    await expect(collect(feed.read())).rejects.toMatchObject(deleted);
    expect(thrown(() => feed.commits())).toMatchObject(deleted);
    await expect(feed.readCommit(1)).rejects.toMatchObject(deleted);
    await expect(feed.get('k1')).rejects.toMatchObject(deleted);
    await expect(feed.acquireLease({ holder: 'other' })).rejects.toMatchObject(deleted);
    await expect(stream.append([{ payload: 'x' }], { token })).rejects.toMatchObject(deleted);
    await expect(stream.seal({ token })).rejects.toMatchObject(deleted);
    await expect(stream.info()).rejects.toMatchObject(deleted);
    await expect(subscription.info()).rejects.toMatchObject(deleted);
    await expect(subscription.advance(1)).rejects.toMatchObject(deleted);
    await expect(subscription.poll()).rejects.toMatchObject(deleted);

    // A new feed of the name shares nothing with the old handles.
    const fresh = await store.createFeed('f');
    await expect(feed.append([{ payload: 'after' }])).rejects.toMatchObject(deleted);
    expect(await fresh.info()).toMatchObject({ commits: 0, lease: null, activeStream: null });
    expect(await fresh.subscriptions()).toEqual([]);
    await store.close();
  });

  it('deletes a name once when asked twice at the same time, and waits for a deletion on close', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    await feedWithRecords(store, 'f', 3);
    const [first, second] = await Promise.all([outcome(store.deleteFeed('f')), outcome(store.deleteFeed('f'))]);
    expect([first.ok, second.ok]).toEqual([true, false]);
    expect(second).toMatchObject({ code: 'FEED_NOT_FOUND' });
    // A lookup and a creation made while a deletion runs wait for it.
    await feedWithRecords(store, 'g', 3);
    const deletion = store.deleteFeed('g');
    const lookup = outcome(store.feed('g'));
    const creation = store.createFeed('g');
    await deletion;
    expect(await lookup).toMatchObject({ ok: false, code: 'FEED_NOT_FOUND' });
    expect((await (await creation).info()).commits).toBe(0);
    const closing = store.deleteFeed('g');
    await store.close();
    await closing;
    expect(feedEntries(directory)).toEqual([]);
  });

  it('deletes a feed whose feed.json is damaged (a way out of a broken feed)', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    await feedWithRecords(store, 'f', 3);
    await store.close();
    fs.writeFileSync(path.join(directory, 'feeds', 'f', 'feed.json'), '{"broken"');
    store = await openStore(directory);
    await expect(store.feed('f')).rejects.toMatchObject({ code: 'CORRUPT' });
    await store.deleteFeed('f');
    expect(await store.feedNames()).toEqual([]);
    await store.close();
  });
});

describe('a deletion interrupted by a crash', () => {
  /**
   * The states a deletion passes through, made by hand: the rename done and synced (the whole
   * tombstone), and the removal part way (files gone, directories left).
   */
  async function interrupted(step: 'renamed' | 'partly removed'): Promise<{ directory: string; tombstone: string }> {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    await feedWithRecords(store, 'f', 300);
    await feedWithRecords(store, 'g', 5);
    await store.close();
    const tombstone = path.join(directory, 'feeds', '.deleted-f-1');
    fs.renameSync(path.join(directory, 'feeds', 'f'), tombstone);
    if (step === 'partly removed') {
      fs.rmSync(path.join(tombstone, 'feed.json'));
      const history = path.join(tombstone, 'history');
      for (const name of fs.readdirSync(history).slice(0, 2)) fs.rmSync(path.join(history, name), { recursive: true });
    }
    return { directory, tombstone };
  }

  for (const step of ['renamed', 'partly removed'] as const) {
    it(`finishes the deletion on open (${step}), and never lists the tombstone`, async () => {
      const { directory, tombstone } = await interrupted(step);
      // A reader takes no lock and writes nothing: it leaves the tombstone, but does not see a feed.
      const reader = await openStore(directory, { readOnly: true });
      expect(await reader.feedNames()).toEqual(['g']);
      await expect(reader.feed('f')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
      await reader.close();
      expect(fs.existsSync(tombstone)).toBe(true);

      const store = await openStore(directory);
      expect(fs.existsSync(tombstone)).toBe(false);
      expect(feedEntries(directory)).toEqual(['g']);
      expect(await store.feedNames()).toEqual(['g']);
      await expect(store.feed('f')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
      expect((await (await store.createFeed('f')).info()).commits).toBe(0);
      expect((await collect((await store.feed('g')).read())).length).toBe(5);
      await store.close();
    });
  }

  it('picks a fresh tombstone name when one of the name is there', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    await feedWithRecords(store, 'f', 3);
    // As a removal that failed would leave it (the open that finishes it has not come yet).
    fs.mkdirSync(path.join(directory, 'feeds', '.deleted-f-1'));
    await store.deleteFeed('f');
    expect(feedEntries(directory)).toEqual(['.deleted-f-1']);
    await store.close();
    const again = await openStore(directory);
    expect(feedEntries(directory)).toEqual([]);
    await again.close();
  });
});

describe('a read-only reader beside the writer when a feed is deleted', () => {
  it('fails its calls on the deleted feed with FEED_NOT_FOUND, and finds a new feed of the name', async () => {
    const directory = temporaryDirectory();
    const writer = await openStore(directory);
    await feedWithRecords(writer, 'f', 2000);
    const reader = await openStore(directory, { readOnly: true });
    const seen = await reader.feed('f');
    expect((await seen.info()).records).toBe(2000);
    const commits = seen.commits();
    const reading = seen.read();
    expect((await reading.next()).done).toBe(false);

    await writer.deleteFeed('f');
    await expect(seen.info()).rejects.toMatchObject(deleted);
    await expect(collect(seen.read())).rejects.toMatchObject(deleted);
    await expect(seen.readCommit(1)).rejects.toMatchObject(deleted);
    await expect(seen.get('k1')).rejects.toMatchObject(deleted);
    await expect(seen.subscriptions()).rejects.toMatchObject(deleted);
    // Iterations begun before the deletion end typed (or finish from what they had open).
    const rest = await outcome(collect(reading));
    if (!rest.ok) expect(rest.code).toBe('FEED_NOT_FOUND');
    const listed = await outcome(collect(commits));
    expect(listed).toMatchObject({ ok: false, code: 'FEED_NOT_FOUND' });
    await expect(reader.feed('f')).rejects.toMatchObject({ code: 'FEED_NOT_FOUND' });
    expect(await reader.feedNames()).toEqual([]);

    const fresh = await writer.createFeed('f');
    await fresh.append([{ payload: 'second life' }]);
    const found = await reader.feed('f');
    expect(found).not.toBe(seen);
    expect((await collect(found.read())).map((record) => text(record.payload))).toEqual(['second life']);
    await expect(seen.info()).rejects.toMatchObject(deleted);
    await reader.close();
    await writer.close();
  });

  it('fails an open that the deletion overtakes with FEED_NOT_FOUND, never an untyped error', async () => {
    for (let round = 0; round < 20; round++) {
      const directory = temporaryDirectory();
      const writer = await openStore(directory);
      await feedWithRecords(writer, 'f', 300);
      const reader = await openStore(directory, { readOnly: true });
      // The open and the deletion race; either may come first.
      const opening = outcome(reader.feed('f').then((feed) => collect(feed.read())));
      await new Promise((resolve) => setTimeout(resolve, round % 5));
      await writer.deleteFeed('f');
      const result = await opening;
      if (result.ok) expect(result.value.length).toBe(300);
      else expect(result.code).toBe('FEED_NOT_FOUND');
      await reader.close();
      await writer.close();
    }
  });
});
