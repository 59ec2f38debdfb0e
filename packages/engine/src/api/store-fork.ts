/**
 * `store.forkFeed`'s work on the store: the fork is laid out beside the feeds in the source's
 * maintenance queue (`coordinator/opening/feed-fork.ts`), then put in place by one rename and
 * opened by the store. A fork shares the source's sealed segments by hard links, so it needs them on this
 * machine: stores with object storage (whose eviction truncates segment files) and replicated
 * feeds are refused.
 */
import type { DataDirectory } from '../coordinator/opening/data-directory.js';
import { layOutFork } from '../coordinator/opening/feed-fork.js';
import { StreamStackError } from '../errors.js';
import type { Feed } from './feed.js';

/** What of the store a fork uses. */
export interface StoreForFork {
  readonly directory: DataDirectory;
  readonly tiered: boolean;
  readonly clock: () => number;
  feed(name: string): Promise<Feed>;
}

/** Lays the fork out and puts it in place; the caller opens it (lookups of `name` wait for this). */
export async function forkInStore(
  store: StoreForFork,
  sourceName: string,
  name: string,
  at: number | undefined,
): Promise<void> {
  if (store.tiered)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      'forks share segment files on this machine: a store with object storage cannot fork yet',
    );
  const source = await store.feed(sourceName);
  const writer = source.writer;
  writer.assertPresent();
  if (writer.durability === 'replicated')
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `feed ${sourceName} is replicated: forks of replicated feeds are not built yet`,
      {
        details: { feed: sourceName },
      },
    );
  const head = writer.watermark.commit;
  const point = at ?? head;
  if (!Number.isSafeInteger(point) || point < 0 || point > head)
    throw new StreamStackError(
      'CURSOR_OUT_OF_RANGE',
      `a fork point is a commit from 0 (an empty fork) to the head (${head}), not ${String(at)}`,
      { details: { at: at ?? null, head } },
    );
  // At 0 the fork holds nothing of the source: what the source trimmed does not matter.
  if (point > 0) writer.assertNotTrimmed(point, 'at');
  if (point > 0 && point < writer.lowMark)
    throw new StreamStackError('TRIMMED', `commit ${point} was trimmed: the history starts at ${writer.lowMark}`, {
      details: { at: point, lowMark: writer.lowMark },
    });
  if (store.directory.holdsFeed(name))
    throw new StreamStackError('FEED_EXISTS', `a feed named ${name} exists already`, { details: { feed: name } });
  const laidOut = await store.directory.restoringDirectory(name);
  try {
    await writer
      .retentionKeeper()
      .serial(() =>
        layOutFork(writer, laidOut, { name, createdAt: store.clock(), origin: { feed: sourceName, at: point } }),
      );
  } catch (error) {
    await store.directory.restoringDirectory(name);
    throw error;
  }
  await store.directory.adoptFeed(name, laidOut);
}
