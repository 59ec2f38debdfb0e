/**
 * A follower's unsealed tail: the commits its writer made since the last segment it uploaded,
 * copied from the writer's HTTP server (`GET /v1/feeds/{feed}/history/tail`, a long poll) byte
 * for byte into the copy's tail segment, and taken by the feed's current view at once. A
 * follower thus reads a commit within a round trip of its seal, not once its segment is
 * uploaded. A segment the writer finished and has not uploaded yet comes the same way, its
 * `SegmentEnd` last; the copy then goes on in the next segment, which the view opens in place.
 * Only when the writer no longer has a segment whole (it evicted it: object storage has it) does
 * the follower wait for a sync. The tail always continues the history the copy has, so what it
 * reads stays a prefix of the writer's.
 *
 * @example
 * const tail = new FollowerTail('orders', { url: 'http://writer:7070', token }, mirror, feed, serial, onError);
 * await tail.start(); // has what the writer has now, and follows it; tail.stop() when the store closes
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { FollowerMirror } from '../coordinator/opening/follower-mirror.js';
import { StreamStackError } from '../errors.js';
import { followerTailBytesMax, followerTailRetryMs, followerTailWaitMs } from '../limits.js';
import type { Feed } from './feed.js';

/** Where a follower reads its writer's unsealed tail. */
export interface FollowOptions {
  /** The writer's `streamstack serve` address, e.g. `http://writer.internal:7070`. */
  readonly url: string;
  /** A token with read access to the feed, when the writer's server asks for one. */
  readonly token?: string;
}

/** Waits `ms`, or less when `signal` aborts. */
const pause = (ms: number, signal: AbortSignal): Promise<void> =>
  delay(ms, undefined, { signal }).catch(() => undefined);

/** Headers of a tail answer (`routes-history-tail.ts` on the server). */
export const tailHeaders = {
  base: 'streamstack-tail-base',
  from: 'streamstack-tail-from',
  end: 'streamstack-tail-end',
  /** Set when the bytes end with the segment's `SegmentEnd`: the next segment's base and first commit. */
  nextBase: 'streamstack-tail-next-base',
  nextCommit: 'streamstack-tail-next-commit',
} as const;

/** What the writer said of the tail a follower asked for. */
type TailAnswer =
  | {
      readonly kind: 'groups';
      readonly base: number;
      readonly from: number;
      readonly end: number;
      readonly bytes: Uint8Array;
      /** Where the history goes on, when the bytes end with the segment's `SegmentEnd`. */
      readonly next?: { readonly nextBase: number; readonly nextBaseCommit: number };
    }
  /** Its active segment is another (or none): the follower waits for object storage. */
  | { readonly kind: 'elsewhere' };

export class FollowerTail {
  private readonly stopping = new AbortController();
  private running: Promise<void> | undefined;
  /** Commits taken from the tail, and requests made, for `feed.info().follower`. */
  tailCommits = 0;
  tailRequests = 0;

