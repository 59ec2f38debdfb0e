/**
 * A fork shares the segment its fork point lies in with its source, whole, and holds it only up
 * to the fork point (a cut). These tests check what that sharing must never do: copy the
 * segment, let the source's later records into the fork (when the fork's summary of the cut
 * segment is lost and the segment is read whole, when the source goes on writing into its
 * active segment, when a fork of the fork inherits the cut), or write into the shared file. A
 * damaged cuts file is `CORRUPT`, and a cut the fork's own merge made stale is passed over.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { outcomeCode } from '../support/failure.js';
import { openStore, recordLines, temporaryDirectory } from '../support/store.js';

/** A feed's RAW history as comparable lines, up to `upTo`. */
const history = (feed: Feed, upTo?: number) => recordLines(feed, upTo === undefined ? {} : { upTo });

/** Appends `count` commits of two records each, one at a time. */
async function fill(feed: Feed, count: number, label: string): Promise<void> {
  for (let index = 0; index < count; index++) {
    await feed.append([
      { payload: `${label}${index}`.padEnd(1500, '.'), key: `k${index % 5}`, tags: [`t${index % 3}`] },
      { payload: `${label}${index}b`, key: `k${(index + 2) % 5}` },
    ]);
  }
}

const historyOf = (directory: string, feed: string) => path.join(directory, 'feeds', feed, 'history');

/** The `.hist` files of a feed, by name, with their inodes. */
function segmentInodes(directory: string, feed: string): Map<string, number> {
  const folder = historyOf(directory, feed);
  return new Map(
    fs
      .readdirSync(folder)
      .filter((name) => name.endsWith('.hist'))
      .map((name) => [name, fs.statSync(path.join(folder, name)).ino]),
  );
}

function cutsOf(directory: string, feed: string): { base: number; commit: number }[] {
  const file = path.join(directory, 'feeds', feed, 'segment-cuts.json');
  return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as { cuts: never[] }).cuts : [];
}

/** Deletes every summary of the feed: its finished segments are then read whole on the next open. */
function dropSummaries(directory: string, feed: string): number {
  const folder = historyOf(directory, feed);
  const summaries = fs.readdirSync(folder).filter((name) => name.endsWith('.sum'));
  for (const name of summaries) fs.rmSync(path.join(folder, name));
  return summaries.length;
}

async function expectVerified(store: Store, feed: string): Promise<void> {
  const [verification] = await store.verify(feed);
  expect(verification?.problems, feed).toEqual([]);
}

