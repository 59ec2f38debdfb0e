/**
 * Durable Streams subscriptions (docs/http.md, subscriptions on the compatibility route):
 * durable cursors over many streams that wake a worker when any of them has data past its
 * acknowledged offset — by a signed webhook, or by a wake event in a stream that workers claim.
 *
 * Each subscription's state is kept by durable-subscription-book.ts: every change is one
 * commit, written before it is answered or acted on, so generations never go back, an
 * acknowledgement is never lost, and a restart resumes the wake, lease and retry schedule it
 * finds. Changes to one subscription take turns; a webhook is delivered outside the turn, and
 * its answer comes back through one.
 *
 * A wake: the generation moves on, the tails of the linked streams are noted, and the worker is
 * told (webhook: a POST signed with the server's Ed25519 key, under a lease; pull-wake: an event
 * appended to the wake stream, leased once claimed). Acks move offsets forward, never past a
 * tail; `done` ends the wake, and a stream still pending wakes again. A lease that runs out ends
 * the wake likewise. A delivery that fails is retried from 1 s to 60 s with 20% jitter.
 */
import crypto from 'node:crypto';
import { isStreamStackError, StreamStackError } from '@streamstack/engine';
import type { ServerContext } from './context.js';
import { isReservedName } from './durable-stream-names.js';
import { commitOfOffset } from './durable-stream-protocol.js';
import { SubscriptionBook, subscriptionFeedName } from './durable-subscription-book.js';
import {
  globMatches,
  linkable,
  retryDelayMs,
  type SubscriptionConfig,
  sameSubscription,
  streamPaths,
} from './durable-subscription-config.js';
import {
  type Acknowledged,
  type SubscriptionState,
  subscriptionView,
  type Wake,
  type WakeRequest,
  wakeStreams,
} from './durable-subscription-state.js';
import type { WebhookKeys } from './webhook-signing.js';

/** What subscriptions need of the streams: their tails, their names, and a wake stream to append to. */
export interface StreamAccess {
  /** The tail (last data commit) of stream `name`, or undefined when there is no such stream. */
  tailOf(name: string): Promise<number | undefined>;
  /** Every stream's name. */
  streamNames(): Promise<string[]>;
  /** Appends one JSON message to stream `name`. */
  appendJson(name: string, value: unknown): Promise<void>;
}

export class DurableSubscriptions {
  private readonly book: SubscriptionBook;
  private closed = false;
  /** Aborts the deliveries in flight when the server closes. */
  private readonly stopping = new AbortController();

  constructor(
    ctx: ServerContext,
    readonly keys: WebhookKeys,
    private readonly streams: StreamAccess,
    private readonly report: (error: unknown) => void,
    private readonly clock: () => number = Date.now,
  ) {
    this.book = new SubscriptionBook(
      ctx,
      (state) => {
        if (state.retry) this.armRetry(state);
        else if (state.wake) this.armLease(state);
        else this.kick(state.id);
      },
      (error) => this.failed(error),
    );
  }

  /** Stops every timer (the server is closing); deliveries in flight finish without effect. */
  close(): void {
    this.closed = true;
    this.stopping.abort();
    this.book.close();
  }

  /** Creates subscription `id`, or finds it as asked (`created: false`); `SUBSCRIPTION_EXISTS` if it differs. */
  async put(
    id: string,
    config: SubscriptionConfig,
    root: string,
  ): Promise<{ created: boolean; view: Record<string, unknown> }> {
    subscriptionFeedName(id);
    await this.book.load();
    return this.book.turn(id, async () => {
      const found = this.book.find(id);
      if (found) {
        if (!sameSubscription(found.config, config)) {
          throw new StreamStackError('SUBSCRIPTION_EXISTS', `subscription ${id} exists with another configuration`, {
            details: { subscription: id },
          });
        }
        return { created: false, view: this.view(found) };
      }
      const state: SubscriptionState = {
        id,
        config,
        createdAt: this.clock(),
        root,
        links: new Map(),
        generation: 0,
        wake: null,
        status: 'active',
        retry: null,
        deleted: false,
      };
      // Streams that exist are linked at their tails: creating a subscription replays nothing.
      const matching =
        config.pattern === null
          ? []
          : (await this.streams.streamNames()).filter(
              (name) => linkable(config, name) && globMatches(config.pattern!, name),
            );
      for (const path of new Set([...matching, ...config.streams])) {
        const acked = (await this.streams.tailOf(path)) ?? 0;
        state.links.set(path, { path, explicit: config.streams.includes(path), glob: matching.includes(path), acked });
      }
      await this.book.add(state);
      return { created: true, view: this.view(state) };
    });
  }

