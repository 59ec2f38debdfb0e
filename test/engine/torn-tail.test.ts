import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Kernels, loadKernels } from '../../packages/engine/src/index.js';
import { groupHeaderBytes } from '../../packages/engine/src/storage/groups.js';
import { collect, openStore, temporaryDirectory, text } from '../support/store.js';

/** Index just past the last non-zero byte: where the written part of a preallocated segment ends. */
function writtenEnd(bytes: Uint8Array): number {
  let end = bytes.length;
  while (end > 0 && bytes[end - 1] === 0) end--;
  return end;
}

/**
 * The one segment in `directory`, as a crash leaves it. A torn write comes from a crash, which
 * leaves no checkpoint of the groups it tore: a clean close checkpoints only bytes the disk
 * confirmed, which no later power loss can tear (damage there is corruption, see
 * active-checkpoint.test.ts). So the checkpoint the test's clean close wrote is removed.
 */
function onlyFile(directory: string): string {
  for (const name of fs.readdirSync(directory)) if (name.endsWith('.ckpt')) fs.rmSync(path.join(directory, name));
  const names = fs.readdirSync(directory);
  expect(names).toHaveLength(1);
  return path.join(directory, names[0]);
}

/**
 * Builds a feed whose last group write spans [start, end) of `file`, then for every byte offset
 * of that write damages a copy the ways a torn write can — the bytes from there to the end of
 * the write lost (zeros: the file was preallocated), or one byte there garbled — and checks each
 * copy with `check` after reopening it. The cut must start exactly where the write began.
 */
async function forEveryDamage(
  build: (directory: string) => Promise<{ file: string; start: number; end: number }>,
  check: (directory: string, damage: string, cut: { offset: number; file: string }) => Promise<void>,
): Promise<number> {
  const pristine = temporaryDirectory();
  const { file, start, end } = await build(pristine);
  const original = fs.readFileSync(file);
  const relative = path.relative(pristine, file);
  const copy = temporaryDirectory();
  let cases = 0;
  for (let offset = start; offset < end; offset++) {
    for (const damage of ['zero', 'flip'] as const) {
      fs.rmSync(copy, { recursive: true, force: true });
      fs.cpSync(pristine, copy, { recursive: true });
      const target = path.join(copy, relative);
      const bytes = Buffer.from(original);
      if (damage === 'zero') bytes.fill(0, offset, end);
      else bytes[offset] ^= 0xff;
      fs.writeFileSync(target, bytes);
      await check(copy, `${damage} at ${offset}`, { offset: start, file: target });
      cases++;
    }
  }
  return cases;
}

/** A write lost whole leaves nothing to cut; otherwise the cut starts where the write began. */
function expectCut(
  recovery: readonly { file: string; offset: number }[],
  damage: string,
  expected: { offset: number; file: string },
): void {
  if (damage === `zero at ${expected.offset}`) {
    expect(recovery, damage).toEqual([]);
    return;
  }
  expect(recovery, damage).toHaveLength(1);
  expect(recovery[0], damage).toMatchObject({ file: fs.realpathSync(expected.file), offset: expected.offset });
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
      // The last group is the last run: it begins with the group header, just before the run,
      // and ends where the written bytes end.
      const last = feed.writer.published.commits.at(3);
      return { file, start: last.runStart - groupHeaderBytes, end: writtenEnd(fs.readFileSync(file)) };
    };
    const cases = await forEveryDamage(build, async (directory, damage, expected) => {
      const store = await openStore(directory);
      const feed = await store.feed('f');
      const commits = await collect(feed.commits());
      expect(
        commits.map((commit) => commit.commit),
        damage,
      ).toEqual([1, 2]);
      expectCut(feed.recovery, damage, expected);
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
      // The next group write begins where the written bytes end now.
      const start = writtenEnd(fs.readFileSync(file));
      await stream.append([{ payload: 'c', key: 'k' }, { payload: 'd' }, { payload: 'e' }], { token });
      await store.close();
      return { file, start, end: writtenEnd(fs.readFileSync(file)) };
    };
    const cases = await forEveryDamage(build, async (directory, damage, expected) => {
      const store = await openStore(directory);
      const feed = await store.feed('f');
      expectCut(feed.recovery, damage, expected);
      const stream = await feed.stream(streamId);
      expect(await stream.info(), damage).toMatchObject({ state: 'open', records: 2 });
      expect((await stream.read()).map((record) => text(record.payload))).toEqual(['a', 'b']);
      await stream.append([{ payload: 'retried' }], { token, expectedSeq: 3 });
      const commit = await stream.seal({ token });
      expect((await feed.readCommit(commit.commit)).map((record) => text(record.payload))).toEqual([
        'a',
        'b',
        'retried',
      ]);
      await store.close();
    });
    expect(cases).toBeGreaterThan(100);
  });
});

