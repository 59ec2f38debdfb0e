import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { openStore, temporaryDirectory, text } from '../support/store.js';

/** Index just past the last non-zero byte: where the written part of a preallocated segment ends. */
function writtenEnd(bytes: Uint8Array): number {
  let end = bytes.length;
  while (end > 0 && bytes[end - 1] === 0) end--;
  return end;
}

function onlyFile(directory: string): string {
  const names = fs.readdirSync(directory);
  expect(names).toHaveLength(1);
  return path.join(directory, names[0]);
}

/**
 * Builds a feed whose last run (of the log in `log`) spans [start, end) of `file`, then for every
 * byte offset of that run truncates the file there and, separately, flips the byte there, and
 * checks each damaged copy with `check` after reopening it.
 */
async function forEveryDamage(
  build: (directory: string) => Promise<{ file: string; start: number; end: number }>,
  check: (directory: string, damage: string) => Promise<void>,
): Promise<number> {
  const pristine = temporaryDirectory();
  const { file, start, end } = await build(pristine);
  const original = fs.readFileSync(file);
  const relative = path.relative(pristine, file);
  const copy = temporaryDirectory();
  let cases = 0;
  for (let offset = start; offset < end; offset++) {
    for (const damage of ['truncate', 'flip'] as const) {
      fs.rmSync(copy, { recursive: true, force: true });
      fs.cpSync(pristine, copy, { recursive: true });
      const target = path.join(copy, relative);
      if (damage === 'truncate') fs.truncateSync(target, offset);
      else {
        const bytes = Buffer.from(original);
        bytes[offset] ^= 0xff;
        fs.writeFileSync(target, bytes);
      }
      await check(copy, `${damage} at ${offset}`);
      cases++;
    }
  }
  return cases;
}

describe('torn tails', () => {
  it('recover a history segment to the last complete commit from any damage to its last run', async () => {
    const build = async (directory: string) => {
      const store = await openStore(directory);
      const feed = await store.createFeed('f');
      await feed.append([{ payload: 'one', key: 'k1', tags: ['a'] }]);
      await feed.append([{ payload: 'two', key: 'k2', type: 't' }]);
      await feed.append([{ payload: 'three', key: 'k3', tags: ['b', 'c'] }, { payload: 'four' }]);
      await store.close();
      const file = onlyFile(path.join(directory, 'feeds', 'f', 'history'));
      // The last run starts where its commit record says, and ends with the commit frame.
      const last = feed.writer.commits[2];
      const commitFrame = last.runStart + last.runBytes;
      const bytes = fs.readFileSync(file);
      const end = commitFrame + 8 + (bytes.readUInt32LE(commitFrame) & 0x7fff_ffff);
      return { file, start: last.runStart, end };
    };
    const cases = await forEveryDamage(build, async (directory, damage) => {
      const store = await openStore(directory);
      const feed = await store.feed('f');
      const commits = feed.commits();
      expect(commits.map((commit) => commit.commit), damage).toEqual([1, 2]);
      const cut = feed.recovery.reduce((sum, tail) => sum + tail.bytes, 0);
      if (!damage.startsWith('truncate at') || cut > 0) expect(cut, damage).toBeGreaterThan(0);
      // Recovery leaves a clean log: the next commit lands, and everything verifies.
      const next = await feed.append([{ payload: 'five' }]);
      expect(next).toMatchObject({ commit: 3, parent: 2, firstPosition: 3 });
      expect((await feed.readCommit(3)).map((record) => text(record.payload))).toEqual(['five']);
      const [verification] = await store.verify('f');
      expect(verification.problems, damage).toEqual([]);
      await store.close();
    });
    expect(cases).toBeGreaterThan(100);
  });

  it('recover a WAL segment to the last complete batch from any damage to its last run', async () => {
    let token = '';
    let streamId = '';
    const build = async (directory: string) => {
      const store = await openStore(directory);
      const feed = await store.createFeed('f');
      ({ token } = await feed.acquireLease({ holder: 'p', ttlMs: 24 * 3600 * 1000 }));
      const stream = await feed.openStream({ token });
      streamId = stream.id;
      await stream.append([{ payload: 'a' }, { payload: 'b', tags: ['x'] }], { token });
      const file = onlyFile(path.join(directory, 'feeds', 'f', 'wal'));
      const start = writtenEnd(fs.readFileSync(file));
      await stream.append([{ payload: 'c', key: 'k' }, { payload: 'd' }, { payload: 'e' }], { token });
      await store.close();
      return { file, start, end: writtenEnd(fs.readFileSync(file)) };
    };
    const cases = await forEveryDamage(build, async (directory, damage) => {
      const store = await openStore(directory);
      const feed = await store.feed('f');
      const stream = feed.stream(streamId);
      expect(stream.info(), damage).toMatchObject({ state: 'open', records: 2 });
      expect((await stream.read()).map((record) => text(record.payload))).toEqual(['a', 'b']);
      await stream.append([{ payload: 'retried' }], { token, expectedSeq: 3 });
      const commit = await stream.seal({ token });
      expect((await feed.readCommit(commit.commit)).map((record) => text(record.payload))).toEqual(['a', 'b', 'retried']);
      await store.close();
    });
    expect(cases).toBeGreaterThan(100);
  });
});