  /** The subscription as GET answers it; `SUBSCRIPTION_NOT_FOUND` if there is none. */
  async get(id: string): Promise<Record<string, unknown>> {
    await this.book.load();
    return this.view(this.book.existing(id));
  }

  /** Deletes subscription `id`: its calls in flight fail and move no cursor. */
  async remove(id: string): Promise<void> {
    await this.book.load();
    await this.book.turn(id, async () => {
      await this.book.remove(this.book.existing(id));
    });
  }

  /** Links `paths` explicitly, each at its tail now; a stream linked already keeps its offset. */
  async addStreams(id: string, paths: unknown): Promise<void> {
    const added = streamPaths(paths);
    await this.book.load();
    await this.book.turn(id, async () => {
      const state = this.book.existing(id);
      for (const path of added) {
        const link = state.links.get(path);
        if (link) link.explicit = true;
        else
          state.links.set(path, { path, explicit: true, glob: false, acked: (await this.streams.tailOf(path)) ?? 0 });
      }
      await this.book.persist(state);
    });
  }

  /** Removes the explicit link to `path`; a glob link that still matches stays. */
  async removeStream(id: string, path: string): Promise<void> {
    await this.book.load();
    await this.book.turn(id, async () => {
      const state = this.book.existing(id);
      const link = state.links.get(path);
      if (!link?.explicit) return;
      link.explicit = false;
      if (!link.glob) state.links.delete(path);
      await this.book.persist(state);
    });
  }

  /** A webhook's callback for its wake: acks, and `done` ends the wake. */
  async callback(id: string, token: string | undefined, request: WakeRequest): Promise<Acknowledged> {
    return this.acknowledge(id, token, request, 'webhook');
  }

  /** A pull-wake worker's ack for the wake it claimed: a heartbeat, and with `done` the end of it. */
  async ack(id: string, token: string | undefined, request: WakeRequest): Promise<Acknowledged> {
    return this.acknowledge(id, token, request, 'pull-wake');
  }

  /** A pull-wake worker gives its wake back unacknowledged; pending work wakes again. */
  async release(id: string, token: string | undefined, request: WakeRequest): Promise<void> {
    await this.book.load();
    await this.book.turn(id, async () => {
      const state = this.book.existing(id);
      this.currentWake(state, token, request, 'pull-wake');
      state.wake = null;
      this.book.clearTimer(id);
      await this.book.persist(state);
    });
    this.kick(id);
  }

  /**
   * A pull-wake worker claims the subscription's wake (one is issued if work is pending and none
   * is); undefined when nothing is pending; `ALREADY_CLAIMED` while another worker holds it.
   */
  async claim(id: string, worker: unknown): Promise<Record<string, unknown> | undefined> {
    if (typeof worker !== 'string' || worker.length === 0 || worker.length > 256) {
      throw new StreamStackError('INVALID_ARGUMENT', 'worker is a string of 1 to 256 characters', {
        details: { field: 'worker' },
      });
    }
    await this.book.load();
    return this.book.turn(id, async () => {
      const state = this.book.existing(id);
      if (state.config.type !== 'pull-wake') throw wrongType(state, 'pull-wake');
      const now = this.clock();
      let wake = state.wake;
      if (wake?.holder && (wake.leaseUntil ?? 0) > now) {
        throw new StreamStackError('ALREADY_CLAIMED', `subscription ${id} is claimed by ${wake.holder}`, {
          details: { current_holder: wake.holder, generation: wake.generation },
        });
      }
      // A lease that ran out ends its wake: the next holder gets a new generation, which fences the old one.
      if (wake?.holder) wake = null;
      if (!wake) {
        const tails = await this.pendingTails(state);
        if (!tails) return undefined;
        wake = this.newWake(state, tails);
      }
      wake.holder = worker;
      wake.leaseUntil = now + state.config.leaseTtlMs;
      state.wake = wake;
      await this.book.persist(state);
      this.armLease(state);
      return {
        wake_id: wake.id,
        generation: wake.generation,
        token: this.keys.wakeToken(id, wake.generation, wake.id),
        streams: wakeStreams(state, wake.tails),
        lease_ttl_ms: state.config.leaseTtlMs,
      };
    });
  }

