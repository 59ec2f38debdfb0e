/**
 * The state of one subscription group, as a value: what is settled, what workers hold, how often
 * each commit was delivered. Every change makes a new value, which the caller writes durably
 * before it takes its place, so a change that did not reach the disk changes nothing.
 *
 * A commit is settled once acknowledged or parked. `cursor` is the last commit before which
 * everything is settled; `settled` lists the settled commits after it, and `work` the unsettled
 * ones delivered at least once (held by a worker until `deadline`, or released for another).
 * Both only ever name commits within `groupWindowCommitsMax` of the cursor.
 *
 * @example
 * const next = state.take([12, 13], 'worker-a', Date.now()); // write next, then use it
 */
import type { GroupOrder } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import { groupWindowCommitsMax } from '../../limits.js';
import { ByteReader, ByteWriter } from '../../storage/codec.js';

export type { GroupOrder };

export interface GroupConfig {
  readonly ackTimeoutMs: number;
  readonly maxDeliveries: number;
  readonly orderedBy: GroupOrder;
  /** The feed parked work is appended to. */
  readonly deadLetter: string;
}

export interface GroupWork {
  readonly commit: number;
  /** Times it was handed to a worker. */
  readonly deliveries: number;
  /** The worker holding it, until `deadline` (ms since the epoch); undefined once released. */
  readonly worker: string | undefined;
  readonly deadline: number;
  /** Why it was last released, when a worker said. */
  readonly reason: string | undefined;
}

export interface GroupTotals {
  readonly acked: number;
  readonly parked: number;
  /** Deliveries after the first: work handed out again after a nack or a timeout. */
  readonly redelivered: number;
}

/** A commit the group may hand out, with the keys of its records (used when ordered by key). */
export interface GroupCandidate {
  readonly commit: number;
  readonly keys: readonly string[];
}

export class GroupState {
  constructor(
    readonly name: string,
    readonly config: GroupConfig,
    readonly cursor: number,
    readonly settled: readonly number[],
    readonly work: ReadonlyMap<number, GroupWork>,
    readonly totals: GroupTotals,
    readonly createdAt: number,
    readonly updatedAt: number,
  ) {}

  static create(name: string, config: GroupConfig, cursor: number, now: number): GroupState {
    return new GroupState(name, config, cursor, [], new Map(), { acked: 0, parked: 0, redelivered: 0 }, now, now);
  }

  /** The last commit the group may hand out now: a window past the cursor. */
  get windowEnd(): number {
    return this.cursor + groupWindowCommitsMax;
  }

  isSettled(commit: number): boolean {
    return commit <= this.cursor || this.settled.includes(commit);
  }

  /** The worker holding `commit` at `now`, if one does. */
  holder(commit: number, now: number): string | undefined {
    const work = this.work.get(commit);
    return work?.worker !== undefined && work.deadline > now ? work.worker : undefined;
  }

  /** Work that had all its deliveries and that no worker holds at `now` (given back, or timed out): to be parked. */
  exhausted(now: number): GroupWork[] {
    return [...this.work.values()].filter(
      (work) => work.deliveries >= this.config.maxDeliveries && (work.worker === undefined || work.deadline <= now),
    );
  }

  /**
   * Which of `candidates` (commits after the cursor, oldest first) a worker may take at `now`, at
   * most `max`. Ordered by key, a commit waits while an earlier unsettled commit shares a key
   * with it, so no two workers hold the same key and each key's commits are handled in order.
   */
  choose(candidates: readonly GroupCandidate[], now: number, max: number): number[] {
    const chosen: number[] = [];
    const blocked = new Set<string>();
    const byKey = this.config.orderedBy === 'key';
    for (const { commit, keys } of candidates) {
      if (chosen.length >= max || commit > this.windowEnd) break;
      if (this.isSettled(commit)) continue;
      if (byKey) {
        const waits = keys.some((key) => blocked.has(key));
        for (const key of keys) blocked.add(key);
        if (waits) continue;
      }
      const work = this.work.get(commit);
      if (work?.worker !== undefined && work.deadline > now) continue;
      // Exhausted work is parked, never handed out again.
      if (work && work.deliveries >= this.config.maxDeliveries) continue;
      chosen.push(commit);
    }
    return chosen;
  }

  /** `worker` takes `commits` until `now` plus the ack timeout. */
  take(commits: readonly number[], worker: string, now: number): GroupState {
    const work = new Map(this.work);
    let redelivered = this.totals.redelivered;
    for (const commit of commits) {
      const before = work.get(commit);
      if (before) redelivered++;
      work.set(commit, {
        commit,
        deliveries: (before?.deliveries ?? 0) + 1,
        worker,
        deadline: now + this.config.ackTimeoutMs,
        reason: before?.reason,
      });
    }
    return this.with({ work, totals: { ...this.totals, redelivered }, updatedAt: now });
  }

  /** `commit` is done: acknowledged, or parked. The cursor moves over every settled commit it reaches. */
  settle(commit: number, how: 'acked' | 'parked', now: number): GroupState {
    if (this.isSettled(commit)) return this;
    const work = new Map(this.work);
    work.delete(commit);
    const settled = new Set(this.settled);
    settled.add(commit);
    let cursor = this.cursor;
    while (settled.delete(cursor + 1)) cursor++;
    const totals = { ...this.totals, [how]: this.totals[how] + 1 };
    return this.with({ cursor, settled: [...settled].sort((a, b) => a - b), work, totals, updatedAt: now });
  }

