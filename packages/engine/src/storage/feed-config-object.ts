/**
 * A feed's `feed.json` in object storage, beside its tag folders: a follower, and a node taking a
 * replicated feed over, read it to find which folder holds the feed's segments and slots.
 */
import type { ObjectSegmentStore } from './object-segment-store.js';
import { feedConfigObjectName, feedNameObjectPrefix } from './segment-descriptor.js';
import { isMissingFile } from './segment-store.js';

/**
 * Puts `config` (the bytes of the feed's local config file) as `feed.json` in the feed's
 * `folder` (`feedNameFolder`), unless
 * object storage already holds exactly those bytes: read first, so a reopening writer costs one
 * request, and a new feed of the name replaces the pointer to the old one's folder. Returns the
 * number of requests it made.
 */
export async function publishFeedConfig(folder: ObjectSegmentStore, config: Uint8Array): Promise<number> {
  const found = await folder.readStart(feedConfigObjectName, Number.POSITIVE_INFINITY).then(
    (start) => start.bytes,
    (error: unknown) => {
      if (isMissingFile(error)) return undefined;
      throw error;
    },
  );
  if (found !== undefined && Buffer.compare(Buffer.from(found), Buffer.from(config)) === 0) return 1;
  await folder.put(feedConfigObjectName, config);
  return 2;
}

/** The folder of every generation of feed `feed`'s name, which holds its `feed.json`. */
export function feedNameFolder(objectStore: ObjectSegmentStore, feed: string): ObjectSegmentStore {
  return objectStore.within(feedNameObjectPrefix(feed));
}
