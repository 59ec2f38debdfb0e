// The process the tiering crash test kills: it appends one-shot commits to feed `tiered` of a
// store with small segments and object storage, so segments seal (and go up) every few commits,
// and now and then merges the history or trims it, so uploads, descriptors and retirements are
// all under way when the kill comes. It prints one JSON line per step: `ack` after each commit
// is acknowledged (its number), `compact` and `trim` before those start. It runs on the built
// engine (packages/engine/dist), as a user's process would.
//
// Arguments: the data directory, the cycle and the run's seed. Environment: TIER_ENDPOINT,
// TIER_BUCKET, TIER_PREFIX, TIER_LOCAL_BUDGET (bytes of sealed history kept locally, so segments
// are evicted while it runs too), and the AWS credentials; STREAMSTACK_KERNELS.
import { loadKernels, Store } from '../../packages/engine/dist/index.js';
import { emit, seededRandom } from './ingest.mjs';

const [directory, cycleText, seedText] = process.argv.slice(2);
const random = seededRandom(Number(cycleText), Number(seedText ?? 0));
const store = await Store.open(directory, {
  segmentBytes: 64 * 1024,
  kernels: loadKernels(process.env.STREAMSTACK_KERNELS ?? 'auto'),
  objectStore: {
    endpoint: process.env.TIER_ENDPOINT,
    bucket: process.env.TIER_BUCKET,
    prefix: process.env.TIER_PREFIX,
    localHistoryBytesMax: Number(process.env.TIER_LOCAL_BUDGET),
  },
});
const feed = await store.feed('tiered');
emit({ kind: 'ready' });
for (let round = 0; ; round++) {
  const size = 20 + Math.floor(random() * 80);
  const commit = await feed.append(
    Array.from({ length: size }, (_, index) => ({
      payload: `{"round":${round},"index":${index},"pad":"${'z'.repeat(Math.floor(random() * 200))}"}`,
      key: `k${Math.floor(random() * 300)}`,
      tags: [`t${index % 4}`],
    })),
  );
  emit({ kind: 'ack', commit: commit.commit });
  const dice = random();
  if (dice < 0.03) {
    emit({ kind: 'compact' });
    await feed.compact();
  } else if (dice < 0.05) {
    const { lowMark, commits } = await feed.info();
    emit({ kind: 'trim' });
    await feed.trim({ before: lowMark + Math.floor((commits - lowMark) / 3), force: true });
  }
}
