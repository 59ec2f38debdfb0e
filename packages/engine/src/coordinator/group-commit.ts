/**
 * Group commit: requests queue while a write is in flight, and the next write takes them all —
 * many requests, one write, one fdatasync. Requests go to one of two lanes (the WAL, or the
 * history); consecutive requests of the same lane share a group, and groups run one at a time,
 * in arrival order, so every request sees the effects of every request before it.
 *
 * Each request lays its frames into the group's builder in `prepare`, checking its preconditions
 * against the state left by the requests before it, and returns a `finish` that runs once the
 * group is durable. A request whose preconditions fail is rolled out of the builder and rejected
 * alone. A failed write is fatal for the feed: after it, nothing is acknowledged again.
 */
import { StreamStackError } from '../errors.js';
import type { FrameBuilder } from '../storage/framing.js';

export type Lane = 'wal' | 'history';

/** Where a group landed: the segment (by base) and the offset of its first byte. */
export interface GroupLocation {
  readonly segment: number;
  readonly offset: number;
}

/**
 * Lays a request into the group: `group` is scratch state shared by the requests of one group
 * (what earlier requests staged), made fresh for every group.
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

export class GroupCommitter<G> {
  private readonly queue: Request<G>[] = [];
  private running = false;
  private failure: StreamStackError | undefined;
  /** Resolves when the queue next drains (for close). */
  private drained: (() => void)[] = [];

  constructor(
    private readonly builders: Record<Lane, FrameBuilder>,
    private readonly write: (lane: Lane, builder: FrameBuilder) => Promise<GroupLocation>,
    /** Told once, when a write fails and the feed stops acknowledging. */
    private readonly onFatal: (error: StreamStackError) => void,
    private readonly newGroup: () => G,
  ) {}

  /** The fatal error, once a write has failed. */
  get failed(): StreamStackError | undefined {
    return this.failure;
  }

  submit<T>(lane: Lane, prepare: Prepare<T, G>): Promise<T> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.refusal) return Promise.reject(this.refusal);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ lane, prepare: prepare as Prepare<unknown, G>, resolve: resolve as (value: unknown) => void, reject });
      if (!this.running) void this.pump();
    });
  }

  /** Refuses every request submitted from now on with `error` (the feed is closing). */
  refuse(error: StreamStackError): void {
    this.refusal = error;
  }

  private refusal: StreamStackError | undefined;

  /** Resolves once every request submitted so far has settled. */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.drained.push(resolve));
  }

  private async pump(): Promise<void> {
    this.running = true;
    while (this.queue.length > 0) {
      const lane = this.queue[0].lane;
      let count = 1;
      while (count < this.queue.length && this.queue[count].lane === lane) count++;
      await this.runGroup(lane, this.queue.splice(0, count));
    }
    this.running = false;
    for (const resolve of this.drained.splice(0)) resolve();
  }

  private async runGroup(lane: Lane, group: Request<G>[]): Promise<void> {
    const builder = this.builders[lane];
    builder.clear();
    const scratch = this.newGroup();
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
    let location: GroupLocation;
    try {
      location = await this.write(lane, builder);
    } catch (error) {
      this.fail(error);
      for (const { request } of prepared) request.reject(this.failure);
      return;
    }
    // Every request of the group is finished in the same turn of the event loop, in order, so
    // no caller sees part of a group published.
    for (const { request, finish } of prepared) {
      try {
        request.resolve(finish(location));
      } catch (error) {
        request.reject(error);
      }
    }
  }

  private fail(error: unknown): void {
    this.failure =
      error instanceof StreamStackError && error.code === 'IO'
        ? error
        : new StreamStackError('IO', `a durable write failed: ${error instanceof Error ? error.message : String(error)}`, {
            cause: error,
          });
    for (const request of this.queue.splice(0)) request.reject(this.failure);
    this.onFatal(this.failure);
  }
}
