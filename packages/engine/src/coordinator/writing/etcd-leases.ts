/**
 * Writer leases kept in etcd, for a store opened with `coordination`: the lease of a feed is then
 * one key every node of a cluster sees, not a file on one machine. Two keys per feed, under the
 * prefix (default `/streamstack/`):
 *
 * - `feeds/<feed>/writer`: who holds the lease (`{ holder, node, url, epoch, token }` as JSON),
 *   attached to an etcd lease whose TTL is the writer lease's, so the key vanishes when its
 *   holder stops renewing;
 * - `feeds/<feed>/epoch`: the highest epoch granted, in decimal.
 *
 * Acquiring is one transaction that creates the writer key (only if absent) and raises the epoch
 * (only if nobody raised it since it was read). The epoch is raised from the highest of etcd's and
 * the node's own floor (every epoch its logs were written under), so an etcd restored from an
 * old backup, or wiped, never hands out an epoch already used. One watch of the prefix mirrors
 * every writer key: a lease whose key is deleted or taken over is lost at once, and writes under
 * it are refused `FENCED` from then on.
 *
 * Each store also registers its node (`nodes/<node>`: `{ node, url, startedAt }`, on an etcd lease
 * it keeps alive), so that `cluster()` lists the nodes and the leases each holds.
 *
 * Why this is safe without the watch: the local expiry of a grant is counted from before its
 * request was sent, and etcd counts its TTL from when the request arrived (and rounds it up to
 * whole seconds), so a node always stops writing under a lease before etcd lets another node
 * take it.
 */
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClusterFeed, ClusterInfo, ClusterNode } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import { clusterNodeTtlSeconds, etcdTxnAttemptsMax, etcdWatchRetryMs } from '../../limits.js';
import { EtcdClient, type EtcdEvent } from '../../storage/etcd-client.js';
import {
  clusterFeedOf,
  type HeadHint,
  heldError,
  parseHeadHint,
  parseRecord,
  readCluster,
  type WriterRecord,
} from './cluster-keys.js';

/** Where a cluster keeps its writer leases: `Store.open(dir, { coordination })`. */
export interface CoordinationOptions {
  /** etcd's client URLs (`http://127.0.0.1:2379`): one, or several members of a cluster. */
  readonly etcd: string | readonly string[];
  /** What every key starts with (default `/streamstack/`): clusters that share one etcd use different ones. */
  readonly prefix?: string;
  /** This node's name, written beside each lease it holds (default: host name and process id). */
  readonly node?: string;
}

/** A grant this node holds in etcd. */
interface HeldGrant {
  readonly token: string;
  /** The etcd lease the writer key is attached to. */
  leaseId: string;
  /** Its TTL in seconds (0: unknown, after a restart). */
  ttlSeconds: number;
  /** The writer key's value, exactly as written: transactions compare against it. */
  readonly raw: string;
  /** The etcd revision that wrote it: older news of the key says nothing about it. */
  readonly revision: bigint;
  /** Set once the grant is lost in etcd: why. */
  lost?: string;
}

/** One feed's lease in etcd, as the feed's `LeaseKeeper` uses it. */
export interface RemoteLease {
  /**
   * Creates the writer key for `holder` under a new epoch (above `epochFloor` and etcd's epoch),
   * `LEASE_HELD` if another holder's key is there. `replacing` is this node's previous token of
   * the feed, no longer live here: its key, if still in etcd, may be taken over.
   */
  acquire(request: {
    holder: string;
    nonce: string;
    epochFloor: number;
    ttlMs: number;
    replacing: string | undefined;
  }): Promise<{ epoch: number; token: string }>;
  /** Extends the grant of `token` to `ttlMs` from now; `FENCED` if etcd no longer has it. */
  renew(token: string, ttlMs: number): Promise<void>;
  /** Deletes the writer key of `token`, if etcd still has it; best effort (its TTL ends it anyway). */
  release(token: string): Promise<void>;
  /** Why the grant of `token` was lost in etcd, or undefined while it holds. */
  lostReason(token: string): string | undefined;
  /** The holder of the feed's key in etcd when it is not this node's grant `token`. */
  heldElsewhere(token: string | undefined): WriterRecord | undefined;
  /** At open: takes back the grant of `token` (the live local lease) if etcd still has it, else marks it lost. */
  adopt(token: string): Promise<void>;
}

