// The process the key-compaction crash test kills: it appends one commit at a time to feed
// `keys` (each commit's records a function of its number, see compaction-records.mjs) while a
// second loop key-compacts the history up to a horizon somewhere below the head, and now and
// then merges segments. It prints one JSON line per step: `appended` after each acknowledged
// commit, `compact` before a compaction and `compacted` after it, so the parent can aim its
// kills inside compactions. It runs on the built engine (packages/engine/dist).
//
// Arguments: the data directory, the cycle and the run's seed. Environment: STREAMSTACK_KERNELS,
// COMPACTION_BREAK_LOCK=1 (after a power loss the LOCK file may name a process that is gone).
import { loadKernels, Store } from '../../packages/engine/dist/index.js';
import { commitRecords, compactionChildSegmentBytes } from './compaction-records.mjs';
import { emit, seededRandom } from './ingest.mjs';

const [directory, cycleText, seedText] = process.argv.slice(2);
const cycle = Number(cycleText);
const random = seededRandom(cycle, Number(seedText ?? 0));
const kernels = loadKernels(process.env.STREAMSTACK_KERNELS ?? 'auto');
const store = await Store.open(directory, {
  segmentBytes: compactionChildSegmentBytes,
  kernels,
  breakLock: process.env.COMPACTION_BREAK_LOCK === '1',
});
const feed = await store.feed('keys');

async function appendNext() {
  const commit = ((await feed.head())?.commit ?? 0) + 1;
  const written = await feed.append(commitRecords(commit));
  if (written.commit !== commit) throw new Error(`expected commit ${commit}, wrote ${written.commit}`);
  emit({ kind: 'appended', commit });
}

/** Before the kills may come, the feed has enough sealed segments above its horizon to compact. */
const filledSegments = 8;
while ((await feed.diskUse()).historySegments < filledSegments) await appendNext();
emit({ kind: 'ready' });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function appending() {
  for (;;) await appendNext();
}

async function maintaining() {
  for (let step = 0; ; step++) {
    await sleep(random() * 10);
    const { horizon, commits } = await feed.info();
    const id = `${cycle}.${step}`;
    if (random() < 0.8) {
      // Somewhere between the horizon and the head (compaction keeps the two newest segments).
      const to = Math.max(horizon, 1) + Math.floor(random() * Math.max(1, commits - Math.max(horizon, 1)));
      emit({ kind: 'compact', id, horizon: to });
      const result = await feed.compactKeys({ horizon: to, keyless: 'keep' });
      emit({
        kind: 'compacted',
        id,
        horizon: result.horizon,
        segments: result.segmentsCompacted,
        putOff: result.putOff,
      });
    } else {
      emit({ kind: 'compact', id, merge: true });
      const result = await feed.compact();
      emit({ kind: 'compacted', id, merges: result.merges.length });
    }
  }
}

await Promise.all([appending(), maintaining()]);
