/**
 * The writer lease of one feed: who may write, under which epoch, until when. Epochs are
 * durable (a state log) and strictly increase across restarts; every grant gets a fresh fencing
 * token. Lease changes do not wait behind queued writes: a takeover is granted as soon as it is
 * durable, and writes still queued under the old token are then refused when their turn comes.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { LeaseGrant } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import { leaseTtlMsDefault, leaseTtlMsMax, leaseTtlMsMin } from '../../limits.js';
import { ByteReader, ByteWriter } from '../../storage/codec.js';
import type { StateLog } from '../../storage/state-log.js';
import type { RemoteLease } from './etcd-leases.js';

export type { LeaseGrant };

export interface LeaseState {
  readonly epoch: number;
  readonly holder: string;
  readonly token: string;
  readonly expiresAt: number;
  readonly released: boolean;
}

function encodeLease(lease: LeaseState): Uint8Array {
  return new ByteWriter()
    .varint(lease.epoch)
    .string(lease.holder)
    .string(lease.token)
    .varint(lease.expiresAt)
    .u8(lease.released ? 1 : 0)
    .finish();
}

function decodeLease(bytes: Uint8Array, file: string): LeaseState {
  const reader = new ByteReader(bytes, 0, bytes.length, `lease record in ${file}`);
  const lease = {
    epoch: reader.varint(),
    holder: reader.string(),
    token: reader.string(),
    expiresAt: reader.varint(),
    released: reader.u8() === 1,
  };
  reader.expectEnd();
  return lease;
}

/**
 * Writes `lease` to a feed's lease log as its current grant: a grant made in etcd before the
 * feed's directory was laid out here (a failover's restore), which the feed then opens with.
 */
export async function recordLease(log: StateLog, lease: LeaseState): Promise<void> {
  await log.write(encodeLease(lease));
}

/** `INVALID_ARGUMENT` unless `holder` is a name a lease may be held under. */
export function validateHolder(holder: unknown): string {
  if (typeof holder !== 'string' || holder.length === 0 || holder.length > 256)
    throw new StreamStackError('INVALID_ARGUMENT', 'holder must be a non-empty string of at most 256 characters');
  return holder;
}

/** `ttlMs`, or the default TTL; `INVALID_ARGUMENT` for one out of bounds. */
export function validateTtl(ttlMs: number | undefined): number {
  const ttl = ttlMs ?? leaseTtlMsDefault;
  if (!Number.isSafeInteger(ttl) || ttl < leaseTtlMsMin || ttl > leaseTtlMsMax) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `ttlMs must be an integer from ${leaseTtlMsMin} to ${leaseTtlMsMax}, not ${String(ttlMs)}`,
    );
  }
  return ttl;
}

