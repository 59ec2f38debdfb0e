/**
 * Repeated payloads: stored once per segment and never referenced across a segment boundary (so
 * every sealed segment stands on its own), and read back exactly through the payload cache.
 */
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadKernels } from '../../packages/engine/src/index.js';
import type { CommitRecord } from '../../packages/engine/src/storage/commit-record.js';
import { History } from '../../packages/engine/src/storage/history-log.js';
import { branchTally } from '../support/branches.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

const kernels = loadKernels('ts');

/** Every commit of a feed's history with the segments its records' payloads lie in. */
async function payloadSegments(directory: string): Promise<{ commit: CommitRecord; segments: number[] }[]> {
  const commits: CommitRecord[] = [];
  const history = await History.open(
    kernels,
    path.join(directory, 'feeds', 'f', 'history'),
    { onCommit: (commit) => commits.push(commit), onPayload: () => undefined, onLost: () => undefined },
    true,
    // Every segment read whole, so that every commit is visited (neither summaries nor the
    // active segment's checkpoint stand in for any).
    false,
  );
  try {
    const out = [];
    for (const commit of commits) {
      const run = await history.runs.readRun(commit);
      out.push({ commit, segments: run.entries.map((entry) => entry.payload.segment) });
    }
    return out;
  } finally {
    history.close();
  }
}

/** Payloads of about 6 KiB drawn from a small pool, so that most appends repeat one. */
const poolPayload = (index: number) => `pool-${index}-${'r'.repeat(6000)}`;

describe('self-contained segments', () => {
  it('never references a payload in another segment, and stores each at most once per segment', async () => {
    const tally = branchTally('self-contained', [
      'repeat in the same segment',
      'repeat stored again in a new segment',
      'group cut at a segment roll',
    ]);
    // Sizes: 60 runs of 6 to 14 rounds of 1 to 12 concurrent one-shot appends of 1 to 4
    // records, from a pool of 2 to 12 payloads of 6 KiB, in 64 KiB segments: a segment holds
    // about ten distinct payloads, so repeats span rolls, and rolls land inside concurrent
    // groups. A roll inside a group depends on how requests group, so about one run in five
    // reaches it: 60 runs make missing it in every run unlikely (25 missed it once in CI).
    const round = fc.array(fc.array(fc.nat(11), { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 12 });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 12 }),
        fc.array(round, { minLength: 6, maxLength: 14 }),
        async (poolSize, rounds) => {
          const directory = temporaryDirectory();
          const store = await openStore(directory);
          const feed = await store.createFeed('f');
          const written: string[][] = [];
          for (const appends of rounds) {
            const records = appends.map((picks) => picks.map((pick) => ({ payload: poolPayload(pick % poolSize) })));
            const results = await Promise.all(records.map((batch) => feed.append(batch)));
            // Requests are never reordered, even when a roll cuts their group in two.
            const numbers = results.map((result) => result.commit);
            expect(numbers).toEqual([...numbers].sort((a, b) => a - b));
            results.forEach((result, index) => {
              written[result.commit - 1] = records[index].map((record) => record.payload);
            });
          }
          const all: string[] = [];
          for await (const record of feed.read()) all.push(text(record.payload));
          expect(all).toEqual(written.flat());
          expect((await store.verify('f'))[0].problems).toEqual([]);
          await store.close();

          const commits = await payloadSegments(directory);
          const segmentOfCommit = new Map(commits.map(({ commit }) => [commit.commit, commit.segment]));
          for (const { commit, segments } of commits) {
            expect(segments.every((segment) => segment === commit.segment)).toBe(true);
          }
          // A payload's bytes appear at most once in each segment file.
          const historyDirectory = path.join(directory, 'feeds', 'f', 'history');
          const seenIn = new Map<number, number>();
          for (const name of fs.readdirSync(historyDirectory)) {
            const bytes = fs.readFileSync(path.join(historyDirectory, name));
            for (let pick = 0; pick < poolSize; pick++) {
              const needle = Buffer.from(poolPayload(pick));
              const first = bytes.indexOf(needle);
              if (first >= 0) expect(bytes.indexOf(needle, first + 1)).toBe(-1);
              if (first >= 0) seenIn.set(pick, (seenIn.get(pick) ?? 0) + 1);
            }
          }
          tally.hit(
            'repeat stored again in a new segment',
            [...seenIn.values()].some((count) => count > 1),
          );
          tally.hit(
            'repeat in the same segment',
            all.length > new Set(commits.map((c) => c.commit.segment)).size * poolSize,
          );
          // A group cut in two at a roll shows as one round's commits in two segments.
          let first = 1;
          for (const appends of rounds) {
            const last = first + appends.length - 1;
            tally.hit('group cut at a segment roll', segmentOfCommit.get(first) !== segmentOfCommit.get(last));
            first = last + 1;
          }
        },
      ),
      { numRuns: 60 },
    );
    tally.expectAllReached();
  }, 120_000);

  it('reads a repeat whose payload landed after the cache last read that block', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { segmentBytes: 1024 * 1024 });
    const feed = await store.createFeed('f');
    const x = `x-${'1'.repeat(300)}`;
    const y = `y-${'2'.repeat(300)}`;
    await feed.append([{ payload: x }]);
    const repeatX = await feed.append([{ payload: x }]);
    // Reading the repeat reads (and keeps) the block around x, up to the end of the bytes
    // written so far: y does not exist yet.
    expect((await feed.readCommit(repeatX.commit)).map((record) => text(record.payload))).toEqual([x]);
    await feed.append([{ payload: y }]);
    const repeatY = await feed.append([{ payload: y }]);
    expect((await feed.readCommit(repeatY.commit)).map((record) => text(record.payload))).toEqual([y]);
    const all: string[] = [];
    for await (const record of feed.read()) all.push(text(record.payload));
    expect(all).toEqual([x, x, y, y]);
    await store.close();
  });

  it('scans many repeats of payloads stored in earlier runs exactly, across a reopen', async () => {
    const directory = temporaryDirectory();
    let store = await openStore(directory, { segmentBytes: 4 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p' });
    const expected: string[] = [];
    let seed = 11;
    const random = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
    for (let streamIndex = 0; streamIndex < 20; streamIndex++) {
      const stream = await feed.openStream({ token });
      const batch = Array.from({ length: 500 }, (_, index) => {
        // Nine in ten records repeat one of the payloads written before them.
        const payload =
          expected.length > 0 && random() < 0.9
            ? expected[Math.floor(random() * expected.length)]
            : `p-${streamIndex}-${index}-${'z'.repeat(150)}`;
        expected.push(payload);
        return { payload };
      });
      await stream.append(batch, { token });
      await stream.seal({ token });
    }
    for (let pass = 0; pass < 2; pass++) {
      const target = pass === 0 ? feed : await store.feed('f');
      const all: string[] = [];
      for await (const records of target.readBatches()) for (const record of records) all.push(text(record.payload));
      expect(all).toEqual(expected);
      await store.close();
      store = await openStore(directory, { segmentBytes: 4 * 1024 * 1024 });
    }
    expect((await store.verify('f'))[0].ok).toBe(true);
    await store.close();
  });
});