const prefixDefault = '/streamstack/';

function endpointsOf(etcd: CoordinationOptions['etcd']): string[] {
  const list = typeof etcd === 'string' ? etcd.split(',') : [...(etcd ?? [])];
  if (list.length === 0) throw new StreamStackError('INVALID_ARGUMENT', 'coordination.etcd names no etcd endpoint');
  return list.map((entry) => {
    let url: URL;
    try {
      url = new URL(String(entry).trim());
    } catch {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `coordination.etcd must be etcd's http(s) URLs, not ${String(entry)}`,
      );
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new StreamStackError('INVALID_ARGUMENT', `coordination.etcd must be etcd's http(s) URLs, not ${url.href}`);
    return url.origin;
  });
}

function lostError(feed: string, reason: string): StreamStackError {
  return new StreamStackError('FENCED', `the lease of ${feed} was lost in etcd: ${reason}`, {
    details: { service: 'etcd' },
  });
}

/** Checks coordination options: etcd's URLs, the key prefix, this node's name. */
function settingsOf(options: CoordinationOptions): { endpoints: string[]; prefix: string; node: string } {
  if (typeof options !== 'object' || options === null)
    throw new StreamStackError('INVALID_ARGUMENT', 'coordination is { etcd, prefix?, node? }');
  const prefix = options.prefix ?? prefixDefault;
  if (typeof prefix !== 'string' || !prefix.endsWith('/'))
    throw new StreamStackError('INVALID_ARGUMENT', `coordination.prefix must end with "/", not ${String(prefix)}`);
  const node = options.node ?? `${os.hostname()}:${process.pid}`;
  if (typeof node !== 'string' || node.length === 0 || node.length > 256)
    throw new StreamStackError('INVALID_ARGUMENT', 'coordination.node must be a name of 1 to 256 characters');
  return { endpoints: endpointsOf(options.etcd), prefix, node };
}

/**
 * The cluster that `options` names, read from etcd without joining it (no node key, no watch):
 * what `streamstack cluster` prints.
 *
 * @example
 * const { nodes, feeds } = await readClusterOf({ etcd: 'http://127.0.0.1:2379' });
 */
export function readClusterOf(options: CoordinationOptions): Promise<ClusterInfo> {
  const { endpoints, prefix, node } = settingsOf(options);
  return readCluster(new EtcdClient(endpoints), prefix, node);
}

export class EtcdLeases {
  /** Every feed's writer key, as the watch last reported it. */
  private readonly writers = new Map<string, WriterRecord>();
  private readonly held = new Map<string, HeldGrant>();
  /** Who hears of head hints as the watch sees them (followers). */
  private readonly headListeners = new Set<(feed: string, hint: HeadHint) => void>();
  /** Each feed's renewal in flight, settled: the next one waits for it (`renew`). */
  private readonly renewals = new Map<string, Promise<void>>();
  private readonly stopping = new AbortController();
  private revision = 0n;
  private watching: Promise<void> = Promise.resolve();
  /** This node's key: its etcd lease (kept alive), and the server address it gives. */
  private nodeLease: string | undefined;
  private url: string | null = null;
  private readonly startedAt = Date.now();
  private keepAlive: NodeJS.Timeout | undefined;

  private constructor(
    readonly client: EtcdClient,
    readonly prefix: string,
    readonly node: string,
  ) {}

  /** Checks `options`, reads every writer key (`UNAVAILABLE` if etcd does not answer) and starts the watch. */
  static async open(options: CoordinationOptions): Promise<EtcdLeases> {
    const { endpoints, prefix, node } = settingsOf(options);
    const leases = new EtcdLeases(new EtcdClient(endpoints), prefix, node);
    await leases.sync();
    await leases.register();
    leases.watching = leases.follow();
    leases.keepAlive = setInterval(
      () => void leases.keepNode().catch(() => undefined),
      (clusterNodeTtlSeconds * 1000) / 3,
    );
    leases.keepAlive.unref();
    return leases;
  }

  private get nodeKey(): string {
    return `${this.prefix}nodes/${this.node}`;
  }

