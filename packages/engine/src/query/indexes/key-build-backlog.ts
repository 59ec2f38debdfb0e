/**
 * The bound on the keys a key index holds in memory for sealed segments whose dictionaries are
 * not built yet. A segment's key occurrences stay in memory from its seal until its dictionary
 * lands (`KeyIndex`), and the builds run one at a time in the background: a bulk load seals
 * segments faster than they are built, and unbounded, the held keys grew with the input (about
 * 130 bytes a record for the key and fingerprint indexes together, hundreds of megabytes over a
 * load of millions of records, let go only seconds after it ended).
 *
 * So a writer waits for `roomInBacklog()` before it writes more, as it does for the publish
 * indexer's backlog (`publish-indexer.ts`): the keys held for builds never pass
 * `keyBuildBacklogKeysMax` by more than the segments sealed meanwhile. A build that fails lets
 * its keys go from the count (they stay held for good, answering lookups, and no build will
 * ever take them): the writers waiting on it are released, never left to hang.
 */
import { keyBuildBacklogKeysMax } from '../../limits.js';

export class KeyBuildBacklog {
  /** Key occurrences held by sealed segments whose dictionary builds are queued or under way. */
  private held = 0;
  /** Writers waiting for the held keys to fall to the bound, first come first served. */
  private waiting: (() => void)[] = [];

  constructor(
    /** Key occurrences held at most before writers wait (`roomInBacklog`). */
    private readonly heldMax = keyBuildBacklogKeysMax,
  ) {}

  /** Key occurrences held for builds now (for tests and memory accounting). */
  get keys(): number {
    return this.held;
  }

  /** Writers waiting now (for tests). */
  get writersWaiting(): number {
    return this.waiting.length;
  }

  /** A sealed segment's `keys` occurrences are held until its dictionary's build settles. */
  hold(keys: number): void {
    this.held += keys;
  }

  /**
   * The build of a segment that held `keys` is over, built or failed: either way nothing will
   * drain those keys any more, so they leave the count and writers may go.
   */
  settle(keys: number): void {
    this.held -= keys;
    if (this.held > this.heldMax) return;
    for (const resolve of this.waiting.splice(0)) resolve();
  }

  /**
   * Undefined when the held keys are within their bound and nobody waits; else a promise that
   * resolves, in the order asked, once they are. Every held key belongs to a queued build that
   * settles (`settle` runs whether it succeeds or fails), so the wait always ends.
   */
  roomInBacklog(): Promise<void> | undefined {
    if (this.held <= this.heldMax && this.waiting.length === 0) return undefined;
    return new Promise((resolve) => this.waiting.push(resolve));
  }
}
