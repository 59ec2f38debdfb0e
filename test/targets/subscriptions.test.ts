/**
 * Subscriptions and live reads, black box, against the embedded store and against the client
 * over HTTP: poll, advance, reset, delete, and follow and live delivering every commit exactly
 * once, catch-up and live in one loop, until the signal aborts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { collect, temporaryDirectory, text } from '../support/store.js';
import { type Opened, targets } from '../support/targets.js';

const opened: Opened[] = [];
afterEach(async () => {
  for (const target of opened.splice(0)) await target.close();
});

describe.each(targets)('subscriptions and live reads ($name)', (target) => {
  async function feedOf() {
    const it = await target.open(temporaryDirectory());
    opened.push(it);
    return it.store.createFeed('f');
  }
  /** Commits of the given sizes, payloads `c<commit index>.<record index>`. */
  async function commitSizes(feed: { append(records: { payload: string }[]): Promise<unknown> }, sizes: number[]) {
    for (const [index, size] of sizes.entries())
      await feed.append(Array.from({ length: size }, (_, record) => ({ payload: `c${index}.${record}` })));
  }

  it('creates, lists and refuses duplicates and unknown subscriptions', async () => {
    const feed = await feedOf();
    await commitSizes(feed, [1, 1]);
    await feed.createSubscription('b');
    await feed.createSubscription('a', { after: 1 });
    expect((await feed.subscriptions()).map((info) => [info.name, info.cursor, info.lag.commits])).toEqual([
      ['a', 1, 1],
      ['b', 0, 2],
    ]);
    await expect(feed.createSubscription('a')).rejects.toMatchObject({ code: 'SUBSCRIPTION_EXISTS' });
    await expect(feed.createSubscription('c', { after: 3 })).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    await expect(feed.subscription('none')).rejects.toMatchObject({ code: 'SUBSCRIPTION_NOT_FOUND' });
  });

  it('polls whole commits bounded by max records without moving the cursor; advances forward only; resets anywhere; deletes', async () => {
    const feed = await feedOf();
    await commitSizes(feed, [3, 1, 4, 2, 5]);
    const subscription = await feed.createSubscription('s');
    const first = await subscription.poll({ max: 4 });
    expect(first.cursor).toBe(2);
    expect(
      first.commits.map(({ commit, records }) => [commit.commit, records.map((record) => text(record.payload))]),
    ).toEqual([
      [1, ['c0.0', 'c0.1', 'c0.2']],
      [2, ['c1.0']],
    ]);
    expect(first.commits[0].records.map((record) => [record.commit, record.seq, record.position])).toEqual([
      [1, 1, 1],
      [1, 2, 2],
      [1, 3, 3],
    ]);
    expect((await subscription.info()).cursor).toBe(0);
    expect((await subscription.poll({ max: 0 })).commits.map(({ commit }) => commit.commit)).toEqual([1]);
    expect((await subscription.poll()).cursor).toBe(5);
    expect(await subscription.advance(2)).toMatchObject({ name: 's', cursor: 2, lag: { commits: 3, records: 11 } });
    const behind = await subscription.advance(1).catch((error: unknown) => error);
    expect(behind).toMatchObject({ code: 'CURSOR_BEHIND', details: { cursor: 2, requested: 1 } });
    for (const cursor of [6, -1, 1.5]) {
      await expect(subscription.advance(cursor)).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
      await expect(subscription.reset(cursor)).rejects.toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    }
    expect((await subscription.reset(0)).cursor).toBe(0);
    expect((await subscription.advance(5)).lag).toEqual({ commits: 0, records: 0, bytes: 0 });
    expect(await subscription.poll()).toEqual({ commits: [], cursor: 5 });
    await subscription.delete();
    await expect(subscription.info()).rejects.toMatchObject({ code: 'SUBSCRIPTION_NOT_FOUND' });
    expect(await feed.subscriptions()).toEqual([]);
    await feed.createSubscription('s');
    expect((await (await feed.subscription('s')).info()).cursor).toBe(0);
  });

  it('follows: catch-up then live, every commit exactly once while writers publish concurrently, until the signal aborts', async () => {
    const feed = await feedOf();
    await commitSizes(feed, [2, 1]);
    const controller = new AbortController();
    const seen: number[] = [];
    const payloads: string[] = [];
    const total = 2 + 40;
    const reader = (async () => {
      try {
        for await (const { commit, records } of feed.follow({ after: 0, signal: controller.signal })) {
          seen.push(commit.commit);
          payloads.push(...records.map((record) => text(record.payload)));
          expect(records.every((record) => record.commit === commit.commit)).toBe(true);
          if (seen.length === total) controller.abort();
        }
      } catch (error) {
        if (!controller.signal.aborted) throw error;
      }
    })();
    await Promise.all(
      Array.from({ length: 4 }, (_, writer) =>
        (async () => {
          for (let index = 0; index < 10; index++) await feed.append([{ payload: `w${writer}.${index}` }]);
        })(),
      ),
    );
    await reader;
    expect(seen).toEqual(Array.from({ length: total }, (_, index) => index + 1));
    expect(payloads.slice(0, 3)).toEqual(['c0.0', 'c0.1', 'c1.0']);
    expect(new Set(payloads).size).toBe(2 + 1 + 40);
  });

  it('stops a follow waiting for the next commit when its signal aborts', async () => {
    const feed = await feedOf();
    await commitSizes(feed, [1]);
    const controller = new AbortController();
    const seen: number[] = [];
    const reading = (async () => {
      for await (const { commit } of feed.follow({ after: 0, signal: controller.signal })) seen.push(commit.commit);
    })();
    // Aborted once the catch-up is delivered, while the follow waits for the next commit.
    while (seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 100));
    controller.abort();
    await expect(reading).rejects.toMatchObject({ name: 'AbortError' });
    expect(seen).toEqual([1]);
  });

  it('lives from the saved cursor, saving it as each commit is handed back, and resumes without gap or repeat', async () => {
    const feed = await feedOf();
    await commitSizes(feed, [1, 1, 1]);
    const subscription = await feed.createSubscription('s', { after: 1 });
    const controller = new AbortController();
    const seen: number[] = [];
    const live = (async () => {
      try {
        for await (const { commit } of subscription.live({ signal: controller.signal, autoAdvance: true })) {
          seen.push(commit.commit);
          if (commit.commit === 4) break;
        }
      } catch (error) {
        if (!controller.signal.aborted) throw error;
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 100));
    await commitSizes(feed, [1, 1]);
    await live;
    expect(seen).toEqual([2, 3, 4]);
    // The break came before commit 4 was handed back, so the saved cursor is 3.
    expect((await subscription.info()).cursor).toBe(3);
    const again = await collect(
      (async function* () {
        for await (const batch of subscription.live({ autoAdvance: true })) {
          yield batch.commit.commit;
          if (batch.commit.commit === 5) return;
        }
      })(),
    );
    expect(again).toEqual([4, 5]);
  });
});
