/**
 * `feed.read`'s iterator over the batch form: records in order however `next` is called (one at
 * a time or many at once), the source made only at the first `next` (an argument error rejects
 * it, as the async generator it replaced did), its errors passed on, and a `break` (or
 * `return`, or `throw`) closes the source, running its `finally`.
 */
import { describe, expect, it } from 'vitest';
import { FlatAsyncIterator } from '../../packages/engine/src/api/flat-iterator.js';
import { openStore, temporaryDirectory } from '../support/store.js';

function source(batches: number[][], log: string[], failAt?: number): () => AsyncGenerator<number[]> {
  return async function* () {
    log.push('opened');
    try {
      for (let index = 0; index < batches.length; index++) {
        if (index === failAt) throw new Error('the source failed');
        await new Promise((resolve) => setTimeout(resolve, 1));
        yield batches[index];
      }
    } finally {
      log.push('closed');
    }
  };
}

describe('FlatAsyncIterator', () => {
  it('hands out every item in order, to calls made one at a time or all at once', async () => {
    const batches = [[1, 2, 3], [], [4], [5, 6]];
    const log: string[] = [];
    const one = new FlatAsyncIterator(source(batches, log));
    const seen: number[] = [];
    for await (const item of one) seen.push(item);
    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
    expect(await one.next()).toEqual({ value: undefined, done: true });

    const many = new FlatAsyncIterator(source(batches, log));
    const first = await many.next();
    // Nine calls at once, one answered from the array in hand, the rest waiting for the source.
    const rest = await Promise.all(Array.from({ length: 9 }, () => many.next()));
    expect([first, ...rest].map((result) => (result.done ? 'done' : result.value))).toEqual([
      1,
      2,
      3,
      4,
      5,
      6,
      'done',
      'done',
      'done',
      'done',
    ]);
    expect(log).toEqual(['opened', 'closed', 'opened', 'closed']);
  });

  it('opens the source at the first next, passes its errors on, and closes it on break', async () => {
    const log: string[] = [];
    let opened = false;
    const lazy = new FlatAsyncIterator<number>(() => {
      opened = true;
      throw new Error('bad options');
    });
    expect(opened).toBe(false);
    await expect(lazy.next()).rejects.toThrow('bad options');
    expect(await lazy.next()).toEqual({ value: undefined, done: true });

    const failing = new FlatAsyncIterator(source([[1], [2]], log, 1));
    expect(await failing.next()).toEqual({ value: 1, done: false });
    await expect(failing.next()).rejects.toThrow('the source failed');
    expect(log).toEqual(['opened', 'closed']);

    log.length = 0;
    for await (const item of new FlatAsyncIterator(source([[1, 2], [3]], log))) if (item === 1) break;
    expect(log).toEqual(['opened', 'closed']);

    log.length = 0;
    const thrown = new FlatAsyncIterator(source([[1, 2], [3]], log));
    await thrown.next();
    await expect(thrown.throw(new Error('stop'))).rejects.toThrow('stop');
    expect(log).toEqual(['opened', 'closed']);
    expect(await thrown.next()).toEqual({ value: undefined, done: true });
  });

  it('is what feed.read returns: a bad option rejects the first next, not the call', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const reading = feed.read({ modes: 'dedup' } as never);
    await expect(reading.next()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await store.close();
  });
});
