/**
 * The history's sealed segments as their derived files (index files, key and fingerprint
 * dictionaries) see them: each one's range, readable commits and source fingerprint, whether
 * corruption took records of it, and why a derived file is not the file of its segment.
 *
 * @example
 * const { sealed, active } = segmentsOf(history);
 * const why = derivedMismatch(head, sealed[0]); // undefined: the file is the segment's
 */
import type { CommitRecord } from '../../storage/commit-record.js';
import type { History } from '../../storage/history-log.js';

/**
 * True when corruption took records of the segment at `base` (up to `nextBase`): inside it (a
 * gap between its readable commits) or at its end (lost commits before the next segment). Its
 * derived files are then built in memory only: written, they would be wrong once repaired.
 */
export function damagedSegment(
  lost: readonly CommitRecord[],
  inSegment: readonly CommitRecord[],
  base: number,
  nextBase: number,
): boolean {
  if (inSegment.some((commit, at) => commit.firstPosition !== (at === 0 ? base : inSegment[at - 1].lastPosition + 1)))
    return true;
  return lost.some((commit) => commit.records > 0 && commit.firstPosition < nextBase && commit.lastPosition >= base);
}

/** A sealed history segment as its derived files see it: its readable commits and its range. */
export interface SealedSegment {
  readonly base: number;
  /** Records it covers: its last readable position − base + 1. */
  readonly count: number;
  /** Its readable commits (read from its summary when it has one: only a rebuild needs them). */
  readonly commits: () => readonly CommitRecord[];
  /** Corruption took records of it (see `damagedSegment`). */
  readonly gaps: boolean;
  /** Its source fingerprint (`History.sourceOf`), which its derived files must carry. */
  readonly source: () => number;
}

/**
 * A function that gives segment `base`'s source fingerprint when called: made here, apart from
 * the caller's scope, for the reason `segmentCommits` is.
 */
export function segmentSourceOf(history: History, base: number): () => number {
  return () => history.sourceOf(base);
}

/**
 * Why a derived file whose head says it covers `count` records from `base`, built from the
 * segment whose fingerprint is `source`, is not the file of `segment`; undefined when it is.
 */
export function derivedMismatch(
  head: { base: number; count: number; source: number },
  segment: { base: number; count: number; source: () => number },
): string | undefined {
  if (head.base !== segment.base || head.count !== segment.count)
    return `it covers ${head.count} records from ${head.base}, the segment ${segment.count} from ${segment.base}`;
  const source = segment.source();
  if (head.source !== source)
    return `it was built from another segment (source fingerprint ${head.source}, the segment's ${source})`;
  return undefined;
}

/**
 * A function that reads segment `base`'s commits when called. It is made here, apart from the
 * caller's scope, because a closure keeps its whole enclosing scope alive: one made where a
 * segment's tail index is in scope would hold that index for the life of the feed.
 */
export function segmentCommits(history: History, base: number): () => CommitRecord[] {
  return () => history.commits.commitsInSegment(base);
}

/** The history's segments, sealed ones described, and the active segment's (its commits read when asked for). */
export function segmentsOf(history: History): {
  sealed: SealedSegment[];
  active?: { base: number; commits: () => CommitRecord[] };
} {
  const list = history.commits;
  const bases = history.segments.segments.map((segment) => segment.header.base);
  const extents = new Map(list.segments().map((extent) => [extent.segment, extent]));
  const sealed = bases.slice(0, -1).map((base, at): SealedSegment => {
    const extent = extents.get(base);
    const count = extent ? extent.lastPosition - base + 1 : 0;
    // A summary's commits follow each other, so only lost commits can leave gaps in it.
    if (!extent || extent.summarized) {
      return {
        base,
        count,
        commits: () => list.commitsInSegment(base),
        gaps: damagedSegment(list.lost, [], base, bases[at + 1]),
        source: segmentSourceOf(history, base),
      };
    }
    // Held commits are checked for gaps now and read again when needed: a slot must not keep
    // a segment's commits as objects for the life of the feed.
    const gaps = damagedSegment(list.lost, list.commitsInSegment(base), base, bases[at + 1]);
    return { base, count, commits: () => list.commitsInSegment(base), gaps, source: segmentSourceOf(history, base) };
  });
  const activeBase = bases[bases.length - 1];
  return {
    sealed,
    ...(activeBase === undefined
      ? {}
      : { active: { base: activeBase, commits: () => list.commitsInSegment(activeBase) } }),
  };
}

/**
 * Why a derived file built after the open (a fork's cut segment's: see `FeedIndex.open`; a
 * dictionary of a segment a takeover wrote back from its slots) was built, as the feed's index
 * rebuilds report it.
 */
export const deferredReason = 'missing: built after the open (a fork cut its segment, or a takeover wrote it back)';
