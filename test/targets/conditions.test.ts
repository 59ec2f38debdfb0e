/**
 * Append conditions (DCB), black box, against the embedded store and against the client over
 * HTTP: validation, refusals naming the first match, seals that stay open when refused, and a
 * race of conditional appends of which exactly one wins.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { limits, StreamStackError } from '../../packages/engine/src/index.js';
import { collect, temporaryDirectory, text } from '../support/store.js';
import { type Opened, targets } from '../support/targets.js';

const opened: Opened[] = [];
afterEach(async () => {
  for (const target of opened.splice(0)) await target.close();
});

describe.each(targets)('append conditions ($name)', (target) => {
  async function feedOf() {
    const it = await target.open(temporaryDirectory());
    opened.push(it);
    return it.store.createFeed('f');
  }

  it('validates the condition and reports the first match and `after` in the refusal', async () => {
    const feed = await feedOf();
    await feed.append([
      { payload: 'a', type: 'booked', tags: ['course:1'] },
      { payload: 'b', type: 'booked', tags: ['course:2'] },
    ]);
    for (const condition of [
      { after: 0 },
      { failIfMatch: {}, after: -1 },
      { failIfMatch: {}, after: 1.5 },
      { failIfMatch: {}, after: '1' },
      { failIfMatch: { items: 'x' } },
      { failIfMatch: { types: 'booked' } },
      { failIfMatch: { tags: [''] } },
      { failIfMatch: { items: Array.from({ length: limits.queryItemsMax + 1 }, () => ({ tags: ['x'] })) } },
    ]) {
      await expect(
        feed.append([{ payload: 'c' }], { condition: condition as never }),
        JSON.stringify(condition).slice(0, 80),
      ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect((await feed.info()).records).toBe(2);
    const refused = await feed
      .append([{ payload: 'c' }], { condition: { failIfMatch: { tags: ['course:2'] }, after: 1 } })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StreamStackError);
    expect(refused).toMatchObject({ code: 'CONDITION_FAILED', details: { position: 2, after: 1 } });
    // An empty query matches everything, but nothing lies after the head.
    await expect(feed.append([{ payload: 'c' }], { condition: { failIfMatch: {}, after: 1 } })).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: 2 },
    });
    await expect(feed.append([{ payload: 'c' }], { condition: { failIfMatch: {}, after: 2 } })).resolves.toMatchObject({
      records: 1,
      firstPosition: 3,
    });
    await expect(
      feed.append([{ payload: 'd' }], { condition: { failIfMatch: { items: [{ tags: ['never'] }] } } }),
    ).resolves.toMatchObject({ records: 1 });
  });

  it('refuses a seal whose condition fails and keeps the stream open for another try', async () => {
    const feed = await feedOf();
    const { token } = await feed.acquireLease({ holder: 'p' });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'seat', type: 'booked', tags: ['course:7'] }], { token });
    await feed.append([{ payload: 'rival', type: 'booked', tags: ['course:7'] }], { token });
    const course7 = { failIfMatch: { items: [{ types: ['booked'], tags: ['course:7'] }] }, after: 0 };
    await expect(stream.seal({ token, condition: course7 })).rejects.toMatchObject({
      code: 'CONDITION_FAILED',
      details: { position: 1 },
    });
    expect(await stream.info()).toMatchObject({ state: 'open', records: 1 });
    await stream.append([{ payload: 'more' }], { token });
    expect(await stream.seal({ token, condition: { ...course7, after: 1 } })).toMatchObject({
      commit: 2,
      records: 2,
      firstPosition: 2,
    });
  });

  it('lets exactly one of many racing conditional bookings of the last seat through', async () => {
    const feed = await feedOf();
    const condition = { failIfMatch: { items: [{ types: ['booked'], tags: ['course:1'] }] }, after: 0 };
    const attempt = async (student: number): Promise<string> => {
      for (let tries = 0; tries < 100; tries++) {
        try {
          await feed.append([{ payload: `1/${student}`, type: 'booked', tags: ['course:1', `student:${student}`] }], {
            condition,
          });
          return 'booked';
        } catch (error) {
          if (!(error instanceof StreamStackError)) throw error;
          // SAME_BATCH is retryable: the group it met is decided by the time a retry is seen.
          if (error.code !== 'SAME_BATCH') return error.code;
        }
      }
      return 'gave up';
    };
    const outcomes = await Promise.all(Array.from({ length: 12 }, (_, student) => attempt(student)));
    expect(outcomes.filter((outcome) => outcome === 'booked')).toHaveLength(1);
    expect(outcomes.filter((outcome) => outcome === 'CONDITION_FAILED')).toHaveLength(11);
    const booked = await collect(feed.read({ filter: { types: ['booked'] } }));
    expect(booked).toHaveLength(1);
    expect(text(booked[0].payload)).toBe(`1/${outcomes.indexOf('booked')}`);
  });
});
