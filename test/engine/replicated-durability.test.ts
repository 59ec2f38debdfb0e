/**
 * `durability: 'replicated'` against a real S3-compatible server (versitygw): every acknowledged
 * group is also a slot object, contiguous from 1, holding the group's bytes; a new writer's fence
 * slot stops a writer that has not noticed its loss (a 412 on its next slot: `FENCED`, nothing
 * acknowledged, no slot of its own); while object storage is down a replicated feed stops
 * acknowledging and says why, then resumes, and a local feed beside it goes on.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { objectStoreSettings as engineObjectSettings } from '../../packages/engine/src/api/object-store-options.js';
import { publishedFeedConfig } from '../../packages/engine/src/coordinator/opening/follower-mirror.js';
import { listPacks, SlotPacks } from '../../packages/engine/src/coordinator/writing/slot-packs.js';
import { slotFoldersOf } from '../../packages/engine/src/coordinator/writing/slot-replication.js';
import { type ObjectStoreOptions, StreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { segmentFileName, segmentSuffix } from '../../packages/engine/src/storage/feed-layout.js';
import { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import { encodeSlot, type SlotObject } from '../../packages/engine/src/storage/slot-object.js';
import { outcomeCode } from '../support/failure.js';
import { startFaultProxy } from '../support/fault-proxy.js';
import { objectStoreSuite } from '../support/object-store.js';
import { allSlots } from '../support/slots.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('replicated-durability');

/**
 * Every slot of feed `feed` (whose local directory is under `data`), decoded, in slot order:
 * those that are objects of their own and those in packs. Packs are read after the slots: a
 * slot packed meanwhile is gone as an object, and in its pack.
 */
async function slotsOf(settings: ObjectStoreOptions, data: string, feed: string): Promise<SlotObject[]> {
  const config = JSON.parse(fs.readFileSync(path.join(data, 'feeds', feed, 'feed.json'), 'utf8')) as { tag: number };
  const store = new ObjectSegmentStore(engineObjectSettings(settings));
  try {
    return await allSlots(store, feed, config.tag);
  } finally {
    store.close();
  }
}

