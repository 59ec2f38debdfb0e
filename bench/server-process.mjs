// The server of `pnpm bench server`, in a process of its own as a deployment runs it: a fresh
// data directory served on a free loopback port. It tells its parent (over the IPC channel of
// `fork`) the URL it listens on, answers `usage` with its CPU and event-loop time so far and
// `groups` with a feed's group-commit counts, and on `close` (or when the parent goes away)
// drains, closes the store and exits.
import { performance } from 'node:perf_hooks';
import { Store } from '@streamstack/engine';
import { createServer } from '@streamstack/server';

const directory = process.argv[2];
if (!directory || !process.send) {
  console.error('usage: fork(server-process.mjs, [DATA_DIRECTORY]) — it talks to its parent over IPC');
  process.exit(2);
}

const store = await Store.open(directory);
const server = await createServer({ store });
const url = await server.listen({ port: 0 });

let closing;
function close() {
  closing ??= server.close().then(() => process.exit(0));
  return closing;
}

process.on('message', async (message) => {
  if (message.type === 'usage') {
    const cpu = process.cpuUsage();
    process.send({
      type: 'usage',
      cpuMicros: cpu.user + cpu.system,
      activeMs: performance.eventLoopUtilization().active,
    });
  } else if (message.type === 'groups') {
    process.send({ type: 'groups', stats: (await store.feed(message.feed)).groupCommitStats() });
  } else if (message.type === 'close') {
    await close();
  }
});
process.on('disconnect', close);
process.send({ type: 'ready', url });
