/**
 * Subscriptions (named, durable cursors) and live reads: poll / advance / reset / delete and
 * their errors, cursors across restarts, exactly-once consumption across restarts, and live
 * tails (`sub.live`, `feed.follow`) racing concurrent writers.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type CommitRecords,
  type Feed,
  limits,
  type Store,
  StreamStackError,
} from '../../packages/engine/src/index.js';
import {
  collect as collectAll,
  cursorOf,
  digestTree,
  ManualClock,
  openStore,
  sequentialIds,
  temporaryDirectory,
  text,
} from '../support/store.js';

/** Appends one-shot commits of the given sizes; payloads name their commit's index and record. */
async function commitSizes(feed: Feed, sizes: readonly number[], label = 'c', token?: string): Promise<void> {
  for (const [index, size] of sizes.entries()) {
    await feed.append(
      Array.from({ length: size }, (_, record) => ({ payload: `${label}${index}.${record}` })),
      token === undefined ? {} : { token },
    );
  }
}

/** What a poll or a live read delivered, in a form that is easy to compare. */
const summary = (batches: readonly CommitRecords[]) =>
  batches.map(({ commit, records }) => ({
    commit: commit.commit,
    records: commit.records,
    payloads: records.map((record) => text(record.payload)),
  }));

async function rejectsWith(action: () => unknown, code: string): Promise<void> {
  let caught: unknown;
  try {
    await action();
  } catch (error) {
    caught = error;
  }
  expect(caught, `expected ${code}`).toMatchObject({ code });
}

/**
 * Runs `consume` over a live iterable until `signal` aborts: the abort ends the loop (whether the
 * iterator then ends or throws the abort reason); any other error fails the test.
 */
async function untilAborted<T>(
  iterable: AsyncIterable<T>,
  signal: AbortSignal,
  consume: (item: T) => void | Promise<void>,
): Promise<void> {
  try {
    for await (const item of iterable) await consume(item);
  } catch (error) {
    if (!signal.aborted || error !== signal.reason) throw error;
  }
}

describe('creating and finding subscriptions', () => {
  it('creates named cursors, lists them sorted, and refuses duplicates, bad names and bad cursors', async () => {
    const directory = temporaryDirectory();
    const clock = new ManualClock();
    const store = await openStore(directory, { clock: clock.read });
    const feed = await store.createFeed('f');
    await commitSizes(feed, [2, 3]);

    const zeta = await feed.createSubscription('zeta');
    expect(zeta.name).toBe('zeta');
    expect((await zeta.info()).cursor).toBe(0);
    clock.advance(10);
    const alpha = await feed.createSubscription('alpha', { after: 1 });
    expect((await alpha.info()).cursor).toBe(1);
    expect(await alpha.info()).toMatchObject({
      name: 'alpha',
      cursor: 1,
      createdAt: clock.now,
      updatedAt: clock.now,
      lag: expect.objectContaining({ commits: 1, records: 3 }),
    });
    await feed.createSubscription('at-head', { after: 2 });
    expect((await feed.subscriptions()).map((info) => [info.name, info.cursor])).toEqual([
      ['alpha', 1],
      ['at-head', 2],
      ['zeta', 0],
    ]);

    await rejectsWith(() => feed.createSubscription('zeta'), 'SUBSCRIPTION_EXISTS');
    await rejectsWith(() => feed.createSubscription('zeta', { after: 2 }), 'SUBSCRIPTION_EXISTS');
    for (const name of ['', 'has space', '../escape', '.hidden', 'a/b', 'x'.repeat(129)]) {
      await rejectsWith(() => feed.createSubscription(name), 'INVALID_NAME');
    }
    for (const after of [3, -1, 0.5, Number.NaN]) {
      await rejectsWith(() => feed.createSubscription('fresh', { after }), 'CURSOR_OUT_OF_RANGE');
    }
    await rejectsWith(() => feed.subscription('fresh'), 'SUBSCRIPTION_NOT_FOUND');
    await rejectsWith(() => feed.subscription('missing'), 'SUBSCRIPTION_NOT_FOUND');
    // The refused creations left nothing behind.
    expect((await feed.subscriptions()).map((info) => info.name)).toEqual(['alpha', 'at-head', 'zeta']);
    expect(await cursorOf(feed, 'zeta')).toBe(0);
    await store.close();
  });

  it('keeps the subscriptions of different feeds apart', async () => {
    const store = await openStore(temporaryDirectory());
    const one = await store.createFeed('one');
    const two = await store.createFeed('two');
    await commitSizes(one, [1, 1, 1]);
    await commitSizes(two, [1]);
    await one.createSubscription('shared', { after: 3 });
    await two.createSubscription('shared');
    expect(await cursorOf(one, 'shared')).toBe(3);
    expect(await cursorOf(two, 'shared')).toBe(0);
    await (await two.subscription('shared')).delete();
    expect(await cursorOf(one, 'shared')).toBe(3);
    await rejectsWith(() => two.subscription('shared'), 'SUBSCRIPTION_NOT_FOUND');
    await store.close();
  });
});

