/**
 * State that must never go back, derived from the history when its logs are lost
 * (docs/faults.md, State that never goes back): the key-compaction horizon's floor from the
 * compacted runs, the low mark's floor from the oldest segment's header; and `verify` reporting
 * damage to one copy of every state log, the compaction and merge logs included.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type Feed, isStreamStackError, Store } from '../../packages/engine/src/index.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const kernelSets = ['native', 'ts'] as const;
const commitCount = 300;

/** Keyed commits over many 64 KiB segments: every key is rewritten often, so compaction thins them. */
async function keyedFeed(directory: string, kernels: (typeof kernelSets)[number]): Promise<void> {
  const store = await openStore(directory, { kernels });
  const feed = await store.createFeed('f');
  for (let commit = 1; commit <= commitCount; commit++) {
    await feed.append(
      Array.from({ length: 10 }, (_, index) => ({
        payload: `commit ${commit} record ${index} ${'v'.repeat(120)}`,
        key: `k${(commit + index) % 17}`,
        type: `t${index % 2}`,
        tags: [`g${index % 3}`],
      })),
    );
  }
  await store.close();
}

const stateFile = (directory: string, name: string) => path.join(directory, 'feeds', 'f', 'state', name);

function removeBothCopies(directory: string, name: string): void {
  const file = stateFile(directory, name);
  expect(fs.existsSync(file) && fs.existsSync(`${file}.copy`), `both files of ${name}`).toBe(true);
  fs.rmSync(file);
  fs.rmSync(`${file}.copy`);
}

/** How an operation ended: its value, or the error code it failed with. */
async function outcome<T>(operation: () => Promise<T>): Promise<{ value: T } | { code: string }> {
  try {
    return { value: await operation() };
  } catch (error) {
    if (!isStreamStackError(error)) throw error;
    return { code: error.code };
  }
}

async function verdict(directory: string, kernels: (typeof kernelSets)[number]) {
  const store = await Store.open(directory, { readOnly: true, kernels });
  try {
    return (await store.verify('f'))[0];
  } finally {
    await store.close();
  }
}

