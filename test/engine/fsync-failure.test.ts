/**
 * A failed fsync is fatal (the PostgreSQL "fsyncgate" lesson): the batch it covered is not
 * acknowledged, every later write to the feed fails with `IO` until the feed is opened again,
 * and after reopening the feed shows the acknowledged data and, at most, the whole failed batch
 * (its bytes may have reached the disk anyway) — never a part of it.
 *
 * The failure is injected in the durable-write kernel: the Nth call writes its bytes, as a
 * pwrite before a failing fdatasync would, and then reports EIO.
 */
import { describe, expect, it } from 'vitest';
import { type Kernels, StreamStackError, tsKernels } from '../../packages/engine/src/index.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

/** The TypeScript kernels, with a switch that makes the next durable write fail after writing. */
function failingKernels(): { kernels: Kernels; failNext: () => void; failures: () => number } {
  let failNext = false;
  let failures = 0;
  const kernels: Kernels = {
    ...tsKernels,
    async writeDurable(fd, position, buffers) {
      await tsKernels.writeDurable(fd, position, buffers);
      if (!failNext) return;
      failNext = false;
      failures++;
      throw new StreamStackError('IO', 'fdatasync failed: EIO (injected)', { details: { errno: 'EIO' } });
    },
  };
  return { kernels, failNext: () => (failNext = true), failures: () => failures };
}

const payloads = async (feed: Awaited<ReturnType<Awaited<ReturnType<typeof openStore>>['feed']>>) => {
  const out: string[] = [];
  for await (const record of feed.read()) out.push(text(record.payload));
  return out;
};

