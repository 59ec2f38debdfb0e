/**
 * The work of a feed's subscription groups: which commits a claim may take, reading them for the
 * worker, parking what used up its deliveries, and waking claims that wait. The durable state is
 * `SubscriptionGroups`; a group's cursor is also kept as the subscription of its name, so trims
 * and key compactions hold for the group as for any subscription.
 *
 * @example
 * const work = await GroupWork.open(feed, siblings);
 * const claims = await work.claim('billing', 'worker-a', 10);
 */
import type { GroupClaim, NackResult } from '@streamstack/protocol';
import { type GroupCandidate, type GroupState, notHeld } from '../coordinator/reading/group-state.js';
import { SubscriptionGroups } from '../coordinator/reading/subscription-groups.js';
import { assert, isStreamStackError } from '../errors.js';
import { groupClaimCommitsMax, groupKeyReadCommits } from '../limits.js';
import { FeedLayout } from '../storage/feed-layout.js';
import type { Feed } from './feed.js';
import { toCommit } from './records.js';

/** The keys of a window's commits, read once: commit → the distinct keys of its records. */
interface KeyCache {
  readonly keys: Map<number, string[]>;
  /** Keys are known for every commit up to this one (past the group's cursor). */
  through: number;
  /** The read under way, which claims arriving meanwhile wait for. */
  reading: Promise<void> | undefined;
}

/** How a feed reaches the store's other feeds: its groups park work in a dead-letter feed, a fork makes one. */
export interface FeedSiblings {
  feed(name: string): Promise<Feed>;
  createFeed(name: string): Promise<Feed>;
  forkFeed(source: string, name: string, options: { at?: number }): Promise<Feed>;
}

/** The tag a parked record carries: it names its origin, and makes parking it twice a no-op. */
export function parkedTag(feed: string, group: string, commit: number): string {
  return `parked:${feed}/${group}/${commit}`;
}

export class GroupWork {
  /** The keys of the commits each group ordered by key has looked at. */
  private readonly keyCaches = new Map<string, KeyCache>();
  /** Claims waiting for work: called on every change that may free some. */
  private readonly waiters = new Set<() => void>();

  private constructor(
    private readonly feed: Feed,
    readonly groups: SubscriptionGroups,
    private readonly siblings: FeedSiblings | undefined,
  ) {}

  static async open(feed: Feed, siblings: FeedSiblings | undefined): Promise<GroupWork> {
    const writer = feed.writer;
    const groups = await SubscriptionGroups.open(writer.kernels, new FeedLayout(writer.directory).groups);
    // A replicated feed on a node of a cluster: every change is copied to etcd first.
    const mirror = writer.groupMirror();
    if (mirror) groups.mirrorTo(mirror);
    const work = new GroupWork(feed, groups, siblings);
    // A crash between writing a group and its subscription leaves the group: its cursor is the truth.
    for (const state of groups.list()) await work.keepSubscription(state);
    return work;
  }

  /** Subscription moves run one at a time, each to the group's cursor as it is when it runs. */
  private moving: Promise<unknown> = Promise.resolve();

  /** Moves the group's subscription up to its cursor (creating it when a crash left none). */
  keepSubscription(state: GroupState): Promise<void> {
    const name = state.name;
    const move = this.moving.then(async () => {
      const cursor = this.groups.has(name) ? this.groups.get(name).cursor : state.cursor;
      const subscriptions = this.feed.writer.subscriptions;
      let subscription: { cursor: number } | undefined;
      try {
        subscription = subscriptions.get(name);
      } catch {
        await subscriptions.create(name, cursor);
        return;
      }
      if (subscription.cursor < cursor) await subscriptions.move(name, cursor, false);
    });
    this.moving = move.catch(() => undefined);
    return move;
  }

  /** Group creations and option changes run one at a time. */
  private creating: Promise<unknown> = Promise.resolve();

  serially<T>(change: () => Promise<T>): Promise<T> {
    const result = this.creating.then(change);
    this.creating = result.catch(() => undefined);
    return result;
  }

  /** Wakes every waiting claim: some work may be free now. */
  wake(): void {
    for (const waiter of [...this.waiters]) waiter();
  }