describe('poll, advance, reset and delete', () => {
  it('polls whole commits after the cursor, bounded by max records, without moving the cursor', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    await commitSizes(feed, [3, 1, 4, 2, 5]);
    const subscription = await feed.createSubscription('s');

    const first = await subscription.poll({ max: 4 });
    // 3 + 1 records fit in 4; the next commit (4 records) would pass it.
    expect(first.cursor).toBe(2);
    expect(summary(first.commits)).toEqual([
      { commit: 1, records: 3, payloads: ['c0.0', 'c0.1', 'c0.2'] },
      { commit: 2, records: 1, payloads: ['c1.0'] },
    ]);
    expect(first.commits[0].records.map((record) => [record.commit, record.seq, record.position])).toEqual([
      [1, 1, 1],
      [1, 2, 2],
      [1, 3, 3],
    ]);
    // Polling does not move the cursor: the same poll gives the same answer.
    expect((await subscription.info()).cursor).toBe(0);
    expect(summary((await subscription.poll({ max: 4 })).commits)).toEqual(summary(first.commits));

    // One commit always comes back, however large, so a poll always makes progress.
    for (const max of [0, 1, 2]) {
      const small = await subscription.poll({ max });
      expect(small.cursor).toBe(1);
      expect(small.commits.map(({ commit }) => commit.commit)).toEqual([1]);
    }
    // The default bound takes everything here.
    const all = await subscription.poll();
    expect(all.cursor).toBe(5);
    expect(all.commits.map(({ commit }) => commit.records)).toEqual([3, 1, 4, 2, 5]);
    expect(all.commits.map(({ commit }) => commit.commit)).toEqual([1, 2, 3, 4, 5]);
    expect((await subscription.poll({ max: 7 })).cursor).toBe(2);
    expect((await subscription.poll({ max: 8 })).cursor).toBe(3);

    await subscription.advance(3);
    const rest = await subscription.poll({ max: 100 });
    expect(summary(rest.commits).map((batch) => batch.commit)).toEqual([4, 5]);
    expect(rest.cursor).toBe(5);
    await subscription.advance(rest.cursor);
    expect(await subscription.poll()).toEqual({ commits: [], cursor: 5 });

    for (const max of [-1, 1.5]) await rejectsWith(() => subscription.poll({ max }), 'INVALID_ARGUMENT');
    await store.close();
  });

  it('advances forward only, resets anywhere, and refuses cursors outside the history', async () => {
    const clock = new ManualClock();
    const store = await openStore(temporaryDirectory(), { clock: clock.read });
    const feed = await store.createFeed('f');
    await commitSizes(feed, [1, 2, 3, 4]);
    const subscription = await feed.createSubscription('s');
    const createdAt = clock.now;

    clock.advance(5);
    expect(await subscription.advance(2)).toMatchObject({
      name: 's',
      cursor: 2,
      createdAt,
      updatedAt: clock.now,
      lag: { commits: 2, records: 7, bytes: expect.any(Number) },
    });
    // Advancing to where it is already is fine (a retried acknowledgement).
    expect((await subscription.advance(2)).cursor).toBe(2);

    const behind = await subscription.advance(1).catch((error: unknown) => error);
    expect(behind).toMatchObject({ code: 'CURSOR_BEHIND', details: { cursor: 2, requested: 1 } });
    expect((await subscription.info()).cursor).toBe(2);

    for (const cursor of [5, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      await rejectsWith(() => subscription.advance(cursor), 'CURSOR_OUT_OF_RANGE');
      await rejectsWith(() => subscription.reset(cursor), 'CURSOR_OUT_OF_RANGE');
    }
    expect((await subscription.info()).cursor).toBe(2);

    clock.advance(5);
    expect(await subscription.reset(0)).toMatchObject({
      cursor: 0,
      updatedAt: clock.now,
      lag: { commits: 4, records: 10 },
    });
    expect((await subscription.poll({ max: 1 })).commits.map(({ commit }) => commit.commit)).toEqual([1]);
    expect((await subscription.reset(4)).cursor).toBe(4);
    expect((await subscription.reset(3)).cursor).toBe(3);
    expect((await subscription.advance(4)).lag).toEqual({ commits: 0, records: 0, bytes: 0 });
    await store.close();
  });

  it('deletes a subscription for good; its name can then start over', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    await commitSizes(feed, [1, 1, 1]);
    const subscription = await feed.createSubscription('s');
    await feed.createSubscription('other', { after: 1 });
    await subscription.advance(3);
    await subscription.delete();

    await rejectsWith(() => feed.subscription('s'), 'SUBSCRIPTION_NOT_FOUND');
    await rejectsWith(() => subscription.poll(), 'SUBSCRIPTION_NOT_FOUND');
    await rejectsWith(() => subscription.advance(3), 'SUBSCRIPTION_NOT_FOUND');
    await rejectsWith(() => subscription.reset(0), 'SUBSCRIPTION_NOT_FOUND');
    await rejectsWith(() => subscription.delete(), 'SUBSCRIPTION_NOT_FOUND');
    await rejectsWith(() => subscription.info(), 'SUBSCRIPTION_NOT_FOUND');
    expect((await feed.subscriptions()).map((info) => info.name)).toEqual(['other']);

    await store.close();
    store = await openStore(directory);
    feed = await store.feed('f');
    await rejectsWith(() => feed.subscription('s'), 'SUBSCRIPTION_NOT_FOUND');
    expect((await feed.subscriptions()).map((info) => [info.name, info.cursor])).toEqual([['other', 1]]);
    // The name starts over: the old cursor does not come back.
    const again = await feed.createSubscription('s');
    expect((await again.info()).cursor).toBe(0);
    expect((await again.poll()).commits.map(({ commit }) => commit.commit)).toEqual([1, 2, 3]);
    await store.close();
    store = await openStore(directory);
    feed = await store.feed('f');
    expect(await cursorOf(feed, 's')).toBe(0);
    await store.close();
  });
});

