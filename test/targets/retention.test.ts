/**
 * Retention and trim, black box, against the embedded store and against the client over HTTP:
 * the policy, a trim held back by a subscription unless forced, and reads after it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { collect, temporaryDirectory, text } from '../support/store.js';
import { type Opened, targets } from '../support/targets.js';

const opened: Opened[] = [];
afterEach(async () => {
  for (const target of opened.splice(0)) await target.close();
});

describe.each(targets)('retention and trim ($name)', (target) => {
  async function filled() {
    const it = await target.open(temporaryDirectory());
    opened.push(it);
    const feed = await it.store.createFeed('f');
    // Distinct 8 KB payloads: the test store's 64 KiB segments roll every few commits.
    for (let commit = 1; commit <= 40; commit++) await feed.append([{ payload: `${commit}:`.padEnd(8000, 'x') }]);
    return feed;
  }

  it('sets and shows the policy, and refuses a bad one', async () => {
    const feed = await filled();
    expect(await feed.retention()).toMatchObject({ policy: {}, lowMark: 1, pinnedBy: null });
    expect((await feed.setRetention({ maxRecords: 1000, maxAgeMs: 3_600_000 })).policy).toEqual({
      maxRecords: 1000,
      maxAgeMs: 3_600_000,
    });
    await expect(feed.setRetention({ maxRecords: -1 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect((await feed.setRetention({})).policy).toEqual({});
  });

  it('keeps what a subscription has not passed unless forced, then reads start at the low mark and older cursors fail with TRIMMED', async () => {
    const feed = await filled();
    const subscription = await feed.createSubscription('slow', { after: 5 });
    const held = await feed.trim({ before: 30 });
    expect(held.heldBy).toEqual({ subscription: 'slow', cursor: 5 });
    expect(held.lowMark).toBeLessThanOrEqual(6);
    const forced = await feed.trim({ before: 30, force: true });
    expect(forced.lowMark).toBeGreaterThan(6);
    expect(forced.lowMark).toBeLessThanOrEqual(30);
    expect(forced.segmentsRemoved).toBeGreaterThan(0);
    const { lowMark } = forced;
    expect((await feed.info()).lowMark).toBe(lowMark);
    const [first] = await collect(feed.read());
    expect([first.commit, text(first.payload).split(':')[0]]).toEqual([lowMark, String(lowMark)]);
    await expect(collect(feed.read({ after: 0 }))).rejects.toMatchObject({ code: 'TRIMMED' });
    await expect(subscription.poll()).rejects.toMatchObject({ code: 'TRIMMED' });
    expect(await subscription.info()).toMatchObject({ trimmed: true });
    expect((await subscription.reset(lowMark - 1)).trimmed).toBe(false);
    expect((await subscription.poll({ max: 1 })).cursor).toBe(lowMark);
  });
});
