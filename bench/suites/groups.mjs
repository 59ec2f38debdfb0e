// Suite `groups`: subscription groups (competing workers) against a plain subscription, in the
// same run, over the same feed: STREAMSTACK_BENCH_GROUP_COMMITS one-event commits (100,000 by
// default: each commit is one unit of work, as a job queue's events are), 200-byte payloads over
// 1,000 keys, in small batches of concurrent appends.
//
// 1. A plain subscription, one consumer: poll one commit, advance past it, durably, for every
//    commit (the same per-commit acknowledgement a group gives), and polling 100 at a time.
// 2. A group ordered by commit, then one ordered by key: 8 workers (async, in this process) each
//    claim up to 16 commits and acknowledge each one, every acknowledgement durable.
// Each rate counts commits settled per second, from the first claim to the last settlement.
// Ratios: each group against the one-at-a-time subscription. The slowest claim and ack are
// reported too. The process test (test/engine/group-workers.test.ts) covers workers over HTTP.
import { Store } from '@streamstack/engine';
import { Suite } from '../harness.mjs';
import { latencySummary, makeRecords, temporaryDirectory } from '../workload.mjs';

const commits = Number(process.env.STREAMSTACK_BENCH_GROUP_COMMITS ?? 100_000);
const workers = 8;
const claimMax = 16;

async function fill(feed) {
  for (let start = 0; start < commits; start += 500) {
    const records = makeRecords(start, Math.min(500, commits - start));
    await Promise.all(records.map((record) => feed.append([{ ...record, key: `k${record.key.slice(1) % 1000}` }])));
  }
}

async function subscriptionRate(feed, name, max) {
  const subscription = await feed.createSubscription(name);
  const started = performance.now();
  let settled = 0;
  while (settled < commits) {
    const polled = await subscription.poll({ max });
    await subscription.advance(polled.cursor);
    settled += polled.commits.length;
  }
  return (commits / (performance.now() - started)) * 1000;
}

async function groupRate(feed, name, orderedBy) {
  const group = await feed.subscriptionGroup(name, { orderedBy });
  const claimMs = [];
  const ackMs = [];
  let settled = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: workers }, async (_, index) => {
      const worker = `worker-${index}`;
      while (settled < commits) {
        const asked = performance.now();
        const claims = await group.claim({ worker, max: claimMax, waitMs: 20 });
        claimMs.push(performance.now() - asked);
        for (const claim of claims) {
          const sent = performance.now();
          await group.ack(claim.commit.commit, { worker });
          ackMs.push(performance.now() - sent);
          settled++;
        }
      }
    }),
  );
  const rate = (commits / (performance.now() - started)) * 1000;
  const info = await group.info();
  if (info.cursor !== commits || info.acked !== commits)
    throw new Error(`group ${name} settled ${info.acked} of ${commits}`);
  return { rate, claim: latencySummary(claimMs), ack: latencySummary(ackMs) };
}

export async function run() {
  const suite = new Suite('groups');
  const store = await Store.open(temporaryDirectory('groups'));
  try {
    const feed = await store.createFeed('jobs');
    await fill(feed);
    const oneAtATime = await subscriptionRate(feed, 'one-at-a-time', 1);
    suite.ratio('plain subscription: poll 1 + advance, commits/s', oneAtATime, undefined, '/s');
    suite.ratio(
      'plain subscription: poll 100 + advance, commits/s',
      await subscriptionRate(feed, 'hundred', 100),
      undefined,
      '/s',
    );
    let slowest = { ms: 0, what: '' };
    for (const orderedBy of ['commit', 'key']) {
      const { rate, claim, ack } = await groupRate(feed, `by-${orderedBy}`, orderedBy);
      suite.ratio(`group by ${orderedBy}, ${workers} workers: commits/s`, rate, undefined, '/s');
      suite.ratio(`group by ${orderedBy} / plain subscription one at a time`, rate / oneAtATime, 1);
      suite.ratio(`group by ${orderedBy}: claim p99 ms`, claim.p99Ms, undefined, ' ms');
      suite.ratio(`group by ${orderedBy}: ack p99 ms`, ack.p99Ms, undefined, ' ms');
      for (const [what, summary] of [
        [`claim (by ${orderedBy})`, claim],
        [`ack (by ${orderedBy})`, ack],
      ]) {
        if (summary.maxMs > slowest.ms) slowest = { ms: summary.maxMs, what };
      }
    }
    suite.ratio(`slowest operation: ${slowest.what}, ms`, slowest.ms, undefined, ' ms');
  } finally {
    await store.close();
  }
  suite.finish();
}
