/**
 * Tail checkpoints: a feed closed cleanly writes what its indexes hold of the active segment, and
 * the next open replays none of its records (it reads the active segment once, to recover it, and
 * not its runs again), answering every read, lookup and condition as a full replay does. One
 * taken before later writes (what a kill leaves) is a prefix: only what came after is replayed.
 * A damaged checkpoint is reported and replayed past; a stale one (a segment no longer active) is
 * deleted.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { outcomeCode } from '../support/failure.js';
import { bytesReadDuring } from '../support/file-reads.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Commits of tagged, typed, keyed records (versions, tombstones, repeated payloads), several segments' worth. */
async function write(feed: Feed, commits: number, from = 0): Promise<void> {
  for (let commit = from; commit < from + commits; commit++) {
    await feed.append(
      Array.from({ length: 25 }, (_, index) => {
        const n = commit * 25 + index;
        return {
          payload: n % 9 === 4 ? 'a payload repeated'.repeat(12) : `record ${n} ${'.'.repeat(n % 120)}`,
          key: `k${n % 300}`,
          ...(n % 4 === 0 ? { version: n } : {}),
          ...(n % 37 === 5 ? { tombstone: true } : {}),
          type: `t${n % 5}`,
          tags: [
            `tag-${n % 7}`,
            `user-${n % 61}`,
            ...(commit === from + commits - 1 ? ['only-in-the-last-commit'] : []),
          ],
        };
      }),
    );
  }
}

/** Everything the indexes answer: tag and type reads, gets (as of earlier positions too), latest, dedup. */
async function answers(feed: Feed): Promise<unknown[]> {
  const out: unknown[] = [];
  const head = (await feed.head())!;
  for await (const record of feed.read({ filter: { tags: ['user-5'] }, plan: 'index' }))
    out.push(['user-5', record.position]);
  for await (const record of feed.read({ filter: { types: ['t3'], tags: ['tag-2'] }, plan: 'index' }))
    out.push(['t3', record.position]);
  for await (const record of feed.read({ filter: { tags: ['only-in-the-last-commit'] }, plan: 'index' }))
    out.push(['last', record.position]);
  for await (const record of feed.read({ mode: 'latest' })) out.push(['latest', record.position, record.key]);
  for await (const record of feed.read({ mode: 'dedup' })) out.push(['dedup', record.position, text(record.payload)]);
  for (const key of ['k0', 'k5', 'k150', 'k299', 'absent']) {
    out.push(['get', key, (await feed.get(key))?.position]);
    out.push(['get as of', key, (await feed.get(key, { asOf: head.commit - 3 }))?.position]);
  }
  return out;
}

const feedDirectory = (directory: string) => path.join(directory, 'feeds', 'f');

function activeSegment(directory: string): string {
  const names = fs
    .readdirSync(path.join(feedDirectory(directory), 'history'))
    .filter((name) => name.endsWith('.hist'))
    .sort();
  return names[names.length - 1];
}

const checkpointOf = (directory: string, segment: string) =>
  path.join(feedDirectory(directory), 'index', segment.replace('.hist', '.tail'));

/** The answers of the feed with its checkpoint deleted: a full replay of the active segment. */
async function replayedAnswers(directory: string, segment: string): Promise<unknown[]> {
  const copy = temporaryDirectory();
  fs.cpSync(directory, copy, { recursive: true });
  fs.rmSync(checkpointOf(copy, segment), { force: true });
  const store = await openStore(copy);
  const result = await answers(await store.feed('f'));
  await store.close();
  return result;
}