  /**
   * Stream `name` took a commit, its tail moving on from `before`: a subscription whose pattern
   * matches it and that does not link it yet links it at `before` (so this commit is pending); a
   * link acked past `before` names a stream deleted and made again, and starts over at `before`;
   * every subscription linking it is woken if idle. Never throws: failures are reported.
   */
  streamWritten(name: string, before: number): void {
    if (isReservedName(name)) return;
    void (async () => {
      await this.book.load();
      for (const state of this.book.all()) {
        const { pattern } = state.config;
        const matches = pattern !== null && linkable(state.config, name) && globMatches(pattern, name);
        const known = state.links.get(name);
        if (!matches && !known) continue;
        if ((matches && !known?.glob) || (known && known.acked > before)) {
          await this.book.turn(state.id, async () => {
            if (state.deleted) return;
            const link = state.links.get(name) ?? { path: name, explicit: false, glob: true, acked: before };
            link.glob ||= matches;
            link.acked = Math.min(link.acked, before);
            state.links.set(name, link);
            await this.book.persist(state);
          });
        }
        this.kick(state.id);
      }
    })().catch((error: unknown) => this.failed(error));
  }

  /** Wakes subscription `id` if it is idle and has work pending; in its turn, outside the caller's. */
  private kick(id: string): void {
    void this.book
      .turn(id, async () => {
        const state = this.book.find(id);
        if (!state || state.deleted || state.wake || this.closed) return;
        // A retry timer that fired before the wall clock reached its time waits again.
        if (state.retry && state.retry.nextAttemptAt > this.clock()) return this.armRetry(state);
        const tails = await this.pendingTails(state);
        if (!tails) return;
        const wake = this.newWake(state, tails);
        if (state.config.type === 'webhook') wake.leaseUntil = this.clock() + state.config.leaseTtlMs;
        state.wake = wake;
        await this.book.persist(state);
        if (state.config.type === 'webhook') {
          this.armLease(state);
          void this.deliver(state, wake);
        } else {
          await this.announce(state, wake, tails);
        }
      })
      .catch((error: unknown) => this.failed(error));
  }

  /** Each linked stream's tail, or undefined when none is past its acked offset. */
  private async pendingTails(state: SubscriptionState): Promise<Record<string, number> | undefined> {
    const tails: Record<string, number> = {};
    let pending = false;
    for (const link of state.links.values()) {
      const tail = (await this.streams.tailOf(link.path)) ?? 0;
      tails[link.path] = tail;
      if (tail > link.acked) pending = true;
    }
    return pending ? tails : undefined;
  }

  private newWake(state: SubscriptionState, tails: Record<string, number>): Wake {
    state.generation += 1;
    return {
      id: `w_${crypto.randomBytes(12).toString('base64url')}`,
      generation: state.generation,
      tails,
      holder: null,
      leaseUntil: null,
    };
  }

