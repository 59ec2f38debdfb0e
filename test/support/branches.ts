/**
 * A tally of the branches a property-based test is meant to reach. A property whose inputs
 * never take a branch says nothing about it, and fast-check's default sizes make that easy to
 * miss (arrays of at most about ten elements), so each property names its branches up front,
 * counts them as its inputs take them, and asserts at the end that every one was reached. The
 * counts are printed, so a run shows how often each branch was exercised.
 */
import { expect } from 'vitest';

export interface BranchTally<Branch extends string> {
  /** Counts `branch` once (or not at all when `when` is false). */
  hit(branch: Branch, when?: boolean): void;
  /** The counts so far, in the order the branches were named. */
  readonly counts: Readonly<Record<Branch, number>>;
  /** Prints the counts and fails the test when any required branch was never reached. */
  expectAllReached(): void;
}

/**
 * A tally of `required` branches, each of which the property must reach, and of `rare` ones,
 * which are counted and printed but may stay at zero in a run (they are reachable, but too
 * seldom by random inputs to demand every time).
 */
export function branchTally<const Required extends string, const Rare extends string = never>(
  title: string,
  required: readonly Required[],
  rare: readonly Rare[] = [],
): BranchTally<Required | Rare> {
  type Branch = Required | Rare;
  const counts = Object.fromEntries([...required, ...rare].map((branch) => [branch, 0])) as Record<Branch, number>;
  return {
    counts,
    hit(branch, when = true) {
      if (!when) return;
      if (!(branch in counts)) throw new Error(`${title}: "${branch}" is not a named branch`);
      counts[branch]++;
    },
    expectAllReached() {
      console.log(`${title}: ${JSON.stringify(counts)}`);
      for (const branch of required) {
        expect(counts[branch], `${title}: the branch "${branch}" was never reached`).toBeGreaterThan(0);
      }
    },
  };
}
