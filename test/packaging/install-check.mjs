// Run by install.test.ts from a folder where the packed tarballs were installed with npm, as a
// user's script would be: every import resolves from that folder's node_modules, never from the
// repository. It exercises the store end to end, reports which kernels load and from which file,
// and prints one JSON line for the test to check.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { loadKernels, Store } from '@streamstack/engine';

const require = createRequire(import.meta.url);
const decoder = new TextDecoder();

function text(payload) {
  return typeof payload === 'string' ? payload : decoder.decode(payload);
}

function resolves(specifier) {
  try {
    return require.resolve(specifier);
  } catch {
    return null;
  }
}

const result = {};

// The store, end to end: create a feed, append under a lease, read back, then read again after
// reopening, so the records came from disk rather than from the writer's memory.
const directory = path.join(process.cwd(), 'data');
fs.rmSync(directory, { recursive: true, force: true });
let store = await Store.open(directory);
result.storeKernels = store.kernels.name;
const feed = await store.createFeed('orders');
const { token } = await feed.acquireLease({ holder: 'install-check', ttlMs: 30_000 });
const commit = await feed.append(
  [
    { payload: '{"id":1}', key: 'order-1', type: 'created', tags: ['customer:7'] },
    { payload: '{"id":2}', key: 'order-2', type: 'created' },
  ],
  { token },
);
result.commit = { commit: commit.commit, records: commit.records };
await store.close();

store = await Store.open(directory);
const reopened = await store.feed('orders');
result.records = [];
for await (const record of reopened.read({ after: 0 })) {
  result.records.push({ key: record.key, position: record.position, payload: text(record.payload) });
}
result.byKey = text((await reopened.get('order-2'))?.payload ?? '');
await store.close();

// The kernels: what `auto` picks, and whether `native` loads or fails with its typed error.
result.auto = loadKernels('auto').name;
try {
  result.native = { name: loadKernels('native').name };
} catch (error) {
  result.native = { code: error?.code, name: error?.name, message: String(error?.message) };
}

// Where the binary came from: Node keeps every loaded addon in the require cache by its path.
result.addons = Object.keys(require.cache).filter((file) => file.endsWith('.node'));
result.platformPackage = resolves('@streamstack/native-linux-x64-gnu');
result.nativePackage = resolves('@streamstack/native');

process.stdout.write(`${JSON.stringify(result)}\n`);