describe('subscriptions across restarts', () => {
  it('refuses subscription changes and reads through handles of a closed store', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    await commitSizes(feed, [1, 1, 1]);
    const subscription = await feed.createSubscription('s');
    await subscription.advance(1);
    await store.close();
    const before = digestTree(directory);

    const outcomes: Record<string, string> = {};
    const actions: Record<string, () => unknown> = {
      'feed.createSubscription': () => feed.createSubscription('t'),
      'subscription.advance': () => subscription.advance(2),
      'subscription.reset': () => subscription.reset(0),
      'subscription.delete': () => subscription.delete(),
      'subscription.poll': () => subscription.poll(),
      'subscription.live': async () => {
        for await (const _ of subscription.live({ signal: AbortSignal.timeout(1000) })) break;
      },
      'feed.follow': async () => {
        for await (const _ of feed.follow({ after: 0, signal: AbortSignal.timeout(1000) })) break;
      },
    };
    for (const [name, action] of Object.entries(actions)) {
      try {
        await action();
        outcomes[name] = 'accepted';
      } catch (error) {
        outcomes[name] = error instanceof StreamStackError ? error.code : String(error);
      }
    }
    expect(outcomes).toEqual(Object.fromEntries(Object.keys(actions).map((name) => [name, 'CLOSED'])));
    // Nothing changed on disk after the close; the next opener finds the cursor as it was.
    expect(digestTree(directory)).toBe(before);
    store = await openStore(directory);
    feed = await store.feed('f');
    expect((await feed.subscriptions()).map((info) => [info.name, info.cursor])).toEqual([['s', 1]]);
    await store.close();
  });

  it('restores every cursor, with its times, after a restart', async () => {
    const directory = temporaryDirectory();
    const clock = new ManualClock();
    let store = await openStore(directory, { clock: clock.read });
    let feed = await store.createFeed('f');
    await commitSizes(feed, [2, 2, 2, 2, 2, 2]);
    const cursors: Record<string, number> = { a: 0, b: 3, c: 6, d: 2 };
    for (const [name, cursor] of Object.entries(cursors)) {
      clock.advance(1);
      const subscription = await feed.createSubscription(name);
      clock.advance(1);
      await subscription.advance(Math.min(6, cursor + 1));
      if (cursor !== Math.min(6, cursor + 1)) await subscription.reset(cursor);
    }
    const before = await feed.subscriptions();
    expect(before.map((info) => [info.name, info.cursor])).toEqual(Object.entries(cursors));
    await store.close();

    store = await openStore(directory, { clock: clock.read });
    feed = await store.feed('f');
    expect(await feed.subscriptions()).toEqual(before);
    expect(before.find((info) => info.name === 'b')!.lag).toMatchObject({ commits: 3, records: 6 });
    await store.close();
  });

  it('keeps the cursor through many moves, past the point where its log is compacted', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    await commitSizes(feed, [1, 1, 1]);
    // A long name makes each state record large, so the log passes its bound sooner.
    const name = `s${'x'.repeat(127)}`;
    const subscription = await feed.createSubscription(name);
    const file = path.join(directory, 'feeds', 'f', 'state', 'subscriptions', `${name}.log`);
    const moves = Math.ceil(limits.stateLogBytesMax / 140) + 50;
    let largest = 0;
    for (let move = 1; move <= moves; move++) {
      await subscription.reset(move % 3);
      largest = Math.max(largest, fs.statSync(file).size);
    }
    expect(largest).toBeLessThanOrEqual(limits.stateLogBytesMax);
    // The log was rewritten at least once (it would have passed its bound otherwise).
    expect(fs.statSync(file).size).toBeLessThan(largest);
    const expected = moves % 3;
    expect((await subscription.info()).cursor).toBe(expected);
    await store.close();
    store = await openStore(directory);
    feed = await store.feed('f');
    expect(await cursorOf(feed, name)).toBe(expected);
    await store.close();
  }, 60_000);

  it('keeps its two log files one write apart at most when copies are torn in two runs in a row', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    await commitSizes(feed, [1, 1, 1, 1]);
    const file = path.join(directory, 'feeds', 'f', 'state', 'subscriptions', 'reader.log');
    const copy = `${file}.copy`;
    await (await feed.createSubscription('reader')).advance(1);
    /** Advances the cursor, then cuts the copy's last record in half: the power failed mid-write. */
    const advanceWithTornCopy = async (cursor: number) => {
      const before = fs.statSync(copy).size;
      await (await feed.subscription('reader')).advance(cursor);
      const written = fs.statSync(copy).size - before;
      expect(written).toBeGreaterThan(0);
      fs.truncateSync(copy, before + Math.floor(written / 2));
      await store.close();
    };
    await advanceWithTornCopy(2);
    store = await openStore(directory);
    feed = await store.feed('f');
    expect(await cursorOf(feed, 'reader')).toBe(2);
    // The open gave the copy the record it missed, so the next torn write leaves it one behind.
    expect(fs.statSync(copy).size).toBe(fs.statSync(file).size);
    await advanceWithTornCopy(3);
    store = await openStore(directory);
    feed = await store.feed('f');
    expect(await cursorOf(feed, 'reader')).toBe(3);
    // Opening the feed cut the torn write; nothing else is wrong with either file.
    const [verification] = await store.verify('f');
    expect(verification.problems).toEqual([]);
    await store.close();
  });

  it('delivers every commit exactly once to a consumer that polls and advances across restarts', async () => {
    const directory = temporaryDirectory();
    const newId = sequentialIds();
    let store: Store = await openStore(directory, { newId });
    let feed = await store.createFeed('f');
    await feed.createSubscription('consumer');

    /** What each commit holds, as the writer saw it acknowledged. */
    const written = new Map<number, string[]>();
    let label = 0;
    const write = async (count: number) => {
      for (let index = 0; index < count; index++) {
        const payloads = Array.from({ length: 1 + ((label * 7) % 4) }, (_, record) => `w${label}.${record}`);
        label++;
        const commit = await feed.append(payloads.map((payload) => ({ payload })));
        written.set(commit.commit, payloads);
      }
    };
    /** Commits the consumer handled, in the order it handled (acknowledged) them. */
    const handled: { commit: number; payloads: string[] }[] = [];
    let lostPolls = 0;

    for (let round = 0; round < 8; round++) {
      await write(5 + ((round * 3) % 7));
      const subscription = await feed.subscription('consumer');
      for (let step = 0; ; step++) {
        const { commits, cursor } = await subscription.poll({ max: 1 + ((round + step) % 6) });
        if (commits.length === 0) break;
        // Sometimes the consumer "crashes" between poll and advance: nothing is handled, and
        // the same commits must come again after the restart.
        if (round % 3 === 1 && step === 1) {
          lostPolls++;
          break;
        }
        for (const { commit, records } of commits)
          handled.push({ commit: commit.commit, payloads: records.map((record) => text(record.payload)) });
        await subscription.advance(cursor);
        // New commits arrive while the consumer works through the backlog.
        if (step % 2 === 0) await write(1);
      }
      await store.close();
      store = await openStore(directory, { newId });
      feed = await store.feed('f');
    }
    // Drain what is left after the last restart.
    const subscription = await feed.subscription('consumer');
    for (;;) {
      const { commits, cursor } = await subscription.poll({ max: 3 });
      if (commits.length === 0) break;
      for (const { commit, records } of commits)
        handled.push({ commit: commit.commit, payloads: records.map((record) => text(record.payload)) });
      await subscription.advance(cursor);
    }

    expect(lostPolls).toBeGreaterThan(0);
    const head = (await feed.info()).commits;
    expect(head).toBe(written.size);
    expect(handled.map((entry) => entry.commit)).toEqual(Array.from({ length: head }, (_, index) => index + 1));
    expect(handled).toEqual(
      [...written.entries()].sort(([a], [b]) => a - b).map(([commit, payloads]) => ({ commit, payloads })),
    );
    expect((await subscription.info()).lag).toEqual({ commits: 0, records: 0, bytes: 0 });
    await store.close();
  });
});

