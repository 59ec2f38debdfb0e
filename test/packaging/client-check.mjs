// Run by install.test.ts from a folder where only the client's and the protocol's tarballs were
// installed, as a user's script would be: every import resolves from that folder's
// node_modules. It talks to the server whose URL is its argument (started from the full install),
// and prints one JSON line for the test to check.
import { createRequire } from 'node:module';
import { RemoteStore, StreamStackError } from '@streamstack/client';
import { StreamStackError as ProtocolError } from '@streamstack/protocol';

const require = createRequire(import.meta.url);

function resolves(specifier) {
  try {
    return require.resolve(specifier);
  } catch {
    return null;
  }
}

const result = {};
const store = await RemoteStore.open(process.argv[2]);
try {
  const feed = await store.createFeed('orders');
  // A byte payload that is not UTF-8 crosses the wire as base64 and must come back exact.
  const commit = await feed.append([
    { payload: '{"id":1}', key: 'order-1', type: 'created' },
    { payload: new Uint8Array([0xff, 0x00, 0x7f]), key: 'bytes' },
  ]);
  result.commit = { commit: commit.commit, records: commit.records };
  result.records = [];
  for await (const record of feed.read({ after: 0 })) {
    result.records.push({ key: record.key, position: record.position, payload: [...record.payload] });
  }
  // An error from the server is rebuilt as the protocol's class, which the client re-exports.
  const missing = await store.feed('no-such-feed').catch((error) => error);
  result.missing = {
    instance: missing instanceof StreamStackError,
    oneClass: StreamStackError === ProtocolError,
    name: missing?.name,
    code: missing?.code,
  };
} finally {
  await store.close();
}

// Nothing of the engine is installed, and nothing native was loaded.
result.engine = resolves('@streamstack/engine');
result.addons = Object.keys(require.cache).filter((file) => file.endsWith('.node'));

process.stdout.write(`${JSON.stringify(result)}\n`);
