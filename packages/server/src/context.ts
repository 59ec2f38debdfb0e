/**
 * What every route shares: the store, the feeds this server has opened (for metrics), the
 * metrics, the drain signal that ends live reads at shutdown, and the live-read settings.
 */

import { type Feed, isStreamStackError, type Store } from '@streamstack/engine';
import type { FastifyRequest } from 'fastify';
import type { Operation } from './auth.js';
import type { ServerMetrics } from './metrics.js';

export interface LiveSettings {
  /** Milliseconds between SSE heartbeats. */
  readonly heartbeatMs: number;
  /** The longest `wait=` a long-poll may ask for, in seconds. */
  readonly waitSecondsMax: number;
}

export class ServerContext {
  private readonly opened = new Set<string>();
  private readonly drain = new AbortController();

  constructor(
    readonly store: Store,
    readonly metrics: ServerMetrics,
    readonly live: LiveSettings,
  ) {}

  /** The feed `name` (`FEED_NOT_FOUND` if there is none), remembered for the metrics. */
  async feed(name: string): Promise<Feed> {
    const feed = await this.store.feed(name);
    this.opened.add(name);
    return feed;
  }

  /**
   * Notes that feed `name` is open here (a lease or a takeover may have opened it without a
   * lookup), for the metrics.
   */
  remember(name: string): void {
    this.opened.add(name);
  }

  /** Forgets feed `name` (it was deleted): the metrics no longer look it up. */
  forget(name: string): void {
    this.opened.delete(name);
  }

  /** The feeds this server has opened so far and that are still there. */
  async openFeeds(): Promise<Feed[]> {
    const feeds = await Promise.all(
      [...this.opened].map((name) =>
        // A feed deleted since (the Durable Streams route deletes them) is left out, not an error.
        this.store.feed(name).catch((error: unknown) => {
          if (isStreamStackError(error, 'FEED_NOT_FOUND')) return undefined;
          throw error;
        }),
      ),
    );
    return feeds.filter((feed): feed is Feed => feed !== undefined);
  }

  /** Aborts when the server starts draining: live reads end so that close can finish. */
  get drainSignal(): AbortSignal {
    return this.drain.signal;
  }

  get draining(): boolean {
    return this.drain.signal.aborted;
  }

  startDraining(): void {
    this.drain.abort();
  }
}

/** The per-route settings the auth hook reads. */
export interface RouteConfig {
  /** What the route does, for token scopes. */
  readonly operation: Operation;
  /**
   * `feed` (the default): the token must allow the operation on the route's `feed` parameter,
   * or on every feed when the route has none. `any`: the token must allow the operation on some
   * feed, and the route checks the feed itself (create names it in the body; list filters).
   */
  readonly scope?: 'feed' | 'any';
  /**
   * `owner` (the default): on a node of a cluster, a request for a feed another node writes is
   * redirected there (owner-redirect.ts). `any`: this node answers it (taking the lease).
   */
  readonly owner?: 'owner' | 'any';
}

declare module 'fastify' {
  // Every route says what it does, which the auth hook checks against the token's scopes.
  interface FastifyContextConfig {
    operation?: Operation;
    scope?: 'feed' | 'any';
    owner?: 'owner' | 'any';
  }
}

/** The `feed` path parameter of a request, when its route has one. */
export function feedParam(request: FastifyRequest): string | undefined {
  return (request.params as { feed?: string } | undefined)?.feed;
}
