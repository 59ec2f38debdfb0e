/**
 * The unsealed tail as bytes (`storage/history-tail.ts`), without object storage: a writer hands
 * out the durable groups of its active segment (`historyTail`), a read-only view over a copy of
 * the feed takes the commits they add once they are written at their offsets (`catchUpTail`) —
 * every read then equals the writer's — and a damaged group, a group that does not continue the
 * chain, or an offset that is not a group's start is refused with a typed error, taking nothing.
 * A segment the writer finished comes whole, its `SegmentEnd` last, and the view opens the next
 * segment in place when its first bytes are copied.
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
  writerDirectory: string;
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
    writerDirectory,
  };
}

/** Whether the writer in `directory` has a history segment after the one based at `base`. */
function rolledPast(directory: string, base: number): boolean {
  return fs
    .readdirSync(path.join(directory, 'feeds', 'f', 'history'))
    .some((name) => name.endsWith('.hist') && Number(name.slice(0, name.indexOf('.'))) > base);
}

/**
 * Copies the writer's segment based at `base` from its start into a file of its own beside
 * `file` (the copy's finished segment), sized as the writer's, as a follower does; returns what
 * the writer sent.
 */
async function copyNextSegment(feed: Feed, base: number, file: string, writerDirectory: string) {
  const first = (await feed.historyTail({ base, from: 0, bytesMax: 1 << 20, waitMs: 0 })).tail!;
  const name = `${String(base).padStart(path.basename(file).indexOf('.'), '0')}.hist`;
  const nextFile = path.join(path.dirname(file), name);
  fs.writeFileSync(nextFile, new Uint8Array(0));
  fs.truncateSync(nextFile, fs.statSync(path.join(writerDirectory, 'feeds', 'f', 'history', name)).size);
  writeAt(nextFile, first.bytes, 0);
  return first;
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
      expect(await view.catchUpTail(base, from, false)).toBe(1);
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
    const corrupt = await failure(() => view.catchUpTail(base, groups.end, false));
    expect(corrupt.code).toBe('CORRUPT');
    expect(await headOf(view)).toBe(3);
    // The sound group then goes in.
    writeAt(file, groups.bytes, end);
    expect(await view.catchUpTail(base, groups.end, false)).toBe(1);
    expect(await headOf(view)).toBe(4);
    // The same group again after it (it names another offset, and a commit taken): CORRUPT, nothing taken.
    writeAt(file, groups.bytes, groups.end);
    const repeated = await failure(() => view.catchUpTail(base, groups.end + groups.bytes.length, false));
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

  it('a finished segment comes with its end, and the view goes on in the next one in place', async () => {
    const { writer, feed, copy, view, file, base, writerDirectory } = await writerAndCopy();
    let from = (await feed.historyTail({ base, from: 0, bytesMax: 1 << 20, waitMs: 0 })).tail!.end;
    writeAt(file, (await feed.historyTail({ base, from: 0, bytesMax: 1 << 20, waitMs: 0 })).tail!.bytes, 0);
    // Commits until the writer rolls past the copied segment, and a few in the next.
    let head = 3;
    while (!rolledPast(writerDirectory, base)) {
      await appendCommits(feed, 20, head * 40);
      head += 20;
    }
    await appendCommits(feed, 2, head * 40);
    head += 2;
    // The finished segment's groups, a bounded answer at a time, until its end names the next.
    let next: { nextBase: number; nextBaseCommit: number } | undefined;
    let taken = 0;
    while (!next) {
      const answer = await feed.historyTail({ base, from, bytesMax: 16 * 1024, waitMs: 0 });
      expect(answer.base).toBe(base);
      writeAt(file, answer.tail!.bytes, from);
      taken += (await view.catchUpTail(base, answer.tail!.end, false))!;
      from = answer.tail!.end;
      next = answer.tail!.next;
    }
    expect(next.nextBaseCommit).toBe(3 + taken + 1);
    expect(await headOf(view)).toBe(3 + taken);
    // Past its end there is nothing more to ask for in it: groups written there are refused.
    const beyond = await failure(() => view.catchUpTail(base, from + 64, false));
    expect(beyond.code).toBe('CORRUPT');
    // The next segment, copied from its start into a file of its own as a follower does.
    const first = await copyNextSegment(feed, next.nextBase, file, writerDirectory);
    // Another base than the one after the finished segment is not the view's to take.
    expect(await view.catchUpTail(next.nextBase + 1, first.end, true)).toBeUndefined();
    expect(await view.catchUpTail(next.nextBase, first.end, true)).toBe(head - 3 - taken);
    expect(await headOf(view)).toBe(head);
    expect(await readsOf(view, head)).toEqual(await readsOf(feed, head));
    // A new read-only view of the copy reads it all the same.
    await copy.close();
    const again = await openStore(path.dirname(path.dirname(path.dirname(path.dirname(file)))), {
      readOnly: true,
      segmentBytes,
    });
    expect(await readsOf(await again.feed('f'), head)).toEqual(await readsOf(feed, head));
    await again.close();
    await writer.close();
  });

  it('a view of a copy whose newest segment is finished opens, and takes the next when it comes', async () => {
    const { writer, feed, copy, file, base, writerDirectory } = await writerAndCopy();
    await copy.close();
    const copyDirectory = path.dirname(path.dirname(path.dirname(path.dirname(file))));
    let head = 3;
    while (!rolledPast(writerDirectory, base)) {
      await appendCommits(feed, 20, head * 40);
      head += 20;
    }
    // The finished segment whole, as the writer has it, and no segment after it yet.
    const finished = await feed.historyTail({ base, from: 0, bytesMax: 64 << 20, waitMs: 0 });
    expect(finished.tail!.next).toBeDefined();
    writeAt(file, finished.tail!.bytes, 0);
    const next = finished.tail!.next!;
    // The successor missing is what a lost file looks like: `verify` reports it; a view waits for it.
    const checker = await openStore(copyDirectory, { readOnly: true, segmentBytes });
    const problems = (await checker.verify('f'))[0].problems;
    expect(problems.map((problem) => `${problem.code}: ${problem.message}`).join('\n')).toContain('is missing');
    await checker.close();
    const reader = await openStore(copyDirectory, { readOnly: true, segmentBytes });
    const view = await reader.feed('f');
    const copied = next.nextBaseCommit - 1;
    expect(await headOf(view)).toBe(copied);
    expect(await readsOf(view, copied)).toEqual(await readsOf(feed, copied));
    await appendCommits(feed, 1, head * 40);
    head += 1;
    const first = await copyNextSegment(feed, next.nextBase, file, writerDirectory);
    expect(await view.catchUpTail(next.nextBase, first.end, true)).toBe(head - copied);
    expect(await readsOf(view, head)).toEqual(await readsOf(feed, head));
    await reader.close();
    await writer.close();
  });
});
