/**
 * A subscription group of a remote feed, with the embedded `SubscriptionGroup`'s methods: many
 * worker processes share one group through the server, each commit held by one of them at a time.
 *
 * @example
 * const group = await feed.subscriptionGroup('emails', { orderedBy: 'key' });
 * const [claim] = await group.claim({ worker: `worker-${process.pid}`, waitMs: 30_000 });
 * if (claim) await group.ack(claim.commit.commit, { worker: `worker-${process.pid}` });
 */
import {
  type CommitRecords,
  type GroupClaim,
  type NackResult,
  type SubscriptionGroupInfo,
  storedRecordFromLine,
} from '@streamstack/protocol';
import { feedPath } from './paths.js';
import type { RemoteFeed } from './remote-feed.js';

/** The longest a claim waits on the server per request (its `groupClaimWaitMsMax`). */
const claimWaitMsMax = 60_000;

export class RemoteSubscriptionGroup {
  /** @internal */
  constructor(
    readonly feed: RemoteFeed,
    readonly name: string,
  ) {}

  private get path(): string {
    return `${feedPath(this.feed.name)}/groups/${encodeURIComponent(this.name)}`;
  }

  info(): Promise<SubscriptionGroupInfo> {
    return this.feed.transport.json('GET', this.path);
  }

  /** Up to `max` commits for `worker`; with `waitMs`, the server waits that long for work. */
  async claim(options: { worker: string; max?: number; waitMs?: number; signal?: AbortSignal }): Promise<GroupClaim[]> {
    const { signal, ...body } = options;
    const answer = await this.feed.transport.json<{
      claims: (Omit<GroupClaim, 'records'> & { commit: CommitRecords['commit']; records: Record<string, unknown>[] })[];
    }>('POST', `${this.path}/claim`, { json: body, ...(signal ? { signal } : {}) });
    return answer.claims.map((claim) => ({ ...claim, records: claim.records.map(storedRecordFromLine) }));
  }

  /** Claims one commit at a time for `worker`, waiting for work, until `signal` aborts. */
  async *claims(options: { worker: string; signal?: AbortSignal }): AsyncGenerator<GroupClaim> {
    while (!options.signal?.aborted) {
      let claims: GroupClaim[];
      try {
        claims = await this.claim({ ...options, waitMs: claimWaitMsMax });
      } catch (error) {
        if (options.signal?.aborted) return;
        throw error;
      }
      for (const claim of claims) yield claim;
    }
  }

  async ack(commit: number, options: { worker: string }): Promise<void> {
    await this.feed.transport.json('POST', `${this.path}/ack`, { json: { worker: options.worker, commit } });
  }

  nack(commit: number, options: { worker: string; reason?: string }): Promise<NackResult> {
    return this.feed.transport.json('POST', `${this.path}/nack`, { json: { ...options, commit } });
  }

  reset(cursor: number): Promise<SubscriptionGroupInfo> {
    return this.feed.transport.json('POST', `${this.path}/reset`, { json: { cursor } });
  }

  async delete(): Promise<void> {
    await this.feed.transport.json('DELETE', this.path);
  }
}
