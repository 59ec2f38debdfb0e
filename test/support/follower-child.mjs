// A follower in a process of its own, as the follower test drives three of them: it opens its
// directory as a follower of feed FOLLOW_FEED in object storage and keeps a subscription of its
// own, `audit`. Each `step` line on stdin makes it refresh, poll the subscription for everything
// after its cursor, advance it, and hash its reads up to its head (RAW, latest and dedup lines,
// and `get` of eleven keys as of the head), printing one JSON line per stage: `ready` (with the
// subscription's cursor), `poll` (the cursor before, the commits delivered, the head),
// `advanced`, `reads` (the head, the low mark, the digest). It runs on the built engine
// (packages/engine/dist), as a user's process would, and the test kills it with SIGKILL at random.
//
// Arguments: the data directory. Environment: FOLLOW_FEED, and what a user sets for the CLI:
// STREAMSTACK_OBJECT_STORE (s3://bucket/prefix), STREAMSTACK_OBJECT_STORE_ENDPOINT and the AWS
// credentials.
import crypto from 'node:crypto';
import readline from 'node:readline';
import { objectStoreFromAddress, Store } from '../../packages/engine/dist/index.js';
import { emit } from './ingest.mjs';

const [directory] = process.argv.slice(2);
const store = await Store.open(directory, {
  follower: true,
  objectStore: objectStoreFromAddress(process.env.STREAMSTACK_OBJECT_STORE, {
    endpoint: process.env.STREAMSTACK_OBJECT_STORE_ENDPOINT,
  }),
});
const feed = await store.feed(process.env.FOLLOW_FEED);
const audit = await feed.subscription('audit').catch(async (error) => {
  if (error.code !== 'SUBSCRIPTION_NOT_FOUND') throw error;
  return feed.createSubscription('audit', { after: 0 });
});
emit({ kind: 'ready', cursor: (await audit.info()).cursor });

/** The keys whose `get` the test compares: ten that recur, and one written only before a trim. */
const keysChecked = [...Array.from({ length: 10 }, (_, key) => `k${key}`), 'early-3'];

/** The SHA-256 of every read the test compares, up to commit `head`. */
async function digestUpTo(head) {
  const hash = crypto.createHash('sha256');
  if (head > 0) {
    for (const mode of ['raw', 'latest', 'dedup'])
      for await (const chunk of feed.readLines({ upTo: head, mode })) hash.update(chunk);
    for (const key of keysChecked) hash.update(JSON.stringify((await feed.get(key, { asOf: head }))?.position ?? null));
  }
  return hash.digest('hex');
}

for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line !== 'step') continue;
  const head = (await feed.refresh())?.commit ?? 0;
  const before = (await audit.info()).cursor;
  const { commits, cursor } = await audit.poll({ max: 10_000_000 });
  emit({ kind: 'poll', from: before, commits: commits.map((batch) => batch.commit.commit), head });
  await audit.advance(cursor);
  emit({ kind: 'advanced', cursor });
  emit({ kind: 'reads', head, lowMark: (await feed.info()).lowMark, digest: await digestUpTo(head) });
}
await store.close();