describe('state that never goes back', () => {
  for (const kernels of kernelSets) {
    it(`losing both copies of compaction.log leaves the horizon at the compacted history, and verify says so (${kernels})`, async () => {
      const directory = temporaryDirectory();
      await keyedFeed(directory, kernels);
      const horizon = 200;
      {
        const store = await openStore(directory, { kernels });
        const feed = await store.feed('f');
        const result = await feed.compactKeys({ horizon });
        expect(result.segmentsCompacted).toBeGreaterThan(2);
        // A merge may join compacted segments to later ones: the floor must not grow with them.
        expect((await feed.compact()).merges.length).toBeGreaterThan(0);
        await store.close();
      }
      // What a user gets below the horizon while the log is there: COMPACTED.
      const probe = async (feed: Feed, cursor: number) => ({
        read: await outcome(() => collect(feed.read({ after: cursor }))),
        filtered: await outcome(() => collect(feed.read({ after: cursor, filter: { types: ['t1'] } }))),
        commit: await outcome(() => feed.readCommit(cursor + 1)),
      });
      const low = 20;
      {
        const store = await Store.open(directory, { readOnly: true, kernels });
        const before = await probe(await store.feed('f'), low);
        expect(before).toEqual({
          read: { code: 'COMPACTED' },
          filtered: { code: 'COMPACTED' },
          commit: { code: 'COMPACTED' },
        });
        await store.close();
      }
      expect((await verdict(directory, kernels)).ok).toBe(true);

      removeBothCopies(directory, 'compaction.log');
      const report = await verdict(directory, kernels);
      expect(report.ok).toBe(false);
      expect(report.problems).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ code: 'CORRUPT', file: expect.stringContaining('compaction.log') }),
        ]),
      );
      for (const readOnly of [true, false]) {
        const store = await Store.open(directory, { readOnly, kernels });
        try {
          const feed = await store.feed('f');
          // Reads that would cross the compacted history still fail, rather than return it as whole.
          expect(await probe(feed, low)).toEqual({
            read: { code: 'COMPACTED' },
            filtered: { code: 'COMPACTED' },
            commit: { code: 'COMPACTED' },
          });
          if (!readOnly) {
            await expect(feed.createSubscription('late', { after: low })).rejects.toMatchObject({ code: 'COMPACTED' });
          }
          // The history after the horizon reads as before.
          const after = await collect(feed.read({ after: horizon }));
          expect(after).toHaveLength((commitCount - horizon) * 10);
        } finally {
          await store.close();
        }
      }
    }, 120_000);

    it(`losing both copies of retention.log keeps the trimmed range trimmed, not lost (${kernels})`, async () => {
      const directory = temporaryDirectory();
      await keyedFeed(directory, kernels);
      let lowMark: number;
      let expected: { get: unknown; records: number };
      {
        const store = await openStore(directory, { kernels });
        const feed = await store.feed('f');
        const trimmed = await feed.trim({ before: 120 });
        lowMark = trimmed.lowMark;
        expect(lowMark).toBeGreaterThan(1);
        const got = await feed.get('k3');
        expected = { get: got?.position, records: (await collect(feed.read())).length };
        await store.close();
      }
      expect((await verdict(directory, kernels)).ok).toBe(true);
      removeBothCopies(directory, 'retention.log');

      const report = await verdict(directory, kernels);
      expect(report.ok).toBe(false);
      expect(report.lowMark).toBe(lowMark);
      expect(report.problems).toEqual([
        expect.objectContaining({ code: 'CORRUPT', file: expect.stringContaining('retention.log') }),
      ]);
      for (const readOnly of [true, false]) {
        const store = await Store.open(directory, { readOnly, kernels });
        try {
          const feed = await store.feed('f');
          // Every read from the start and every get answers, as it did before the logs were lost.
          expect((await feed.get('k3'))?.position).toBe(expected.get);
          expect(await collect(feed.read())).toHaveLength(expected.records);
          expect(await collect(feed.read({ mode: 'latest' }))).toHaveLength(17);
          await expect(collect(feed.read({ after: 1 }))).rejects.toMatchObject({ code: 'TRIMMED' });
          if (!readOnly) {
            // A policy set now keeps the floor: the next open still starts at the low mark.
            await feed.setRetention({ maxRecords: 10_000_000 });
          }
        } finally {
          await store.close();
        }
      }
      const reopened = await openStore(directory, { kernels });
      try {
        const feed = await reopened.feed('f');
        expect((await feed.retention()).lowMark ?? (await feed.info()).lowMark).toBe(lowMark);
        expect(await collect(feed.read())).toHaveLength(expected.records);
      } finally {
        await reopened.close();
      }
      expect((await verdict(directory, kernels)).ok).toBe(true);
    }, 120_000);
  }

  it('verify reports damage to one copy of compaction.log and of merge.log, which reads survive', async () => {
    const directory = temporaryDirectory();
    await keyedFeed(directory, 'ts');
    {
      const store = await openStore(directory);
      const feed = await store.feed('f');
      // Key compaction records its horizon, and each rewrite's switch-over in the merge log.
      expect((await feed.compactKeys({ horizon: 150 })).segmentsCompacted).toBeGreaterThan(0);
      await store.close();
    }
    expect((await verdict(directory, 'ts')).ok).toBe(true);
    const pristine = fs.mkdtempSync(`${directory}-pristine`);
    fs.cpSync(directory, pristine, { recursive: true });
    for (const name of ['compaction.log', 'merge.log']) {
      for (const copy of ['', '.copy']) {
        for (const damage of ['flip', 'delete'] as const) {
          fs.rmSync(directory, { recursive: true });
          fs.cpSync(pristine, directory, { recursive: true });
          const file = `${stateFile(directory, name)}${copy}`;
          if (damage === 'delete') fs.rmSync(file);
          else {
            const bytes = fs.readFileSync(file);
            bytes[Math.floor(bytes.length / 2)] ^= 0x21;
            fs.writeFileSync(file, bytes);
          }
          const report = await verdict(directory, 'ts');
          expect(report.ok, `${damage} ${name}${copy}`).toBe(false);
          expect(
            report.problems.some((problem) => problem.file?.includes(name)),
            `${damage} ${name}${copy}: ${JSON.stringify(report.problems)}`,
          ).toBe(true);
          // The newest record survived in the other file: reads below the horizon still refuse.
          const store = await Store.open(directory, { readOnly: true });
          try {
            await expect(collect((await store.feed('f')).read({ after: 10 }))).rejects.toMatchObject({
              code: 'COMPACTED',
            });
          } finally {
            await store.close();
          }
        }
      }
    }
    fs.rmSync(pristine, { recursive: true, force: true });
  }, 120_000);
});
