/**
 * An append is acknowledged only once its bytes are durable. The kernels' `writeDurable` resolves
 * only after the fdatasync returned, so while a test holds that call, the append that made it
 * must stay pending, and nothing may read the record: a record a reader saw before it was durable
 * could vanish in a crash after the reader acted on it. Once the write is released, the append
 * resolves and the record reads back, also after a restart.
 */
import { describe, expect, it } from 'vitest';
import type { Feed, StoredRecord } from '../../packages/engine/src/index.js';
import { type Kernels, loadKernels, tsKernels } from '../../packages/engine/src/kernels/index.js';
import { collect, openStore, temporaryDirectory, text } from '../support/store.js';

/**
 * Kernels whose durable writes wait while held: every `writeDurable` that starts between `hold()`
 * and `release()` is noted in `held` and waits for the release before it writes anything.
 */
function holdingKernels(base: Kernels) {
  let gate: { readonly released: Promise<void>; readonly open: () => void } | undefined;
  const held: { position: number; bytes: number }[] = [];
  const kernels: Kernels = {
    ...base,
    async writeDurable(fd, position, buffers) {
      const waiting = gate;
      if (waiting) {
        held.push({ position, bytes: buffers.reduce((total, buffer) => total + buffer.length, 0) });
        await waiting.released;
      }
      return base.writeDurable(fd, position, buffers);
    },
  };
  return {
    kernels,
    held,
    hold(): void {
      let open!: () => void;
      const released = new Promise<void>((resolve) => (open = resolve));
      gate = { released, open };
    },
    release(): void {
      const waiting = gate;
      gate = undefined;
      waiting?.open();
    },
  };
}

/** Whether `promise` has settled, as a flag that a `.then` sets. */
function track<T>(promise: Promise<T>): { readonly settled: boolean; readonly promise: Promise<T> } {
  const state = { settled: false, promise };
  promise.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}

/**
 * Lets the append run as far as it can: many turns of the event loop (each drains the microtasks
 * queued before it), and a few milliseconds for any file-system call it makes on the way.
 */
async function letItRun(): Promise<void> {
  for (let turn = 0; turn < 50; turn++) await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setTimeout(resolve, 20));
  for (let turn = 0; turn < 50; turn++) await new Promise((resolve) => setImmediate(resolve));
}

async function payloads(read: AsyncIterable<StoredRecord>): Promise<string[]> {
  const out: string[] = [];
  for await (const record of read) out.push(text(record.payload));
  return out;
}

describe.each([
  ['ts', tsKernels],
  ['native', loadKernels('native')],
] as const)('an append whose durable write is held (%s kernels)', (_, base) => {
  it('stays pending, and no read sees its record, until the write is released', async () => {
    const directory = temporaryDirectory();
    const holder = holdingKernels(base);
    const store = await openStore(directory, { kernels: holder.kernels });
    const feed = await store.createFeed('f');
    // A first append, written freely, so the segment files exist and the held write is the
    // append's own.
    await feed.append([{ payload: 'durable' }]);

    holder.hold();
    const append = track(feed.append([{ payload: 'held' }]));
    await letItRun();
    expect(holder.held.length, 'the append reached its durable write').toBeGreaterThan(0);
    expect(append.settled, 'the append resolved while its durable write was held').toBe(false);
    // Reads run while the write is held, through the same handle and through another one.
    const other: Feed = await store.feed('f');
    expect(await payloads(other.read())).toEqual(['durable']);
    expect(await payloads(feed.read())).toEqual(['durable']);
    expect(await feed.info()).toMatchObject({ commits: 1, records: 1 });
    expect(await collect(feed.commits())).toHaveLength(1);
    expect(append.settled).toBe(false);

    holder.release();
    await expect(append.promise).resolves.toMatchObject({ commit: 2, firstPosition: 2, records: 1 });
    expect(await payloads(other.read())).toEqual(['durable', 'held']);
    await store.close();

    const reopened = await openStore(directory, { kernels: base });
    expect(await payloads((await reopened.feed('f')).read())).toEqual(['durable', 'held']);
    await reopened.close();
  });

  it('applies to a stream append too: pending, unseen in the open stream, then acknowledged', async () => {
    const directory = temporaryDirectory();
    const holder = holdingKernels(base);
    const store = await openStore(directory, { kernels: holder.kernels });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'writer', ttlMs: 60_000 });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'first' }], { token });

    holder.hold();
    const append = track(stream.append([{ payload: 'held' }], { token }));
    await letItRun();
    expect(holder.held.length, 'the stream append reached its durable write').toBeGreaterThan(0);
    expect(append.settled, 'the stream append resolved while its durable write was held').toBe(false);
    // The open stream, read through the writer's handle and another, holds only the first batch.
    expect((await stream.read()).map((record) => text(record.payload))).toEqual(['first']);
    expect((await (await feed.stream(stream.id)).read()).map((record) => text(record.payload))).toEqual(['first']);
    expect(await stream.info()).toMatchObject({ state: 'open', records: 1 });
    expect(append.settled).toBe(false);

    holder.release();
    await expect(append.promise).resolves.toMatchObject({ firstSeq: 2, lastSeq: 2 });
    expect((await (await feed.stream(stream.id)).read()).map((record) => text(record.payload))).toEqual([
      'first',
      'held',
    ]);
    const commit = await stream.seal({ token });
    expect(commit.records).toBe(2);
    expect(await payloads(feed.read())).toEqual(['first', 'held']);
    await store.close();

    const reopened = await openStore(directory, { kernels: base });
    expect(await payloads((await reopened.feed('f')).read())).toEqual(['first', 'held']);
    await reopened.close();
  });
});