describe('tail checkpoints', () => {
  it('spare a clean reopen every replay of the active segment, with the same answers', async () => {
    const directory = temporaryDirectory();
    let store: Store = await openStore(directory);
    await write(await store.createFeed('f'), 40);
    await store.close();
    const segment = activeSegment(directory);
    expect(fs.existsSync(checkpointOf(directory, segment))).toBe(true);
    const size = fs.statSync(path.join(feedDirectory(directory), 'history', segment)).size;

    let reopened: Feed | undefined;
    const read = await bytesReadDuring(async () => {
      store = await openStore(directory);
      reopened = await store.feed('f');
    });
    // Read once whole to recover it (and its last commit frame's header, to check the checkpoint
    // against), never its runs again.
    expect(read.get(path.join(feedDirectory(directory), 'history', segment))).toBeLessThanOrEqual(size + 64);
    expect(read.get(checkpointOf(directory, segment))).toBe(fs.statSync(checkpointOf(directory, segment)).size);
    expect(reopened!.indexRebuilds).toEqual([]);
    const expected = await replayedAnswers(directory, segment);
    expect(expected.filter((answer) => (answer as unknown[])[0] === 'last').length).toBe(25);
    expect(await answers(reopened!)).toEqual(expected);
    // A condition on a tag only the checkpointed tail holds is refused, at its position.
    expect(
      await outcomeCode(
        reopened!.append([{ payload: 'x' }], { condition: { failIfMatch: { tags: ['only-in-the-last-commit'] } } }),
      ),
    ).toBe('CONDITION_FAILED');
    // And the feed goes on from it: new records join the tails the checkpoint gave.
    await write(reopened!, 3, 40);
    const after = await answers(reopened!);
    await store.close();
    const [verification] = await (store = await openStore(directory)).verify('f');
    expect(verification?.problems).toEqual([]);
    expect(await answers(await store.feed('f'))).toEqual(after);
    await store.close();
  });

  it('replay only what came after a checkpoint a kill left behind, and pass over a damaged one', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    const feed = await store.createFeed('f');
    await write(feed, 30);
    await store.close();
    store = await openStore(directory);
    const open = await store.feed('f');
    await write(open, 4, 30);
    // What a kill now leaves: the records acknowledged, the checkpoint of the last clean close.
    const killed = temporaryDirectory();
    fs.cpSync(directory, killed, { recursive: true });
    fs.rmSync(path.join(killed, 'LOCK'), { force: true });
    const expected = await answers(open);
    await store.close();
    const segment = activeSegment(killed);
    expect(fs.existsSync(checkpointOf(killed, segment))).toBe(true);

    store = await openStore(killed);
    const recovered = await store.feed('f');
    expect(recovered.indexRebuilds).toEqual([]);
    expect(await answers(recovered)).toEqual(expected);
    await store.close();

    // A flipped byte: reported, and the segment replayed as before checkpoints.
    const file = checkpointOf(killed, segment);
    const bytes = fs.readFileSync(file);
    bytes[Math.floor(bytes.length / 2)] ^= 0x20;
    fs.writeFileSync(file, bytes);
    store = await openStore(killed);
    const damaged = await store.feed('f');
    expect(damaged.indexRebuilds.map(({ reason }) => reason)).toEqual(['tail checkpoint: CRC mismatch']);
    expect(await answers(damaged)).toEqual(expected);
    await store.close();
  });

  it('are deleted once their segment is no longer the active one, and not written again for nothing', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    await write(await store.createFeed('f'), 5);
    await store.close();
    const first = activeSegment(directory);
    expect(fs.existsSync(checkpointOf(directory, first))).toBe(true);
    store = await openStore(directory);
    await write(await store.feed('f'), 60, 5);
    expect(activeSegment(directory)).not.toBe(first);
    await store.close();
    store = await openStore(directory);
    await store.feed('f');
    const checkpoints = fs
      .readdirSync(path.join(feedDirectory(directory), 'index'))
      .filter((name) => name.endsWith('.tail'));
    expect(checkpoints).toEqual([activeSegment(directory).replace('.hist', '.tail')]);
    const written = fs.statSync(checkpointOf(directory, activeSegment(directory)), { bigint: true });
    await store.close();
    // Nothing was written since it was taken: the close leaves it as it is.
    const after = fs.statSync(checkpointOf(directory, activeSegment(directory)), { bigint: true });
    expect([after.ino, after.mtimeNs]).toEqual([written.ino, written.mtimeNs]);
  });
});
