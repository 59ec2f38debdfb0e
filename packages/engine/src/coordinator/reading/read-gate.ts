/**
 * The gate between reads of sealed history and a merge's switch-over. A read holds the commit
 * records, index segments and locators of the files it started on; a merge replaces several
 * sealed segments by one file laid out anew, where those offsets mean nothing. So each read
 * holds the gate while it reads, and a switch-over waits until no read holds it (new reads wait
 * the few milliseconds the switch takes). A switch that cannot get the gate in time — a reader
 * holding an iteration open for long — is put off, never forced: reads are never broken.
 */
import { assert } from '../../errors.js';

export class ReadGate {
  private readers = 0;
  /** Set while a switch waits for readers or runs: new readers wait for it. */
  private switching: Promise<void> | undefined;
  /** Called when the last reader leaves while a switch waits. */
  private drained: (() => void) | undefined;
  /** Called when the last reader leaves (see `whenIdle`). */
  private idleWaiters: (() => void)[] = [];

  /** Enters the gate (after any switch under way); the returned function leaves it, once. */
  async enter(): Promise<() => void> {
    while (this.switching) await this.switching;
    this.readers++;
    let left = false;
    return () => {
      assert(!left, 'a reader leaves the gate once');
      left = true;
      this.readers--;
      if (this.readers === 0) {
        this.drained?.();
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const waiter of waiters) waiter();
      }
    };
  }

  /**
   * Whether no switch-over waits or runs: a read that runs to its end in this turn may then go
   * without entering the gate, for no switch can run inside it.
   */
  get open(): boolean {
    return this.switching === undefined;
  }

  /** Resolves once no reader holds the gate (at once when none does): a follower's old view closes then. */
  whenIdle(): Promise<void> {
    if (this.readers === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Runs the reads of `body` inside the gate. */
  async hold<T>(body: () => Promise<T>): Promise<T> {
    const leave = await this.enter();
    try {
      return await body();
    } finally {
      leave();
    }
  }

  /** Yields what `items` yields, holding the gate from its first item to its end. */
  async *holdAll<T>(items: AsyncGenerator<T>): AsyncGenerator<T> {
    const leave = await this.enter();
    try {
      yield* items;
    } finally {
      leave();
    }
  }

  /**
   * Runs `change` once no reader holds the gate, keeping new readers out until it is done.
   * Returns false without running it when readers still hold the gate after `waitMs`.
   */
  async exclusive(change: () => Promise<void>, waitMs: number): Promise<boolean> {
    while (this.switching) await this.switching;
    let release!: () => void;
    this.switching = new Promise<void>((resolve) => (release = resolve));
    try {
      if (this.readers > 0) {
        const drained = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), waitMs);
          this.drained = () => {
            clearTimeout(timer);
            resolve(true);
          };
        });
        this.drained = undefined;
        if (!drained) return false;
      }
      await change();
      return true;
    } finally {
      this.switching = undefined;
      release();
    }
  }
}