describe('live reads', () => {
  /**
   * Writers for a live test: `appenders` concurrent one-shot writers, `perAppender` commits each,
   * plus one writer sealing streams, all under one lease. Returns what each commit holds.
   */
  async function writeConcurrently(
    feed: Feed,
    token: string,
    options: { appenders: number; perAppender: number; streams: number },
  ): Promise<Map<number, string[]>> {
    const written = new Map<number, string[]>();
    const appenders = Array.from({ length: options.appenders }, async (_, writer) => {
      for (let index = 0; index < options.perAppender; index++) {
        const payloads = Array.from(
          { length: 1 + ((writer + index) % 3) },
          (_, record) => `a${writer}-${index}.${record}`,
        );
        const commit = await feed.append(
          payloads.map((payload) => ({ payload })),
          { token },
        );
        written.set(commit.commit, payloads);
        // Let the readers run between some of the commits.
        if (index % 7 === 0) await new Promise((resolve) => setImmediate(resolve));
      }
    });
    const streamWriter = (async () => {
      for (let index = 0; index < options.streams; index++) {
        const stream = await feed.openStream({ token });
        const payloads: string[] = [];
        for (let batch = 0; batch < 3; batch++) {
          const records = [`s${index}-${batch}.0`, `s${index}-${batch}.1`];
          await stream.append(
            records.map((payload) => ({ payload })),
            { token },
          );
          payloads.push(...records);
        }
        const commit = await stream.seal({ token });
        written.set(commit.commit, payloads);
      }
    })();
    await Promise.all([...appenders, streamWriter]);
    return written;
  }

  /** Collects a live read until it has delivered commit `last`, then aborts it. */
  function collect(
    start: (signal: AbortSignal) => AsyncIterable<CommitRecords>,
    last: () => number | undefined,
  ): { done: Promise<void>; delivered: { commit: number; payloads: string[] }[]; controller: AbortController } {
    const controller = new AbortController();
    const delivered: { commit: number; payloads: string[] }[] = [];
    const done = untilAborted(start(controller.signal), controller.signal, ({ commit, records }) => {
      delivered.push({ commit: commit.commit, payloads: records.map((record) => text(record.payload)) });
      if (commit.commit === last()) controller.abort();
    });
    return { done, delivered, controller };
  }

  it('delivers every commit exactly once to live readers while writers publish concurrently', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'writers', ttlMs: 600_000 });
    // A backlog to catch up on before the live tail.
    await commitSizes(feed, [1, 2, 3, 1, 2], 'backlog', token);
    const backlog = (await feed.info()).commits;
    const subscription = await feed.createSubscription('live');
    const tailFrom = await feed.createSubscription('tail-from-2', { after: 2 });

    const appenders = 5;
    const perAppender = 40;
    const streams = 10;
    const total = backlog + appenders * perAppender + streams;
    const expectedLast = () => total;

    const viaSubscription = collect((signal) => subscription.live({ signal }), expectedLast);
    const viaAutoAdvance = collect((signal) => tailFrom.live({ signal, autoAdvance: true }), expectedLast);
    const viaFollow = collect((signal) => feed.follow({ after: 0, signal }), expectedLast);
    const lateFollow = collect((signal) => feed.follow({ after: backlog, signal }), expectedLast);

    const written = await writeConcurrently(feed, token, { appenders, perAppender, streams });
    expect((await feed.info()).commits).toBe(total);
    const everything = [
      ...(await collectAll(feed.commits({ limit: backlog }))).map((commit) => commit.commit),
      ...written.keys(),
    ].sort((a, b) => a - b);
    expect(everything).toEqual(Array.from({ length: total }, (_, index) => index + 1));

    const deadline = setTimeout(() => {
      for (const reader of [viaSubscription, viaAutoAdvance, viaFollow, lateFollow])
        reader.controller.abort(new Error('timed out'));
    }, 20_000);
    await Promise.all([viaSubscription.done, viaAutoAdvance.done, viaFollow.done, lateFollow.done]);
    clearTimeout(deadline);

    const backlogPayloads = new Map<number, string[]>();
    for await (const commit of feed.commits({ limit: backlog })) {
      backlogPayloads.set(
        commit.commit,
        (await feed.readCommit(commit.commit)).map((record) => text(record.payload)),
      );
    }
    const expectedFrom = (after: number) =>
      Array.from({ length: total - after }, (_, index) => {
        const commit = after + index + 1;
        return { commit, payloads: written.get(commit) ?? backlogPayloads.get(commit)! };
      });
    // Every commit after the start, in order, each once: no gap, no repeat.
    expect(viaSubscription.delivered).toEqual(expectedFrom(0));
    expect(viaFollow.delivered).toEqual(expectedFrom(0));
    expect(viaAutoAdvance.delivered).toEqual(expectedFrom(2));
    expect(lateFollow.delivered).toEqual(expectedFrom(backlog));

    // `live` alone does not move the cursor; with autoAdvance it is saved as each commit is handled.
    expect((await subscription.info()).cursor).toBe(0);
    expect((await subscription.info()).lag).toMatchObject({ commits: total });
    expect((await tailFrom.info()).cursor).toBe(total);
    expect((await tailFrom.info()).lag).toEqual({ commits: 0, records: 0, bytes: 0 });
    await store.close();
  });

  it('resumes a live subscription from its saved cursor after a stop and a restart, without gap or repeat', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    let feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'w', ttlMs: 600_000 });
    await feed.createSubscription('s');
    const delivered: number[] = [];
    const written: number[] = [];

    for (let round = 0; round < 4; round++) {
      const subscription = await feed.subscription('s');
      const controller = new AbortController();
      // Stop this round's reader once it has handled a few commits past the round's start.
      const stopAt = (await subscription.info()).cursor + 30;
      let previous = (await subscription.info()).cursor;
      const reader = untilAborted(
        subscription.live({ signal: controller.signal, autoAdvance: true }),
        controller.signal,
        async ({ commit }) => {
          // With autoAdvance, each commit is saved once it is handed back: by the time the next
          // one arrives, the one before it is the saved cursor.
          expect((await subscription.info()).cursor).toBe(previous);
          previous = commit.commit;
          delivered.push(commit.commit);
          if (commit.commit >= stopAt) controller.abort();
        },
      );
      const writers = Array.from({ length: 3 }, async (_, writer) => {
        for (let index = 0; index < 15; index++)
          written.push((await feed.append([{ payload: `r${round}w${writer}i${index}` }], { token })).commit);
      });
      await Promise.all(writers);
      await reader;
      expect(await cursorOf(feed, 's')).toBe(delivered[delivered.length - 1]);
      await store.close();
      store = await openStore(directory);
      feed = await store.feed('f');
    }
    // The rest, after the last restart.
    const subscription = await feed.subscription('s');
    const controller = new AbortController();
    const head = (await feed.info()).commits;
    if ((await subscription.info()).cursor < head) {
      await untilAborted(
        subscription.live({ signal: controller.signal, autoAdvance: true }),
        controller.signal,
        ({ commit }) => {
          delivered.push(commit.commit);
          if (commit.commit === head) controller.abort();
        },
      );
    }
    expect(written.sort((a, b) => a - b)).toEqual(Array.from({ length: head }, (_, index) => index + 1));
    expect(delivered).toEqual(Array.from({ length: head }, (_, index) => index + 1));
    expect(await cursorOf(feed, 's')).toBe(head);
    await store.close();
  });

  it('delivers a commit published while the reader was busy with the one before', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const subscription = await feed.createSubscription('s');
    for (const [name, start] of [
      ['follow', (signal: AbortSignal, head: number) => feed.follow({ after: head, signal })],
      ['live', (signal: AbortSignal) => subscription.live({ signal, autoAdvance: true })],
    ] as const) {
      const base = (await feed.info()).commits;
      await subscription.reset(base);
      const controller = new AbortController();
      const seen: number[] = [];
      const reading = untilAborted(start(controller.signal, base), controller.signal, async ({ commit }) => {
        seen.push(commit.commit);
        // The next commit is published while this one is still being handled, and then nothing
        // else happens: the reader must still find it.
        if (commit.commit === base + 1) await feed.append([{ payload: `${name} second` }]);
        if (commit.commit === base + 2) controller.abort();
      });
      await new Promise((resolve) => setImmediate(resolve));
      await feed.append([{ payload: `${name} first` }]);
      const stalled = setTimeout(() => controller.abort(new Error('stalled')), 5_000);
      await reading;
      clearTimeout(stalled);
      expect(controller.signal.reason, name).not.toEqual(new Error('stalled'));
      expect(seen, name).toEqual([base + 1, base + 2]);
    }
    await store.close();
  });

  it('stops a live read waiting for the next commit when its signal aborts', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    await commitSizes(feed, [1, 1]);
    const subscription = await feed.createSubscription('s');

    const controller = new AbortController();
    const seen: number[] = [];
    const reading = untilAborted(subscription.live({ signal: controller.signal }), controller.signal, ({ commit }) => {
      seen.push(commit.commit);
    });
    // It catches up, then waits; nothing arrives, so the abort is what ends it.
    for (let wait = 0; wait < 500 && seen.length < 2; wait++) await new Promise((resolve) => setTimeout(resolve, 10));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(seen).toEqual([1, 2]);
    controller.abort();
    await reading;
    // A commit after the abort is not delivered.
    await feed.append([{ payload: 'after' }]);
    expect(seen).toEqual([1, 2]);

    // A signal aborted before the read starts stops it at once.
    const aborted = AbortSignal.abort();
    const none: number[] = [];
    await untilAborted(feed.follow({ after: 0, signal: aborted }), aborted, ({ commit }) => {
      none.push(commit.commit);
    });
    expect(none).toEqual([]);

    await rejectsWith(async () => {
      for await (const _ of feed.follow({ after: 4 })) break;
    }, 'CURSOR_OUT_OF_RANGE');
    await store.close();
  });
});