describe('forks share the segment of their fork point, cut', () => {
  it('link the segment instead of copying it, and read only up to the cut, with or without its summary', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 120, 's');
    const head = (await source.head())!.commit;
    // A fork point inside a sealed segment (neither its first nor its last commit), and the head,
    // which lies inside the source's active segment.
    const bases = [...segmentInodes(directory, 'source').keys()]
      .map((name) => Number(name.slice(0, 16)))
      .sort((a, b) => a - b);
    expect(bases.length).toBeGreaterThan(3);
    const commits: { commit: number; firstPosition: number; lastPosition: number }[] = [];
    for await (const commit of source.commits({ limit: head })) commits.push(commit);
    const middle = commits.find(
      (commit) => commit.firstPosition > bases[1] + 2 && commit.lastPosition < bases[2] - 3,
    )!.commit;
    const forks = { middle, head };
    for (const [name, at] of Object.entries(forks)) await source.fork(name, { at });

    const sourceInodes = segmentInodes(directory, 'source');
    for (const [name, at] of Object.entries(forks)) {
      const cuts = cutsOf(directory, name);
      expect(
        cuts.map((cut) => cut.commit),
        name,
      ).toEqual([at]);
      const inodes = segmentInodes(directory, name);
      // Every segment the fork holds of the source's is the same file; only its own new segment is not.
      const shared = [...inodes].filter(([file, inode]) => sourceInodes.get(file) === inode);
      expect(shared.length, name).toBe(inodes.size - 1);
      const cutFile = `${String(cuts[0].base).padStart(16, '0')}.hist`;
      expect(inodes.get(cutFile), name).toBe(sourceInodes.get(cutFile));
    }
    const expected = { middle: await history(source, middle), head: await history(source, head) };

    // The source goes on writing into the segment the head fork holds, and past it.
    const cutOfHead = cutsOf(directory, 'head')[0].base;
    await fill(source, 60, 'later');
    expect(segmentInodes(directory, 'source').has(`${String(cutOfHead).padStart(16, '0')}.hist`)).toBe(true);
    for (const [name] of Object.entries(forks)) {
      const fork = await store.feed(name);
      expect(await history(fork), name).toEqual(expected[name as keyof typeof expected]);
      await fill(fork, 3, `${name}-own`);
    }
    const withOwn = {
      middle: await history(await store.feed('middle')),
      head: await history(await store.feed('head')),
    };
    const sourceHistory = await history(source);
    await store.close();

    // Lost summaries: the cut segments are read whole, and still only up to their cuts.
    for (const name of Object.keys(forks)) expect(dropSummaries(directory, name), name).toBeGreaterThan(0);
    store = await openStore(directory);
    for (const name of Object.keys(forks)) {
      const fork = await store.feed(name);
      expect(await history(fork), name).toEqual(withOwn[name as keyof typeof withOwn]);
      expect((await fork.get('k1'))?.commit, name).toBeDefined();
      await expectVerified(store, name);
    }
    expect(await history(await store.feed('source'))).toEqual(sourceHistory);
    await expectVerified(store, 'source');
    await store.close();
  }, 120_000);

  it('answer tag queries, key lookups, dedup and appends at once, while the cut segment’s files are built', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 90, 's');
    // Payloads repeated across segments, for the dedup read.
    await fill(source, 10, 's');
    const at = 97;
    const fork = await source.fork('fork', { at });
    const [cut] = cutsOf(directory, 'fork');
    const name = String(cut.base).padStart(16, '0');
    // The cut segment's derived files are built after the open: these reads and the append,
    // made at once, wait for them where they need them.
    const index = path.join(directory, 'feeds', 'fork', 'index');
    const tagged = (feed: Feed, upTo?: number) => recordLines(feed, { upTo, filter: { tags: ['t1'] }, plan: 'index' });
    const deduplicated = (feed: Feed, upTo?: number) => recordLines(feed, { upTo, mode: 'dedup' });
    const [forkTagged, forkKeys, forkDeduplicated, appended] = await Promise.all([
      tagged(fork),
      Promise.all(['k0', 'k1', 'k2', 'k3', 'k4'].map(async (key) => (await fork.get(key))?.position)),
      deduplicated(fork),
      fork.append([{ payload: 'new in the fork', type: 'fresh' }]),
    ]);
    expect(forkTagged.length).toBeGreaterThan(0);
    expect(forkTagged).toEqual(await tagged(source, at));
    expect(forkDeduplicated.length).toBeLessThan((await history(source, at)).length);
    expect(forkDeduplicated).toEqual(await deduplicated(source, at));
    expect(forkKeys).toEqual(
      await Promise.all(
        ['k0', 'k1', 'k2', 'k3', 'k4'].map(async (key) => (await source.get(key, { asOf: at }))?.position),
      ),
    );
    expect(appended.records).toBe(1);
    await fork.settled();
    // Reported as built after the open, for the cut segment only (the others are shared).
    expect(new Set(fork.indexRebuilds.map(({ segment, reason }) => `${segment} ${reason}`))).toEqual(
      new Set([`${cut.base} missing: built after the open (a fork cut its segment, or a takeover wrote it back)`]),
    );
    await store.close();
    expect(
      fs
        .readdirSync(index)
        .filter((file) => file.startsWith(name))
        .sort(),
    ).toEqual(['fps', 'idx', 'keys'].map((suffix) => `${name}.${suffix}`));
  }, 120_000);

  it('are inherited by a fork of a fork, and pass over a cut the fork’s own merge replaced', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 80, 's');
    const fork = await source.fork('fork', { at: 50 });
    await fill(fork, 40, 'f');
    // The grandchild forks past the fork's cut: it holds the cut segment as the fork does.
    const grandchild = await fork.fork('grandchild', { at: 75 });
    const [inherited] = cutsOf(directory, 'fork');
    expect(cutsOf(directory, 'grandchild').some((cut) => cut.base === inherited.base && cut.commit === 50)).toBe(true);
    const expectedGrandchild = await history(grandchild);
    expect(expectedGrandchild).toEqual(await history(fork, 75));
    // A fork of a fork inside the cut segment cuts it shorter.
    const shorter = await fork.fork('shorter', { at: 45 });
    expect(cutsOf(directory, 'shorter').map((cut) => cut.commit)).toEqual([45]);
    expect(await history(shorter)).toEqual(await history(source, 45));

    // The fork merges its segments: the cut segment is rewritten under its name and the cut
    // no longer applies to that file, whatever the fork reads it by.
    const forkHistory = await history(fork);
    await fork.compact();
    expect(segmentInodes(directory, 'fork').get(`${String(inherited.base).padStart(16, '0')}.hist`)).not.toBe(
      segmentInodes(directory, 'source').get(`${String(inherited.base).padStart(16, '0')}.hist`),
    );
    await store.close();
    for (const name of ['fork', 'grandchild', 'shorter']) dropSummaries(directory, name);
    store = await openStore(directory);
    expect(await history(await store.feed('fork'))).toEqual(forkHistory);
    expect(await history(await store.feed('grandchild'))).toEqual(expectedGrandchild);
    for (const name of ['fork', 'grandchild', 'shorter', 'source']) await expectVerified(store, name);
    await store.close();
  }, 120_000);

  it('copy the segment when the fork point holds no record of it: a segment of its own would take its name', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 10, 's');
    const { token } = await source.acquireLease({ holder: 'test', ttlMs: 600_000 });
    // Empty streams sealed until one starts a new segment: that commit holds no record of it.
    let at = 0;
    for (let attempt = 0; attempt < 5_000 && at === 0; attempt++) {
      const before = segmentInodes(directory, 'source').size;
      const commit = await (await source.openStream({ token })).seal({ token });
      if (segmentInodes(directory, 'source').size > before) at = commit.commit;
    }
    expect(at).toBeGreaterThan(0);
    await source.releaseLease({ token });
    const fork = await source.fork('fork', { at });
    expect(cutsOf(directory, 'fork')).toEqual([]);
    expect(await history(fork)).toEqual(await history(source, at));
    expect((await fork.head())?.commit).toBe(at);
    await fill(fork, 2, 'f');
    expect((await history(fork)).length).toBe((await history(source, at)).length + 4);
    // Its history was written under a lease: its lease log says so, and its first lease is above it.
    await expectVerified(store, 'fork');
    expect((await fork.acquireLease({ holder: 'fork' })).epoch).toBeGreaterThan(
      (await source.acquireLease({ holder: 'again' })).epoch - 1,
    );
    await store.close();
  }, 120_000);

  it('refuse to open a fork whose cuts file is damaged, and never write into the shared segment', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    const source = await store.createFeed('source');
    await fill(source, 40, 's');
    await source.fork('fork', { at: 25 });
    const [cut] = cutsOf(directory, 'fork');
    const shared = path.join(historyOf(directory, 'source'), `${String(cut.base).padStart(16, '0')}.hist`);
    const before = fs.readFileSync(shared);
    const fork = await store.feed('fork');
    await fill(fork, 30, 'f');
    await fork.compact();
    await store.close();
    // The fork wrote 30 commits, merged and reopened: the shared file is byte for byte the source's.
    expect(fs.readFileSync(shared).equals(before)).toBe(true);

    const cuts = path.join(directory, 'feeds', 'fork', 'segment-cuts.json');
    fs.writeFileSync(
      cuts,
      fs.readFileSync(cuts, 'utf8').replace(`"commit":${cut.commit}`, `"commit":${cut.commit + 1}`),
    );
    store = await openStore(directory);
    expect(await outcomeCode(store.feed('fork').then((feed) => feed.head()))).toBe('CORRUPT');
    expect(await history(await store.feed('source'))).toHaveLength(80);
    await store.close();
  }, 120_000);
});
