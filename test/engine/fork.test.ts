/**
 * Forks: a feed branched at a commit reads exactly the source's history up to it, at every
 * possible fork point (inside a group of several commits, at a group's end, at a segment's end,
 * in the active segment); the two then live apart — appends, trims, merges, key compactions and
 * deletions of one never change what the other reads — across reopens, with verify finding
 * nothing wrong. Bad input is refused with a typed error and changes nothing.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { outcomeCode } from '../support/failure.js';
import { digestTree, openStore, recordLines, temporaryDirectory } from '../support/store.js';

/** A feed's RAW history as comparable lines, up to `upTo`. */
const history = (feed: Feed, upTo?: number) => recordLines(feed, upTo === undefined ? {} : { upTo });

async function commitLines(feed: Feed, upTo: number): Promise<string[]> {
  const lines: string[] = [];
  for await (const commit of feed.commits({ limit: upTo })) lines.push(JSON.stringify({ ...commit, feed: '' }));
  return lines;
}

/** Appends `count` commits in rounds of three concurrent appends, so group commits hold several. */
async function fill(feed: Feed, count: number, label: string): Promise<void> {
  for (let index = 0; index < count; index += 3) {
    await Promise.all(
      Array.from({ length: Math.min(3, count - index) }, (_, offset) =>
        feed.append([
          { payload: `${label}${index + offset}`.padEnd(2000, '.'), key: `k${(index + offset) % 7}` },
          { payload: `${label}${index + offset}b`, key: `k${(index + offset + 3) % 7}` },
        ]),
      ),
    );
  }
}

describe('forks', () => {
  it('reads exactly the source up to the fork point, at every commit of a feed of several segments', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 150, 's');
    const head = (await source.head())!.commit;
    const segments = fs
      .readdirSync(path.join(directory, 'feeds', 'source', 'history'))
      .filter((name) => name.endsWith('.hist'));
    expect(segments.length).toBeGreaterThan(3);
    for (let at = 1; at <= head; at++) {
      const fork = await source.fork('fork', { at });
      expect(await history(fork), `fork at ${at}`).toEqual(await history(source, at));
      expect((await fork.head())?.commit).toBe(at);
      expect((await fork.info()).fork).toEqual({ feed: 'source', at });
      if (at % 25 === 0) {
        expect(await commitLines(fork, at)).toEqual(await commitLines(source, at));
        expect((await fork.get('k3'))?.position).toBe((await source.get('k3', { asOf: at }))?.position);
        const [verification] = await store.verify('fork');
        expect(verification?.problems).toEqual([]);
      }
      await store.deleteFeed('fork');
    }
    await store.close();
  }, 240_000);

  it('lives apart from its source: appends, trims, merges, key compactions, deletion and reopening', async () => {
    const directory = temporaryDirectory();
    let store: Store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 90, 's');
    const at = 70;
    const expected = await history(source, at);
    const fork = await source.fork('fork', { at });
    const info = await fork.info();
    expect(info.shared).toEqual({ segments: expect.any(Number), bytes: expect.any(Number), feeds: ['source'] });
    expect(info.shared!.segments).toBeGreaterThan(0);
    expect((await source.info()).shared?.feeds).toEqual(['fork']);

    await fill(fork, 20, 'f');
    await fill(source, 20, 's2');
    const forked = await history(fork);
    expect(forked.slice(0, expected.length)).toEqual(expected);
    expect(forked.slice(expected.length).every((line) => line.includes('/f'))).toBe(true);
    // A fork of the fork shares what both share.
    const grandchild = await fork.fork('grandchild', { at: 80 });
    expect(await history(grandchild)).toEqual(forked.slice(0, (await history(fork, 80)).length));

    await source.compact();
    await source.compactKeys({ horizon: 60 });
    await source.trim({ before: 50, force: true });
    expect(await history(fork)).toEqual(forked);
    await store.deleteFeed('source');
    expect(await history(fork)).toEqual(forked);
    await fork.compact();
    await fork.trim({ before: 30, force: true });
    const grandchildHistory = await history(grandchild);
    expect(grandchildHistory).toEqual(forked.slice(0, grandchildHistory.length));
    const forkHistory = await history(fork);
    await store.close();

    store = await openStore(directory);
    expect(await history(await store.feed('grandchild'))).toEqual(grandchildHistory);
    expect(await history(await store.feed('fork'))).toEqual(forkHistory);
    for (const name of await store.feedNames()) {
      const [verification] = await store.verify(name);
      expect(verification?.problems, name).toEqual([]);
    }
    await store.close();
  }, 120_000);

  it('refuses a fork point outside the history and a name taken, changing nothing', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 60, 's');
    await store.createFeed('taken');
    await source.trim({ before: 40, force: true });
    const low = (await source.info()).lowMark;
    expect(low).toBeGreaterThan(1);
    const before = digestTree(directory);
    expect(
      await Promise.all([
        outcomeCode(source.fork('f', { at: 61 })),
        outcomeCode(source.fork('f', { at: -1 })),
        outcomeCode(source.fork('f', { at: low - 1 })),
        outcomeCode(source.fork('taken')),
        outcomeCode(source.fork('bad name')),
        outcomeCode(store.forkFeed('nothing', 'f')),
      ]),
    ).toEqual([
      'CURSOR_OUT_OF_RANGE',
      'CURSOR_OUT_OF_RANGE',
      'TRIMMED',
      'FEED_EXISTS',
      'INVALID_NAME',
      'FEED_NOT_FOUND',
    ]);
    expect(digestTree(directory)).toBe(before);
    expect(await history(await source.fork('f', { at: low }))).toEqual(await history(source, low));
    // At 0 a fork holds nothing, whatever the source trimmed, and starts its own history at 1.
    const empty = await source.fork('empty', { at: 0 });
    expect(await history(empty)).toEqual([]);
    expect((await empty.info()).fork).toEqual({ feed: 'source', at: 0 });
    expect((await empty.append([{ payload: 'first' }])).commit).toBe(1);
    await store.close();
  });

  it('are listed by their source: direct forks only, and a deleted one no more', async () => {
    const store = await openStore(temporaryDirectory());
    const source = await store.createFeed('source');
    await fill(source, 5, 's');
    await source.fork('b', { at: 3 });
    const a = await source.fork('a');
    await a.fork('a-child', { at: 2 });
    await store.createFeed('unrelated');
    expect(await store.forksOf('source')).toEqual(['a', 'b']);
    expect(await store.forksOf('a')).toEqual(['a-child']);
    expect(await store.forksOf('unrelated')).toEqual([]);
    await store.deleteFeed('b');
    expect(await store.forksOf('source')).toEqual(['a']);
    expect(await outcomeCode(store.forksOf('bad name'))).toBe('INVALID_NAME');
    await store.close();
  });
});
