/**
 * Active checkpoints: a feed closed cleanly writes its active history segment's commits and
 * stored payloads, and the next open reads the segment only from where it ended then — not every
 * commit frame of it — with the same commits, reads and payload deduplication as a full read. One
 * a kill left behind is a prefix: what came after is read as before. A damaged checkpoint, or one
 * the segment does not bear out (another feed's), is reported and passed over; a torn write after
 * it is still cut; a stale one (its segment finished) is deleted.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { bytesReadDuring } from '../support/file-reads.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Large enough that the active segment holds every commit of a test (several commit pages). */
const segmentBytes = 4 * 1024 * 1024;
const repeated = 'a payload stored once and referenced after'.repeat(40);

/** `count` one-record commits from `from`: keys, tags, and a payload repeated every seventh. */
async function write(feed: Feed, count: number, from = 0): Promise<void> {
  for (let n = from; n < from + count; n++) {
    await feed.append([
      { payload: n % 7 === 3 ? repeated : `record ${n}`, key: `k${n % 50}`, type: `t${n % 3}`, tags: [`g${n % 11}`] },
    ]);
  }
}

/** What a reader sees: every commit's number and positions, every record, a tag read and gets. */
async function view(feed: Feed): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const commit of feed.commits()) out.push(['commit', commit.commit, commit.firstPosition, commit.records]);
  for await (const record of feed.read()) out.push(['record', record.position, record.key, text(record.payload)]);
  for await (const record of feed.read({ filter: { tags: ['g4'] }, plan: 'index' })) out.push(['g4', record.position]);
  for (const key of ['k0', 'k17', 'k49']) out.push(['get', key, (await feed.get(key))?.position]);
  return out;
}

const historyOf = (directory: string) => path.join(directory, 'feeds', 'f', 'history');

function activeSegment(directory: string): string {
  const names = fs
    .readdirSync(historyOf(directory))
    .filter((name) => name.endsWith('.hist'))
    .sort();
  return path.join(historyOf(directory), names[names.length - 1]);
}

const checkpointOf = (segment: string) => segment.replace(/\.hist$/, '.ckpt');

/** Where the segment's written bytes end: the file is made at its capacity, zeros after. */
function writtenEnd(segment: string): number {
  const bytes = fs.readFileSync(segment);
  let end = bytes.length;
  while (end > 0 && bytes[end - 1] === 0) end--;
  return end;
}

/** A copy of the store as a kill would leave it (without the lock). */
function copyOf(directory: string): string {
  const copy = temporaryDirectory();
  fs.cpSync(directory, copy, { recursive: true });
  fs.rmSync(path.join(copy, 'LOCK'), { force: true });
  return copy;
}

/** The view of the store at `directory` with the checkpoint deleted: the active segment read whole. */
async function viewReadWhole(directory: string): Promise<unknown[]> {
  const copy = copyOf(directory);
  fs.rmSync(checkpointOf(activeSegment(copy)), { force: true });
  const store = await openStore(copy, { segmentBytes });
  const feed = await store.feed('f');
  expect(feed.summaryRebuilds).toEqual([]);
  const out = await view(feed);
  await store.close();
  return out;
}

/** Opens the store at `directory` and its feed `f`, counting the bytes read from each file meanwhile. */
async function reopenCountingReads(
  directory: string,
): Promise<{ store: Store; feed: Feed; read: Map<string, number> }> {
  let store: Store | undefined;
  let feed: Feed | undefined;
  const read = await bytesReadDuring(async () => {
    store = await openStore(directory, { segmentBytes });
    feed = await store.feed('f');
  });
  return { store: store!, feed: feed!, read };
}

/** A new store whose feed `f` took `commits` commits, closed cleanly (so with its checkpoints). */
async function closedFeed(commits: number): Promise<string> {
  const directory = temporaryDirectory();
  const store = await openStore(directory, { segmentBytes });
  await write(await store.createFeed('f'), commits);
  await store.close();
  return directory;
}