  /** Puts this node's key, on a new etcd lease when it has none. */
  private async register(): Promise<void> {
    this.nodeLease ??= (await this.client.leaseGrant(clusterNodeTtlSeconds)).id;
    const record: ClusterNode = { node: this.node, url: this.url, startedAt: this.startedAt };
    await this.client.txn([], [{ put: { key: this.nodeKey, value: JSON.stringify(record), lease: this.nodeLease } }]);
  }

  /** Keeps the node's key alive; puts it again if its etcd lease ended (etcd restarted empty, a long outage). */
  private async keepNode(): Promise<void> {
    if (this.nodeLease !== undefined && (await this.client.leaseKeepAlive(this.nodeLease)) > 0) return;
    this.nodeLease = undefined;
    await this.register();
  }

  /** Names the address this node's server answers at, for `cluster()` and redirects. */
  async advertise(url: string): Promise<void> {
    this.url = url;
    await this.register();
  }

  /** The nodes and the feeds' writers, read from etcd now. */
  cluster(): Promise<ClusterInfo> {
    return readCluster(this.client, this.prefix, this.node);
  }

  private get feedsPrefix(): string {
    return `${this.prefix}feeds/`;
  }

  private writerKey(feed: string): string {
    return `${this.feedsPrefix}${feed}/writer`;
  }

  private epochKey(feed: string): string {
    return `${this.feedsPrefix}${feed}/epoch`;
  }

  /** The feed whose writer key (or head key) `key` is, or undefined for any other key. */
  private feedOfKey(key: string, suffix: '/writer' | '/head' = '/writer'): string | undefined {
    if (!key.startsWith(this.feedsPrefix) || !key.endsWith(suffix)) return undefined;
    const feed = key.slice(this.feedsPrefix.length, -suffix.length);
    // A feed's name holds no '/': a deeper key (a subscription's copy) is another kind.
    return feed.includes('/') ? undefined : feed;
  }

  /**
   * Puts feed `feed`'s head hint (`commit`) under this node's grant, guarded by its epoch: once
   * another node raised it (a takeover), the old writer's hints are refused. False then, or with no grant here.
   */
  async publishHead(feed: string, commit: number): Promise<boolean> {
    const grant = this.held.get(feed);
    const epoch = grant && !grant.lost ? parseRecord(grant.raw)?.epoch : undefined;
    if (epoch === undefined) return false;
    const hint: HeadHint = { epoch, commit, node: this.node, url: this.url };
    const put = { key: `${this.feedsPrefix}${feed}/head`, value: JSON.stringify(hint) };
    return (await this.client.txn([{ key: this.epochKey(feed), value: String(epoch) }], [{ put }])).succeeded;
  }

  /** Calls `listener` with every head hint the watch sees, until the returned function is called. */
  onHeadHint(listener: (feed: string, hint: HeadHint) => void): () => void {
    this.headListeners.add(listener);
    return () => this.headListeners.delete(listener);
  }

  /** Reads every writer key anew, at one revision, and judges the grants held against them. */
  private async sync(): Promise<void> {
    const { kvs, revision } = await this.client.getPrefix(this.feedsPrefix);
    const at = BigInt(revision);
    this.writers.clear();
    for (const kv of kvs) {
      const feed = this.feedOfKey(kv.key);
      const record = feed === undefined ? undefined : parseRecord(kv.value);
      if (feed !== undefined && record) this.writers.set(feed, record);
    }
    for (const [feed, grant] of this.held) {
      if (grant.lost || at < grant.revision) continue;
      const record = this.writers.get(feed);
      if (record?.token !== grant.token)
        grant.lost = record
          ? `etcd gave the lease to ${record.holder} on node ${record.node} (epoch ${record.epoch})`
          : 'its key in etcd is gone (its etcd lease expired or was revoked)';
    }
    this.revision = at;
  }

  private apply(events: readonly EtcdEvent[]): void {
    for (const event of events) {
      const at = BigInt(event.modRevision);
      if (at > this.revision) this.revision = at;
      const hinted = this.feedOfKey(event.key, '/head');
      if (hinted !== undefined && event.type === 'put' && event.value !== undefined) {
        const hint = parseHeadHint(event.value);
        if (hint) for (const listener of this.headListeners) listener(hinted, hint);
        continue;
      }
      const feed = this.feedOfKey(event.key);
      if (feed === undefined) continue;
      const record = event.type === 'put' && event.value !== undefined ? parseRecord(event.value) : undefined;
      if (record) this.writers.set(feed, record);
      else this.writers.delete(feed);
      const grant = this.held.get(feed);
      if (!grant || grant.lost || at <= grant.revision) continue;
      if (record?.token !== grant.token)
        grant.lost = record
          ? `etcd gave the lease to ${record.holder} on node ${record.node} (epoch ${record.epoch})`
          : 'its key in etcd was deleted (its etcd lease expired or was revoked)';
    }
  }

