/**
 * Which segment store holds each of a feed's folders of sealed files: its history (sealed
 * segments and their summaries) and its index folder (tag indexes, key and fingerprint
 * dictionaries). The one place that chooses, so that a store elsewhere (object storage) is a
 * change here, not in the code that lists, reads and deletes the files.
 */
import type { Kernels } from '../kernels/kernels.js';
import { FeedLayout } from './feed-layout.js';
import { LocalSegmentStore, type SegmentStore } from './segment-store.js';

/** A feed's stores, by folder. */
export interface FeedStores {
  readonly history: SegmentStore;
  readonly index: SegmentStore;
}

/** The stores of the feed in `directory`: today its local folders. */
export function feedStores(kernels: Kernels, directory: string): FeedStores {
  const layout = new FeedLayout(directory);
  return {
    history: new LocalSegmentStore(kernels, layout.history),
    index: new LocalSegmentStore(kernels, layout.index),
  };
}
