// The process the deletion crash test kills: it creates feeds of a few segments each and
// deletes some of them — the one it just filled (open in this process) every other time, and at
// start one left by an earlier child (not yet opened here) — printing a line before each step
// and one after it, so the parent knows which creations and deletions were acknowledged. It
// runs on the built engine (packages/engine/dist), as a user's process would.
import crypto from 'node:crypto';
import { Store } from '../../packages/engine/dist/index.js';

const [directory, cycleText] = process.argv.slice(2);
const cycle = Number(cycleText);
const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const store = await Store.open(directory, { segmentBytes: 64 * 1024 });
emit({ kind: 'ready' });
const left = (await store.feedNames())[0];
if (left !== undefined) {
  emit({ kind: 'delete', feed: left });
  await store.deleteFeed(left);
  emit({ kind: 'deleted', feed: left });
}
for (let index = 0; ; index++) {
  const name = `c${cycle}-${index}`;
  emit({ kind: 'create', feed: name });
  const feed = await store.createFeed(name);
  let records = 0;
  // About 300 KiB: several history segments, with their summaries, index files and dictionaries.
  for (let batch = 0; batch < 6; batch++) {
    await feed.append(
      Array.from({ length: 50 }, (_, at) => ({ payload: crypto.randomBytes(500).toString('hex'), key: `k${at}` })),
    );
    records += 50;
  }
  emit({ kind: 'created', feed: name, records });
  if (index % 2 === 1) {
    emit({ kind: 'delete', feed: name });
    await store.deleteFeed(name);
    emit({ kind: 'deleted', feed: name });
  }
}
