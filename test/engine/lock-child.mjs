// A process that tries to open a data directory while others try too, for the lock race test.
// It runs on the built engine (packages/engine/dist), as a user's process would, and prints one
// JSON line per event so the parent knows exactly what it held and what was acknowledged.
//
// Usage: node lock-child.mjs <directory> <name> <mode>
//   contend: print `ready` once the engine is loaded, wait for a `go` line on stdin (so that the
//            parent can release every contender at the same moment), then try Store.open.
//   hold:    open the store at once and print `opened`, wait for `go`, append, then keep the
//            store open until a `release` line, so that it is a live holder for the whole round.
// A child that gets LOCKED prints `locked` and exits 0; any other failure exits 1.
//
// While it holds the store it prints `opened` just after Store.open resolves and `closing` just
// before it calls close, both stamped with process.hrtime (CLOCK_MONOTONIC, which every process on
// the machine shares), so the parent can check that no two openers' holding windows overlapped.
import readline from 'node:readline';
import { Store } from '../../packages/engine/dist/index.js';

const [directory, name, mode] = process.argv.slice(2);
const appends = 5;
// Small segments, as the tests' own stores use: the default preallocates 64 MiB per feed, which
// every later opener (the test's read-back included) would have to scan.
const segmentBytes = 64 * 1024;

const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const now = () => process.hrtime.bigint().toString();

// Lines from the parent, in order. A closed stdin means the parent is gone: nothing more will
// come, so a child waiting for a line exits rather than holding the directory forever.
const input = readline.createInterface({ input: process.stdin });
const pending = [];
const waiting = [];
input.on('line', (line) => (waiting.length > 0 ? waiting.shift()(line) : pending.push(line)));
input.on('close', () => {
  for (const resolve of waiting.splice(0)) resolve(undefined);
  pending.push(undefined);
});
const nextLine = () =>
  pending.length > 0 ? Promise.resolve(pending.shift()) : new Promise((resolve) => waiting.push(resolve));

async function expectLine(expected) {
  const line = await nextLine();
  if (line !== expected) {
    process.stderr.write(
      `${name}: expected ${JSON.stringify(expected)} from the parent, got ${JSON.stringify(line)}\n`,
    );
    process.exit(1);
  }
}

async function open() {
  try {
    const store = await Store.open(directory, { segmentBytes });
    emit({ kind: 'opened', at: now() });
    return store;
  } catch (error) {
    if (error?.code !== 'LOCKED') throw error;
    emit({ kind: 'locked', message: error.message });
    input.close();
    return undefined;
  }
}

async function appendAll(store) {
  const feed = await store.feed('f');
  for (let index = 0; index < appends; index++) {
    const payload = `child-${name}-${index}`;
    // One-shot appends, one commit each: two writers that both think they hold the directory
    // hand out the same commit numbers, which the parent sees.
    const commit = await feed.append([{ payload }]);
    emit({ kind: 'ack', payload, commit: commit.commit });
  }
}

try {
  if (mode === 'contend') {
    emit({ kind: 'ready' });
    await expectLine('go');
    const store = await open();
    if (store) {
      await appendAll(store);
      emit({ kind: 'closing', at: now() });
      await store.close();
      input.close();
    }
  } else if (mode === 'hold') {
    const store = await open();
    if (store) {
      await expectLine('go');
      await appendAll(store);
      emit({ kind: 'appended' });
      await expectLine('release');
      emit({ kind: 'closing', at: now() });
      await store.close();
      input.close();
    }
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
} catch (error) {
  process.stderr.write(`${name}: ${error?.stack ?? error}\n`);
  process.exit(1);
}
