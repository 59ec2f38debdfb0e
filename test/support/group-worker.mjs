// A worker of a subscription group in a process of its own, as the group test drives eight of
// them and kills them at random: it claims work from the server (a long-poll), and for each commit
// gives it back with probability NACK_RATE or acknowledges it. It runs on the built client
// (packages/client/dist), as a user's worker would.
//
// It logs what it does, one JSON line each, synchronously, so that a SIGKILL loses at most the
// line being written: `claim` (commit, delivery, keys, time after the answer came), `nack`,
// `send` (time just before an ack is sent), `acked` (the ack succeeded: this worker settled the
// commit) and `lost` (the ack was refused: the claim had run out and gone to another worker).
//
// Arguments: server URL, feed, group, worker name, log file. Environment: NACK_RATE (0 to 1).
import fs from 'node:fs';
import { RemoteStore, StreamStackError } from '../../packages/client/dist/index.js';

const [url, feedName, groupName, worker, logFile] = process.argv.slice(2);
const nackRate = Number(process.env.NACK_RATE ?? '0');
const log = fs.openSync(logFile, 'a');
const write = (entry) => fs.writeSync(log, `${JSON.stringify(entry)}\n`);

const store = await RemoteStore.open(url);
const feed = await store.feed(feedName);
const group = await feed.existingSubscriptionGroup(groupName);
for (;;) {
  const claims = await group.claim({ worker, max: 16, waitMs: 1_000 });
  for (const claim of claims) {
    const commit = claim.commit.commit;
    const keys = [...new Set(claim.records.map((record) => record.key))];
    write({ kind: 'claim', commit, delivery: claim.delivery, keys, time: Date.now() });
    if (Math.random() < nackRate) {
      await group.nack(commit, { worker, reason: 'chose to' });
      write({ kind: 'nack', commit });
      continue;
    }
    write({ kind: 'send', commit, time: Date.now() });
    try {
      await group.ack(commit, { worker });
      write({ kind: 'acked', commit });
    } catch (error) {
      if (!(error instanceof StreamStackError && error.code === 'CLAIM_NOT_HELD')) throw error;
      write({ kind: 'lost', commit });
    }
  }
}
