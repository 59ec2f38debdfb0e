// Segments grow as a feed fills: a log's first segment is small, each next one doubles up to
// `segmentBytes`, so a feed of a few records costs kilobytes, not two full-size segments. Every
// segment is still preallocated whole: its file size is the capacity its header names.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const kib = 1024;
const mib = 1024 * 1024;

/** Each segment of a log, in order: its capacity (from its header) and its file's size. */
function segments(directory: string, feed: string, log: 'history' | 'wal'): { capacity: number; size: number }[] {
  const folder = path.join(directory, 'feeds', feed, log);
  const extension = log === 'history' ? '.hist' : '.wal';
  return fs
    .readdirSync(folder)
    .filter((name) => /^\d{16}\./.test(name) && name.endsWith(extension))
    .sort()
    .map((name) => {
      const bytes = fs.readFileSync(path.join(folder, name));
      // Header: magic (8), kind (4), version (4), base (8), base commit (8), capacity (8).
      return { capacity: Number(bytes.readBigUInt64LE(32)), size: bytes.length };
    });
}

/** Every file under `directory`, with its size. */
function tree(directory: string): string[] {
  return (fs.readdirSync(directory, { recursive: true }) as string[])
    .filter((name) => fs.statSync(path.join(directory, name)).isFile())
    .sort();
}

describe('segments that grow as a feed fills', () => {
  it('gives a feed of one record a first segment of segmentBytesFirst, not segmentBytes', async () => {
    const directory = temporaryDirectory();
    // The default segmentBytes (64 MiB): the size the segments would all have had.
    const store = await openStore(directory, { segmentBytes: limits.segmentBytesDefault });
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'one' }]);
    expect(limits.segmentBytesFirst).toBe(64 * kib);
    expect(segments(directory, 'f', 'history')).toEqual([
      { capacity: limits.segmentBytesFirst, size: limits.segmentBytesFirst },
    ]);
    expect((await feed.diskUse()).bytes).toBeLessThan(limits.segmentBytesFirst * 2);
    await store.close();
  });

  it('doubles each next history segment up to segmentBytes, and reads everything back after a reopen', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory, { segmentBytes: 1 * mib });
    let feed = await store.createFeed('f');
    // Random bytes, so that nothing is stored once for many records.
    const payload = () => crypto.randomBytes(2000).toString('hex');
    let written = 0;
    // Enough for 64 KiB + 128 KiB + 256 KiB + 512 KiB + 1 MiB and two more full-size segments.
    while (segments(directory, 'f', 'history').length < 7) {
      await feed.append(Array.from({ length: 8 }, (_, index) => ({ payload: `${written + index}:${payload()}` })));
      written += 8;
    }
    const capacities = [64 * kib, 128 * kib, 256 * kib, 512 * kib, 1 * mib, 1 * mib, 1 * mib];
    expect(segments(directory, 'f', 'history')).toEqual(capacities.map((capacity) => ({ capacity, size: capacity })));
    await store.close();
    // Growth goes on from the segments on disk: the next one is full size again.
    store = await openStore(directory, { segmentBytes: 1 * mib });
    feed = await store.feed('f');
    expect(feed.recovery).toEqual([]);
    const records = await collect(feed.read());
    expect(records.length).toBe(written);
    expect(records.map((record) => new TextDecoder().decode(record.payload).split(':')[0])).toEqual(
      records.map((_, index) => String(index)),
    );
    while (segments(directory, 'f', 'history').length < 8) await feed.append([{ payload: payload() }]);
    expect(segments(directory, 'f', 'history').at(-1)).toEqual({ capacity: 1 * mib, size: 1 * mib });
    expect((await store.verify('f'))[0]).toMatchObject({ ok: true, problems: [] });
    await store.close();
    // A spare zero-filled ahead of a roll never outlives the store.
    expect(tree(directory).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  });

  it('grows the WAL the same way, and keeps the stream it holds across its rolls', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { segmentBytes: 256 * kib });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'h' });
    const stream = await feed.openStream({ token });
    let batches = 0;
    while (segments(directory, 'f', 'wal').length < 4) {
      await stream.append([{ payload: crypto.randomBytes(2000) }, { payload: crypto.randomBytes(2000) }], { token });
      batches++;
    }
    const wal = segments(directory, 'f', 'wal');
    // The stream is open, so every WAL segment it has batches in is still live.
    expect(wal).toEqual([64 * kib, 128 * kib, 256 * kib, 256 * kib].map((capacity) => ({ capacity, size: capacity })));
    const commit = await stream.seal({ token });
    expect(commit.records).toBe(batches * 2);
    expect((await collect(feed.read())).length).toBe(batches * 2);
    await store.close();
  });

  it('takes a record of up to a quarter of segmentBytes in a small first segment, in a segment sized to hold it', async () => {
    const directory = temporaryDirectory();
    const segmentBytes = 1 * mib;
    const store = await openStore(directory, { segmentBytes });
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'small' }]);
    // The limit is a quarter of segmentBytes, not of the 64 KiB segment the feed has now.
    const big = new Uint8Array(200 * kib).fill(7);
    await feed.append([{ payload: big }]);
    await expect(feed.append([{ payload: new Uint8Array(segmentBytes / 4) }])).rejects.toMatchObject({
      code: 'RECORD_TOO_LARGE',
    });
    const history = segments(directory, 'f', 'history');
    expect(history[0]).toEqual({ capacity: 64 * kib, size: 64 * kib });
    // The next size would be 128 KiB: too small for the record, so the segment is sized to it.
    expect(history[1].capacity).toBeGreaterThan(200 * kib);
    expect(history[1].capacity).toBeLessThan(256 * kib);
    expect(history[1].size).toBe(history[1].capacity);
    await feed.append([{ payload: 'after' }]);
    const records = await collect(feed.read());
    expect(records.map((record) => record.payload.length)).toEqual([5, 200 * kib, 5]);
    expect(records[1].payload.every((byte) => byte === 7)).toBe(true);
    await store.close();
    const again = await openStore(directory, { segmentBytes });
    expect((await again.verify('f'))[0]).toMatchObject({ ok: true });
    await again.close();
  });
});