  /** The watch, for as long as the store is open: reconnects after a break and reads every key again. */
  private async follow(): Promise<void> {
    const signal = this.stopping.signal;
    while (!signal.aborted) {
      try {
        await this.client.watch(
          this.feedsPrefix,
          (this.revision + 1n).toString(),
          (events) => this.apply(events),
          signal,
        );
      } catch {
        // The stream broke (or the store is closing): wait, read every key again, watch anew.
      }
      if (signal.aborted) return;
      await sleep(etcdWatchRetryMs, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) return;
      await this.sync().catch(() => undefined);
    }
  }

  /**
   * Feed `feed`'s writer, as the watch last saw its key, when another node holds it; undefined
   * when this node does or nobody does.
   */
  ownerElsewhere(feed: string): ClusterFeed | undefined {
    const record = this.writers.get(feed);
    return record && record.node !== this.node ? clusterFeedOf(feed, record) : undefined;
  }

  /** The lease of feed `feed` in etcd. */
  forFeed(feed: string): RemoteLease {
    return {
      acquire: (request) => this.acquire(feed, request),
      renew: (token, ttlMs) => this.renew(feed, token, ttlMs),
      release: (token) => this.release(feed, token),
      lostReason: (token) => {
        const grant = this.held.get(feed);
        return grant && grant.token === token ? grant.lost : undefined;
      },
      heldElsewhere: (token) => {
        const record = this.writers.get(feed);
        return record && record.token !== token ? record : undefined;
      },
      adopt: (token) => this.adopt(feed, token),
    };
  }

  private async acquire(
    feed: string,
    request: { holder: string; nonce: string; epochFloor: number; ttlMs: number; replacing: string | undefined },
  ): Promise<{ epoch: number; token: string }> {
    const grant = await this.client.leaseGrant(Math.ceil(request.ttlMs / 1000));
    let taken = false;
    try {
      for (let attempt = 0; attempt < etcdTxnAttemptsMax; attempt++) {
        const read = await this.client.txn(
          [],
          [{ range: { key: this.writerKey(feed) } }, { range: { key: this.epochKey(feed) } }],
        );
        const [writer, epochKv] = read.ranges;
        if (writer) {
          const record = parseRecord(writer.value);
          if (record?.token !== request.replacing || request.replacing === undefined) throw heldError(record, feed);
        }
        const stored = epochKv ? Number(epochKv.value) : 0;
        const epoch = Math.max(Number.isSafeInteger(stored) ? stored : 0, request.epochFloor) + 1;
        const token = `${epoch}.${request.nonce}`;
        const record: WriterRecord = { holder: request.holder, node: this.node, url: this.url, epoch, token };
        const raw = JSON.stringify(record);
        const result = await this.client.txn(
          [
            writer ? { key: this.writerKey(feed), value: writer.value } : { key: this.writerKey(feed), version: '0' },
            epochKv
              ? { key: this.epochKey(feed), modRevision: epochKv.modRevision }
              : { key: this.epochKey(feed), version: '0' },
          ],
          [
            { put: { key: this.writerKey(feed), value: raw, lease: grant.id } },
            { put: { key: this.epochKey(feed), value: String(epoch) } },
          ],
        );
        if (!result.succeeded) continue;
        taken = true;
        const previous = this.held.get(feed);
        this.held.set(feed, {
          token,
          leaseId: grant.id,
          ttlSeconds: grant.ttlSeconds,
          raw,
          revision: BigInt(result.revision),
        });
        this.writers.set(feed, record);
        // The replaced key now hangs on the new lease: the old one ends with nothing attached.
        if (previous && previous.leaseId !== grant.id)
          await this.client.leaseRevoke(previous.leaseId).catch(() => undefined);
        return { epoch, token };
      }
      throw new StreamStackError(
        'LEASE_HELD',
        `the lease of ${feed} changed hands ${etcdTxnAttemptsMax} times while this node tried to take it`,
      );
    } finally {
      // A grant that was not taken holds nothing, or (after an answer lost on the way) a key
      // no one here will use: revoking it frees the feed now rather than at its TTL.
      if (!taken) await this.client.leaseRevoke(grant.id).catch(() => undefined);
    }
  }

