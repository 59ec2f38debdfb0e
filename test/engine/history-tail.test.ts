/**
 * The unsealed tail as bytes (`storage/history-tail.ts`), without object storage: a writer hands
 * out the durable groups of its active segment (`historyTail`), a read-only view over a copy of
 * the feed takes the commits they add once they are written at their offsets (`catchUpTail`) —
 * every read then equals the writer's — and a damaged group, a group that does not continue the
 * chain, or an offset that is not a group's start is refused with a typed error, taking nothing.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { failure } from '../support/failure.js';
import { collect, openStore, recordShapes, temporaryDirectory } from '../support/store.js';

const segmentBytes = 1024 * 1024;

async function appendCommits(feed: Feed, commits: number, from: number): Promise<void> {
  for (let commit = 0; commit < commits; commit++)
    await feed.append(
      Array.from({ length: 40 }, (_, index) => {
        const n = from + commit * 40 + index;
        return { payload: `{"n":${n % 50}}`, key: `k${n % 31}`, type: `t${n % 3}`, tags: [`a${n % 5}`] };
      }),
    );
}

async function readsOf(feed: Feed, upTo: number) {
  return {
    raw: recordShapes(await collect(feed.read({ upTo }))),
    latest: recordShapes(await collect(feed.read({ upTo, mode: 'latest' }))),
    dedup: recordShapes(await collect(feed.read({ upTo, mode: 'dedup' }))),
    tagged: recordShapes(await collect(feed.read({ upTo, filter: { tags: ['a2'] }, plan: 'index' }))),
    got: recordShapes([(await feed.get('k7', { asOf: upTo }))!].filter(Boolean)),
  };
}

const headOf = async (feed: Feed) => (await feed.head())?.commit ?? 0;

/** A writer, and a read-only view over a copy of its feed made now (its active segment too). */
async function writerAndCopy(): Promise<{
  writer: Store;
  feed: Feed;
  copy: Store;
  view: Feed;
  file: string;
  base: number;
}> {
  const writerDirectory = temporaryDirectory();
  const writer = await openStore(writerDirectory, { segmentBytes });
  const feed = await writer.createFeed('f');
  await appendCommits(feed, 3, 0);
  await writer.close();
  const copyDirectory = temporaryDirectory();
  fs.cpSync(writerDirectory, copyDirectory, { recursive: true });
  fs.rmSync(path.join(copyDirectory, 'LOCK'), { force: true });
  const reopened = await openStore(writerDirectory, { segmentBytes });
  const copy = await openStore(copyDirectory, { readOnly: true, segmentBytes });
  const history = path.join(copyDirectory, 'feeds', 'f', 'history');
  const name = fs
    .readdirSync(history)
    .filter((entry) => entry.endsWith('.hist'))
    .sort()
    .at(-1)!;
  return {
    writer: reopened,
    feed: await reopened.feed('f'),
    copy,
    view: await copy.feed('f'),
    file: path.join(history, name),
    base: Number(name.slice(0, name.indexOf('.'))),
  };
}

/** Writes `bytes` at `offset` of `file`. */
function writeAt(file: string, bytes: Uint8Array, offset: number): void {
  const fd = fs.openSync(file, 'r+');
  fs.writeSync(fd, bytes, 0, bytes.length, offset);
  fs.closeSync(fd);
}

describe('the unsealed tail, as bytes', () => {
  it('a view takes the groups its writer hands out, and reads as the writer does', async () => {
    const { writer, feed, copy, view, file, base } = await writerAndCopy();
    expect(await headOf(view)).toBe(3);
    let from = fs.statSync(file).size;
    const first = await feed.historyTail({ base, from: 0, bytesMax: 1 << 20, waitMs: 0 });
    from = first.tail!.end;
    await appendCommits(feed, 5, 1000);
    // A small bound still sends whole groups: one at a time here.
    let rounds = 0;
    for (;;) {
      const answer = await feed.historyTail({ base, from, bytesMax: 64, waitMs: 0 });
      expect(answer.base).toBe(base);
      if (answer.tail!.end === from) break;
      writeAt(file, answer.tail!.bytes, from);
      from = answer.tail!.end;
      expect(await view.catchUpTail(base, from)).toBe(1);
      rounds++;
    }
    expect(rounds).toBe(5);
    expect(await headOf(view)).toBe(8);
    expect(await readsOf(view, 8)).toEqual(await readsOf(feed, 8));
    // Another segment's base is answered with the one that is active, and no bytes.
    expect(await feed.historyTail({ base: base + 1, from: 0, bytesMax: 64, waitMs: 0 })).toEqual({ base });
    await copy.close();
    await writer.close();
  });

  it('refuses an offset inside a group or past the durable end, and damaged or foreign groups', async () => {
    const { writer, feed, copy, view, file, base } = await writerAndCopy();
    const end = (await feed.historyTail({ base, from: 0, bytesMax: 1 << 20, waitMs: 0 })).tail!.end;
    await appendCommits(feed, 1, 500);
    const inside = await failure(() => feed.historyTail({ base, from: end + 5, bytesMax: 1 << 20, waitMs: 0 }));
    expect(inside.code).toBe('INVALID_ARGUMENT');
    const past = await failure(() => feed.historyTail({ base, from: end + (1 << 20), bytesMax: 1 << 20, waitMs: 0 }));
    expect(past.code).toBe('INVALID_ARGUMENT');

    const groups = (await feed.historyTail({ base, from: end, bytesMax: 1 << 20, waitMs: 0 })).tail!;
    // A flipped byte in the group: CORRUPT, and the view takes nothing.
    const damaged = Uint8Array.from(groups.bytes);
    damaged[Math.floor(damaged.length / 2)] ^= 0x40;
    writeAt(file, damaged, end);
    const corrupt = await failure(() => view.catchUpTail(base, groups.end));
    expect(corrupt.code).toBe('CORRUPT');
    expect(await headOf(view)).toBe(3);
    // The sound group then goes in.
    writeAt(file, groups.bytes, end);
    expect(await view.catchUpTail(base, groups.end)).toBe(1);
    expect(await headOf(view)).toBe(4);
    // The same group again after it (it names another offset, and a commit taken): CORRUPT, nothing taken.
    writeAt(file, groups.bytes, groups.end);
    const repeated = await failure(() => view.catchUpTail(base, groups.end + groups.bytes.length));
    expect(repeated.code).toBe('CORRUPT');
    expect(corrupt.message).toContain(file);
    expect(await headOf(view)).toBe(4);
    expect(await readsOf(view, 4)).toEqual(await readsOf(feed, 4));
    await copy.close();
    await writer.close();
  });

  it('waits for a commit when there is nothing new, up to waitMs', async () => {
    const { writer, feed, copy, base } = await writerAndCopy();
    const end = (await feed.historyTail({ base, from: 0, bytesMax: 1 << 20, waitMs: 0 })).tail!.end;
    const waiting = feed.historyTail({ base, from: end, bytesMax: 1 << 20, waitMs: 10_000 });
    await appendCommits(feed, 1, 900);
    const answer = await waiting;
    expect(answer.tail!.from).toBe(end);
    expect(answer.tail!.end).toBeGreaterThan(end);
    // Nothing comes: the wait ends with no bytes.
    const idle = await feed.historyTail({ base, from: answer.tail!.end, bytesMax: 1 << 20, waitMs: 50 });
    expect(idle.tail!.bytes.length).toBe(0);
    await copy.close();
    await writer.close();
  });
});