describe('active checkpoints', () => {
  // 256 commits fill two commit pages exactly; 601 leave a page part full.
  it.each([256, 601])('spare a clean reopen of %i commits reading the active segment', async (commits) => {
    const directory = await closedFeed(commits);
    let store!: Store;
    const segment = activeSegment(directory);
    expect(fs.existsSync(checkpointOf(segment))).toBe(true);
    const end = writtenEnd(segment);
    const size = fs.statSync(segment).size;

    const { read, ...opened } = await reopenCountingReads(directory);
    store = opened.store;
    const reopened: Feed | undefined = opened.feed;
    // From its last commit frame on: that frame, then the zeros after the written bytes.
    expect(read.get(segment)).toBeLessThan(size - end + 256);
    expect(read.get(checkpointOf(segment))).toBe(fs.statSync(checkpointOf(segment)).size);
    expect(reopened!.summaryRebuilds).toEqual([]);
    const expected = await viewReadWhole(directory);
    expect(expected.filter((entry) => (entry as unknown[])[0] === 'commit').length).toBe(commits);
    expect(await view(reopened!)).toEqual(expected);

    // Pack deduplication goes on from the checkpoint's payloads: a repeat costs no payload bytes.
    const before = writtenEnd(segment);
    await reopened!.append([{ payload: repeated }]);
    const repeat = writtenEnd(segment) - before;
    await reopened!.append([{ payload: `${repeated}, and fresh` }]);
    const fresh = writtenEnd(segment) - before - repeat;
    expect(repeat).toBeLessThan(fresh - repeated.length + 64);
    const after = await view(reopened!);
    await store.close();

    store = await openStore(directory, { segmentBytes });
    const [verification] = await store.verify('f');
    expect(verification?.problems).toEqual([]);
    expect(await view(await store.feed('f'))).toEqual(after);
    await store.close();
  });

  it('resume from a checkpoint a kill left behind, and pass over a damaged or foreign one', async () => {
    const directory = await closedFeed(300);
    let store!: Store;
    store = await openStore(directory, { segmentBytes });
    const open = await store.feed('f');
    await write(open, 40, 300);
    const killed = copyOf(directory);
    const expected = await view(open);
    await store.close();
    const segment = activeSegment(killed);
    const size = fs.statSync(segment).size;

    const { read, ...opened } = await reopenCountingReads(killed);
    store = opened.store;
    const recovered: Feed | undefined = opened.feed;
    // The 40 commits after the checkpoint are read; the 300 before it are not.
    expect(read.get(segment)).toBeLessThan(size - writtenEnd(segment) + 40 * 1024);
    expect(recovered!.summaryRebuilds).toEqual([]);
    expect(await view(recovered!)).toEqual(expected);
    await store.close();

    // A flipped byte: reported, and the segment read whole.
    const damaged = copyOf(killed);
    const file = checkpointOf(activeSegment(damaged));
    const bytes = fs.readFileSync(file);
    bytes[Math.floor(bytes.length / 2)] ^= 0x20;
    fs.writeFileSync(file, bytes);
    store = await openStore(damaged, { segmentBytes });
    let feed = await store.feed('f');
    expect(feed.summaryRebuilds.map(({ reason }) => reason)).toEqual(['active checkpoint: CRC mismatch']);
    expect(await view(feed)).toEqual(expected);
    await store.close();

    // Another feed's checkpoint of a segment with the same base, first commit and capacity: the
    // segment does not hold its last commit frame, so it is passed over.
    const other = temporaryDirectory();
    store = await openStore(other, { segmentBytes });
    await write(await store.createFeed('f'), 250, 5);
    await store.close();
    const foreign = copyOf(killed);
    fs.copyFileSync(checkpointOf(activeSegment(other)), checkpointOf(activeSegment(foreign)));
    store = await openStore(foreign, { segmentBytes });
    feed = await store.feed('f');
    expect(feed.summaryRebuilds.map(({ reason }) => reason)).toEqual([
      expect.stringMatching(
        /^active checkpoint: the segment does not bear it out: its last group at \d+ does not end at \d+/,
      ),
    ]);
    expect(await view(feed)).toEqual(expected);
    await store.close();
  });

  // Damage early in the segment, in a group later ones say was confirmed; and in the last group,
  // the one the checkpoint names. Neither is a torn write: the disk had confirmed both before
  // the checkpoint was written.
  it.each([
    { where: 'an early group', commits: 150, damaged: 13 },
    { where: 'the last group', commits: 120, damaged: 120 },
  ])(
    'leave damage in $where to the reads that reach it: never cut, as in a summarized segment',
    async ({ commits, damaged }) => {
      const directory = await closedFeed(commits);
      const segment = activeSegment(directory);
      const bytes = fs.readFileSync(segment);
      // Commit n holds `record n-1`, stored before any record whose text starts with it.
      const at = bytes.indexOf(`record ${damaged - 1}`);
      expect(at).toBeGreaterThan(0);
      bytes[at + 3] ^= 0x01;
      fs.writeFileSync(segment, bytes);

      const store = await openStore(directory, { segmentBytes });
      const feed = await store.feed('f');
      expect(feed.summaryRebuilds).toEqual([]);
      expect(feed.recovery).toEqual([]);
      await expect(feed.readCommit(damaged)).rejects.toMatchObject({ code: 'CORRUPT' });
      expect((await feed.readCommit(damaged - 1)).map((record) => text(record.payload))).toEqual([
        `record ${damaged - 2}`,
      ]);
      // `verify` reads the segment whole, without the checkpoint: at the end of the newest
      // segment it cannot tell the damage from a torn write, and says TORN_TAIL there.
      const [verification] = await store.verify('f');
      expect(verification?.problems.map((problem) => problem.code)).toContain(
        damaged === commits ? 'TORN_TAIL' : 'CORRUPT',
      );
      await store.close();
      expect(fs.readFileSync(segment).equals(bytes)).toBe(true);
    },
  );

  it('leave a torn write after the checkpointed end to be cut, as ever', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory, { segmentBytes });
    await write(await store.createFeed('f'), 200);
    const expected = await view(await store.feed('f'));
    await store.close();
    const segment = activeSegment(directory);
    const end = writtenEnd(segment);
    // A group that never finished: bytes after the end, no sound group header.
    const descriptor = fs.openSync(segment, 'r+');
    fs.writeSync(descriptor, Buffer.alloc(700, 0xab), 0, 700, end + 16);
    fs.closeSync(descriptor);

    store = await openStore(directory, { segmentBytes });
    const feed = await store.feed('f');
    expect(feed.summaryRebuilds).toEqual([]);
    expect(await view(feed)).toEqual(expected);
    await store.close();
    // Cut: the torn bytes are gone, and the feed verifies clean.
    expect(writtenEnd(segment)).toBe(end);
    store = await openStore(directory, { segmentBytes });
    const [verification] = await store.verify('f');
    expect(verification?.problems).toEqual([]);
    await store.close();
  });

  it('are deleted once their segment is finished, and not written again for nothing', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    await write(await store.createFeed('f'), 20);
    await store.close();
    const first = activeSegment(directory);
    expect(fs.existsSync(checkpointOf(first))).toBe(true);
    store = await openStore(directory);
    await write(await store.feed('f'), 600, 20);
    expect(activeSegment(directory)).not.toBe(first);
    // Deleted once the segment finished, without waiting for the next open.
    await vi.waitFor(() => expect(fs.existsSync(checkpointOf(first))).toBe(false));
    await store.close();
    store = await openStore(directory);
    await store.feed('f');
    const checkpoints = fs.readdirSync(historyOf(directory)).filter((name) => name.endsWith('.ckpt'));
    expect(checkpoints).toEqual([path.basename(checkpointOf(activeSegment(directory)))]);
    const written = fs.statSync(checkpointOf(activeSegment(directory)), { bigint: true });
    await store.close();
    // Nothing was written since it was taken: the close leaves it as it is.
    const after = fs.statSync(checkpointOf(activeSegment(directory)), { bigint: true });
    expect([after.ino, after.mtimeNs]).toEqual([written.ino, written.mtimeNs]);
  });
});