export class LeaseKeeper {
  private current: LeaseState | undefined;
  /** Lease changes run one at a time, in call order. */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly log: StateLog,
    private readonly clock: () => number,
    private readonly newId: () => string,
    /**
     * The highest epoch any write in the logs was made under: the epoch never goes below it,
     * so fencing holds even when the lease log was lost.
     */
    private epochFloor = 0,
    /**
     * The feed's lease in a coordination store (etcd), when the store has one: grants are then
     * made there first, and a grant lost there is dead here at once.
     */
    private readonly remote?: RemoteLease,
  ) {
    this.current = log.last ? decodeLease(log.last, log.file) : undefined;
  }

  /**
   * At open, with a coordination store: a lease live in the local log holds only if etcd still
   * has its key (the process may have been down past its TTL, and another node taken over).
   */
  async reconcile(): Promise<void> {
    const live = this.live();
    if (this.remote && live) await this.remote.adopt(live.token);
  }

  /**
   * Raises the floor to `epoch`, an epoch found in storage (a replicated feed's newest slot): no
   * grant here goes back to it or below, even with the lease log and etcd both lost.
   */
  raiseFloor(epoch: number): void {
    this.epochFloor = Math.max(this.epochFloor, epoch);
  }

  /**
   * The epoch of this node's last grant of the feed, live or not (0 before the first): what its
   * changes elsewhere are guarded by. Unlike `epoch`, never raised by what others wrote.
   */
  get grantedEpoch(): number {
    return this.current?.epoch ?? 0;
  }

  /** The highest epoch ever granted or written under (0 before the first grant). */
  get epoch(): number {
    return Math.max(this.current?.epoch ?? 0, this.epochFloor);
  }

  /** The lease when it is live (granted, not released, not expired, not lost in etcd), else undefined. */
  live(): LeaseState | undefined {
    const lease = this.current;
    if (!lease || lease.released || this.clock() >= lease.expiresAt) return undefined;
    return this.remote?.lostReason(lease.token) === undefined ? lease : undefined;
  }

  private serial<T>(change: () => Promise<T>): Promise<T> {
    const result = this.chain.then(change);
    this.chain = result.catch(() => undefined);
    return result;
  }

  acquire(holder: string, ttlMs?: number): Promise<LeaseGrant> {
    const ttl = validateTtl(ttlMs);
    try {
      validateHolder(holder);
    } catch (error) {
      return Promise.reject(error);
    }
    return this.serial(async () => {
      const live = this.live();
      if (live) {
        throw new StreamStackError(
          'LEASE_HELD',
          `the lease is held by ${live.holder} (epoch ${live.epoch}) until ${new Date(live.expiresAt).toISOString()}`,
          {
            details: { holder: live.holder, epoch: live.epoch, expiresAt: live.expiresAt },
          },
        );
      }
      // The expiry counts from before any request to etcd: a lease ends here no later than there.
      const now = this.clock();
      let epoch = this.epoch + 1;
      let token = `${epoch}.${this.newId()}`;
      if (this.remote) {
        ({ epoch, token } = await this.remote.acquire({
          holder,
          nonce: this.newId(),
          epochFloor: this.epoch,
          ttlMs: ttl,
          replacing: this.current?.token,
        }));
      }
      const lease: LeaseState = { epoch, holder, token, expiresAt: now + ttl, released: false };
      await this.log.write(encodeLease(lease));
      this.current = lease;
      return { epoch, token: lease.token, expiresAt: lease.expiresAt, holder };
    });
  }

  renew(token: string, ttlMs?: number): Promise<LeaseGrant> {
    const ttl = validateTtl(ttlMs);
    return this.serial(async () => {
      const lease = this.check(token);
      const now = this.clock();
      await this.remote?.renew(token, ttl);
      const renewed = { ...lease, expiresAt: now + ttl };
      await this.log.write(encodeLease(renewed));
      this.current = renewed;
      return { epoch: renewed.epoch, token, expiresAt: renewed.expiresAt, holder: renewed.holder };
    });
  }

  /**
   * Renews the grant of `token` even if it expired here, as long as etcd still holds it: a
   * takeover keeps its grant alive in etcd while it lays the feed out and opens it, which may
   * take longer than the TTL. The expiry counts from before the request to etcd, as a grant's.
   */
  resume(token: string, ttlMs: number): Promise<LeaseGrant> {
    const ttl = validateTtl(ttlMs);
    return this.serial(async () => {
      const lease = this.current;
      if (!lease || lease.token !== token || lease.released || !this.remote)
        throw new StreamStackError('FENCED', 'the token does not name the current lease of this feed', {
          details: { epoch: lease?.epoch ?? 0 },
        });
      const now = this.clock();
      await this.remote.renew(token, ttl);
      const renewed = { ...lease, expiresAt: now + ttl };
      await this.log.write(encodeLease(renewed));
      this.current = renewed;
      return { epoch: renewed.epoch, token, expiresAt: renewed.expiresAt, holder: renewed.holder };
    });
  }

  release(token: string): Promise<void> {
    return this.serial(async () => {
      const lease = this.check(token);
      const released = { ...lease, released: true };
      await this.log.write(encodeLease(released));
      this.current = released;
      // Released here first: nothing writes under it from now, whether or not etcd answers.
      await this.remote?.release(token);
    });
  }

  /**
   * The live lease that `token` names, or the reason it does not: `FENCED` when the token is not
   * the current lease's (a newer epoch was granted, or it never was a token here),
   * `LEASE_EXPIRED` when it is the current lease's but that lease expired or was released.
   */
  check(token: string): LeaseState {
    const lease = this.current;
    if (!lease || typeof token !== 'string' || token !== lease.token) {
      const epoch = typeof token === 'string' ? Number.parseInt(token, 10) : Number.NaN;
      throw new StreamStackError(
        'FENCED',
        Number.isInteger(epoch) && lease && epoch < lease.epoch
          ? `the token of epoch ${epoch} was fenced off by epoch ${lease.epoch}`
          : 'the token does not name the current lease of this feed',
        { details: { epoch: lease?.epoch ?? 0 } },
      );
    }
    const lost = this.remote?.lostReason(token);
    if (lost !== undefined) {
      throw new StreamStackError('FENCED', `the lease of epoch ${lease.epoch} was lost in etcd: ${lost}`, {
        details: { epoch: lease.epoch, service: 'etcd' },
      });
    }
    if (lease.released || this.clock() >= lease.expiresAt) {
      throw new StreamStackError(
        'LEASE_EXPIRED',
        `the lease of epoch ${lease.epoch} ${lease.released ? 'was released' : 'expired'}`,
        {
          details: { epoch: lease.epoch, expiresAt: lease.expiresAt },
        },
      );
    }
    return lease;
  }

  /**
   * For writes that may come without a token (one-shot appends): with a token, it must be
   * valid; without one, no lease may be live.
   */
  checkOptional(token: string | undefined): number {
    if (token !== undefined) return this.check(token).epoch;
    const live = this.live();
    if (live) {
      throw new StreamStackError(
        'LEASE_HELD',
        `the feed is leased to ${live.holder} (epoch ${live.epoch}); writes must carry its token`,
        {
          details: { holder: live.holder, epoch: live.epoch },
        },
      );
    }
    const elsewhere = this.remote?.heldElsewhere(this.current?.token);
    if (elsewhere) {
      throw new StreamStackError(
        'LEASE_HELD',
        `the feed is leased to ${elsewhere.holder} on node ${elsewhere.node} (epoch ${elsewhere.epoch}); writes must carry its token`,
        { details: { holder: elsewhere.holder, node: elsewhere.node, epoch: elsewhere.epoch } },
      );
    }
    return this.epoch;
  }
}
