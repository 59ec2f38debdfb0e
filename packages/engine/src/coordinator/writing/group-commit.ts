/**
 * Group commit: requests queue while writes are in flight, and the next write takes them all —
 * many requests, one write, one fdatasync. Requests go to one of two lanes (the WAL, or the
 * history); consecutive requests of the same lane share a group, and groups are prepared one at a
 * time, in arrival order, so every request sees the effects of every request before it.
 *
 * Groups are pipelined: while one group's fdatasync is in flight, the next group of the same lane
 * is prepared and written behind it (up to `groupsInFlightMax` groups), so the CPU work of
 * preparing a group overlaps the disk's. Requests are acknowledged strictly in order: a group's
 * requests are finished only after every group before it was. A group of the other lane, or one
 * that needs a new segment, waits until the groups in flight have settled.
 *
 * Each request lays its frames into the group's builder in `prepare`, checking its preconditions
 * against the state left by the requests before it (those in flight included), and returns a
 * `finish` that runs once the group is durable. A request whose preconditions fail is rolled out
 * of the builder and rejected alone. A failed write is fatal for the feed: after it, nothing is
 * acknowledged again — not the groups in flight behind it either, even if their own writes
 * succeeded.
 */
import { StreamStackError } from '../../errors.js';
import { groupsInFlightMax } from '../../limits.js';
import type { FrameBuilder } from '../../storage/framing.js';

export type Lane = 'wal' | 'history';

/** Where a group landed: the segment (by base) and the offset of its first byte. */
export interface GroupLocation {
  readonly segment: number;
  readonly offset: number;
}

/**
 * Lays a request into the group: `group` is scratch state shared by the requests of one group
 * (what earlier requests staged), made fresh for every group by `newGroup`, which is handed the
 * groups still in flight (see `EarlierGroup`).
 */
export type Prepare<T, G> = (
  builder: FrameBuilder,
  group: G,
) => Promise<(location: GroupLocation) => T> | ((location: GroupLocation) => T);

/**
 * Thrown by a `prepare` whose request does not fit the group that already holds others (the
 * history group would have to roll to a new segment, and the runs before it may reference the
 * active one). The group is cut there: this request and every one after it go to the next group,
 * in the same order, so no request is ever reordered past another.
 */
export class GroupFull extends Error {
  constructor() {
    super('the group is full');
  }
}

interface Request<G> {
  readonly lane: Lane;
  readonly prepare: Prepare<unknown, G>;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * A group handed to the disk. `placed` says its bytes were reserved in the active segment when
 * `write` returned, so the next group may be laid out behind it; otherwise (a new segment is
 * being made) nothing more is prepared until it settles.
 */
export interface GroupWrite {
  readonly placed: boolean;
  readonly durable: Promise<GroupLocation>;
}

/** What the group commit has done since the feed opened: how well writes are shared. */
export interface GroupCommitStats {
  /** Groups written: each one write and one fdatasync. */
  readonly groups: number;
  /** Requests those groups carried. */
  readonly requests: number;
  /** Groups written while an earlier group of the same lane was still in flight. */
  readonly pipelined: number;
  /** Groups written and not yet acknowledged, now. */
  readonly inFlight: number;
}

/**
 * A group in flight as the group prepared behind it sees it: its scratch, and when it settles. A
 * request that depends on what such a group staged waits for `settled` rather than guess (a
 * request refused on a guess and retried at once would be refused again in microtasks alone, and
 * the write that settles the guess could never be handled).
 */
export interface EarlierGroup<G> {
  readonly scratch: G;
  /** Resolves once the group's requests are settled (acknowledged or refused). */
  readonly settled: Promise<void>;
}

/** A group written and not yet acknowledged. */
interface InFlight<G> extends EarlierGroup<G> {
  readonly lane: Lane;
  readonly placed: boolean;
}

export class GroupCommitter<G> {
  private readonly queue: Request<G>[] = [];
  private readonly inFlight: InFlight<G>[] = [];
  private running = false;
  private failure: StreamStackError | undefined;
  /** Resolves when the queue next drains and no group is in flight (for close). */
  private drained: (() => void)[] = [];
  private refusal: StreamStackError | undefined;
  private groupsWritten = 0;
  private requestsWritten = 0;
  private groupsPipelined = 0;

  constructor(
    private readonly builders: Record<Lane, FrameBuilder>,
    /** Finishes the builder's bytes and hands them to the disk (see `GroupWrite`). */
    private readonly write: (lane: Lane, builder: FrameBuilder, group: G) => GroupWrite,
    /** Told once, when a write fails and the feed stops acknowledging. */
    private readonly onFatal: (error: StreamStackError) => void,
    private readonly newGroup: (inFlight: readonly EarlierGroup<G>[]) => G,
    /** Groups of one lane in flight at once (`groupsInFlightMax`; more for a replicated feed). */
    private readonly inFlightMax = groupsInFlightMax,
  ) {}

  /** The fatal error, once a write has failed. */
  get failed(): StreamStackError | undefined {
    return this.failure;
  }

