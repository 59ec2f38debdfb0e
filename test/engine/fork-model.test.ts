/**
 * Forks against a model: random appends, forks (of forks too), forced trims, merges, deletions
 * and reopens across a tree of feeds; after every step each feed's RAW read equals the model of
 * its own history (the commits it holds from its low mark on), and at the end verify finds
 * nothing wrong in any feed. Trims remove whole segments, so the model takes each trim's low mark
 * from its result.
 *
 * Sizes: 60 runs of 15 to 40 random steps (fast-check's default would give about 10), after 32
 * commits appended to the root; records of about 10 KB in 64 KiB segments, so trees share several
 * segments and cut groups of several commits.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { branchTally } from '../support/branches.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

type Step =
  | { kind: 'append'; feed: number; commits: number; size: number }
  | { kind: 'fork'; feed: number; at: number }
  | { kind: 'trim'; feed: number; before: number }
  | { kind: 'compact'; feed: number }
  | { kind: 'delete'; feed: number }
  | { kind: 'reopen' };

const pick = fc.nat(2);
const fraction = fc.double({ min: 0, max: 1, noNaN: true });
const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      feed: pick,
      commits: fc.integer({ min: 1, max: 8 }),
      size: fc.integer({ min: 1, max: 3 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('fork' as const), feed: pick, at: fraction }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('trim' as const), feed: pick, before: fraction }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('compact' as const), feed: pick }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), feed: pick }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reopen' as const) }) },
);

interface ModelFeed {
  /** Payloads of each commit, commit n at index n − 1 (trimmed ones too, never read). */
  readonly commits: string[][];
  low: number;
  /** Forked from a feed that still had forks of its own, or from a fork. */
  readonly depth: number;
}

async function raw(feed: Feed): Promise<string[]> {
  const payloads: string[] = [];
  for await (const record of feed.read()) payloads.push(`${record.commit}:${text(record.payload).slice(0, 24)}`);
  return payloads;
}

function modelRaw(model: ModelFeed): string[] {
  return model.commits.flatMap((payloads, index) =>
    index + 1 < model.low ? [] : payloads.map((payload) => `${index + 1}:${payload.slice(0, 24)}`),
  );
}

describe('forks against a model', () => {
  it('keeps every feed of a tree of forks equal to its own history through trims, merges, deletions and reopens', async () => {
    // Deleting a feed while it shares segments is reached now and then (a merge of the source
    // ends the sharing): counted here, and asserted by the deletion in fork.test.ts.
    const tally = branchTally(
      'fork model',
      ['fork', 'fork-of-fork', 'trim-moved', 'compact', 'reopen', 'fork-after-trim'],
      ['delete-shared'],
    );
    let label = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 15, maxLength: 40 }), async (randomSteps) => {
        // Every run starts from a root of several segments, so trims and forks have some to share.
        const warmUp: Step[] = Array.from({ length: 4 }, () => ({ kind: 'append', feed: 0, commits: 8, size: 2 }));
        const steps = [...warmUp, ...randomSteps];
        const directory = temporaryDirectory();
        let store: Store = await openStore(directory);
        const models = new Map<string, ModelFeed>([['root', { commits: [], low: 1, depth: 0 }]]);
        await store.createFeed('root');
        let forks = 0;
        const nameOf = (index: number) => [...models.keys()].sort()[index % models.size]!;
        try {
          for (const action of steps) {
            if (models.size === 0) {
              models.set('root', { commits: [], low: 1, depth: 0 });
              await store.createFeed('root');
            }
            if (action.kind === 'reopen') {
              await store.close();
              store = await openStore(directory);
              tally.hit('reopen');
            } else {
              // Trims go to the longest history, where whole segments lie before the active one.
              const name =
                action.kind === 'trim'
                  ? [...models].sort(([, a], [, b]) => b.commits.length - a.commits.length)[0]![0]
                  : nameOf(action.feed);
              const model = models.get(name)!;
              const feed = await store.feed(name);
              const head = model.commits.length;
              if (action.kind === 'append') {
                const batches = Array.from({ length: action.commits }, () =>
                  Array.from({ length: action.size }, () => `${name}-${label++}-`.padEnd(10_000, '.')),
                );
                // Concurrent appends share group commits: forks then cut groups of several commits.
                const commits = await Promise.all(
                  batches.map((payloads) => feed.append(payloads.map((payload) => ({ payload })))),
                );
                for (const [index, commit] of commits.entries()) model.commits[commit.commit - 1] = batches[index]!;
              } else if (action.kind === 'fork') {
                if (head < model.low) continue;
                const at = model.low + Math.floor(action.at * (head - model.low + 1 - 1e-9));
                const forkName = `fork${forks++}`;
                await feed.fork(forkName, { at });
                models.set(forkName, { commits: model.commits.slice(0, at), low: model.low, depth: model.depth + 1 });
                tally.hit('fork');
                tally.hit('fork-of-fork', model.depth > 0);
                tally.hit('fork-after-trim', model.low > 1);
              } else if (action.kind === 'trim') {
                if (head === 0) continue;
                const result = await feed.trim({ before: 1 + Math.floor(action.before * head), force: true });
                tally.hit('trim-moved', result.lowMark > model.low);
                model.low = result.lowMark;
              } else if (action.kind === 'compact') {
                await feed.compact();
                tally.hit('compact');
              } else {
                // The last feed stays: a tree needs a trunk.
                if (models.size === 1) continue;
                tally.hit('delete-shared', (await feed.info()).shared !== undefined);
                await store.deleteFeed(name);
                models.delete(name);
              }
            }
            for (const [name, model] of models)
              expect(await raw(await store.feed(name)), name).toEqual(modelRaw(model));
          }
          for (const name of models.keys()) {
            const [verification] = await store.verify(name);
            expect(verification?.problems, name).toEqual([]);
          }
        } finally {
          await store.close();
        }
      }),
      { numRuns: 60 },
    );
    tally.expectAllReached();
  }, 600_000);
});
