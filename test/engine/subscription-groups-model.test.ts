/**
 * Subscription groups against a model: random appends (commits of 0 to 2 keys out of 4), claims
 * by three workers, acknowledgements right and wrong, nacks, clock moves past the ack timeout and
 * restarts, in both orders. Every claim must hand out exactly the oldest free commits the model
 * names (free: unsettled, not held, deliveries left, and ordered by key, no earlier unsettled
 * commit sharing a key), with the model's delivery count; every ack and nack must succeed or be
 * refused as the model says. At the end one worker drains the group: every commit is settled
 * exactly once, and the dead-letter feed holds each parked commit once.
 *
 * Sizes: 60 runs of 20 to 80 steps each (fast-check's default would give about 10).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Feed, parkedTag, type Store } from '../../packages/engine/src/index.js';
import { branchTally } from '../support/branches.js';
import { outcomeCode } from '../support/failure.js';
import { ManualClock, openStore, sequentialIds, temporaryDirectory } from '../support/store.js';

const ackTimeoutMs = 1_000;
const maxDeliveries = 2;
const keys = ['k0', 'k1', 'k2', 'k3'];
const workers = ['w0', 'w1', 'w2'];

type Step =
  | { kind: 'append'; keys: string[] }
  | { kind: 'claim'; worker: number; max: number }
  | { kind: 'ack' | 'nack'; worker: number; pick: number }
  | { kind: 'wait'; ms: number }
  | { kind: 'restart' };

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('append' as const),
      keys: fc.uniqueArray(fc.constantFrom(...keys), { maxLength: 2 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('claim' as const),
      worker: fc.nat(2),
      max: fc.integer({ min: 1, max: 3 }),
    }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('ack' as const), worker: fc.nat(2), pick: fc.nat(20) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('nack' as const), worker: fc.nat(2), pick: fc.nat(20) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('wait' as const), ms: fc.constantFrom(0, 400, 1_000, 1_500) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('restart' as const) }) },
);

interface ModelCommit {
  readonly keys: readonly string[];
  deliveries: number;
  holder: string | undefined;
  deadline: number;
  settled: 'acked' | 'parked' | undefined;
}

class Model {
  readonly commits: ModelCommit[] = [];
  constructor(readonly orderedBy: 'commit' | 'key') {}

  /** Commits whose deliveries are spent and that nobody holds: the next claim parks them. */
  parkExhausted(now: number): number {
    let parked = 0;
    for (const commit of this.commits) {
      if (
        !commit.settled &&
        commit.deliveries >= maxDeliveries &&
        !(commit.holder !== undefined && commit.deadline > now)
      ) {
        commit.settled = 'parked';
        parked++;
      }
    }
    return parked;
  }

  /** The oldest free commits, at most `max` (numbered from 1). */
  free(now: number, max: number): number[] {
    const free: number[] = [];
    const blocked = new Set<string>();
    for (const [index, commit] of this.commits.entries()) {
      if (free.length >= max) break;
      if (commit.settled) continue;
      const waits = this.orderedBy === 'key' && commit.keys.some((key) => blocked.has(key));
      if (this.orderedBy === 'key') for (const key of commit.keys) blocked.add(key);
      if (waits) continue;
      if (commit.holder !== undefined && commit.deadline > now) continue;
      if (commit.deliveries >= maxDeliveries) continue;
      free.push(index + 1);
    }
    return free;
  }
}

