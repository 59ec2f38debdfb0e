// The cold reads of `pnpm bench tiered` in a process of their own (see `cold-reads.mjs`): it
// takes the stores and object store from its parent over IPC, runs the reads, answers with what
// they measured, and exits.
import { coldReads } from './cold-reads.mjs';

if (!process.send) {
  console.error('usage: fork(cold-reads-process.mjs) — it talks to its parent over IPC');
  process.exit(2);
}
process.once('message', async ({ on, off, objectStore }) => {
  try {
    process.send({ type: 'result', result: await coldReads(on, off, objectStore) }, () => process.exit(0));
  } catch (error) {
    process.send({ type: 'error', error: error.stack ?? String(error) }, () => process.exit(1));
  }
});
