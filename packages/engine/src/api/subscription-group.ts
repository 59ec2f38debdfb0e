/**
 * A subscription shared by competing workers. `claim` hands each commit to one worker at a time;
 * the worker `ack`s it once handled, or `nack`s it to give it back. Work not acknowledged within
 * `ackTimeoutMs` goes to another worker; work delivered `maxDeliveries` times without an
 * acknowledgement is parked in the dead-letter feed, with its reason in the commit message.
 * Ordered by key, no two workers hold commits sharing a key, and each key's commits are handed
 * out in order. Claims, acknowledgements and delivery counts are durable: they survive restarts.
 *
 * @example
 * const group = await feed.subscriptionGroup('emails', { ackTimeoutMs: 10_000, orderedBy: 'key' });
 * for await (const claim of group.claims({ worker: 'worker-1', signal })) {
 *   try {
 *     await send(claim.records);
 *     await group.ack(claim.commit.commit, { worker: 'worker-1' });
 *   } catch (error) {
 *     await group.nack(claim.commit.commit, { worker: 'worker-1', reason: String(error) });
 *   }
 * }
 */
import type { GroupClaim, NackResult, SubscriptionGroupInfo, SubscriptionGroupOptions } from '@streamstack/protocol';
import { validateFeedName } from '../coordinator/opening/data-directory.js';
import { type GroupConfig, GroupState } from '../coordinator/reading/group-state.js';
import { StreamStackError } from '../errors.js';
import {
  groupAckTimeoutMsDefault,
  groupAckTimeoutMsMax,
  groupAckTimeoutMsMin,
  groupClaimCommitsMax,
  groupClaimWaitMsMax,
  groupDeliveriesDefault,
  groupDeliveriesMax,
  groupReasonBytesMax,
  groupWorkerBytesMax,
} from '../limits.js';
import type { Feed } from './feed.js';
import type { GroupWork } from './group-work.js';
import { optionsOf, validateCursor } from './records.js';

const encoder = new TextEncoder();

function text(value: unknown, name: string, bytesMax: number): string {
  if (typeof value !== 'string' || value.length === 0 || encoder.encode(value).length > bytesMax) {
    throw new StreamStackError('INVALID_ARGUMENT', `${name} is a non-empty string of at most ${bytesMax} bytes`, {
      details: { [name]: value ?? null },
    });
  }
  return value;
}

function commitOf(value: unknown): number {
  if (!Number.isSafeInteger(value) || (value as number) < 1)
    throw new StreamStackError('INVALID_ARGUMENT', 'a commit is a positive integer', {
      details: { commit: value ?? null },
    });
  return value as number;
}

export class SubscriptionGroup {
  /** @internal */
  constructor(
    readonly feed: Feed,
    readonly name: string,
    private readonly work: GroupWork,
  ) {}

  private state(): GroupState {
    this.feed.writer.assertPresent();
    return this.work.groups.get(this.name);
  }

  /** The group's options, cursor and counts, and how far it is behind the head. */
  async info(): Promise<SubscriptionGroupInfo> {
    return groupInfo(this.feed, this.state());
  }

  /**
   * Up to `max` commits (default 1) for `worker`, each held until its `deadline`. With `waitMs`,
   * waits up to that long for work when none is free (a long-poll); an empty array means none came.
   */
  async claim(options: { worker: string; max?: number; waitMs?: number; signal?: AbortSignal }): Promise<GroupClaim[]> {
    options = optionsOf(options, 'group.claim');
    const worker = text(options.worker, 'worker', groupWorkerBytesMax);
    const max = validateCursor(options.max, 'max') ?? 1;
    if (max < 1 || max > groupClaimCommitsMax)
      throw new StreamStackError('INVALID_ARGUMENT', `max is 1 to ${groupClaimCommitsMax} commits`, {
        details: { max },
      });
    const waitMs = validateCursor(options.waitMs, 'waitMs') ?? 0;
    if (waitMs > groupClaimWaitMsMax)
      throw new StreamStackError('INVALID_ARGUMENT', `waitMs is at most ${groupClaimWaitMsMax}`, {
        details: { waitMs },
      });
    const until = this.work.now() + waitMs;
    for (;;) {
      this.state();
      const head = this.feed.writer.watermark.commit;
      const claims = await this.work.claim(this.name, worker, max);
      const left = until - this.work.now();
      if (claims.length > 0 || left <= 0 || options.signal?.aborted) return claims;
      await this.work.wait(head, left, this.work.nextDeadline(this.name), options.signal);
    }
  }

