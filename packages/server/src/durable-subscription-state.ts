/**
 * What one Durable Streams subscription is at a moment (docs/http.md, subscriptions): its
 * configuration, the streams it links with each one's acknowledged offset, the generation, the
 * wake in flight and the retry schedule of a failed webhook; how that is written as one record,
 * and how it is shown.
 *
 * Offsets are commit numbers here and the protocol's offsets on the wire.
 */
import { StreamStackError } from '@streamstack/engine';
import { offsetOf } from './durable-stream-protocol.js';
import type { SubscriptionConfig } from './durable-subscription-config.js';

/** One stream a subscription links. */
export interface StreamLink {
  readonly path: string;
  /** Linked by `streams` (a removal of the explicit link keeps a glob link that still matches). */
  explicit: boolean;
  /** Linked because the pattern matches it. */
  glob: boolean;
  /** The last commit processed, inclusive. */
  acked: number;
}

/** A wake in flight: its snapshot of the tails, and for pull-wake, the worker holding it. */
export interface Wake {
  readonly id: string;
  readonly generation: number;
  /** Each linked stream's tail when the wake was issued (what `done` acknowledges). */
  readonly tails: Readonly<Record<string, number>>;
  /** Pull-wake: the worker that claimed it (none until a claim); webhook: none. */
  holder: string | null;
  /** When its lease runs out (ms since the epoch); none for a pull-wake not claimed yet. */
  leaseUntil: number | null;
}

/** What an ack, a callback or a release names. */
export interface WakeRequest {
  readonly wakeId: unknown;
  readonly generation: unknown;
  readonly acks?: unknown;
  readonly done?: unknown;
}

/** What an ack or callback answers: whether pending work will wake again. */
export interface Acknowledged {
  readonly ok: true;
  readonly next_wake: boolean;
}

export interface SubscriptionState {
  readonly id: string;
  readonly config: SubscriptionConfig;
  readonly createdAt: number;
  /** The stream root as the creating request reached it (`…/ds/v1/stream/`), for the URLs it hands out. */
  readonly root: string;
  readonly links: Map<string, StreamLink>;
  /** Counts every wake: a request for an older one is fenced. */
  generation: number;
  wake: Wake | null;
  /** A failed webhook delivery is retried; `active` otherwise. */
  status: 'active' | 'failed';
  retry: { attempts: number; nextAttemptAt: number } | null;
  /** Set once deleted: calls still holding it must not write. */
  deleted: boolean;
}

const formatVersion = 1;

/** The record a state is written as. */
export function encodeSubscription(state: SubscriptionState): string {
  return JSON.stringify({
    v: formatVersion,
    id: state.id,
    config: state.config,
    createdAt: state.createdAt,
    root: state.root,
    links: [...state.links.values()],
    generation: state.generation,
    wake: state.wake,
    status: state.status,
    retry: state.retry,
  });
}

/** The state a record holds; `CORRUPT` for one this server did not write. */
export function decodeSubscription(text: string, feed: string): SubscriptionState {
  try {
    const fields = JSON.parse(text);
    if (fields.v !== formatVersion || typeof fields.id !== 'string' || !Array.isArray(fields.links)) throw new Error();
    return {
      id: fields.id,
      config: fields.config,
      createdAt: fields.createdAt,
      root: fields.root,
      links: new Map((fields.links as StreamLink[]).map((link) => [link.path, link])),
      generation: fields.generation,
      wake: fields.wake,
      status: fields.status,
      retry: fields.retry,
      deleted: false,
    };
  } catch {
    throw new StreamStackError('CORRUPT', `feed ${feed} holds no subscription state this server wrote`, {
      details: { feed },
    });
  }
}

/**
 * Puts `state` back as `saved` says it was, in place (the turns, timers and requests under way
 * hold the object): what a change of it can touch, its links, generation, wake and retries.
 */
export function restoreSubscription(state: SubscriptionState, saved: SubscriptionState): void {
  state.links.clear();
  for (const [path, link] of saved.links) state.links.set(path, link);
  state.generation = saved.generation;
  state.wake = saved.wake;
  state.status = saved.status;
  state.retry = saved.retry;
}

/** How a link is shown: explicit wins over glob. */
function linkType(link: StreamLink): 'explicit' | 'glob' {
  return link.explicit ? 'explicit' : 'glob';
}

/** The subscription as GET (and PUT) answer it. */
export function subscriptionView(state: SubscriptionState, kid: string): Record<string, unknown> {
  const { config } = state;
  return {
    id: state.id,
    subscription_id: state.id,
    type: config.type,
    pattern: config.pattern,
    streams: [...state.links.values()].map((link) => ({
      path: link.path,
      link_type: linkType(link),
      acked_offset: offsetOf(link.acked),
    })),
    webhook:
      config.webhookUrl === null
        ? null
        : { url: config.webhookUrl, signing: { alg: 'ed25519', kid, jwks_url: `${state.root}__ds/jwks.json` } },
    wake_stream: config.wakeStream,
    lease_ttl_ms: config.leaseTtlMs,
    created_at: new Date(state.createdAt).toISOString(),
    status: state.status,
    description: config.description,
    generation: state.generation,
  };
}

/** Each link with its acknowledged and tail offsets, as a wake hands them out. */
export function wakeStreams(
  state: SubscriptionState,
  tails: Readonly<Record<string, number>>,
): Record<string, unknown>[] {
  return [...state.links.values()].map((link) => {
    const tail = Math.max(tails[link.path] ?? 0, link.acked);
    return {
      path: link.path,
      link_type: linkType(link),
      acked_offset: offsetOf(link.acked),
      tail_offset: offsetOf(tail),
      has_pending: tail > link.acked,
    };
  });
}