describe('lag', () => {
  it('reports the commits, records and bytes a cursor is behind the head', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const subscription = await feed.createSubscription('s');
    expect((await subscription.info()).lag).toEqual({ commits: 0, records: 0, bytes: 0 });

    const sizes = [3, 1, 4, 1, 5, 9, 2, 6];
    await commitSizes(feed, sizes);
    const recordsAfter = (cursor: number) => sizes.slice(cursor).reduce((sum, size) => sum + size, 0);
    let previousBytes = Number.POSITIVE_INFINITY;
    for (let cursor = 0; cursor <= sizes.length; cursor++) {
      const { lag } = await subscription.reset(cursor);
      expect({ commits: lag.commits, records: lag.records }).toEqual({
        commits: sizes.length - cursor,
        records: recordsAfter(cursor),
      });
      // Fewer commits behind, fewer bytes behind.
      expect(lag.bytes).toBeLessThan(previousBytes);
      previousBytes = lag.bytes;
      expect((await feed.subscriptions())[0].lag).toEqual(lag);
    }
    expect(previousBytes).toBe(0);

    // New commits grow the lag of a cursor that stays put.
    await subscription.reset(5);
    await commitSizes(feed, [7, 7], 'more');
    expect((await subscription.info()).lag).toMatchObject({ commits: 5, records: recordsAfter(5) + 14 });
    // Bigger records, more bytes behind.
    const small = (await subscription.info()).lag.bytes;
    await feed.append([{ payload: 'x'.repeat(5000) }]);
    expect((await subscription.info()).lag.bytes).toBeGreaterThan(small + 5000);
    await store.close();
  });
});