describe.skipIf(objects.missing)(objects.title('replicated durability'), () => {
  objects.start();

  it('stores every acknowledged group as a slot, contiguous, holding its bytes; a grant puts a fence', async () => {
    const data = temporaryDirectory();
    const settings = objects.settings();
    await using store = await openStore(data, { objectStore: settings });
    const feed = await store.createFeed('payments', { durability: 'replicated' });
    const config = JSON.parse(fs.readFileSync(path.join(data, 'feeds', 'payments', 'feed.json'), 'utf8'));
    expect(config.durability).toBe('replicated');

    const payloads = Array.from({ length: 40 }, (_, n) => `payment-${n}-${'p'.repeat(n)}`);
    // Concurrent one-shot appends share groups: fewer slots than appends, each one group.
    await Promise.all(payloads.slice(0, 20).map((payload) => feed.append([{ payload }])));
    const grant = await feed.acquireLease({ holder: 'ingest-1' });
    const stream = await feed.openStream({ token: grant.token });
    for (const payload of payloads.slice(20)) await stream.append([{ payload }], { token: grant.token });
    await stream.seal({ token: grant.token });

    const slots = await slotsOf(settings, data, 'payments');
    expect(slots.map((slot) => slot.slot)).toEqual(slots.map((_, index) => index + 1));
    const info = (await feed.info()).replication;
    expect(info).toMatchObject({ lastSlot: slots.length, slotsWritten: slots.length, stalled: null });
    const fences = slots.filter((slot) => slot.kind === 'fence');
    expect(fences).toEqual([{ kind: 'fence', epoch: grant.epoch, slot: expect.any(Number) }]);
    // Every group of the history and the WAL went up: each payload is in a slot of its lane.
    const text = (lane: string) =>
      slots
        .flatMap((slot) =>
          slot.kind === 'group' && slot.lane === lane ? [Buffer.from(slot.bytes).toString('latin1')] : [],
        )
        .join('');
    for (const payload of payloads.slice(0, 20)) expect(text('history')).toContain(payload);
    for (const payload of payloads.slice(20)) {
      expect(text('wal')).toContain(payload);
      // The seal copied the stream's records into a history run, and that group went up too.
      expect(text('history')).toContain(payload);
    }
    // A group's bytes are the bytes at its place in the local segment.
    const group = slots.find((slot) => slot.kind === 'group' && slot.lane === 'history');
    if (group?.kind !== 'group') throw new Error('no history group');
    const local = fs.readFileSync(
      path.join(data, 'feeds', 'payments', 'history', segmentFileName(group.segment, segmentSuffix.history)),
    );
    expect(Buffer.compare(local.subarray(group.offset, group.offset + group.bytes.length), group.bytes)).toBe(0);
  });

  it('a writer that has not noticed a new writer finds its next slot fenced: FENCED, nothing acknowledged', async () => {
    const dataA = temporaryDirectory();
    const settings = objects.settings();
    const storeA = await openStore(dataA, { objectStore: settings });
    const feedA = await storeA.createFeed('payments', { durability: 'replicated' });
    await feedA.append([{ payload: 'a1' }]);
    await feedA.append([{ payload: 'a2' }]);
    const before = (await feedA.info()).commits;

    // A standby restored from the writer's state takes the lease: its first slot is a fence.
    const dataB = temporaryDirectory();
    fs.cpSync(dataA, dataB, { recursive: true, filter: (source) => path.basename(source) !== 'LOCK' });
    const storeB = await openStore(dataB, { objectStore: settings });
    const feedB = await storeB.feed('payments');
    const grant = await feedB.acquireLease({ holder: 'standby' });

    // The old writer (no lease of its own, so nothing told it) tries to go on.
    const refused = await feedA.append([{ payload: 'a3 from the zombie' }]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StreamStackError);
    expect((refused as StreamStackError).code).toBe('FENCED');
    expect((refused as StreamStackError).message).toContain(`epoch ${grant.epoch}`);
    expect(await outcomeCode(feedA.append([{ payload: 'a4' }]))).toBe('FENCED');
    expect((await feedA.info()).commits).toBe(before);

    // No slot holds the zombie's write; the fence is the newest slot.
    const slots = await slotsOf(settings, dataA, 'payments');
    expect(slots.at(-1)).toMatchObject({ kind: 'fence', epoch: grant.epoch });
    expect(
      slots.some((slot) => slot.kind === 'group' && Buffer.from(slot.bytes).toString('latin1').includes('zombie')),
    ).toBe(false);
    await storeA.close();

    // Opened again, the old writer sees the newer epoch in the slots and stays fenced.
    const reopened = await openStore(dataA, { objectStore: settings });
    const reopenedFeed = await reopened.feed('payments');
    expect(await outcomeCode(reopenedFeed.append([{ payload: 'a5' }]))).toBe('FENCED');
    // The epoch found in the slots is its floor now: no grant of its own could reuse it.
    expect((await reopenedFeed.info()).epoch).toBe(grant.epoch);
    await reopened.close();

    // The new writer writes on after its fence.
    await feedB.append([{ payload: 'b1' }], { token: grant.token });
    const after = await slotsOf(settings, dataB, 'payments');
    expect(after.map((slot) => slot.slot)).toEqual(after.map((_, index) => index + 1));
    expect(after.at(-1)).toMatchObject({ kind: 'group', epoch: grant.epoch });
    await storeB.close();
  });

  it('object storage down: a replicated feed stops acknowledging and says why, then resumes; a local feed goes on', async () => {
    const data = temporaryDirectory();
    const settings = objects.settings();
    await using store = await openStore(data, { objectStore: settings });
    const replicated = await store.createFeed('payments', { durability: 'replicated' });
    const local = await store.createFeed('clicks');
    await replicated.append([{ payload: 'before' }]);

    await objects.server().halt();
    let acknowledged = false;
    let pending: Promise<unknown> | undefined;
    try {
      pending = replicated.append([{ payload: 'during' }]).then((commit) => {
        acknowledged = true;
        return commit;
      });
      // The local feed acknowledges as ever.
      await local.append([{ payload: 'click' }]);
      const deadline = Date.now() + 15_000;
      while ((await replicated.info()).replication?.stalled == null && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 50));
      expect((await replicated.info()).replication?.stalled).toMatch(/waits for object storage/);
      expect(acknowledged).toBe(false);
    } finally {
      await objects.server().resume();
    }
    await pending;
    expect(acknowledged).toBe(true);
    expect((await replicated.info()).replication?.stalled).toBeNull();
    const slots = await slotsOf(settings, data, 'payments');
    expect(slots.map((slot) => slot.slot)).toEqual(slots.map((_, index) => index + 1));
    expect(
      Buffer.from(slots.map((slot) => (slot.kind === 'group' ? Buffer.from(slot.bytes) : '')).join('')).toString(),
    ).toContain('during');
  }, 60_000);

  it('puts the feed (feed.json) in object storage before its first slot: no acknowledged write is where a takeover cannot find it', async () => {
    const proxy = await startFaultProxy(objects.server().endpoint);
    try {
      // The feed's pointer to its folder cannot be stored; its slots could be.
      proxy.refuse = (method, url) => method === 'PUT' && url.includes('/feeds/payments/feed.json');
      const data = temporaryDirectory();
      const settings = objects.settings({ endpoint: proxy.endpoint });
      await using store = await openStore(data, { objectStore: settings });
      const written = store
        .createFeed('payments', { durability: 'replicated' })
        .then((feed) => feed.append([{ payload: 'unpublished' }]));
      expect(await outcomeCode(written)).toBe('UNAVAILABLE');
      expect(await slotsOf(settings, data, 'payments')).toEqual([]);
      // Once it can be stored, the feed opens and acknowledges, and a takeover would find it.
      proxy.refuse = undefined;
      const feed = await store.feed('payments');
      await feed.append([{ payload: 'published' }]);
      const objectStore = new ObjectSegmentStore(engineObjectSettings(settings));
      try {
        expect((await publishedFeedConfig(objectStore, 'payments'))?.tag).toBe(
          JSON.parse(fs.readFileSync(path.join(data, 'feeds', 'payments', 'feed.json'), 'utf8')).tag,
        );
      } finally {
        objectStore.close();
      }
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it("retires slots once their history is in tiered segments, never an open stream's, never the newest", async () => {
    const data = temporaryDirectory();
    const settings = objects.settings();
    const store = await openStore(data, { objectStore: settings });
    const feed = await store.createFeed('payments', { durability: 'replicated' });
    const batch = (n: number) => [{ payload: `payment ${n} ${'x'.repeat(400)}`, key: `k${n % 7}` }];
    // A stream opened first and left open: its WAL groups must outlive every retirement.
    const grant = await feed.acquireLease({ holder: 'ingest-1', ttlMs: 600_000 });
    const stream = await feed.openStream({ token: grant.token });
    await stream.append([{ payload: 'held open' }], { token: grant.token });
    for (let n = 0; n < 400; n++) await feed.append(batch(n), { token: grant.token });
    await feed.tiered();
    const before = await slotsOf(settings, data, 'payments');
    // Stores after the upload look for slots to retire.
    for (let n = 400; n < 480; n++) await feed.append(batch(n), { token: grant.token });
    await vi.waitFor(async () => expect((await feed.info()).replication?.slotsRetired).toBeGreaterThan(0), {
      timeout: 10_000,
    });
    const after = await slotsOf(settings, data, 'payments');
    const info = (await feed.info()).replication!;
    // Most slots went into packs (one object per run of them) before their retirement.
    expect(info.slotsPacked).toBeGreaterThan(0);
    // A prefix went, contiguous from there to the newest.
    expect(after.map((slot) => slot.slot)).toEqual(
      Array.from({ length: after.length }, (_, index) => info.slotsRetired + 1 + index),
    );
    expect(after.at(-1)?.slot).toBe(info.lastSlot);
    // The open stream's frames are still there, and so is every group of the segment being written.
    const kept = new Set(after.map((slot) => slot.slot));
    const walOfStream = before.filter(
      (slot) =>
        slot.kind === 'group' &&
        slot.lane === 'wal' &&
        Buffer.from(slot.bytes).toString('latin1').includes('held open'),
    );
    expect(walOfStream.length).toBeGreaterThan(0);
    for (const slot of walOfStream) expect(kept.has(slot.slot)).toBe(true);
    const active = Math.max(
      ...before.flatMap((slot) => (slot.kind === 'group' && slot.lane === 'history' ? [slot.segment] : [])),
    );
    for (const slot of before)
      if (slot.kind === 'group' && slot.lane === 'history' && slot.segment === active)
        expect(kept.has(slot.slot)).toBe(true);

    // Sealed, its records are in a history group: once that is uploaded, the stream's slots go too.
    await stream.seal({ token: grant.token });
    for (let n = 480; n < 900; n++) await feed.append(batch(n), { token: grant.token });
    await feed.tiered();
    for (let n = 900; n < 980; n++) await feed.append(batch(n), { token: grant.token });
    await vi.waitFor(
      async () => {
        const oldest = (await slotsOf(settings, data, 'payments'))[0]!.slot;
        for (const slot of walOfStream) expect(slot.slot).toBeLessThan(oldest);
      },
      { timeout: 10_000 },
    );
    await store.close();

    // Slots found at open go once the history up to the head at open is uploaded.
    const reopened = await openStore(data, { objectStore: settings });
    const again = await reopened.feed('payments');
    const found = await slotsOf(settings, data, 'payments');
    for (let n = 980; n < 1400; n++) await again.append(batch(n), { token: grant.token });
    await again.tiered();
    for (let n = 1400; n < 1480; n++) await again.append(batch(n), { token: grant.token });
    await vi.waitFor(
      async () => {
        const oldest = (await slotsOf(settings, data, 'payments'))[0]!.slot;
        expect(oldest).toBeGreaterThan(found.at(-1)!.slot);
      },
      { timeout: 10_000 },
    );
    await reopened.close();
  }, 120_000);

  it("retires a pack another writer stored after this one listed the packs (a fenced writer's, resumed)", async () => {
    const settings = objects.settings();
    const store = new ObjectSegmentStore(engineObjectSettings(settings));
    try {
      const folders = slotFoldersOf(store, 'zombie', 1);
      const encoded = (slot: number) => encodeSlot(tsKernels, { kind: 'fence', epoch: 1, slot });
      const mine = new SlotPacks(tsKernels, folders);
      await mine.found();
      // The fenced writer packs slots 1 to 64 after this writer listed the packs at open.
      const theirs = new SlotPacks(tsKernels, folders);
      await theirs.write(
        Array.from({ length: 64 }, (_, index) => encoded(index + 1)),
        1,
      );
      expect(await listPacks(folders.packs)).toHaveLength(1);
      await mine.retireThrough(100);
      expect(await listPacks(folders.packs)).toEqual([]);
    } finally {
      store.close();
    }
  });

  it('refuses a replicated feed without object storage, and a durability it does not know', async () => {
    await using bare = await openStore(temporaryDirectory());
    expect(await outcomeCode(bare.createFeed('payments', { durability: 'replicated' }))).toBe('INVALID_ARGUMENT');
    expect(await outcomeCode(bare.createFeed('payments', { durability: 'quorum' as 'local' }))).toBe(
      'INVALID_ARGUMENT',
    );
    expect(await bare.feedNames()).toEqual([]);
  });
});
