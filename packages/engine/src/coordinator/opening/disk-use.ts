/**
 * What a feed takes on disk, for `feed.diskUse()`: its history segments, and every file and byte
 * under its directory (logs, summaries, index files, dictionaries, state).
 */
import fs from 'node:fs';
import path from 'node:path';
// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { FeedDiskUse } from '@streamstack/protocol';
import { baseOfSegmentName, FeedLayout, segmentSuffix } from '../../storage/feed-layout.js';

export type { FeedDiskUse };

/**
 * Walks the feed's directory once, without blocking the event loop on the file system; files
 * that vanish meanwhile (a WAL segment deleted) are skipped.
 */
export async function feedDiskUse(directory: string): Promise<FeedDiskUse> {
  let historySegments = 0;
  let files = 0;
  let bytes = 0;
  const historyDirectory = new FeedLayout(directory).history;
  const walk = async (at: string): Promise<void> => {
    let entries: fs.Dirent[];
    try {
      entries = await fs.promises.readdir(at, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const file = path.join(at, entry.name);
      if (entry.isDirectory()) {
        await walk(file);
        continue;
      }
      try {
        bytes += (await fs.promises.stat(file)).blocks * 512;
      } catch {
        continue;
      }
      files++;
      if (
        at === historyDirectory &&
        entry.name.endsWith(segmentSuffix.history) &&
        baseOfSegmentName(entry.name) !== undefined
      )
        historySegments++;
    }
  };
  await walk(directory);
  return { historySegments, files, bytes };
}