/** Kernels whose next durable write, once armed, reaches the file and then waits for `release`. */
function holdingKernels(base: Kernels = loadKernels()) {
  let armed = false;
  let release: (() => void) | undefined;
  return {
    kernels: {
      ...base,
      async writeDurable(fd: number, position: number, buffers: readonly Uint8Array[]) {
        if (!armed) return base.writeDurable(fd, position, buffers);
        armed = false;
        await base.writeDurable(fd, position, buffers);
        await new Promise<void>((resolve) => (release = resolve));
      },
    } as Kernels,
    hold: () => (armed = true),
    release: () => release?.(),
  };
}

const until = async (condition: () => boolean) => {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 1));
};

/**
 * A feed whose last two history groups were in flight together: commit 3's group is held in
 * its fdatasync while commit 4's is written and synced behind it (`pipelined`), or commit 4 is
 * appended only once commit 3 is acknowledged (not pipelined). Returns where each group lies.
 */
async function lastTwoGroups(directory: string, pipelined: boolean) {
  const holding = holdingKernels();
  const store = await openStore(directory, { kernels: holding.kernels });
  const feed = await store.createFeed('f');
  await feed.append([{ payload: 'one', key: 'k1', tags: ['a'] }]);
  await feed.append([{ payload: 'two', key: 'k2', type: 't' }]);
  if (pipelined) {
    holding.hold();
    const third = feed.append([{ payload: 'three', key: 'k3', tags: ['b', 'c'] }, { payload: 'four' }]);
    await until(() => feed.groupCommitStats().inFlight === 1);
    const fourth = feed.append([{ payload: 'five', key: 'k1' }]);
    await until(() => feed.groupCommitStats().pipelined === 1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    holding.release();
    await Promise.all([third, fourth]);
  } else {
    await feed.append([{ payload: 'three', key: 'k3', tags: ['b', 'c'] }, { payload: 'four' }]);
    await feed.append([{ payload: 'five', key: 'k1' }]);
  }
  expect(feed.groupCommitStats().pipelined).toBe(pipelined ? 1 : 0);
  await store.close();
  const file = onlyFile(path.join(directory, 'feeds', 'f', 'history'));
  const start = (commit: number) => feed.writer.published.commits.at(commit).runStart - groupHeaderBytes;
  return {
    file,
    second: { start: start(2), end: start(3) },
    third: { start: start(3), end: start(4) },
    fourth: { start: start(4), end: writtenEnd(fs.readFileSync(file)) },
  };
}

describe('torn tails of pipelined groups', () => {
  it('cut both groups from where the first began when the first is torn, and only the second when it is', async () => {
    const pristine = temporaryDirectory();
    const { file, third, fourth } = await lastTwoGroups(pristine, true);
    const original = fs.readFileSync(file);
    const copy = temporaryDirectory();
    let cases = 0;
    for (const [group, kept] of [
      [third, [1, 2]],
      [fourth, [1, 2, 3]],
    ] as const) {
      for (let offset = group.start; offset < group.end; offset++) {
        for (const damage of ['zero', 'flip'] as const) {
          fs.rmSync(copy, { recursive: true, force: true });
          fs.cpSync(pristine, copy, { recursive: true });
          const target = path.join(copy, path.relative(pristine, file));
          const bytes = Buffer.from(original);
          // A torn write of one group: its bytes from here on lost, or one of them garbled.
          if (damage === 'zero') bytes.fill(0, offset, group.end);
          else bytes[offset] ^= 0xff;
          // Zeros over bytes that were zeros already (a group's last bytes may be) change nothing.
          if (bytes.equals(original)) continue;
          fs.writeFileSync(target, bytes);
          const what = `${damage} at ${offset} of the ${group === third ? 'first' : 'second'} group`;
          const store = await openStore(copy);
          const feed = await store.feed('f');
          expect(
            (await collect(feed.commits())).map((commit) => commit.commit),
            what,
          ).toEqual(kept);
          // Lost whole, the second group leaves nothing to cut; anything else is cut from the
          // start of the first damaged group, the sound second group behind a torn first with it.
          if (group === fourth && damage === 'zero' && offset === fourth.start) expect(feed.recovery, what).toEqual([]);
          else expect(feed.recovery, what).toMatchObject([{ file: fs.realpathSync(target), offset: group.start }]);
          const next = await feed.append([{ payload: 'next' }]);
          expect(next, what).toMatchObject({ commit: kept.length + 1, parent: kept.length });
          expect((await store.verify('f'))[0].problems, what).toEqual([]);
          await store.close();
          cases++;
        }
      }
    }
    expect(cases).toBeGreaterThan(200);
  });

  it('report damage to a group as corruption when a later group says it was confirmed', async () => {
    const directory = temporaryDirectory();
    const { file, third } = await lastTwoGroups(directory, false);
    const bytes = fs.readFileSync(file);
    bytes[third.start + Math.floor((third.end - third.start) / 2)] ^= 0xff;
    fs.writeFileSync(file, bytes);
    const store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.recovery).toEqual([]);
    await expect(feed.readCommit(3)).rejects.toMatchObject({ code: 'CORRUPT' });
    expect((await feed.readCommit(4)).map((record) => text(record.payload))).toEqual(['five']);
    const [verification] = await store.verify('f');
    expect(verification.problems.map((problem) => problem.code)).toContain('CORRUPT');
    await store.close();
    expect(fs.readFileSync(file).equals(bytes), 'corruption is never cut').toBe(true);
  });

  it('still cut a torn last group when an earlier one is corrupt, and leave the corruption as it is', async () => {
    // Commit 2's group is damaged, commit 3's (sound) says it was confirmed, commit 4's is torn.
    const directory = temporaryDirectory();
    const { file, second, fourth } = await lastTwoGroups(directory, false);
    const bytes = fs.readFileSync(file);
    const flipped = second.start + Math.floor((second.end - second.start) / 2);
    bytes[flipped] ^= 0xff;
    bytes.fill(0, fourth.start + Math.floor((fourth.end - fourth.start) / 2), fourth.end);
    fs.writeFileSync(file, bytes);
    const store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.recovery).toMatchObject([{ file: fs.realpathSync(file), offset: fourth.start }]);
    await expect((async () => feed.readCommit(2))()).rejects.toMatchObject({
      code: 'CORRUPT',
      details: { offset: second.start },
    });
    expect((await feed.readCommit(3)).map((record) => text(record.payload))).toEqual(['three', 'four']);
    const [verification] = await store.verify('f');
    expect(verification.problems.map((problem) => problem.code)).toEqual(['CORRUPT']);
    await store.close();
    // Reopened, the corruption is still corruption and nothing more is cut.
    const again = await openStore(directory);
    expect((await again.feed('f')).recovery).toEqual([]);
    await again.close();
    const after = fs.readFileSync(file);
    expect(after[flipped], 'the corrupt byte is left as it was').toBe(bytes[flipped]);
    expect(
      after.subarray(fourth.start, fourth.end).every((byte) => byte === 0),
      'the torn group is cut',
    ).toBe(true);
  });
});

describe('damage that is not a torn write', () => {
  it('is refused as CORRUPT and never cut: a truncated newest segment keeps its earlier commits readable', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory);
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'one' }]);
    await feed.append([{ payload: 'two' }]);
    const second = feed.writer.published.commits.at(2);
    await store.close();
    const file = onlyFile(path.join(directory, 'feeds', 'f', 'history'));
    // A segment's size is durable from its creation, so a shorter file is damage, not a torn write.
    fs.truncateSync(file, second.runStart + 4);
    const before = fs.readFileSync(file);
    store = await openStore(directory);
    const reopened = await store.feed('f');
    expect(reopened.recovery).toEqual([]);
    expect(text((await reopened.readCommit(1))[0].payload)).toBe('one');
    await expect(reopened.append([{ payload: 'three' }])).rejects.toMatchObject({ code: 'CORRUPT' });
    const [verification] = await store.verify('f');
    expect(verification.ok).toBe(false);
    expect(verification.problems.some((problem) => problem.code === 'CORRUPT')).toBe(true);
    await store.close();
    expect(fs.readFileSync(file).equals(before)).toBe(true);
  });
});
