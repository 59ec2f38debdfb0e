/**
 * A read's options are checked before it reads: an unknown mode or plan, and an option the read
 * does not take (a filter's `types` given beside `filter` instead of inside it), are refused with
 * `INVALID_ARGUMENT` naming the field, in every form of the read — never silently ignored.
 */
import { describe, expect, it } from 'vitest';
import type { ReadOptions } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

describe('read options', () => {
  it('refuses what a read does not take, in every form of the read', async () => {
    const store = await openStore(temporaryDirectory(), { kernels: tsKernels });
    const feed = await store.createFeed('f');
    await feed.append([
      { payload: 'a', type: 'x' },
      { payload: 'b', type: 'y' },
    ]);
    const bad: [unknown, string | undefined][] = [
      [{ types: ['x'] }, 'types'],
      [{ filter: { types: ['x'] }, tag: 'y' }, 'tag'],
      [{ mode: 'newest' }, undefined],
      [{ plan: 'fast', filter: { types: ['x'] } }, undefined],
    ];
    const forms = [
      async (options: ReadOptions) => collect(feed.read(options)),
      async (options: ReadOptions) => collect(feed.readBatches(options)),
      async (options: ReadOptions) => collect(feed.readColumns(options)),
    ];
    for (const [options, field] of bad) {
      for (const form of forms) {
        const error = await form(options as ReadOptions).then(
          () => undefined,
          (failure: unknown) => failure,
        );
        expect(error, JSON.stringify(options)).toMatchObject({ code: 'INVALID_ARGUMENT' });
        if (field) expect((error as { details: unknown }).details).toEqual({ field });
      }
    }
    // The filter where it belongs is taken, and works.
    expect((await collect(feed.read({ filter: { types: ['x'] } }))).map((record) => record.type)).toEqual(['x']);
    await store.close();
  });
});
