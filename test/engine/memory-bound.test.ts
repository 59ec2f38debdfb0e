/**
 * Memory stays bounded by the active segment: once a finished segment's index, key dictionary
 * and fingerprint dictionary are written, nothing keeps that segment's in-memory tails alive.
 * Checked with weak references and a forced collection, so a reference kept by mistake (a
 * closure that captured a tail, say) fails here rather than as slow growth over millions of
 * records.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

v8.setFlagsFromString('--expose-gc');
const collectGarbage = vm.runInNewContext('gc') as () => void;

/** The writer's in-memory tails of the active segment (internal fields, read for this test only). */
interface Tails {
  index: { tail: object | undefined };
  keys: { tail: object | undefined };
  fingerprints: { tail: object | undefined };
}

describe('memory of finished segments', () => {
  it('is released once their index files are written', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 64 * 1024 });
    const feed = await store.createFeed('f');
    const writer = feed.writer as unknown as Tails & { idle(): Promise<void> };
    const record = (n: number) => ({
      payload: `record ${n} ${'.'.repeat(200)}`,
      key: `k${n}`,
      type: `t${n % 3}`,
      tags: [`tag-${n % 11}`],
    });

    await feed.append([record(0)]);
    await writer.idle();
    const firstTails = [writer.index.tail, writer.keys.tail, writer.fingerprints.tail].map((tail) => {
      expect(tail).toBeDefined();
      return new WeakRef(tail!);
    });
    // Enough records to fill several 64 KiB segments, so the first one is long finished.
    for (let n = 1; n <= 2_000; n += 50) await feed.append(Array.from({ length: 50 }, (_, at) => record(n + at)));
    await writer.idle();
    expect(writer.index.tail).not.toBe(firstTails[0].deref());

    collectGarbage();
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    expect(firstTails.map((tail) => tail.deref() === undefined)).toEqual([true, true, true]);
    // The finished segments still answer, from their files.
    expect((await feed.get('k7'))?.position).toBe(8);
    await store.close();
  });
});

describe('memory of a large seal', () => {
  it('is not kept by the group builders once the seal is written', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 64 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const lease = await feed.acquireLease({ holder: 'test' });
    const stream = await feed.openStream({ token: lease.token });
    // 24 MiB of distinct payloads: the seal's group outgrows what a builder may keep.
    const payloadBytes = 12 * 1024;
    const records = 2_048;
    for (let n = 0; n < records; n += 256) {
      await stream.append(
        Array.from({ length: 256 }, (_, at) => ({
          payload: `${n + at} `.padEnd(payloadBytes, 'x'),
          key: `k${n + at}`,
        })),
        { token: lease.token },
      );
    }
    const commit = await stream.seal({ token: lease.token });
    expect(commit.records).toBe(records);
    const builders = (
      feed as unknown as {
        view: { writer: { committer: { builders: Record<string, { writer: { capacity: number } }> } } };
      }
    ).view.writer.committer.builders;
    expect(Object.keys(builders).sort()).toEqual(['history', 'wal']);
    for (const builder of Object.values(builders))
      expect(builder.writer.capacity).toBeLessThanOrEqual(limits.writerRetainedBytesMax);
    // The handed-over group was written whole: the last record reads back, and so does one
    // written after the seal through the same builder.
    expect(text((await feed.get(`k${records - 1}`))!.payload)).toBe(`${records - 1} `.padEnd(payloadBytes, 'x'));
    await feed.append([{ payload: 'after', key: 'after' }], { token: lease.token });
    expect(text((await feed.get('after'))!.payload)).toBe('after');
    await store.close();
  });
});