  /** Posts the wake to the webhook; its answer (`done`, or a failure) comes back in a turn. */
  private async deliver(state: SubscriptionState, wake: Wake): Promise<void> {
    const body = JSON.stringify({
      subscription_id: state.id,
      wake_id: wake.id,
      generation: wake.generation,
      streams: wakeStreams(state, wake.tails),
      callback_url: `${state.root}__ds/subscriptions/${encodeURIComponent(state.id)}/callback`,
      callback_token: this.keys.wakeToken(state.id, wake.generation, wake.id),
    });
    let done = false;
    let failure: string | undefined;
    try {
      const response = await fetch(state.config.webhookUrl!, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'webhook-signature': this.keys.signature(body, this.clock()) },
        body,
        // A redirect could lead anywhere the URL check refused: it counts as a failure.
        redirect: 'manual',
        signal: AbortSignal.any([AbortSignal.timeout(state.config.leaseTtlMs), this.stopping.signal]),
      });
      const text = await response.text();
      if (!response.ok) failure = `the webhook answered ${response.status}`;
      else {
        try {
          done = (JSON.parse(text) as { done?: unknown })?.done === true;
        } catch {
          done = false;
        }
      }
    } catch (error) {
      failure = `the webhook could not be reached: ${(error as Error).message}`;
    }
    await this.book
      .turn(state.id, async () => {
        if (this.closed || state.deleted || state.wake?.id !== wake.id) return;
        if (failure !== undefined) {
          const attempts = (state.retry?.attempts ?? 0) + 1;
          state.status = 'failed';
          state.retry = { attempts, nextAttemptAt: this.clock() + retryDelayMs(attempts) };
          state.wake = null;
          await this.book.persist(state);
          this.armRetry(state);
          return;
        }
        state.status = 'active';
        state.retry = null;
        if (done) {
          for (const link of state.links.values()) link.acked = Math.max(link.acked, wake.tails[link.path] ?? 0);
          state.wake = null;
          this.book.clearTimer(state.id);
        }
        await this.book.persist(state);
      })
      .catch((error: unknown) => this.failed(error));
    if (done || failure === undefined) this.kick(state.id);
  }

  /** Appends a pull-wake's event to its wake stream; a failure is retried like a webhook's. */
  private async announce(state: SubscriptionState, wake: Wake, tails: Record<string, number>): Promise<void> {
    const stream = [...state.links.values()].find((link) => (tails[link.path] ?? 0) > link.acked)?.path;
    try {
      await this.streams.appendJson(state.config.wakeStream!, {
        type: 'wake',
        subscription_id: state.id,
        stream,
        generation: wake.generation,
        ts: this.clock(),
      });
      state.status = 'active';
      state.retry = null;
    } catch {
      const attempts = (state.retry?.attempts ?? 0) + 1;
      state.status = 'failed';
      state.retry = { attempts, nextAttemptAt: this.clock() + retryDelayMs(attempts) };
      state.wake = null;
      this.armRetry(state);
    }
    await this.book.persist(state);
  }

  private async acknowledge(
    id: string,
    token: string | undefined,
    request: WakeRequest,
    type: SubscriptionConfig['type'],
  ): Promise<Acknowledged> {
    await this.book.load();
    const nextWake = await this.book.turn(id, async () => {
      const state = this.book.existing(id);
      const wake = this.currentWake(state, token, request, type);
      const acks = request.acks ?? [];
      if (!Array.isArray(acks)) throw invalidBody('acks is an array of {stream, offset}');
      for (const ack of acks as { stream?: unknown; offset?: unknown }[]) {
        const link = typeof ack?.stream === 'string' ? state.links.get(ack.stream) : undefined;
        if (!link) throw invalidBody(`acks names ${JSON.stringify(ack?.stream)}, which the subscription does not link`);
        const commit = commitOfOffset(String(ack.offset), { parameter: 'acks.offset' });
        // A stream gone since the wake takes the ack as it is: its worker must be able to finish.
        const tail = (await this.streams.tailOf(link.path)) ?? wake.tails[link.path] ?? 0;
        if (commit > tail) throw invalidBody(`acks.offset for ${link.path} lies past its tail`);
        link.acked = Math.max(link.acked, commit);
      }
      if (request.done === true) {
        state.wake = null;
        this.book.clearTimer(id);
      } else {
        wake.leaseUntil = this.clock() + state.config.leaseTtlMs;
        this.armLease(state);
      }
      await this.book.persist(state);
      return request.done === true && (await this.pendingTails(state)) !== undefined;
    });
    if (nextWake) this.kick(id);
    return { ok: true, next_wake: nextWake };
  }

  /** The wake a request names, if it is the current one and its token is its own; else `FENCED`. */
  private currentWake(
    state: SubscriptionState,
    token: string | undefined,
    request: WakeRequest,
    type: SubscriptionConfig['type'],
  ): Wake {
    if (state.config.type !== type) throw wrongType(state, type);
    const wake = state.wake;
    const current =
      wake !== null &&
      request.wakeId === wake.id &&
      request.generation === wake.generation &&
      (type === 'webhook' || wake.holder !== null) &&
      token !== undefined &&
      this.keys.isWakeToken(token, state.id, wake.generation, wake.id);
    if (!current) {
      throw new StreamStackError(
        'FENCED',
        `wake ${String(request.wakeId)} of subscription ${state.id} is not the current one`,
        {
          details: { generation: state.generation },
        },
      );
    }
    return wake;
  }

  /** Ends the wake when its lease runs out, and wakes again if work is pending. */
  private armLease(state: SubscriptionState): void {
    const wake = state.wake;
    if (!wake || wake.leaseUntil === null) return;
    this.book.setTimer(state.id, wake.leaseUntil - this.clock(), async () => {
      if (state.deleted || state.wake?.id !== wake.id) return;
      // Timers run on a monotonic clock: one that fires before the wall clock's end waits again.
      if ((wake.leaseUntil ?? 0) > this.clock()) return this.armLease(state);
      state.wake = null;
      await this.book.persist(state);
      this.kick(state.id);
    });
  }

  private armRetry(state: SubscriptionState): void {
    if (!state.retry) return;
    this.book.setTimer(state.id, state.retry.nextAttemptAt - this.clock(), async () => this.kick(state.id));
  }

  private view(state: SubscriptionState): Record<string, unknown> {
    return subscriptionView(state, this.keys.kid);
  }

  private failed(error: unknown): void {
    // The store closing under a wake (the server is shutting down) is no failure.
    if (this.closed || isStreamStackError(error, 'CLOSED')) return;
    this.report(error);
  }
}

function wrongType(state: SubscriptionState, type: SubscriptionConfig['type']): StreamStackError {
  return new StreamStackError(
    'INVALID_ARGUMENT',
    `subscription ${state.id} is a ${state.config.type} subscription, not ${type}`,
    { details: { subscription: state.id, type: state.config.type } },
  );
}

function invalidBody(message: string): StreamStackError {
  return new StreamStackError('INVALID_ARGUMENT', message, { details: { field: 'body' } });
}
