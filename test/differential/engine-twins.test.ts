/**
 * Principle 5 at the level of the whole engine: the same workload, with the clock and ids
 * injected, leaves byte-identical data directories on the native kernels and on the ts kernels,
 * and each reads what the other wrote.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Kernels, Store } from '../../packages/engine/src/index.js';
import { ManualClock, openStore, sequentialIds, temporaryDirectory, text } from '../support/store.js';
import { native, ts } from './both.js';

async function workload(store: Store, clock: ManualClock): Promise<void> {
  const feed = await store.createFeed('events');
  const { token } = await feed.acquireLease({ holder: 'ingest', ttlMs: 24 * 3_600_000 });
  for (let hour = 0; hour < 6; hour++) {
    clock.advance(3_600_000);
    const stream = await feed.openStream({ token, message: `hour ${hour}` });
    for (let batch = 0; batch < 5; batch++) {
      clock.advance(1000);
      await stream.append(
        Array.from({ length: 40 }, (_, index) => ({
          payload: index % 7 === 0 ? 'repeated payload' : `h${hour} b${batch} r${index} ${'z'.repeat(index * 13)}`,
          key: `key-${index % 11}`,
          version: hour,
          tombstone: index === 39 && hour === 5,
          type: `type-${index % 3}`,
          tags: [`hour:${hour}`, `record:${index}`],
        })),
        { token },
      );
    }
    if (hour === 3) await stream.abort({ token });
    else await stream.seal({ token });
  }
  await feed.append([{ payload: new Uint8Array([0, 255, 254]), fingerprint: 'fp', timestamp: 42 }], { token });
}

function listFiles(directory: string): string[] {
  const files: string[] = [];
  const walk = (at: string) => {
    for (const name of fs.readdirSync(at).sort()) {
      const file = path.join(at, name);
      if (fs.statSync(file).isDirectory()) walk(file);
      else files.push(path.relative(directory, file));
    }
  };
  walk(directory);
  return files;
}

async function run(kernels: Kernels): Promise<string> {
  const directory = temporaryDirectory(`streamstack-twin-${kernels.name}-`);
  const clock = new ManualClock();
  const store = await openStore(directory, { kernels, clock: clock.read, newId: sequentialIds() });
  await workload(store, clock);
  await store.close();
  return directory;
}

describe('native and ts engines', () => {
  it('write byte-identical data directories for the same workload', async () => {
    const fromNative = await run(native);
    const fromTs = await run(ts);
    const files = listFiles(fromNative);
    expect(files).toEqual(listFiles(fromTs));
    expect(files.some((file) => file.includes('history'))).toBe(true);
    expect(files.some((file) => file.includes('wal'))).toBe(true);
    for (const file of files) {
      const a = fs.readFileSync(path.join(fromNative, file));
      const b = fs.readFileSync(path.join(fromTs, file));
      expect(a.equals(b), file).toBe(true);
    }
  });

  it('read what the other wrote', async () => {
    for (const [writer, reader] of [
      [native, ts],
      [ts, native],
    ] as const) {
      const directory = await run(writer);
      const store = await openStore(directory, { kernels: reader });
      const feed = await store.feed('events');
      expect(feed.commits()).toHaveLength(6);
      const records = await feed.readCommit(1);
      expect(records).toHaveLength(200);
      expect(text(records[1].payload)).toBe(`h0 b0 r1 ${'z'.repeat(13)}`);
      expect((await store.verify('events'))[0].problems).toEqual([]);
      await store.close();
    }
  });
});
