/**
 * A sealed history segment whose `SegmentEnd` a crash tore while the next segment's first group
 * was written (groups are pipelined) is whole: the next segment starts where it ends. It must
 * still get its summary. Without one it was read whole on every open, and tiering, which uploads
 * a segment with its summary and keeps only the summary when it evicts it, uploaded it without
 * one and then could not open it again.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { frameHeaderBytes, segmentHeaderBytes } from '../../packages/engine/src/limits.js';
import { FrameKind } from '../../packages/engine/src/storage/frame-kinds.js';
import { groupHeaderBytes, segmentEndGroupBytes } from '../../packages/engine/src/storage/groups.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

/**
 * Where each group of a segment starts, walked by the group headers' lengths (the frames after
 * a header: a `u32` after the header frame's length word, CRC and kind) up to the zeroed space.
 */
function groupStarts(bytes: Buffer): number[] {
  const starts: number[] = [];
  for (let at = segmentHeaderBytes; at + groupHeaderBytes <= bytes.length && bytes.readUInt32LE(at) !== 0; ) {
    starts.push(at);
    at += groupHeaderBytes + bytes.readUInt32LE(at + frameHeaderBytes + 1);
  }
  return starts;
}

describe('a sealed segment without its SegmentEnd', () => {
  it('gets its summary on open, and reads back whole', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    const payload = 'x'.repeat(400);
    // Enough 100-record commits to fill the first small segments and go on in a later one.
    for (let round = 0; round < 12; round++)
      await feed.append(
        Array.from({ length: 100 }, (_, at) => ({ payload: `${round}:${at}:${payload}`, key: `k${at}` })),
      );
    await store.close();

    const history = path.join(directory, 'feeds', 'f', 'history');
    const segments = fs
      .readdirSync(history)
      .filter((name) => name.endsWith('.hist'))
      .sort();
    expect(segments.length).toBeGreaterThanOrEqual(3);
    const sealed = path.join(history, segments[0]);
    const summary = sealed.replace(/\.hist$/, '.sum');
    expect(fs.existsSync(summary)).toBe(true);
    // The segment end torn, and its summary not yet written when the crash came.
    const bytes = fs.readFileSync(sealed);
    const last = groupStarts(bytes).at(-1)!;
    // The sealed segment's last group is its segment end, alone.
    expect(bytes[last + groupHeaderBytes + frameHeaderBytes]).toBe(FrameKind.SegmentEnd);
    expect(groupHeaderBytes + bytes.readUInt32LE(last + frameHeaderBytes + 1)).toBe(segmentEndGroupBytes);
    bytes.fill(0, last, last + segmentEndGroupBytes);
    fs.writeFileSync(sealed, bytes);
    fs.rmSync(summary);

    const reopened = await openStore(directory);
    const again = await reopened.feed('f');
    const records = await collect(again.read());
    expect(records).toHaveLength(1200);
    expect(records.map((record) => record.position)).toEqual(Array.from({ length: 1200 }, (_, at) => at + 1));
    expect((await reopened.verify('f'))[0].problems).toEqual([]);
    await reopened.close();
    expect(fs.existsSync(summary)).toBe(true);

    // The summary written stands for the segment: the next open uses it, reads the same, and
    // writes no summary again.
    const summaries = () =>
      fs
        .readdirSync(history)
        .filter((name) => name.endsWith('.sum'))
        .map((name) => `${name}:${fs.statSync(path.join(history, name)).mtimeMs}`);
    const before = summaries();
    expect(before.length).toBe(segments.length - 1);
    const third = await openStore(directory);
    expect(await collect((await third.feed('f')).read())).toHaveLength(1200);
    await third.close();
    expect(summaries()).toEqual(before);
  });
});