  submit<T>(lane: Lane, prepare: Prepare<T, G>): Promise<T> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.refusal) return Promise.reject(this.refusal);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({
        lane,
        prepare: prepare as Prepare<unknown, G>,
        resolve: resolve as (value: unknown) => void,
        reject,
      });
      if (!this.running) void this.pump();
    });
  }

  get stats(): GroupCommitStats {
    return {
      groups: this.groupsWritten,
      requests: this.requestsWritten,
      pipelined: this.groupsPipelined,
      inFlight: this.inFlight.length,
    };
  }

  /** Refuses every request submitted from now on with `error` (the feed is closing). */
  refuse(error: StreamStackError): void {
    this.refusal = error;
  }

  /** Resolves once every request submitted so far has settled. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.drained.push(resolve));
  }

  /**
   * Resolves once the groups in flight now have settled (not the requests queued behind them):
   * a lease takeover waits for it, so that once it is granted no write of the old lease is
   * still to be acknowledged.
   */
  async inFlightSettled(): Promise<void> {
    await Promise.all(this.inFlight.map((group) => group.settled));
  }

  private isIdle(): boolean {
    return !this.running && this.queue.length === 0 && this.inFlight.length === 0;
  }

  private notifyIfIdle(): void {
    if (this.isIdle()) for (const resolve of this.drained.splice(0)) resolve();
  }

  private async pump(): Promise<void> {
    this.running = true;
    while (this.queue.length > 0) {
      const lane = this.queue[0].lane;
      const last = this.inFlight[this.inFlight.length - 1];
      if (last && (last.lane !== lane || !last.placed || this.inFlight.length >= this.inFlightMax)) {
        // Lanes are different logs, and a request may depend on the other lane's effects once
        // they are published (a seal reads the appends before it back from the WAL).
        await this.inFlight[0].settled;
        continue;
      }
      let count = 1;
      while (count < this.queue.length && this.queue[count].lane === lane) count++;
      await this.prepareGroup(lane, this.queue.splice(0, count));
    }
    this.running = false;
    this.notifyIfIdle();
  }

  /** Prepares one group's requests, and hands the group to the disk unless none was accepted. */
  private async prepareGroup(lane: Lane, group: Request<G>[]): Promise<void> {
    const builder = this.builders[lane];
    builder.clear();
    const scratch = this.newGroup(this.inFlight.map(({ scratch, settled }) => ({ scratch, settled })));
    const prepared: { request: Request<G>; finish: (location: GroupLocation) => unknown }[] = [];
    for (const [index, request] of group.entries()) {
      if (this.failure) {
        request.reject(this.failure);
        continue;
      }
      const mark = builder.mark();
      try {
        prepared.push({ request, finish: await request.prepare(builder, scratch) });
      } catch (error) {
        builder.rollback(mark);
        if (error instanceof GroupFull && prepared.length > 0) {
          this.queue.unshift(...group.slice(index));
          break;
        }
        request.reject(error);
      }
    }
    if (prepared.length === 0) return;
    if (this.failure) {
      for (const { request } of prepared) request.reject(this.failure);
      return;
    }
    let written: GroupWrite;
    try {
      written = this.write(lane, builder, scratch);
    } catch (error) {
      written = { placed: false, durable: Promise.reject(error) };
    }
    this.groupsWritten++;
    this.requestsWritten += prepared.length;
    if (this.inFlight.length > 0) this.groupsPipelined++;
    const previous = this.inFlight[this.inFlight.length - 1]?.settled;
    const entry: InFlight<G> = {
      lane,
      placed: written.placed,
      scratch,
      settled: this.acknowledge(written.durable, previous, prepared),
    };
    this.inFlight.push(entry);
    void entry.settled.then(() => {
      this.inFlight.splice(this.inFlight.indexOf(entry), 1);
      this.notifyIfIdle();
    });
  }

  /**
   * Acknowledges a group once it is durable and every group before it is settled: its requests
   * are finished in the same turn of the event loop, in order, so no caller sees part of a group
   * published. If this write or any before it failed, every request is refused instead.
   */
  private async acknowledge(
    durable: Promise<GroupLocation>,
    previous: Promise<void> | undefined,
    prepared: readonly { request: Request<G>; finish: (location: GroupLocation) => unknown }[],
  ): Promise<void> {
    let location: GroupLocation | undefined;
    let failed: unknown;
    try {
      location = await durable;
    } catch (error) {
      failed = error;
    }
    await previous;
    if (failed !== undefined && !this.failure) this.fail(failed);
    if (this.failure || location === undefined) {
      for (const { request } of prepared) request.reject(this.failure);
      return;
    }
    for (const { request, finish } of prepared) {
      try {
        request.resolve(finish(location));
      } catch (error) {
        request.reject(error);
      }
    }
  }

  private fail(error: unknown): void {
    // A fenced replicated feed says so: its slot was taken by a newer writer, not a disk failure.
    this.failure =
      error instanceof StreamStackError && (error.code === 'IO' || error.code === 'FENCED')
        ? error
        : new StreamStackError(
            'IO',
            `a durable write failed: ${error instanceof Error ? error.message : String(error)}`,
            {
              cause: error,
            },
          );
    for (const request of this.queue.splice(0)) request.reject(this.failure);
    this.onFatal(this.failure);
  }
}
