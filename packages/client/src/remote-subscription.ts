/** A subscription of a remote feed, with the embedded `Subscription`'s methods. */
import {
  type CommitRecords,
  type PollResult,
  type SubscriptionInfo,
  storedRecordFromLine,
} from '@streamstack/protocol';
import { feedPath } from './paths.js';
import type { RemoteFeed } from './remote-feed.js';

export class RemoteSubscription {
  /** @internal */
  constructor(
    readonly feed: RemoteFeed,
    readonly name: string,
  ) {}

  private get path(): string {
    return `${feedPath(this.feed.name)}/subscriptions/${encodeURIComponent(this.name)}`;
  }

  /** The saved cursor, when it was created and last moved, and its lag behind the head. */
  info(): Promise<SubscriptionInfo> {
    return this.feed.transport.json('GET', this.path);
  }

  /** Whole commits after the saved cursor up to the head, stopping before `max` records. */
  async poll(options: { max?: number } = {}): Promise<PollResult> {
    const polled = await this.feed.transport.json<{
      cursor: number;
      commits: { commit: CommitRecords['commit']; records: Record<string, unknown>[] }[];
    }>('GET', `${this.path}/poll`, { query: { max: options.max } });
    return {
      cursor: polled.cursor,
      commits: polled.commits.map(({ commit, records }) => ({ commit, records: records.map(storedRecordFromLine) })),
    };
  }

  advance(cursor: number): Promise<SubscriptionInfo> {
    return this.feed.transport.json('POST', `${this.path}/advance`, { json: { cursor } });
  }

  reset(cursor: number): Promise<SubscriptionInfo> {
    return this.feed.transport.json('POST', `${this.path}/reset`, { json: { cursor } });
  }

  async delete(): Promise<void> {
    await this.feed.transport.json('DELETE', this.path);
  }

  /**
   * Commits after the saved cursor, then each new one as it is published, until `signal`
   * aborts; with `autoAdvance`, the cursor is saved as each commit is handed back.
   */
  async *live(options: { signal?: AbortSignal; autoAdvance?: boolean } = {}): AsyncGenerator<CommitRecords> {
    const { cursor } = await this.info();
    for await (const batch of this.feed.follow({
      after: cursor,
      ...(options.signal ? { signal: options.signal } : {}),
    })) {
      yield batch;
      if (options.autoAdvance) await this.advance(batch.commit.commit);
    }
  }
}
