// The process the trim crash and power-loss tests kill: it appends one-shot commits to feed
// `trim` (single ones and rounds of concurrent ones, so group commits are pipelined) while a
// second loop, at the same time, trims the history (with an explicit `before`, forced or not,
// and by a policy it sets — by age, records or bytes — which also trims on its own after each
// finished segment) and advances the subscription `pin` that holds retention back. It prints one
// JSON line per step: `attempt` before a write and the acknowledgement after it, with a digest of
// the commit's records, so the parent knows exactly what was acknowledged and can check that it
// reads back unchanged; `trim` before a trim and `trimmed` after it. It runs on the built engine
// (packages/engine/dist), as a user's process would.
//
// Arguments: the data directory, the cycle and the run's seed. Environment: STREAMSTACK_KERNELS,
// TRIM_TOKEN (the lease token of the child before), TRIM_LEASE_TTL_MS, TRIM_BREAK_LOCK=1 (after
// a power loss the LOCK file may name a process that is gone).
import { loadKernels, Store } from '../../packages/engine/dist/index.js';
import { emit, overlapReporting, seededRandom, takeLease } from './ingest.mjs';
import { recordsDigest, trimChildSegmentBytes } from './trim-records.mjs';

const [directory, cycleText, seedText] = process.argv.slice(2);
const cycle = Number(cycleText);
const seed = Number(seedText ?? 0);
const leaseTtlMs = Number(process.env.TRIM_LEASE_TTL_MS ?? 24 * 3600 * 1000);
/** The keys records are written under: few, so that every key has many versions to choose from. */
const keyCount = 40;

const random = seededRandom(cycle, seed);
const kernels = overlapReporting(loadKernels(process.env.STREAMSTACK_KERNELS ?? 'auto'));
const store = await Store.open(directory, {
  segmentBytes: trimChildSegmentBytes,
  kernels,
  breakLock: process.env.TRIM_BREAK_LOCK === '1',
});
const feed = await store.feed('trim');

const token = await takeLease(feed, process.env.TRIM_TOKEN, `child-${cycle}`, leaseTtlMs);

// The lease is renewed well before it expires, so a short one (the power-loss test's) lasts
// through a stall of most of its TTL on a busy machine. A renewal that fails is tried again at the
// next tick; an append after the lease ran out fails on its own.
setInterval(() => {
  feed
    .renewLease({ token, ttlMs: leaseTtlMs })
    .then((renewed) => emit({ kind: 'lease', token, epoch: renewed.epoch }))
    .catch(() => undefined);
}, leaseTtlMs / 8);

const pin = await feed.subscription('pin');
/** After a forced trim the subscription may be below the low mark: it is put back at it. */
async function repairPin() {
  if ((await pin.info()).trimmed) {
    const reset = await pin.reset((await feed.info()).lowMark - 1);
    emit({ kind: 'reset', cursor: reset.cursor });
  }
  emit({ kind: 'force-done' });
}
// A forced trim of the child before may have been cut off before its repair.
await repairPin();

/**
 * The records of one commit: some keyed, with a small random version (so a key's winner is by
 * version first, then position), some repeating a payload seen before (so dedup has first
 * occurrences to find again after a trim), some tagged.
 */
function commitRecords(batch) {
  const size = 1 + Math.floor(random() * 8);
  return Array.from({ length: size }, (_, index) => {
    const repeated = random() < 0.3;
    const record = {
      payload: repeated
        ? `repeat-${Math.floor(random() * 25)}`
        : `${batch}:${index}:${size}|${'x'.repeat(Math.floor(random() * 1500))}`,
    };
    if (random() < 0.7) {
      record.key = `k${Math.floor(random() * keyCount)}`;
      record.version = Math.floor(random() * 10);
    }
    if (random() < 0.3) record.tags = [`t${Math.floor(random() * 4)}`];
    return record;
  });
}

async function appendOne(batch) {
  const records = commitRecords(batch);
  emit({ kind: 'attempt', batch });
  const commit = await feed.append(records, { token });
  emit({ kind: 'oneshot', batch, commit: commit.commit, digest: recordsDigest(records) });
}

/**
 * Before the kills may come, the feed grows to `filledSegments` history segments above its low
 * mark (in rounds of concurrent commits, which the group commit writes together), so that every
 * child has whole segments to trim however little the one before it wrote.
 */
const filledSegments = 8;
for (let round = 0; (await feed.diskUse()).historySegments < filledSegments; round++) {
  await Promise.all(Array.from({ length: 16 }, (_, index) => appendOne(`${cycle}.fill.${round}.${index}`)));
}
emit({ kind: 'ready' });

async function appending() {
  for (let step = 0; ; step++) {
    const batch = `${cycle}.${step}`;
    if (random() < 0.3) {
      const count = 2 + Math.floor(random() * 5);
      await Promise.all(Array.from({ length: count }, (_, index) => appendOne(`${batch}.${index}`)));
    } else {
      await appendOne(batch);
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function maintaining() {
  for (let step = 0; ; step++) {
    await sleep(random() * 15);
    const info = await feed.info();
    const head = (await feed.head())?.commit ?? 0;
    const low = info.lowMark;
    const choice = random();
    const id = `${cycle}.${step}`;
    if (choice < 0.45) {
      // An explicit trim, somewhere in the kept history; now and then forced past the pin.
      const force = random() < 0.2;
      const before = Math.min(head + 1, low + Math.floor(random() * (head - low + 2)));
      emit({ kind: 'trim', id, before, force });
      const started = performance.now();
      const result = await feed.trim({ before, force });
      emit({
        kind: 'trimmed',
        id,
        lowMark: result.lowMark,
        lowPosition: result.lowPosition,
        segmentsRemoved: result.segmentsRemoved,
        ms: performance.now() - started,
      });
      if (force) await repairPin();
    } else if (choice < 0.65) {
      // A policy, durably set, then applied at once (and again after each finished segment).
      const kind = random();
      const policy =
        kind < 0.33
          ? { maxRecords: 200 + Math.floor(random() * 600) }
          : kind < 0.66
            ? { maxBytes: (3 + Math.floor(random() * 6)) * trimChildSegmentBytes }
            : { maxAgeMs: 200 + Math.floor(random() * 2000) };
      emit({ kind: 'policy', id, policy });
      await feed.setRetention(policy);
      emit({ kind: 'trim', id, policy: true, force: false });
      const started = performance.now();
      const result = await feed.trim();
      emit({
        kind: 'trimmed',
        id,
        lowMark: result.lowMark,
        lowPosition: result.lowPosition,
        segmentsRemoved: result.segmentsRemoved,
        ms: performance.now() - started,
      });
    } else if (choice < 0.95) {
      // The pin moves forward, part of the way to the head, so it holds some trims back.
      const cursor = (await pin.info()).cursor;
      const to = Math.max(cursor, cursor + Math.floor(random() * (head - cursor + 1)));
      const advanced = await pin.advance(to);
      emit({ kind: 'advanced', cursor: advanced.cursor });
    }
  }
}

await Promise.all([appending(), maintaining()]);
