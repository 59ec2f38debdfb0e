/**
 * What a feed's history shares with other feeds of its store: segments hard-linked by a fork
 * (`feed-fork.ts`). A segment file with more than one link is shared; the feeds holding the same
 * file are found by its device and inode. Space is reclaimed when the last feed lets go of it.
 *
 * @example
 * sharedHistory('/data/feeds/orders'); // { segments: 12, bytes: 805306368, feeds: ['orders-trial'] }
 */
import fs from 'node:fs';
import path from 'node:path';
import type { FeedSharing } from '@streamstack/protocol';
import { FeedLayout, segmentSuffix } from '../../storage/feed-layout.js';

/** The identities (device and inode) of a feed's history segment files, with their sizes and links. */
function segmentFiles(feedDirectory: string): Map<string, { size: number; links: number }> {
  const files = new Map<string, { size: number; links: number }>();
  const history = new FeedLayout(feedDirectory).history;
  let names: string[];
  try {
    names = fs.readdirSync(history);
  } catch {
    return files;
  }
  for (const name of names) {
    if (!name.endsWith(segmentSuffix.history)) continue;
    try {
      const stats = fs.statSync(path.join(history, name));
      files.set(`${stats.dev}:${stats.ino}`, { size: stats.size, links: stats.nlink });
    } catch {
      // Gone since the listing (a merge or trim of this feed): not shared any more.
    }
  }
  return files;
}

/** What the feed in `feedDirectory` shares with the other feeds beside it; undefined when nothing. */
export function sharedHistory(feedDirectory: string): FeedSharing | undefined {
  const shared = new Map([...segmentFiles(feedDirectory)].filter(([, file]) => file.links > 1));
  if (shared.size === 0) return undefined;
  const feedsFolder = path.dirname(feedDirectory);
  const self = path.basename(feedDirectory);
  const feeds: string[] = [];
  for (const other of fs.readdirSync(feedsFolder).sort()) {
    // Names starting with '.' are deletions and layouts under way, never feeds.
    if (other === self || other.startsWith('.')) continue;
    const files = segmentFiles(path.join(feedsFolder, other));
    if ([...shared.keys()].some((identity) => files.has(identity))) feeds.push(other);
  }
  let bytes = 0;
  for (const file of shared.values()) bytes += file.size;
  return { segments: shared.size, bytes, feeds };
}
