/**
 * On a node of a cluster, a request for a feed that another node writes is answered with a
 * redirect there: `NOT_OWNER`, 307, with `Location` the same path and query at the owner's
 * address, and the owner named in the error body (`node`, `url`, `epoch`). It is answered before
 * the body is read, so a producer's batch crosses the network once, to the owner.
 *
 * Reads are redirected too: a cluster node's copy of a feed another node writes is one that
 * writer fenced off (a takeover moved the feed), so it is stale. A follower of the cluster
 * answers from its own copy. Taking the lease (and a
 * takeover) is answered here, as `LEASE_HELD` naming the owner while its key lives: a producer
 * whose writer died asks any node for the lease.
 */
import { type Store, StreamStackError } from '@streamstack/engine';
import type { FastifyRequest } from 'fastify';
import { feedParam, type RouteConfig } from './context.js';

/** The `NOT_OWNER` error for `request`, or undefined when this node answers it. */
export function ownerRedirect(store: Store, request: FastifyRequest): StreamStackError | undefined {
  // A follower answers from its own copy: that is what it is for.
  if (!store.clustered || store.follower) return undefined;
  const config = request.routeOptions.config as Partial<RouteConfig>;
  if (config.owner === 'any') return undefined;
  const feed = feedParam(request);
  if (feed === undefined) return undefined;
  const owner = store.ownerElsewhere(feed);
  if (!owner) return undefined;
  const location = owner.url === null ? undefined : `${owner.url.replace(/\/+$/, '')}${request.url}`;
  return new StreamStackError(
    'NOT_OWNER',
    owner.url === null
      ? `feed ${feed} is written by node ${owner.node} (epoch ${owner.epoch}), which serves no address`
      : `feed ${feed} is written by node ${owner.node} (epoch ${owner.epoch}) at ${owner.url}`,
    {
      details: {
        feed,
        node: owner.node,
        url: owner.url,
        epoch: owner.epoch,
        ...(location === undefined ? {} : { location }),
      },
    },
  );
}
