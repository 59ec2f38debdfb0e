// Type-checked by install.test.ts in a folder where the tarballs were installed, against the
// shipped declarations (and by `tsc -p test/tsconfig.json` against the sources): one function
// takes the embedded store or the remote one, and the records, infos and error class of the two
// are the same types, which holds only while the client and the engine share the protocol's.

import { type RemoteStore, type StoredRecord, StreamStackError } from '@streamstack/client';
import {
  StreamStackError as EngineError,
  type StoredRecord as EngineRecord,
  type FeedInfo,
  type Store,
} from '@streamstack/engine';

const oneClass: typeof EngineError = StreamStackError;

export async function latest(
  store: Store | RemoteStore,
  name: string,
): Promise<{ info: FeedInfo; records: StoredRecord[] }> {
  const feed = await store.feed(name);
  const records: EngineRecord[] = [];
  for await (const record of feed.read({ mode: 'latest' })) records.push(record);
  try {
    return { info: await feed.info(), records };
  } catch (error) {
    if (error instanceof oneClass && error.code === 'FEED_NOT_FOUND')
      throw new EngineError('INVALID_ARGUMENT', `no feed ${name}`);
    throw error;
  }
}
