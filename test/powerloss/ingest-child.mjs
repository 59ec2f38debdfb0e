// The process whose power is cut: it ingests into one feed on a powerloss-fs mount — stream
// batches, seals, one-shot appends, rounds of concurrent one-shot appends and stream batches (so
// group commits are pipelined), lease renewals and subscription advances — printing one JSON
// line per acknowledged step (and `attempt` before each write, and `overlap` lines saying when
// two writes to one file are in flight), so the parent knows exactly what the store
// acknowledged. It runs on the built engine, as a user's process would.
import { loadKernels, Store } from '../../packages/engine/dist/index.js';
import { batchRecords, concurrentRound, emit, overlapReporting, seededRandom, takeLease } from '../support/ingest.mjs';

const [directory, cycleText, seedText] = process.argv.slice(2);
const cycle = Number(cycleText);
const seed = Number(seedText);
const segmentBytes = 64 * 1024;
// Short, so that a grant the power cut before it was acknowledged (its holder never heard of it)
// expires soon and the next child can take the lease over.
const leaseTtlMs = 2000;

const random = seededRandom(cycle, seed);

// The previous process lost power: if its LOCK file survived, it names a process that is gone.
const kernels = overlapReporting(loadKernels(process.env.STREAMSTACK_KERNELS ?? 'auto'));
const store = await Store.open(directory, { segmentBytes, breakLock: true, kernels });
const feed = await store.feed('power');
const token = await takeLease(feed, process.env.POWER_TOKEN, `child-${cycle}`, leaseTtlMs);
let subscription;
try {
  subscription = await feed.subscription('reader');
} catch {
  subscription = await feed.createSubscription('reader');
}
let stream = await feed.activeStream();
if (stream && token !== process.env.POWER_TOKEN) {
  // The lease of the child before expired (a slow machine between cycles) and this one holds a
  // new epoch: the stream opened under the old one takes no more batches, only its seal.
  const commit = await stream.seal({ token });
  emit({ kind: 'sealed', commit: commit.commit });
  stream = undefined;
}
emit({ kind: 'ready' });

/** A round of concurrent writes: the group commit pipelines them. */
const concurrently = (step, write, acknowledged) =>
  concurrentRound(random, `${cycle}.${step}`, (batch) => batchRecords(random, batch, 12, 400, 30), write, acknowledged);

for (let step = 0; ; step++) {
  const batch = `${cycle}.${step}`;
  const { size, records } = batchRecords(random, batch, 12, 400, 30);
  const choice = random();
  if (choice < 0.25) {
    await concurrently(
      step,
      (records) => feed.append(records, { token }),
      (batch, size, commit) => emit({ kind: 'oneshot', batch, size, commit: commit.commit }),
    );
    continue;
  }
  if (choice < 0.4 && stream) {
    await concurrently(
      step,
      (records) => stream.append(records, { token }),
      (batch, size) => emit({ kind: 'batch', batch, size }),
    );
    continue;
  }
  emit({ kind: 'attempt', batch });
  if (choice < 0.5) {
    const commit = await feed.append(records, { token });
    emit({ kind: 'oneshot', batch, size, commit: commit.commit });
  } else if (choice < 0.8 || !stream) {
    if (!stream) {
      stream = await feed.openStream({ token });
      emit({ kind: 'open', stream: stream.id });
    }
    await stream.append(records, { token });
    emit({ kind: 'batch', batch, size });
  } else if (choice < 0.9) {
    const commit = await stream.seal({ token });
    emit({ kind: 'sealed', commit: commit.commit });
    stream = undefined;
  } else {
    const head = (await feed.info()).commits;
    const advanced = await subscription.advance(head);
    emit({ kind: 'advanced', cursor: advanced.cursor });
  }
}