  /**
   * Resolves after `ms`, or sooner when work may have come: a new commit after `head`, a change
   * to the groups, a claim's time running out (`until`), or `signal` aborting.
   */
  async wait(head: number, ms: number, until: number | undefined, signal: AbortSignal | undefined): Promise<void> {
    const controller = new AbortController();
    const stop = () => controller.abort();
    const timer = setTimeout(stop, until === undefined ? ms : Math.max(0, Math.min(ms, until - this.now() + 1)));
    signal?.addEventListener('abort', stop, { once: true });
    this.waiters.add(stop);
    try {
      await this.feed.writer.waitForCommitAfter(head, controller.signal);
    } catch (error) {
      if (!controller.signal.aborted) throw error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', stop);
      this.waiters.delete(stop);
    }
  }

  now(): number {
    return this.feed.writer.now();
  }

  /**
   * Hands `worker` up to `max` commits of group `name` now (none when there is no free work): the
   * claims are durable before they are returned, so a restart redelivers rather than forgets them.
   */
  async claim(name: string, worker: string, max: number): Promise<GroupClaim[]> {
    // A forced trim took commits the group had not settled: nothing is handed out until a reset.
    this.feed.writer.assertNotTrimmed(this.groups.get(name).cursor, `the cursor of group ${name}`);
    await this.parkExhausted(name);
    const limit = Math.min(max, groupClaimCommitsMax);
    const candidates = await this.candidates(this.groups.get(name), limit);
    const taken = await this.groups.change(name, (state) => {
      const now = this.now();
      const chosen = state.choose(candidates, now, limit);
      return { next: chosen.length > 0 ? state.take(chosen, worker, now) : state, result: chosen };
    });
    if (taken.length === 0) return [];
    const state = this.groups.get(name);
    const claims: GroupClaim[] = [];
    for (const commit of taken) {
      const { batches } = await this.feed.reads.poll(commit - 1, 1);
      const batch = batches[0];
      const work = state.work.get(commit);
      if (!batch || !work || batch.commit.commit !== commit) continue;
      claims.push({
        commit: toCommit(this.feed.name, batch.commit),
        records: batch.records,
        delivery: work.deliveries,
        deadline: work.deadline,
        ...(work.reason === undefined ? {} : { reason: work.reason }),
      });
    }
    return claims;
  }

  /** The earliest time a claim of group `name` runs out, if any is held. */
  nextDeadline(name: string): number | undefined {
    let earliest: number | undefined;
    for (const work of this.groups.get(name).work.values()) {
      if (work.worker !== undefined && (earliest === undefined || work.deadline < earliest)) earliest = work.deadline;
    }
    return earliest;
  }

  /** Commits after the group's cursor that a claim may consider, oldest first, with their keys when needed. */
  private async candidates(state: GroupState, max: number): Promise<GroupCandidate[]> {
    const head = this.feed.writer.watermark.commit;
    const end = Math.min(head, state.windowEnd);
    if (state.config.orderedBy === 'commit') {
      const candidates: GroupCandidate[] = [];
      const enough = max + state.work.size + state.settled.length;
      for (let commit = state.cursor + 1; commit <= end && candidates.length < enough; commit++) {
        candidates.push({ commit, keys: [] });
      }
      return candidates;
    }
    const cache = this.keyCache(state.name);
    for (const commit of cache.keys.keys()) if (commit <= state.cursor) cache.keys.delete(commit);
    cache.through = Math.max(cache.through, state.cursor);
    // Keys are read a stretch at a time, as far as needed to find `max` free commits.
    for (;;) {
      const candidates: GroupCandidate[] = [];
      for (let commit = state.cursor + 1; commit <= cache.through; commit++) {
        candidates.push({ commit, keys: cache.keys.get(commit) ?? [] });
      }
      if (cache.through >= end || state.choose(candidates, this.now(), max).length >= max) return candidates;
      await this.readKeys(cache, Math.min(end, cache.through + groupKeyReadCommits));
    }
  }

  private keyCache(name: string): KeyCache {
    let cache = this.keyCaches.get(name);
    if (!cache) {
      cache = { keys: new Map(), through: 0, reading: undefined };
      this.keyCaches.set(name, cache);
    }
    return cache;
  }

  /** Forgets the keys read for group `name` (its cursor moved back, or it is gone). */
  forgetKeys(name: string): void {
    this.keyCaches.delete(name);
  }

  /**
   * Reads the keys of the commits after `cache.through` up to `upTo` from the key column, once
   * for every claim that needs them at the same time.
   */
  private readKeys(cache: KeyCache, upTo: number): Promise<void> {
    cache.reading ??= (async () => {
      const from = cache.through;
      for await (const batch of this.feed.readColumns({ after: from, upTo })) {
        for (let row = 0; row < batch.length; row++) {
          const key = batch.key(row);
          if (key === undefined) continue;
          const commit = batch.commitOf(row);
          const keys = cache.keys.get(commit);
          if (!keys) cache.keys.set(commit, [key]);
          else if (!keys.includes(key)) keys.push(key);
        }
      }
      cache.through = Math.max(cache.through, upTo);
    })().finally(() => {
      cache.reading = undefined;
    });
    return cache.reading;
  }