  /** `commit` goes back to the group, for another worker, with the reason its worker gave. */
  release(commit: number, reason: string | undefined, now: number): GroupState {
    const before = this.work.get(commit);
    if (!before) return this;
    const work = new Map(this.work);
    work.set(commit, { ...before, worker: undefined, deadline: 0, reason: reason ?? before.reason });
    return this.with({ work, updatedAt: now });
  }

  /** Everything after `cursor` is unsettled and undelivered again; nothing before it is handed out. */
  reset(cursor: number, now: number): GroupState {
    return this.with({ cursor, settled: [], work: new Map(), updatedAt: now });
  }

  reconfigure(config: GroupConfig, now: number): GroupState {
    return this.with({ config, updatedAt: now });
  }

  private with(change: Partial<Omit<GroupState, 'name' | 'createdAt'>>): GroupState {
    return new GroupState(
      this.name,
      change.config ?? this.config,
      change.cursor ?? this.cursor,
      change.settled ?? this.settled,
      change.work ?? this.work,
      change.totals ?? this.totals,
      this.createdAt,
      change.updatedAt ?? this.updatedAt,
    );
  }
}

const orders: readonly GroupOrder[] = ['commit', 'key'];
/** The record's format, first in it, so that a later format can be told apart. */
const groupFormatVersion = 1;

/** The state as one state-log record: commits after the cursor are written as gaps from it. */
export function encodeGroupState(state: GroupState): Uint8Array {
  const writer = new ByteWriter()
    .varint(groupFormatVersion)
    .string(state.name)
    .varint(state.config.ackTimeoutMs)
    .varint(state.config.maxDeliveries)
    .varint(orders.indexOf(state.config.orderedBy))
    .string(state.config.deadLetter)
    .varint(state.cursor)
    .varint(state.createdAt)
    .varint(state.updatedAt)
    .varint(state.totals.acked)
    .varint(state.totals.parked)
    .varint(state.totals.redelivered)
    .varint(state.settled.length);
  for (const commit of state.settled) writer.varint(commit - state.cursor);
  writer.varint(state.work.size);
  for (const work of state.work.values()) {
    writer
      .varint(work.commit - state.cursor)
      .varint(work.deliveries)
      .string(work.worker ?? '')
      .varint(work.deadline)
      .string(work.reason ?? '');
  }
  return writer.finish();
}

export function decodeGroupState(bytes: Uint8Array, file: string): GroupState {
  const reader = new ByteReader(bytes, 0, bytes.length, `subscription group record in ${file}`);
  const version = reader.varint();
  if (version !== groupFormatVersion) throw reader.corrupt(`unknown subscription group format ${version}`);
  const name = reader.string();
  const ackTimeoutMs = reader.varint();
  const maxDeliveries = reader.varint();
  const orderedBy = orders[reader.varint()];
  if (!orderedBy) throw reader.corrupt('unknown subscription group order');
  const deadLetter = reader.string();
  const cursor = reader.varint();
  const createdAt = reader.varint();
  const updatedAt = reader.varint();
  const totals = { acked: reader.varint(), parked: reader.varint(), redelivered: reader.varint() };
  const settled: number[] = [];
  for (let count = reader.varint(); count > 0; count--) settled.push(cursor + reader.varint());
  const work = new Map<number, GroupWork>();
  for (let count = reader.varint(); count > 0; count--) {
    const commit = cursor + reader.varint();
    const deliveries = reader.varint();
    const worker = reader.string();
    const deadline = reader.varint();
    const reason = reader.string();
    work.set(commit, { commit, deliveries, worker: worker || undefined, deadline, reason: reason || undefined });
  }
  reader.expectEnd();
  // What was checked before writing holds after reading: commits lie past the cursor, apart.
  for (const commit of [...settled, ...work.keys()]) {
    if (commit <= cursor || commit > cursor + groupWindowCommitsMax || (settled.includes(commit) && work.has(commit)))
      throw reader.corrupt(`subscription group ${name} names commit ${commit} out of place (cursor ${cursor})`);
  }
  return new GroupState(
    name,
    { ackTimeoutMs, maxDeliveries, orderedBy, deadLetter },
    cursor,
    settled,
    work,
    totals,
    createdAt,
    updatedAt,
  );
}

/**
 * The error for work `worker` does not hold: never claimed, claimed by another, timed out and
 * taken, or settled already.
 */
export function notHeld(
  group: string,
  commit: number,
  worker: string,
  holder: string | undefined,
  settled = false,
): StreamStackError {
  const why = settled
    ? `commit ${commit} of group ${group} is settled already`
    : holder
      ? `commit ${commit} of group ${group} is held by ${holder}, not ${worker}`
      : `worker ${worker} holds no claim on commit ${commit} of group ${group} (its time may have run out)`;
  return new StreamStackError('CLAIM_NOT_HELD', why, {
    details: { group, commit, worker, holder: holder ?? null, settled },
  });
}
