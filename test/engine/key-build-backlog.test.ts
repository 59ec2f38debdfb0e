/**
 * The bound on the keys sealed segments hold until their dictionaries are built: a writer waits
 * (before it writes) while more than `keyBuildBacklogKeysMax` are held, so a bulk load cannot
 * outrun the background builds by more than the bound and the segments sealed meanwhile; a
 * build that fails lets every waiting writer go rather than hang it. The builds are paused here
 * by holding the dictionary build behind a gate the test opens, and the bound is made small.
 */
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { KeyBuildBacklog } from '../../packages/engine/src/query/indexes/key-build-backlog.js';
import { KeyIndex } from '../../packages/engine/src/query/indexes/key-index.js';
import { historySegmentBases, openStore, temporaryDirectory } from '../support/store.js';

/**
 * The bound the feed runs with here, about two segments' keys of the records below (the mock of
 * the limits says it again: mocks are hoisted above every constant).
 */
const heldMax = 300;

const gate = vi.hoisted(() => ({
  /** While set, every dictionary build of a just-sealed segment waits for it. */
  paused: undefined as Promise<void> | undefined,
  /** Builds fail (once past the gate) instead of building. */
  fail: false,
  /** Builds that reached the gate. */
  builds: 0,
}));

vi.mock('../../packages/engine/src/limits.js', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../../packages/engine/src/limits.js')>()),
  keyBuildBacklogKeysMax: 300,
}));

vi.mock('../../packages/engine/src/query/indexes/index-builder.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../packages/engine/src/query/indexes/index-builder.js')>();
  return {
    ...original,
    keyFileOfSegmentOffThread: async (...args: Parameters<typeof original.keyFileOfSegmentOffThread>) => {
      gate.builds++;
      if (gate.paused) await gate.paused;
      if (gate.fail) throw new Error('the dictionary build broke');
      return original.keyFileOfSegmentOffThread(...args);
    },
  };
});

/** Commit `at` of the load: 20 keyed records of about 400 bytes, so a 64 KiB segment holds about 150. */
function commit(at: number) {
  return Array.from({ length: 20 }, (_, index) => ({
    payload: `c${at}-r${index}-${'p'.repeat(400)}`,
    key: `key-${(at * 20 + index) % 500}`,
  }));
}

const commits = 100;

/** Turns of the event loop until `done` says so: what the test waits on, with no clock. */
async function until(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((resolve) => setImmediate(resolve));
}

describe('the backlog of keys held for dictionary builds', () => {
  let openSpy: MockInstance<typeof KeyIndex.open>;
  beforeEach(() => {
    gate.paused = undefined;
    gate.fail = false;
    gate.builds = 0;
    openSpy = vi.spyOn(KeyIndex, 'open');
  });
  afterEach(() => {
    openSpy.mockRestore();
  });

  /**
   * Starts a load of `commits` one-shot appends with the builds paused, and waits until a writer
   * waits for the builds (or the load ends: what it did before the bound).
   */
  async function pausedLoad() {
    let open!: () => void;
    gate.paused = new Promise<void>((resolve) => {
      open = resolve;
    });
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    const indexes = await Promise.all(openSpy.mock.results.map((result) => result.value as Promise<KeyIndex>));
    expect(indexes.map((index) => index.order).sort()).toEqual(['first', 'latest']);
    let written = 0;
    let peak = 0;
    let done = false;
    const load = (async () => {
      for (let at = 0; at < commits; at++) {
        await feed.append(commit(at));
        written++;
        for (const index of indexes) peak = Math.max(peak, index.backlog.keys);
      }
    })().finally(() => {
      done = true;
    });
    await until(() => done || indexes.some((index) => index.backlog.writersWaiting > 0));
    return { directory, store, feed, indexes, load, open, written: () => written, peak: () => peak, done: () => done };
  }

  it('makes writers wait while builds lag, and lets them go as the builds land', async () => {
    const run = await pausedLoad();
    // Without the bound the whole load is written with no dictionary built.
    expect(run.done()).toBe(false);
    expect(run.written()).toBeLessThan(commits);
    // Only each index's first build started, and it waits at the gate: every sealed segment's
    // keys are held.
    expect(gate.builds).toBe(2);
    const heldWhenStopped = Math.max(...run.indexes.map((index) => index.backlog.keys));
    expect(heldWhenStopped).toBeGreaterThan(heldMax);
    run.open();
    await run.load;
    expect(run.written()).toBe(commits);
    // At most the bound, the segment that crossed it, and one more sealed by a commit not yet
    // folded into the indexes when the writer asked for room.
    const bases = historySegmentBases(run.directory);
    const segmentRecordsMax = Math.max(...bases.slice(1).map((base, at) => base - bases[at]));
    expect(run.peak()).toBeLessThanOrEqual(heldMax + 2 * segmentRecordsMax);
    // A lookup waits until the indexes hold every commit: every segment is sealed in them.
    expect((await run.feed.get('key-499'))?.key).toBe('key-499');
    for (const index of run.indexes) {
      await index.flushed();
      expect(index.backlog.keys).toBe(0);
      expect(index.backlog.writersWaiting).toBe(0);
    }
    await run.store.close();
  });

  it('lets waiting writers go when a build fails, and the held keys still answer', async () => {
    const run = await pausedLoad();
    expect(run.done()).toBe(false);
    gate.fail = true;
    run.open();
    await run.load;
    expect(run.written()).toBe(commits);
    // A lookup waits until the indexes hold every commit; the failed builds' keys answer it.
    const found = await run.feed.get('key-7');
    expect(found?.key).toBe('key-7');
    // Its last write is record 1,507 of the load (from 0): position 1,508.
    expect(found?.position).toBe(1_508);
    for (const index of run.indexes) {
      await index.flushed();
      expect(index.backlog.keys).toBe(0);
      expect(index.backlog.writersWaiting).toBe(0);
    }
    // Each index's first build failed; those after it were built from their held keys, since a
    // dictionary before them is held in memory only (no file the worker could merge with).
    expect(gate.builds).toBe(2);
    await run.store.close();
  });
});

describe('KeyBuildBacklog', () => {
  it('makes writers wait past the bound and lets them go in order once builds settle under it', async () => {
    const backlog = new KeyBuildBacklog(1_000);
    backlog.hold(800);
    expect(backlog.roomInBacklog()).toBeUndefined();
    backlog.hold(800);
    const released: number[] = [];
    const waits = [0, 1].map((writer) => backlog.roomInBacklog()!.then(() => released.push(writer)));
    expect(backlog.writersWaiting).toBe(2);
    backlog.settle(800);
    await Promise.all(waits);
    expect(released).toEqual([0, 1]);
    expect(backlog.roomInBacklog()).toBeUndefined();
  });

  it('releases waiting writers when the build holding the keys settles, failed or not', async () => {
    const backlog = new KeyBuildBacklog(100);
    backlog.hold(150);
    const room = backlog.roomInBacklog();
    expect(room).toBeInstanceOf(Promise);
    backlog.settle(150);
    await room;
    expect(backlog.keys).toBe(0);
    expect(backlog.writersWaiting).toBe(0);
  });
});
