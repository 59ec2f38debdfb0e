/**
 * Where Durable Streams subscriptions are kept (durable-subscriptions.ts has what they do): each
 * one a feed, `dssub.` and its id encoded as stream names are, whose last commit holds its whole
 * state (durable-subscription-state.ts), read once when first needed; the turns its changes
 * take, one at a time; and its one timer (a lease or a retry). The feeds are outside the
 * streams' `ds.` namespace, so a token scoped to the streams (`ds.*`) does not read what a
 * subscription holds (its webhook URL may carry a secret).
 */
import { type Feed, isStreamStackError, limits, StreamStackError } from '@streamstack/engine';
import type { ServerContext } from './context.js';
import { feedStreamName, streamFeedName, streamFeedPrefix } from './durable-stream-names.js';
import {
  decodeSubscription,
  encodeSubscription,
  restoreSubscription,
  type SubscriptionState,
} from './durable-subscription-state.js';
import { KeyedTurns } from './keyed-turns.js';

/** What every subscription's feed name starts with. */
const subscriptionFeedPrefix = 'dssub.';

/** Commits of a subscription's feed between trims of the older ones (each is a whole state). */
const trimEveryCommits = 1024;

export class SubscriptionBook {
  private loaded: Promise<void> | undefined;
  private readonly states = new Map<string, SubscriptionState>();
  private readonly feeds = new Map<string, Feed>();
  private readonly turns = new KeyedTurns();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /** Each subscription's state as its feed last took it (what a failed write goes back to). */
  private readonly written = new Map<string, string>();
  private closed = false;

  /**
   * @param resume called for each subscription read from its feed, to take up its wake, lease or retry
   * @param failed where a timer's failure goes
   */
  constructor(
    private readonly ctx: ServerContext,
    private readonly resume: (state: SubscriptionState) => void,
    private readonly failed: (error: unknown) => void,
  ) {}

  /** Stops every timer (the server is closing). */
  close(): void {
    this.closed = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  /** Every subscription known. */
  all(): SubscriptionState[] {
    return [...this.states.values()];
  }

  /** Subscription `id`, or undefined. */
  find(id: string): SubscriptionState | undefined {
    return this.states.get(id);
  }

  /** Subscription `id`; `SUBSCRIPTION_NOT_FOUND` if there is none. */
  existing(id: string): SubscriptionState {
    const state = this.states.get(id);
    if (!state)
      throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription ${id}`, { details: { subscription: id } });
    return state;
  }

  /** Keeps a new subscription: its feed made (or one a creation cut short left, taken over) and its state written. */
  async add(state: SubscriptionState): Promise<void> {
    const feedName = subscriptionFeedName(state.id);
    await this.ctx.store.createFeed(feedName).catch((error: unknown) => {
      if (!isStreamStackError(error, 'FEED_EXISTS')) throw error;
    });
    this.feeds.set(state.id, await this.ctx.feed(feedName));
    await this.persist(state);
    this.states.set(state.id, state);
  }

  /** Forgets subscription `state` and deletes its feed; whatever still holds it writes nothing more. */
  async remove(state: SubscriptionState): Promise<void> {
    state.deleted = true;
    this.states.delete(state.id);
    this.written.delete(state.id);
    this.feeds.delete(state.id);
    this.clearTimer(state.id);
    const feedName = subscriptionFeedName(state.id);
    await this.ctx.store.deleteFeed(feedName).catch((error: unknown) => {
      if (!isStreamStackError(error, 'FEED_NOT_FOUND')) throw error;
    });
    this.ctx.forget(feedName);
  }

  /**
   * Writes the state as its feed's next commit (and drops older commits now and then). A change
   * is made on the state in memory first: when its write fails, the state goes back to what its
   * feed holds, so nothing shows or acts on a change the disk did not take.
   */
  async persist(state: SubscriptionState): Promise<void> {
    if (state.deleted) return;
    const feed = this.feeds.get(state.id)!;
    const record = encodeSubscription(state);
    let commit: number;
    try {
      ({ commit } = await feed.append([{ payload: record }]));
    } catch (error) {
      const held = this.written.get(state.id);
      if (held !== undefined) restoreSubscription(state, decodeSubscription(held, feed.name));
      throw error;
    }
    this.written.set(state.id, record);
    if (commit % trimEveryCommits === 0) await feed.trim({ before: commit, force: true });
  }

  /** Reads every subscription's state once, and has each resumed. */
  load(): Promise<void> {
    this.loaded ??= (async () => {
      for (const feedName of await this.ctx.store.feedNames()) {
        if (subscriptionIdOf(feedName) === undefined) continue;
        const feed = await this.ctx.feed(feedName);
        const head = await feed.head();
        if (!head) continue;
        const [record] = await feed.readCommit(head.commit);
        const text = Buffer.from(record!.payload).toString('utf8');
        const state = decodeSubscription(text, feedName);
        this.written.set(state.id, text);
        this.states.set(state.id, state);
        this.feeds.set(state.id, feed);
        this.resume(state);
      }
    })();
    this.loaded.catch(() => {
      this.loaded = undefined;
    });
    return this.loaded;
  }

  /** Runs `work` after every earlier change to subscription `id` has settled. */
  turn<T>(id: string, work: () => Promise<T>): Promise<T> {
    return this.turns.run(id, work);
  }

  /** Runs `run` in a turn of subscription `id` after `ms`, in place of its timer set before. */
  setTimer(id: string, ms: number, run: () => Promise<void>): void {
    this.clearTimer(id);
    if (this.closed) return;
    const timer = setTimeout(
      () => {
        this.timers.delete(id);
        void this.turn(id, run).catch((error: unknown) => this.failed(error));
      },
      Math.max(0, ms),
    );
    timer.unref();
    this.timers.set(id, timer);
  }

  clearTimer(id: string): void {
    clearTimeout(this.timers.get(id));
    this.timers.delete(id);
  }
}

/** The feed of subscription `id`; `INVALID_NAME` for an id that is empty, holds `/` or is too long. */
export function subscriptionFeedName(id: string): string {
  if (id.length === 0 || id.includes('/')) {
    throw new StreamStackError('INVALID_NAME', 'a subscription id is a non-empty name without /', {
      details: { subscription: id },
    });
  }
  const name = subscriptionFeedPrefix + streamFeedName(id).slice(streamFeedPrefix.length);
  if (name.length > limits.feedNameCharactersMax) {
    throw new StreamStackError('INVALID_NAME', `subscription id ${id} is too long for a feed name`, {
      details: { subscription: id, max: limits.feedNameCharactersMax },
    });
  }
  return name;
}

/** The subscription a feed name stands for, or undefined when it is no subscription's feed. */
function subscriptionIdOf(feed: string): string | undefined {
  if (!feed.startsWith(subscriptionFeedPrefix)) return undefined;
  return feedStreamName(streamFeedPrefix + feed.slice(subscriptionFeedPrefix.length));
}