  /**
   * Claims one commit at a time for `worker`, waiting for work when there is none, until `signal`
   * aborts. Each claim must still be acknowledged (or given back) before its deadline.
   */
  async *claims(options: { worker: string; signal?: AbortSignal }): AsyncGenerator<GroupClaim> {
    options = optionsOf(options, 'group.claims');
    while (!options.signal?.aborted) {
      const claims = await this.claim({
        worker: options.worker,
        waitMs: groupClaimWaitMsMax,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      for (const claim of claims) yield claim;
    }
  }

  /** Settles `commit` for good; `CLAIM_NOT_HELD` unless `worker` holds it (work settled already included). */
  async ack(commit: number, options: { worker: string }): Promise<void> {
    options = optionsOf(options, 'group.ack');
    this.state();
    await this.work.ack(this.name, text(options.worker, 'worker', groupWorkerBytesMax), commitOf(commit));
  }

  /** Gives `commit` back, with an optional reason: another worker gets it, or it is parked once its deliveries are spent. */
  async nack(commit: number, options: { worker: string; reason?: string }): Promise<NackResult> {
    options = optionsOf(options, 'group.nack');
    this.state();
    const reason = options.reason === undefined ? undefined : text(options.reason, 'reason', groupReasonBytesMax);
    return this.work.nack(this.name, text(options.worker, 'worker', groupWorkerBytesMax), commitOf(commit), reason);
  }

  /** Forgets every claim and delivery count and starts again after `cursor` (backwards too). */
  async reset(cursor: number): Promise<SubscriptionGroupInfo> {
    this.state();
    const at = validateCursor(cursor, 'cursor');
    const head = this.feed.writer.watermark.commit;
    if (at === undefined || at > head)
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', `cursor ${cursor} is outside the history (0 to ${head})`, {
        details: { cursor, head },
      });
    this.feed.writer.assertNotTrimmed(at, 'cursor');
    const state = await this.work.groups.change(this.name, (current) => {
      const next = current.reset(at, this.work.now());
      return { next, result: next };
    });
    this.work.forgetKeys(this.name);
    await this.feed.writer.subscriptions.move(this.name, at, true);
    this.work.wake();
    return groupInfo(this.feed, state);
  }

  /** Deletes the group and its subscription; its claims end. */
  async delete(): Promise<void> {
    this.state();
    await this.work.groups.delete(this.name);
    this.work.forgetKeys(this.name);
    await this.feed.writer.subscriptions.delete(this.name);
    this.work.wake();
  }
}

/**
 * Creates group `name` with `options`, or applies the options given to the group that exists
 * (its order is fixed at creation, and `after` only places a new group).
 */