  /** The grant of `token`, held and not lost; `FENCED` otherwise. */
  private grantOf(feed: string, token: string): HeldGrant {
    const grant = this.held.get(feed);
    if (!grant || grant.token !== token || grant.lost) throw lostError(feed, grant?.lost ?? 'no such grant');
    return grant;
  }

  /**
   * Renewals of one feed's grant run one at a time: a renewal with another TTL moves the key to
   * a new etcd lease and revokes the old one, so a keep-alive (or a second move) running beside
   * it would renew a revoked lease, or revoke the one the key now hangs on, and lose a grant
   * that nobody took. A takeover's timer renews beside the feed's own first renewal.
   */
  private renew(feed: string, token: string, ttlMs: number): Promise<void> {
    const before = this.renewals.get(feed) ?? Promise.resolve();
    const renewal = before.then(() => this.renewNow(feed, token, ttlMs));
    const settled = renewal.then(
      () => undefined,
      () => undefined,
    );
    this.renewals.set(feed, settled);
    void settled.then(() => {
      if (this.renewals.get(feed) === settled) this.renewals.delete(feed);
    });
    return renewal;
  }

  private async renewNow(feed: string, token: string, ttlMs: number): Promise<void> {
    const grant = this.grantOf(feed, token);
    const ttlSeconds = Math.ceil(ttlMs / 1000);
    if (ttlSeconds === grant.ttlSeconds) {
      if ((await this.client.leaseKeepAlive(grant.leaseId)) > 0) return;
      grant.lost = 'its etcd lease expired before it was renewed';
      throw lostError(feed, grant.lost);
    }
    // Another TTL: the key moves to a new etcd lease, if it is still this grant's.
    const fresh = await this.client.leaseGrant(ttlSeconds);
    const result = await this.client
      .txn(
        [{ key: this.writerKey(feed), value: grant.raw }],
        [{ put: { key: this.writerKey(feed), value: grant.raw, lease: fresh.id } }],
      )
      .catch(async (error: unknown) => {
        await this.client.leaseRevoke(fresh.id).catch(() => undefined);
        throw error;
      });
    if (!result.succeeded) {
      await this.client.leaseRevoke(fresh.id).catch(() => undefined);
      grant.lost ??= 'its key in etcd is gone or was taken over';
      throw lostError(feed, grant.lost);
    }
    const old = grant.leaseId;
    grant.leaseId = fresh.id;
    grant.ttlSeconds = fresh.ttlSeconds;
    await this.client.leaseRevoke(old).catch(() => undefined);
  }

  private async release(feed: string, token: string): Promise<void> {
    const grant = this.held.get(feed);
    if (!grant || grant.token !== token) return;
    this.held.delete(feed);
    if (grant.lost) return;
    try {
      await this.client.txn(
        [{ key: this.writerKey(feed), value: grant.raw }],
        [{ delete: { key: this.writerKey(feed) } }],
      );
      await this.client.leaseRevoke(grant.leaseId);
    } catch {
      // etcd is unreachable: the key ends with its TTL, and nothing here writes under it any more.
    }
  }

  private async adopt(feed: string, token: string): Promise<void> {
    const { kv, revision } = await this.client.get(this.writerKey(feed));
    const record = kv && parseRecord(kv.value);
    this.held.set(feed, {
      token,
      leaseId: kv?.lease ?? '0',
      ttlSeconds: 0,
      raw: kv?.value ?? '',
      revision: kv ? BigInt(kv.modRevision) : BigInt(revision),
      ...(record?.token === token ? {} : { lost: 'etcd no longer had it when the feed was opened again' }),
    });
  }

  /** Stops the watch. Grants are not released: each ends with its TTL, as on a crash. */
  async close(): Promise<void> {
    this.stopping.abort();
    clearInterval(this.keepAlive);
    await this.watching;
    // The node leaves the cluster's list at once, rather than when its key's lease expires.
    if (this.nodeLease !== undefined) await this.client.leaseRevoke(this.nodeLease).catch(() => undefined);
  }
}