describe('subscription groups against a model', () => {
  it('hands out, settles and parks exactly what the model says, in both orders', async () => {
    const tally = branchTally('group model', [
      'claim-some',
      'claim-none',
      'ack-ok',
      'ack-refused',
      'nack-released',
      'nack-parked',
      'redelivered-after-timeout',
      'parked-after-timeout',
      'key-blocked',
      'restart',
    ]);
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('commit' as const, 'key' as const),
        fc.array(step, { minLength: 20, maxLength: 80 }),
        async (orderedBy, steps) => {
          const directory = temporaryDirectory();
          const clock = new ManualClock();
          const ids = sequentialIds();
          let store: Store = await openStore(directory, { clock: clock.read, newId: ids });
          let feed: Feed = await store.createFeed('jobs');
          const groupOptions = { ackTimeoutMs, maxDeliveries, orderedBy };
          let group = await feed.subscriptionGroup('g', groupOptions);
          const model = new Model(orderedBy);
          try {
            for (const action of steps) {
              const now = clock.now;
              if (action.kind === 'append') {
                await feed.append(
                  action.keys.length === 0 ? [{ payload: 'x' }] : action.keys.map((key) => ({ payload: key, key })),
                );
                model.commits.push({
                  keys: action.keys,
                  deliveries: 0,
                  holder: undefined,
                  deadline: 0,
                  settled: undefined,
                });
              } else if (action.kind === 'claim') {
                const worker = workers[action.worker]!;
                tally.hit(
                  'parked-after-timeout',
                  model.commits.some(
                    (c) => !c.settled && c.holder !== undefined && c.deadline <= now && c.deliveries >= maxDeliveries,
                  ),
                );
                model.parkExhausted(now);
                const expected = model.free(now, action.max);
                tally.hit('key-blocked', orderedBy === 'key' && blockedCount(model, now) > 0);
                const claims = await group.claim({ worker, max: action.max });
                expect(claims.map((claim) => claim.commit.commit)).toEqual(expected);
                for (const claim of claims) {
                  const commit = model.commits[claim.commit.commit - 1]!;
                  tally.hit('redelivered-after-timeout', commit.holder !== undefined && commit.deadline <= now);
                  commit.deliveries++;
                  commit.holder = worker;
                  commit.deadline = now + ackTimeoutMs;
                  expect(claim.delivery).toBe(commit.deliveries);
                  expect(claim.deadline).toBe(commit.deadline);
                }
                tally.hit(claims.length > 0 ? 'claim-some' : 'claim-none');
              } else if (action.kind === 'ack' || action.kind === 'nack') {
                const worker = workers[action.worker]!;
                if (model.commits.length === 0) continue;
                const number = (action.pick % model.commits.length) + 1;
                const commit = model.commits[number - 1]!;
                if (action.kind === 'ack') {
                  const allowed = commit.settled === undefined && commit.holder === worker;
                  expect(await outcomeCode(group.ack(number, { worker }))).toBe(allowed ? 'none' : 'CLAIM_NOT_HELD');
                  tally.hit(allowed ? 'ack-ok' : 'ack-refused');
                  if (allowed) commit.settled = 'acked';
                } else {
                  const allowed = commit.settled === undefined && commit.holder === worker;
                  if (!allowed) {
                    expect(await outcomeCode(group.nack(number, { worker, reason: 'no' }))).toBe('CLAIM_NOT_HELD');
                    continue;
                  }
                  const result = await group.nack(number, { worker, reason: 'no' });
                  commit.holder = undefined;
                  const parks = commit.deliveries >= maxDeliveries;
                  expect(result).toEqual({
                    commit: number,
                    outcome: parks ? 'parked' : 'released',
                    deliveries: commit.deliveries,
                  });
                  if (parks) commit.settled = 'parked';
                  tally.hit(parks ? 'nack-parked' : 'nack-released');
                }
              } else if (action.kind === 'wait') {
                clock.advance(action.ms);
              } else {
                await store.close();
                store = await openStore(directory, { clock: clock.read, newId: ids });
                feed = await store.feed('jobs');
                group = await feed.subscriptionGroup('g');
                tally.hit('restart');
              }
            }
            // Drain: one worker takes everything left, waiting out the claims others hold.
            for (let round = 0; round < 100; round++) {
              clock.advance(ackTimeoutMs);
              const claims = await group.claim({ worker: 'drain', max: 1000 });
              if (claims.length === 0 && model.commits.length === (await group.info()).cursor) break;
              for (const claim of claims) await group.ack(claim.commit.commit, { worker: 'drain' });
            }
            const info = await group.info();
            expect(info.cursor).toBe(model.commits.length);
            expect(info.acked + info.parked).toBe(model.commits.length);
            const parkedCommits = model.commits.flatMap((commit, index) =>
              commit.settled === 'parked' ? [index + 1] : [],
            );
            if (parkedCommits.length > 0) {
              const deadLetter = await store.feed('jobs.g.parked');
              const parked: number[] = [];
              for await (const commit of deadLetter.commits()) parked.push(JSON.parse(commit.message ?? '{}').commit);
              // Those the model parked are parked once each; the drain may have parked more (spent by timeouts).
              expect(new Set(parked).size).toBe(parked.length);
              expect(parked.length).toBe(info.parked);
              for (const commit of parkedCommits) expect(parked).toContain(commit);
              for (const record of await collectRecords(deadLetter)) {
                expect(record.tags.some((tag) => tag.startsWith(parkedTag('jobs', 'g', 0).slice(0, -1)))).toBe(true);
              }
            }
          } finally {
            await store.close();
          }
        },
      ),
      { numRuns: 60 },
    );
    tally.expectAllReached();
  }, 240_000);
});

/** Commits the model holds back only because an earlier unsettled commit shares a key. */
function blockedCount(model: Model, now: number): number {
  const blocked = new Set<string>();
  let count = 0;
  for (const commit of model.commits) {
    if (commit.settled) continue;
    if (commit.keys.some((key) => blocked.has(key)) && !(commit.holder !== undefined && commit.deadline > now)) count++;
    for (const key of commit.keys) blocked.add(key);
  }
  return count;
}

async function collectRecords(feed: Feed) {
  const records = [];
  for await (const record of feed.read()) records.push(record);
  return records;
}