  /**
   * Acknowledges `commit` for `worker`: it is settled for good. Work settled already is refused
   * (`CLAIM_NOT_HELD`, `settled: true`) even to the worker that settled it: an acknowledgement
   * that succeeds is the one that settled the commit, so a worker can count what it did.
   */
  async ack(name: string, worker: string, commit: number): Promise<void> {
    const state = await this.groups.change(name, (state) => {
      const work = state.work.get(commit);
      if (state.isSettled(commit) || work?.worker !== worker)
        throw notHeld(name, commit, worker, state.holder(commit, this.now()), state.isSettled(commit));
      const next = state.settle(commit, 'acked', this.now());
      return { next, result: next };
    });
    await this.settled(state);
  }

  /** Gives `commit` back: another worker gets it, or it is parked once its deliveries are spent. */
  async nack(name: string, worker: string, commit: number, reason: string | undefined): Promise<NackResult> {
    const released = await this.groups.change(name, (state) => {
      const work = state.work.get(commit);
      if (state.isSettled(commit) || work?.worker !== worker)
        throw notHeld(name, commit, worker, state.holder(commit, this.now()));
      return { next: state.release(commit, reason, this.now()), result: work.deliveries };
    });
    const state = this.groups.get(name);
    if (released >= state.config.maxDeliveries) {
      await this.park(name, commit);
      return { commit, outcome: 'parked', deliveries: released };
    }
    this.wake();
    return { commit, outcome: 'released', deliveries: released };
  }

  /** Parks every commit of group `name` whose deliveries are spent and that no worker holds. */
  private async parkExhausted(name: string): Promise<void> {
    for (const work of this.groups.get(name).exhausted(this.now())) await this.park(name, work.commit);
  }

  /**
   * Appends `commit`'s records to the group's dead-letter feed, with the reason in the commit's
   * message, then settles it. The append is conditional on the parked tag, so a park repeated
   * after a crash (or by two claims at once) appends nothing the second time.
   */
  private async park(name: string, commit: number): Promise<void> {
    const state = this.groups.get(name);
    const work = state.work.get(commit);
    if (!work || state.isSettled(commit)) return;
    const { batches } = await this.feed.reads.poll(commit - 1, 1);
    const records = batches[0]?.commit.commit === commit ? batches[0].records : [];
    if (records.length > 0) {
      const tag = parkedTag(this.feed.name, name, commit);
      const deadLetter = await this.deadLetterFeed(state.config.deadLetter);
      const message = JSON.stringify({
        feed: this.feed.name,
        group: name,
        commit,
        deliveries: work.deliveries,
        reason: work.reason ?? (work.worker === undefined ? 'given back' : 'acknowledgement timed out'),
      });
      try {
        await deadLetter.append(
          records.map((record) => ({
            payload: record.payload,
            ...(record.key === undefined ? {} : { key: record.key }),
            ...(record.type === undefined ? {} : { type: record.type }),
            tags: [...record.tags, tag],
            fingerprint: record.fingerprint,
            timestamp: record.timestamp,
          })),
          { message, condition: { failIfMatch: { items: [{ tags: [tag] }] } } },
        );
      } catch (error) {
        if (!(isStreamStackError(error) && error.code === 'CONDITION_FAILED')) throw error;
      }
    }
    const next = await this.groups.change(name, (current) => {
      const settled = current.settle(commit, 'parked', this.now());
      return { next: settled, result: settled };
    });
    await this.settled(next);
  }

  private async deadLetterFeed(name: string): Promise<Feed> {
    assert(this.siblings !== undefined, 'a feed whose groups park work reaches the store');
    try {
      return await this.siblings.feed(name);
    } catch (error) {
      if (!(isStreamStackError(error) && error.code === 'FEED_NOT_FOUND')) throw error;
      try {
        return await this.siblings.createFeed(name);
      } catch (raced) {
        if (isStreamStackError(raced) && raced.code === 'FEED_EXISTS') return this.siblings.feed(name);
        throw raced;
      }
    }
  }

  /** After a change settled work: the subscription follows the cursor, and waiting claims look again. */
  private async settled(state: GroupState): Promise<void> {
    await this.keepSubscription(state);
    this.wake();
  }

  close(): void {
    this.wake();
    this.groups.close();
  }
}
