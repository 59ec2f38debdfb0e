/**
 * A writer's head hints in etcd: for as long as a feed's writer is open on a node of a cluster,
 * each new head is put as the feed's hint (`EtcdLeases.publishHead`), coalesced to one
 * transaction per `headHintIntervalMs` at most, under the grant's epoch. Followers of the cluster
 * watch the hints to know when the feed moved on, and where its writer serves.
 *
 * @example
 * publishHeadHints('orders', writer, leases); // ends by itself when the writer closes
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { headHintIntervalMs } from '../../limits.js';
import type { EtcdLeases } from './etcd-leases.js';
import type { FeedWriter } from './feed-writer.js';

/** What the hints need of a writer: its head, and a wait for the next commit (which fails once it closes). */
export type HintedWriter = Pick<FeedWriter, 'watermark' | 'waitForCommitAfter'>;

/**
 * Publishes feed `feed`'s head hints from `writer` until the writer closes. A hint that fails
 * (etcd unreachable, no grant here, a newer epoch) is skipped: the next commit tries again, and
 * a follower's slow poll covers the gap.
 */
export function publishHeadHints(feed: string, writer: HintedWriter, leases: Pick<EtcdLeases, 'publishHead'>): void {
  void (async () => {
    let hinted = writer.watermark.commit;
    for (;;) {
      try {
        await writer.waitForCommitAfter(hinted);
      } catch {
        return; // The writer closed.
      }
      const commit = writer.watermark.commit;
      await leases.publishHead(feed, commit).catch(() => false);
      hinted = commit;
      // Commits made meanwhile are hinted together, by the next transaction.
      await sleep(headHintIntervalMs, undefined, { ref: false });
    }
  })();
}