export function openGroup(
  feed: Feed,
  work: GroupWork,
  name: string,
  options: SubscriptionGroupOptions,
  startCursor: () => number,
): Promise<void> {
  const given = groupConfigOf(options);
  return work.serially(async () => {
    const now = work.now();
    if (work.groups.has(name)) {
      const state = work.groups.get(name);
      if (given.orderedBy !== undefined && given.orderedBy !== state.config.orderedBy)
        throw new StreamStackError(
          'INVALID_ARGUMENT',
          `subscription group ${name} is ordered by ${state.config.orderedBy}; delete it to order it by ${given.orderedBy}`,
          { details: { subscription: name, orderedBy: state.config.orderedBy } },
        );
      const config = { ...state.config, ...given };
      if (JSON.stringify(config) !== JSON.stringify(state.config))
        await work.groups.change(name, (current) => ({
          next: current.reconfigure(config, work.now()),
          result: undefined,
        }));
      return;
    }
    const subscriptions = feed.writer.subscriptions;
    if (subscriptions.list().some((subscription) => subscription.name === name))
      throw new StreamStackError('SUBSCRIPTION_EXISTS', `a subscription named ${name} exists already`, {
        details: { subscription: name },
      });
    const config: GroupConfig = {
      ackTimeoutMs: given.ackTimeoutMs ?? groupAckTimeoutMsDefault,
      maxDeliveries: given.maxDeliveries ?? groupDeliveriesDefault,
      orderedBy: given.orderedBy ?? 'commit',
      deadLetter: given.deadLetter ?? deadLetterName(feed.name, name),
    };
    const state = GroupState.create(name, config, startCursor(), now);
    await work.groups.create(state);
    await work.keepSubscription(state);
  });
}

function deadLetterName(feed: string, group: string): string {
  const name = `${feed}.${group}.parked`;
  try {
    return validateFeedName(name);
  } catch {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `the default dead-letter feed name ${name} is too long: give the group a deadLetter feed`,
      { details: { deadLetter: name } },
    );
  }
}

/** The options given, checked; those not given are left out. */
function groupConfigOf(options: SubscriptionGroupOptions): Partial<GroupConfig> {
  const config: { -readonly [K in keyof GroupConfig]?: GroupConfig[K] } = {};
  if (options.ackTimeoutMs !== undefined) {
    const ms = options.ackTimeoutMs;
    if (!Number.isSafeInteger(ms) || ms < groupAckTimeoutMsMin || ms > groupAckTimeoutMsMax)
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `ackTimeoutMs is ${groupAckTimeoutMsMin} to ${groupAckTimeoutMsMax} milliseconds`,
        { details: { ackTimeoutMs: ms } },
      );
    config.ackTimeoutMs = ms;
  }
  if (options.maxDeliveries !== undefined) {
    const deliveries = options.maxDeliveries;
    if (!Number.isSafeInteger(deliveries) || deliveries < 1 || deliveries > groupDeliveriesMax)
      throw new StreamStackError('INVALID_ARGUMENT', `maxDeliveries is 1 to ${groupDeliveriesMax}`, {
        details: { maxDeliveries: deliveries },
      });
    config.maxDeliveries = deliveries;
  }
  if (options.orderedBy !== undefined) {
    if (options.orderedBy !== 'commit' && options.orderedBy !== 'key')
      throw new StreamStackError('INVALID_ARGUMENT', "orderedBy is 'commit' or 'key'", {
        details: { orderedBy: options.orderedBy },
      });
    config.orderedBy = options.orderedBy;
  }
  if (options.deadLetter !== undefined) config.deadLetter = validateFeedName(options.deadLetter);
  return config;
}

/** What `info()` reports of a group's state. */
export function groupInfo(feed: Feed, state: GroupState): SubscriptionGroupInfo {
  let held = 0;
  let released = 0;
  const now = feed.writer.now();
  for (const work of state.work.values()) {
    if (work.worker !== undefined && work.deadline > now) held++;
    else released++;
  }
  return {
    name: state.name,
    ackTimeoutMs: state.config.ackTimeoutMs,
    maxDeliveries: state.config.maxDeliveries,
    orderedBy: state.config.orderedBy,
    deadLetter: state.config.deadLetter,
    cursor: state.cursor,
    held,
    released,
    settledAhead: state.settled.length,
    ...state.totals,
    lag: feed.reads.lag(state.cursor),
    createdAt: state.createdAt,
    updatedAt: state.updatedAt,
  };
}