describe('a failed fsync', () => {
  it('fails its one-shot append and every later write with IO; after a reopen the batch is whole or absent', async () => {
    const directory = temporaryDirectory();
    const failing = failingKernels();
    let store = await openStore(directory, { kernels: failing.kernels });
    let feed = await store.createFeed('f');
    await feed.append([{ payload: 'kept-1' }, { payload: 'kept-2' }]);
    failing.failNext();
    const batch = [{ payload: 'failed-1' }, { payload: 'failed-2' }, { payload: 'failed-3' }];
    await expect(feed.append(batch)).rejects.toMatchObject({ code: 'IO' });
    expect(failing.failures()).toBe(1);
    // Nothing is acknowledged after a failed fsync, and the failed batch is not published.
    await expect(feed.append([{ payload: 'after' }])).rejects.toMatchObject({ code: 'IO' });
    expect(await payloads(feed)).toEqual(['kept-1', 'kept-2']);
    await store.close();

    store = await openStore(directory, { kernels: failing.kernels });
    feed = await store.feed('f');
    const seen = await payloads(feed);
    // The failed batch's bytes reached the file here, so it may be there — whole.
    expect([
      ['kept-1', 'kept-2'],
      ['kept-1', 'kept-2', 'failed-1', 'failed-2', 'failed-3'],
    ]).toContainEqual(seen);
    await feed.append([{ payload: 'after reopen' }]);
    expect((await payloads(feed)).slice(-1)).toEqual(['after reopen']);
    expect((await store.verify('f'))[0].ok).toBe(true);
    await store.close();
  });

  it('acknowledges none of the groups pipelined behind a failed one, though their own fsyncs succeeded', async () => {
    const directory = temporaryDirectory();
    // The first group's write is held, then fails; the group written behind it meanwhile syncs.
    let release: (() => void) | undefined;
    let holdNext = false;
    const order: string[] = [];
    const kernels: Kernels = {
      ...tsKernels,
      async writeDurable(fd, position, buffers) {
        if (!holdNext) return tsKernels.writeDurable(fd, position, buffers);
        holdNext = false;
        await tsKernels.writeDurable(fd, position, buffers);
        await new Promise<void>((resolve) => (release = resolve));
        order.push('first failed');
        throw new StreamStackError('IO', 'fdatasync failed: EIO (injected)', { details: { errno: 'EIO' } });
      },
    };
    let store = await openStore(directory, { kernels });
    let feed = await store.createFeed('f');
    await feed.append([{ payload: 'kept' }]);
    holdNext = true;
    const first = feed.append([{ payload: 'first' }]).catch((error: unknown) => error);
    const behind = Array.from({ length: 4 }, (_, index) =>
      feed.append([{ payload: `behind-${index}` }]).then(
        () => 'acknowledged',
        (error: unknown) => (order.push('behind refused'), error),
      ),
    );
    // The group behind the held one is written and synced while the first is still in flight.
    while (feed.groupCommitStats().pipelined === 0) await new Promise((resolve) => setTimeout(resolve, 1));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(feed.groupCommitStats().inFlight).toBe(2);
    release!();
    expect(await first).toMatchObject({ code: 'IO' });
    for (const outcome of await Promise.all(behind)) expect(outcome).toMatchObject({ code: 'IO' });
    expect(order[0]).toBe('first failed');
    expect(await payloads(feed)).toEqual(['kept']);
    await store.close();

    // Every byte reached the file here, so after a reopen each commit is there whole, in order.
    store = await openStore(directory);
    feed = await store.feed('f');
    const seen = await payloads(feed);
    expect(seen.slice(0, 1)).toEqual(['kept']);
    expect(['first', 'behind-0', 'behind-1', 'behind-2', 'behind-3'].slice(0, seen.length - 1)).toEqual(seen.slice(1));
    expect((await store.verify('f'))[0].ok).toBe(true);
    await store.close();
  });

  it('fails a stream batch and refuses the stream until a reopen, which keeps every acknowledged batch', async () => {
    const directory = temporaryDirectory();
    const failing = failingKernels();
    let store = await openStore(directory, { kernels: failing.kernels });
    let feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 600_000 });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'a' }, { payload: 'b' }], { token });
    failing.failNext();
    await expect(stream.append([{ payload: 'c' }, { payload: 'd' }], { token })).rejects.toMatchObject({ code: 'IO' });
    await expect(stream.append([{ payload: 'e' }], { token })).rejects.toMatchObject({ code: 'IO' });
    await expect(stream.seal({ token })).rejects.toMatchObject({ code: 'IO' });
    await store.close();

    store = await openStore(directory, { kernels: failing.kernels });
    feed = await store.feed('f');
    const reopened = await feed.stream(stream.id);
    const records = (await reopened.read()).map((record) => text(record.payload));
    expect([
      ['a', 'b'],
      ['a', 'b', 'c', 'd'],
    ]).toContainEqual(records);
    const commit = await reopened.seal({ token });
    expect(commit.records).toBe(records.length);
    await store.close();
  });

  it('fails a lease change, and the lease log takes no more writes until a reopen, which keeps a whole record', async () => {
    const directory = temporaryDirectory();
    const failing = failingKernels();
    let store = await openStore(directory, { kernels: failing.kernels });
    let feed = await store.createFeed('f');
    const first = await feed.acquireLease({ holder: 'one', ttlMs: 10 });
    expect(first.epoch).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    failing.failNext();
    await expect(feed.acquireLease({ holder: 'two', ttlMs: 600_000 })).rejects.toMatchObject({ code: 'IO' });
    await expect(feed.acquireLease({ holder: 'three', ttlMs: 600_000 })).rejects.toMatchObject({ code: 'IO' });
    await store.close();

    store = await openStore(directory, { kernels: failing.kernels });
    feed = await store.feed('f');
    // The failed grant may have reached the disk (epoch 2, then live) or not (epoch 1, expired):
    // either way a new grant is strictly newer than anything granted before.
    const info = await feed.info();
    expect([1, 2]).toContain(info.epoch);
    if (info.lease === null)
      expect((await feed.acquireLease({ holder: 'four', ttlMs: 600_000 })).epoch).toBe(info.epoch + 1);
    else expect(info.lease).toMatchObject({ holder: 'two', epoch: 2 });
    await store.close();
  });
});