  constructor(
    private readonly feed: string,
    private options: FollowOptions,
    private readonly mirror: FollowerMirror,
    private readonly target: () => Feed | undefined,
    /** Runs work on the copy one piece at a time (the object storage syncs share it). */
    private readonly serial: <T>(work: () => Promise<T>) => Promise<T>,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** The writer's server the tail is read from. */
  get url(): string {
    return this.options.url;
  }

  /**
   * Reads the tail from the server at `url` from the next request on: the feed's writer moved
   * there (a takeover), as its head hint in etcd says. The tail still continues the copy's
   * history, so what the follower reads stays a prefix of the new writer's.
   */
  pointAt(url: string): void {
    this.options = { ...this.options, url: new URL(url).href };
  }

  /** True when `url` names the server the tail is read from now. */
  readsFrom(url: string): boolean {
    return new URL(url).href === new URL(this.options.url).href;
  }

  /**
   * Takes what the writer has now (one request that does not wait, so a command run once reads
   * the tail too; a failure is noted, and the follower goes on with what object storage holds),
   * then keeps following it.
   */
  async start(): Promise<void> {
    if (this.running) return;
    const signal = this.stopping.signal;
    const first = (async () => {
      try {
        await this.step(0, signal);
      } catch (error) {
        if (!signal.aborted) this.onError(error);
      }
    })();
    this.running = first.then(() => this.loop());
    await first;
  }

  /** Stops asking, and resolves once the request under way is given up. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.running;
  }

  private async loop(): Promise<void> {
    const signal = this.stopping.signal;
    while (!signal.aborted) {
      try {
        if (!(await this.step(followerTailWaitMs, signal))) await pause(followerTailRetryMs, signal);
      } catch (error) {
        if (signal.aborted) break;
        this.onError(error);
        await pause(followerTailRetryMs, signal);
      }
    }
  }

  /**
   * Asks the writer once (waiting up to `waitMs` for a group) and takes what it sends; returns
   * false when there was nothing to ask for or the writer is ahead of object storage (then it is
   * worth pausing before the next step).
   */
  private async step(waitMs: number, signal: AbortSignal): Promise<boolean> {
    const feed = this.target();
    const wanted = this.mirror.tailWanted;
    if (!feed || !wanted) return false;
    const answer = await this.ask(wanted.base, wanted.from, waitMs, signal);
    if (answer.kind === 'elsewhere') {
      // Object storage is behind the writer: the next sync brings the segments between.
      await feed.refresh();
      return this.mirror.tailWanted?.base !== wanted.base;
    }
    if (answer.end === wanted.from) return true;
    const end = await this.serial(() => this.mirror.writeTail(answer));
    if (end === undefined) return true;
    // The view takes the groups in place; when it cannot (a file it holds was made anew, or it
    // opened while the copy moved on by more than a segment), a new view opens the copy as it
    // is now: the refresh is told to open one even though object storage did not change.
    const taken = await feed.catchUpTail(answer.base, end, wanted.from === 0);
    if (taken === undefined) {
      this.mirror.viewBehind();
      await feed.refresh();
    } else this.tailCommits += taken;
    return true;
  }

  /** One long poll of the writer for the tail from `from` of the segment based at `base`. */
  private async ask(base: number, from: number, waitMs: number, signal: AbortSignal): Promise<TailAnswer> {
    const url = new URL(`/v1/feeds/${encodeURIComponent(this.feed)}/history/tail`, this.options.url);
    url.search = new URLSearchParams({
      base: String(base),
      from: String(from),
      waitMs: String(waitMs),
      bytesMax: String(followerTailBytesMax),
    }).toString();
    this.tailRequests++;
    let response: Response;
    try {
      response = await fetch(url, {
        signal,
        headers: this.options.token ? { authorization: `Bearer ${this.options.token}` } : {},
      });
    } catch (error) {
      if (signal.aborted) throw error;
      throw new StreamStackError(
        'UNAVAILABLE',
        `the writer at ${this.options.url} cannot be reached: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
    if (response.status === 204) {
      await response.body?.cancel();
      return { kind: 'elsewhere' };
    }
    if (response.status !== 200) {
      const text = await response.text().catch(() => '');
      let code = 'UNAVAILABLE';
      let message = `the writer at ${this.options.url} answered ${response.status}`;
      try {
        const body = JSON.parse(text) as { error?: { code?: string; message?: string } };
        if (body.error?.code) code = body.error.code;
        if (body.error?.message) message = `the writer at ${this.options.url}: ${body.error.message}`;
      } catch {
        // Not one of the server's error bodies: the status says it.
      }
      throw new StreamStackError(code as StreamStackError['code'], message, { details: { status: response.status } });
    }
    const number = (name: string) => {
      const value = Number(response.headers.get(name));
      if (!Number.isSafeInteger(value) || value < 0)
        throw new StreamStackError('UNAVAILABLE', `the writer at ${this.options.url} sent a tail without ${name}`);
      return value;
    };
    const answer = { base: number(tailHeaders.base), from: number(tailHeaders.from), end: number(tailHeaders.end) };
    const next = response.headers.has(tailHeaders.nextBase)
      ? { nextBase: number(tailHeaders.nextBase), nextBaseCommit: number(tailHeaders.nextCommit) }
      : undefined;
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (answer.base !== base || answer.from !== from || bytes.length !== answer.end - answer.from)
      throw new StreamStackError('UNAVAILABLE', `the writer at ${this.options.url} sent another tail than asked`);
    return { kind: 'groups', ...answer, bytes, ...(next ? { next } : {}) };
  }
}
