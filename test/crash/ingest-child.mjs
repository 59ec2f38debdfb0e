// The process the crash test kills: it ingests into one feed as fast as it can — stream batches
// of random sizes, seals, one-shot appends, and rounds of concurrent one-shot appends and of
// concurrent stream batches (so group commits are pipelined: one written while the one before
// is still being synced) — and prints one JSON line per step, `attempt` before a write and the
// acknowledgement after it, so the parent knows exactly what was acknowledged, and `overlap`
// lines saying when two writes to one file are in flight. It runs on the built engine
// (packages/engine/dist), as a user's process would.
import { loadKernels, Store } from '../../packages/engine/dist/index.js';
import { batchRecords, concurrentRound, emit, overlapReporting, seededRandom } from '../support/ingest.mjs';

const [directory, cycleText, seedText] = process.argv.slice(2);
const cycle = Number(cycleText);
const seed = Number(seedText ?? 0);
const segmentBytes = 128 * 1024;
const leaseTtlMs = 24 * 3600 * 1000;

const random = seededRandom(cycle, seed);

const kernels = overlapReporting(loadKernels(process.env.STREAMSTACK_KERNELS ?? 'auto'));
const store = await Store.open(directory, { segmentBytes, kernels });
const feed = await store.feed('crash');
let token = process.env.CRASH_TOKEN;
try {
  if (!token) throw new Error('no token yet');
  await feed.renewLease({ token, ttlMs: leaseTtlMs });
} catch {
  token = (await feed.acquireLease({ holder: `child-${cycle}`, ttlMs: leaseTtlMs })).token;
}
emit({ kind: 'lease', token });
let stream = await feed.activeStream();
emit({ kind: 'ready' });

/** A round of concurrent writes: the group commit pipelines them. */
const concurrently = (step, write, acknowledged) =>
  concurrentRound(random, `${cycle}.${step}`, (batch) => batchRecords(random, batch, 20, 300, 50), write, acknowledged);

for (let step = 0; ; step++) {
  const batch = `${cycle}.${step}`;
  const { size, records } = batchRecords(random, batch, 20, 300, 50);
  const choice = random();
  if (choice < 0.2) {
    await concurrently(
      step,
      (records) => feed.append(records, { token }),
      (batch, size, commit) => emit({ kind: 'oneshot', batch, size, commit: commit.commit }),
    );
  } else if (choice < 0.35 && stream) {
    const id = stream.id;
    await concurrently(
      step,
      (records) => stream.append(records, { token }),
      (batch, size, appended) => emit({ kind: 'batch', batch, size, stream: id, firstSeq: appended.firstSeq }),
    );
  } else if (choice < 0.45) {
    emit({ kind: 'attempt', batch });
    const commit = await feed.append(records, { token });
    emit({ kind: 'oneshot', batch, size, commit: commit.commit });
  } else if (choice < 0.9 || !stream) {
    if (!stream) {
      stream = await feed.openStream({ token });
      emit({ kind: 'open', stream: stream.id });
    }
    emit({ kind: 'attempt', batch });
    const appended = await stream.append(records, { token });
    emit({ kind: 'batch', batch, size, stream: stream.id, firstSeq: appended.firstSeq });
  } else {
    const commit = await stream.seal({ token });
    emit({ kind: 'sealed', stream: stream.id, commit: commit.commit });
    stream = undefined;
  }
}
