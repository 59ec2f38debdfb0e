// What one-event commits cost in memory while they sit in the active segment, measured in a
// process of its own on the built engine (packages/engine/dist), as a user's process would run
// it: a test runner's own lazily loaded code would otherwise show up as heap the commits took.
// Run with --expose-gc. Prints one JSON line: the heap (typed arrays' stores included) the
// commits between FROM and TO took, per commit; whether they all stayed in one segment; and how
// many commit pages were decoded meanwhile.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Store } from '../../packages/engine/dist/index.js';

const from = Number(process.env.FROM);
const to = Number(process.env.TO);
const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-small-commits-'));
const store = await Store.open(directory, { segmentBytes: 64 * 1024 * 1024 });
const feed = await store.createFeed('f');
const list = feed.writer.published.commits;
let issued = 0;

/** One-event commits (a key, a type, a tag) from 64 concurrent appenders until `commits` are written. */
async function appendUpTo(commits) {
  const appender = async () => {
    while (issued < commits) {
      const n = issued++;
      await feed.append([{ payload: `{"n":${n}}`, key: `k${n}`, type: 'e', tags: [`t${n % 13}`] }]);
    }
  };
  await Promise.all(Array.from({ length: 64 }, appender));
}

/** Heap in use after forced collections, typed arrays' backing stores included. */
async function heapUsed() {
  globalThis.gc();
  await new Promise((resolve) => setImmediate(resolve));
  globalThis.gc();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return heapUsed + arrayBuffers;
}

await appendUpTo(from);
const segment = list.segments().at(-1).segment;
const pagesRead = list.pagesRead;
const before = await heapUsed();
await appendUpTo(to);
const after = await heapUsed();
console.log(
  JSON.stringify({
    bytesPerCommit: (after - before) / (to - from),
    oneSegment: list.segments().at(-1).segment === segment,
    pagesRead: list.pagesRead - pagesRead,
  }),
);
await store.close();
fs.rmSync(directory, { recursive: true, force: true });
