// The follower of `pnpm bench tiered`, in a process of its own as another machine would run
// one: it opens a fresh directory as a follower of feed `tiered` in the object store its
// environment names (BENCH_FOLLOW_ENDPOINT, _BUCKET, _PREFIX; credentials from the AWS
// environment; the writer's server for the unsealed tail in BENCH_FOLLOW_URL), waits for the
// feed to appear, and follows it from the start, noting when each commit reaches it
// (milliseconds since the epoch, the clock the writer notes its acknowledgements with). On
// `finish` (sent once the writer's uploads are done, with the writer's head) it refreshes, waits
// up to a minute for its head to reach the writer's, waits for its follow to reach its head,
// hashes a RAW scan of the whole history up to it, and answers with the head, the arrivals, the
// hash, its records, RSS and requests.
import crypto from 'node:crypto';
import { Store } from '@streamstack/engine';

const directory = process.argv[2];
if (!directory || !process.send) {
  console.error('usage: fork(follower-process.mjs, [DATA_DIRECTORY]) — it talks to its parent over IPC');
  process.exit(2);
}

const store = await Store.open(directory, {
  follower: true,
  objectStore: {
    endpoint: process.env.BENCH_FOLLOW_ENDPOINT,
    bucket: process.env.BENCH_FOLLOW_BUCKET,
    prefix: process.env.BENCH_FOLLOW_PREFIX,
  },
  ...(process.env.BENCH_FOLLOW_URL ? { follow: { url: process.env.BENCH_FOLLOW_URL } } : {}),
});
let feed;
for (;;) {
  try {
    feed = await store.feed('tiered');
    break;
  } catch (error) {
    if (error.code !== 'FEED_NOT_FOUND') throw error;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
process.send({ type: 'ready' });

/** Commit numbers and arrival times, in order. */
const arrivals = [];
let reached = 0;
let waiting;
const stop = new AbortController();
const following = (async () => {
  for await (const batch of feed.follow({ after: 0, signal: stop.signal })) {
    arrivals.push(batch.commit.commit, Date.now());
    reached = batch.commit.commit;
    if (waiting && reached >= waiting.head) waiting.resolve();
  }
})().catch((error) => {
  if (!stop.signal.aborted) throw error;
});

process.on('message', async (message) => {
  if (message.type !== 'finish') return;
  // Everything tiered is in object storage now, and the tail is at the writer's server: the
  // follower's head reaches the writer's (`message.head`) soon, or stays at the last tiered
  // commit without a writer to follow.
  let head = (await feed.refresh())?.commit ?? 0;
  const deadline = Date.now() + 60_000;
  while (process.env.BENCH_FOLLOW_URL && head < message.head && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    head = (await feed.head())?.commit ?? 0;
  }
  if (reached < head) await new Promise((resolve) => (waiting = { head, resolve }));
  stop.abort();
  await following;
  const hash = crypto.createHash('sha256');
  const started = performance.now();
  let bytes = 0;
  let records = 0;
  for await (const chunk of feed.readLines({ after: 0, upTo: head })) {
    hash.update(chunk);
    bytes += chunk.length;
    for (const byte of chunk) if (byte === 10) records++;
  }
  const scanMs = performance.now() - started;
  const tiering = (await feed.info()).tiering;
  process.send({
    type: 'finished',
    head,
    records,
    arrivals,
    digest: hash.digest('hex'),
    scanMs,
    bytes,
    rssBytes: process.memoryUsage().rss,
    requests: tiering?.remoteReads.requests ?? 0,
  });
  await store.close();
  process.exit(0);
});
