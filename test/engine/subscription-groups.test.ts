/**
 * Subscription groups: commits shared by competing workers. Each commit goes to one worker at a
 * time, is redelivered after a nack or a timeout, is parked in the dead-letter feed once its
 * deliveries are spent, keeps each key's commits in order when ordered by key, and keeps all of
 * that across restarts. Bad input changes nothing.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Feed, parkedTag, type Store } from '../../packages/engine/src/index.js';
import { outcomeCode } from '../support/failure.js';
import { digestTree, ManualClock, openStore, sequentialIds, temporaryDirectory, text } from '../support/store.js';

async function fixture(
  clock = new ManualClock(),
): Promise<{ directory: string; store: Store; feed: Feed; clock: ManualClock }> {
  const directory = temporaryDirectory();
  const store = await openStore(directory, { clock: clock.read, newId: sequentialIds() });
  const feed = await store.createFeed('jobs');
  return { directory, store, feed, clock };
}

/** Appends one commit per entry: its payload names it, its records carry the keys given. */
async function commits(feed: Feed, entries: readonly (readonly string[])[]): Promise<void> {
  for (const [index, keys] of entries.entries()) {
    const records =
      keys.length === 0 ? [{ payload: `job ${index}` }] : keys.map((key) => ({ payload: `job ${index} ${key}`, key }));
    await feed.append(records);
  }
}

