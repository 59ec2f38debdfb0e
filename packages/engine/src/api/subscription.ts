/**
 * A named, durable cursor on a feed. `poll` reads from the saved cursor to the head; `advance`
 * saves a new cursor (forward only; `reset` moves it anywhere); `live` is catch-up and live tail
 * in one loop.
 *
 * @example
 * const subscription = await feed.createSubscription('billing');
 * for await (const { commit, records } of subscription.live({ signal })) {
 *   await handle(records);
 *   await subscription.advance(commit.commit);
 * }
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { PollResult, SubscriptionInfo } from '@streamstack/protocol';
import { StreamStackError } from '../errors.js';
import { subscriptionPollRecordsDefault } from '../limits.js';
import type { CommitRecords, Feed } from './feed.js';
import { optionsOf, toCommit, validateCursor } from './records.js';

export type { PollResult, SubscriptionInfo };

export class Subscription {
  /** @internal */
  constructor(
    readonly feed: Feed,
    readonly name: string,
  ) {}

  /** The saved cursor: the last commit this subscription has handled. */
  private savedCursor(): number {
    this.feed.writer.assertPresent();
    return this.feed.writer.subscriptions.get(this.name).cursor;
  }

  /**
   * The saved cursor (the last commit handled), when it was created and last moved, and how far
   * it is behind the head.
   *
   * @example
   * const { cursor, lag } = await subscription.info();
   */
  async info(): Promise<SubscriptionInfo> {
    this.feed.writer.assertPresent();
    const state = this.feed.writer.subscriptions.get(this.name);
    return { ...state, lag: this.feed.reads.lag(state.cursor), trimmed: state.cursor < this.feed.writer.lowMark - 1 };
  }

  /**
   * Whole commits after the saved cursor up to the head, stopping before `max` records are
   * passed (one commit is always returned when there is one). Does not move the cursor.
   */
  async poll(options: { max?: number } = {}): Promise<PollResult> {
    options = optionsOf(options, 'subscription.poll');
    const max = validateCursor(options.max, 'max') ?? subscriptionPollRecordsDefault;
    const { batches, cursor } = await this.feed.reads.poll(this.savedCursor(), max);
    return {
      commits: batches.map((batch) => ({ commit: toCommit(this.feed.name, batch.commit), records: batch.records })),
      cursor,
    };
  }

  /** Saves `cursor` durably; it must not be behind the saved one (`CURSOR_BEHIND`) or past the head. */
  async advance(cursor: number): Promise<SubscriptionInfo> {
    this.checkInRange(cursor);
    await this.feed.assertNotGrouped(this.name);
    await this.feed.writer.subscriptions.move(this.name, cursor, false);
    return this.info();
  }

  /** Moves the cursor anywhere in the history, backwards included, durably. */
  async reset(cursor: number): Promise<SubscriptionInfo> {
    this.checkInRange(cursor);
    await this.feed.assertNotGrouped(this.name);
    await this.feed.writer.subscriptions.move(this.name, cursor, true);
    return this.info();
  }

  async delete(): Promise<void> {
    this.feed.writer.assertPresent();
    await this.feed.assertNotGrouped(this.name);
    await this.feed.writer.subscriptions.delete(this.name);
  }

  /**
   * Commits after the saved cursor, then each new one as it is published, until `signal`
   * aborts. The cursor is not moved: call `advance` with each commit once it is handled (or pass
   * `autoAdvance` to have it saved as each commit is yielded back).
   */
  async *live(options: { signal?: AbortSignal; autoAdvance?: boolean } = {}): AsyncGenerator<CommitRecords> {
    options = optionsOf(options, 'subscription.live');
    for await (const batch of this.feed.follow({
      after: this.savedCursor(),
      ...(options.signal ? { signal: options.signal } : {}),
    })) {
      yield batch;
      if (options.autoAdvance) await this.advance(batch.commit.commit);
    }
  }

  private checkInRange(cursor: number): void {
    this.feed.writer.assertPresent();
    this.feed.writer.assertNotTrimmed(cursor, 'cursor');
    const head = this.feed.writer.watermark.commit;
    if (!Number.isSafeInteger(cursor) || cursor < 0 || cursor > head) {
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', `cursor ${cursor} is outside the history (0 to ${head})`, {
        details: { cursor, head },
      });
    }
  }
}