describe('subscription groups', () => {
  it('hands each commit to one worker, and moves the cursor over what is acknowledged', async () => {
    const { store, feed } = await fixture();
    await commits(feed, [[], [], [], []]);
    const group = await feed.subscriptionGroup('mail');
    const a = await group.claim({ worker: 'a', max: 2 });
    const b = await group.claim({ worker: 'b', max: 5 });
    expect(a.map((claim) => claim.commit.commit)).toEqual([1, 2]);
    expect(b.map((claim) => claim.commit.commit)).toEqual([3, 4]);
    expect(text(b[0]?.records[0]?.payload ?? new Uint8Array())).toBe('job 2');
    expect(await group.claim({ worker: 'c' })).toEqual([]);

    await group.ack(3, { worker: 'b' });
    expect((await group.info()).cursor).toBe(0);
    await group.ack(1, { worker: 'a' });
    await group.ack(2, { worker: 'a' });
    const info = await group.info();
    expect(info).toMatchObject({ cursor: 3, held: 1, settledAhead: 0, acked: 3, parked: 0, redelivered: 0 });
    // The group's cursor is the subscription of its name: trims and compactions hold for it.
    expect((await feed.subscriptions()).map(({ name, cursor }) => ({ name, cursor }))).toEqual([
      { name: 'mail', cursor: 3 },
    ]);
    // An acknowledgement that succeeds is the one that settled the commit: a second one is refused.
    expect(await outcomeCode(group.ack(1, { worker: 'a' }))).toBe('CLAIM_NOT_HELD');
    expect((await group.info()).acked).toBe(3);
    expect(await outcomeCode(group.ack(4, { worker: 'a' }))).toBe('CLAIM_NOT_HELD');
    await store.close();
  });

  it('redelivers work whose time ran out to another worker, and refuses the late acknowledgement', async () => {
    const { store, feed, clock } = await fixture();
    await commits(feed, [[]]);
    const group = await feed.subscriptionGroup('mail', { ackTimeoutMs: 1_000 });
    const [first] = await group.claim({ worker: 'slow' });
    expect(first).toMatchObject({ delivery: 1, deadline: clock.now + 1_000 });
    expect(await group.claim({ worker: 'fast' })).toEqual([]);
    clock.advance(1_000);
    const [again] = await group.claim({ worker: 'fast' });
    expect(again).toMatchObject({ commit: { commit: 1 }, delivery: 2 });
    expect(await outcomeCode(group.ack(1, { worker: 'slow' }))).toBe('CLAIM_NOT_HELD');
    await group.ack(1, { worker: 'fast' });
    expect(await group.info()).toMatchObject({ cursor: 1, acked: 1, redelivered: 1 });
    await store.close();
  });

  it('parks work whose deliveries are spent in the dead-letter feed, with its reason, once', async () => {
    const { store, feed, clock } = await fixture();
    await feed.append([
      { payload: 'poison', key: 'k', type: 'order', tags: ['customer:7'] },
      { payload: 'second', tags: [] },
    ]);
    await commits(feed, [[]]);
    const group = await feed.subscriptionGroup('mail', { maxDeliveries: 2, ackTimeoutMs: 500 });
    const [one] = await group.claim({ worker: 'a' });
    expect(one?.commit.commit).toBe(1);
    expect(await group.nack(1, { worker: 'a', reason: 'template missing' })).toEqual({
      commit: 1,
      outcome: 'released',
      deliveries: 1,
    });
    const [two] = await group.claim({ worker: 'b' });
    expect(two).toMatchObject({ commit: { commit: 1 }, delivery: 2, reason: 'template missing' });
    expect(await group.nack(1, { worker: 'b', reason: 'still missing' })).toMatchObject({ outcome: 'parked' });

    const parked = await store.feed('jobs.mail.parked');
    const [commit] = await collect(parked.commits());
    expect(JSON.parse(commit?.message ?? '')).toEqual({
      feed: 'jobs',
      group: 'mail',
      commit: 1,
      deliveries: 2,
      reason: 'still missing',
    });
    const records = await collect(parked.read());
    expect(records.map((record) => [text(record.payload), record.key, record.type, record.tags])).toEqual([
      ['poison', 'k', 'order', ['customer:7', parkedTag('jobs', 'mail', 1)]],
      ['second', undefined, undefined, [parkedTag('jobs', 'mail', 1)]],
    ]);

    // A claim whose time ran out on its last delivery is parked by the next claim.
    const [three] = await group.claim({ worker: 'c' });
    expect(three?.commit.commit).toBe(2);
    clock.advance(500);
    expect(await group.claim({ worker: 'c' })).toMatchObject([{ commit: { commit: 2 }, delivery: 2 }]);
    clock.advance(500);
    expect(await group.claim({ worker: 'c' })).toEqual([]);
    expect(await group.info()).toMatchObject({ cursor: 2, parked: 2, acked: 0 });
    const messages = (await collect(parked.commits())).map((entry) => JSON.parse(entry.message ?? '').reason);
    expect(messages).toEqual(['still missing', 'acknowledgement timed out']);
    await store.close();
  });

  it('ordered by key, holds a key at one worker and hands its commits out in order', async () => {
    const { store, feed } = await fixture();
    await commits(feed, [['a'], ['b'], ['a'], ['c', 'b'], ['d']]);
    const group = await feed.subscriptionGroup('orders', { orderedBy: 'key' });
    expect((await group.claim({ worker: 'w1', max: 10 })).map((claim) => claim.commit.commit)).toEqual([1, 2, 5]);
    expect(await group.claim({ worker: 'w2', max: 10 })).toEqual([]);
    await group.ack(1, { worker: 'w1' });
    expect((await group.claim({ worker: 'w2', max: 10 })).map((claim) => claim.commit.commit)).toEqual([3]);
    await group.nack(2, { worker: 'w1' });
    // Commit 4 shares key b with commit 2, given back but not settled: it still waits.
    expect((await group.claim({ worker: 'w2', max: 10 })).map((claim) => claim.commit.commit)).toEqual([2]);
    await group.ack(2, { worker: 'w2' });
    expect((await group.claim({ worker: 'w1', max: 10 })).map((claim) => claim.commit.commit)).toEqual([4]);
    await store.close();
  });

  it('keeps claims, delivery counts and settled work across a restart', async () => {
    const clock = new ManualClock();
    const { directory, store, feed } = await fixture(clock);
    await commits(feed, [[], [], []]);
    let group = await feed.subscriptionGroup('mail', { ackTimeoutMs: 1_000, maxDeliveries: 3 });
    await group.claim({ worker: 'a', max: 3 });
    await group.ack(2, { worker: 'a' });
    await group.nack(1, { worker: 'a', reason: 'retry' });
    await store.close();

    const reopened = await openStore(directory, { clock: clock.read, newId: sequentialIds('again') });
    group = await (await reopened.feed('jobs')).subscriptionGroup('mail');
    expect(await group.info()).toMatchObject({ cursor: 0, held: 1, released: 1, settledAhead: 1, acked: 1 });
    expect(await group.claim({ worker: 'b', max: 3 })).toMatchObject([
      { commit: { commit: 1 }, delivery: 2, reason: 'retry' },
    ]);
    await group.ack(1, { worker: 'b' });
    clock.advance(1_000);
    expect(await group.claim({ worker: 'b', max: 3 })).toMatchObject([{ commit: { commit: 3 }, delivery: 2 }]);
    await group.ack(3, { worker: 'b' });
    expect(await group.info()).toMatchObject({ cursor: 3, acked: 3, held: 0, released: 0 });
    await reopened.close();
  });

  it('reports damage to a group log on verify, and serves from the sound copy', async () => {
    const { directory, store, feed, clock } = await fixture();
    await commits(feed, [[], []]);
    const group = await feed.subscriptionGroup('mail');
    await group.claim({ worker: 'a', max: 2 });
    await group.ack(1, { worker: 'a' });
    await store.close();
    // A flipped byte in the first record of the first file: the newest record is sound in both.
    const file = path.join(directory, 'feeds', 'jobs', 'state', 'groups', 'mail.group');
    const bytes = fs.readFileSync(file);
    bytes[12] = (bytes[12] ?? 0) ^ 0xff;
    fs.writeFileSync(file, bytes);
    const reopened = await openStore(directory, { clock: clock.read });
    const again = await (await reopened.feed('jobs')).existingSubscriptionGroup('mail');
    expect(await again.info()).toMatchObject({ cursor: 1, held: 1, acked: 1 });
    const [verification] = await reopened.verify('jobs');
    expect(verification?.problems).toEqual([expect.objectContaining({ code: 'CORRUPT', file })]);
    await reopened.close();
  });

  it('hands out nothing past a forced trim of unsettled commits until it is reset', async () => {
    const { store, feed } = await fixture();
    const group = await feed.subscriptionGroup('mail');
    // 1 KiB payloads in 64 KiB segments: a few hundred commits fill several segments.
    for (let index = 0; index < 300; index++) await feed.append([{ payload: `${index}`.padEnd(1024, '.') }]);
    const trim = await feed.trim({ before: 200, force: true });
    expect(trim.lowMark).toBeGreaterThan(1);
    const claimed = await outcomeCode(group.claim({ worker: 'a' }));
    expect(['TRIMMED', 'COMPACTED']).toContain(claimed);
    expect((await group.info()).held).toBe(0);
    await group.reset(trim.lowMark - 1);
    expect((await group.claim({ worker: 'a' })).map((claim) => claim.commit.commit)).toEqual([trim.lowMark]);
    await store.close();
  });

  it('waits for work when asked to, and hands out the commit that comes', async () => {
    const { store, feed } = await fixture(undefined);
    const group = await feed.subscriptionGroup('mail');
    const waiting = group.claim({ worker: 'a', waitMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    await commits(feed, [[]]);
    expect((await waiting).map((claim) => claim.commit.commit)).toEqual([1]);
    const aborted = new AbortController();
    const idle = group.claim({ worker: 'b', waitMs: 10_000, signal: aborted.signal });
    aborted.abort();
    expect(await idle).toEqual([]);
    await store.close();
  });

  it('refuses bad input with a typed error and changes nothing', async () => {
    const { directory, store, feed } = await fixture();
    await commits(feed, [[]]);
    await feed.createSubscription('plain');
    const group = await feed.subscriptionGroup('mail');
    const plain = await feed.subscription('mail');
    const before = digestTree(directory);
    const refusals = await Promise.all([
      outcomeCode(feed.subscriptionGroup('plain')),
      outcomeCode(feed.subscriptionGroup('mail', { orderedBy: 'key' })),
      outcomeCode(feed.subscriptionGroup('mail', { ackTimeoutMs: 5 })),
      outcomeCode(feed.subscriptionGroup('mail', { maxDeliveries: 0 })),
      outcomeCode(feed.subscriptionGroup('bad name')),
      outcomeCode(group.claim({ worker: '' })),
      outcomeCode(group.claim({ worker: 'a', max: 0 })),
      outcomeCode(group.claim({ worker: 'a', waitMs: 3_600_000 })),
      outcomeCode(group.ack(1, { worker: 'a' })),
      outcomeCode(group.nack(0, { worker: 'a' })),
      outcomeCode(plain.advance(1)),
      outcomeCode(plain.delete()),
    ]);
    expect(refusals).toEqual([
      'SUBSCRIPTION_EXISTS',
      'INVALID_ARGUMENT',
      'INVALID_ARGUMENT',
      'INVALID_ARGUMENT',
      'INVALID_NAME',
      'INVALID_ARGUMENT',
      'INVALID_ARGUMENT',
      'INVALID_ARGUMENT',
      'CLAIM_NOT_HELD',
      'INVALID_ARGUMENT',
      'SUBSCRIPTION_GROUPED',
      'SUBSCRIPTION_GROUPED',
    ]);
    expect(digestTree(directory)).toBe(before);
    await group.delete();
    expect(await outcomeCode(feed.subscription('mail'))).toBe('SUBSCRIPTION_NOT_FOUND');
    expect(await outcomeCode(group.claim({ worker: 'a' }))).toBe('SUBSCRIPTION_NOT_FOUND');
    await store.close();
  });
});

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterable) items.push(item);
  return items;
}
