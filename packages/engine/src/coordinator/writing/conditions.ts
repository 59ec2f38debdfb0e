/**
 * Append conditions (docs/architecture.md, Conditions; the DCB model): "fail if any record matching this query lies
 * after position p". Checked in two arms, never with a false negative.
 *
 * - The staged arm settles conflicts with requests not yet published: those laid into the same
 *   group, and those of the groups in flight before it (group commits are pipelined). None of
 *   them can be seen in the published history yet, so each accepted request stages its records.
 *   A later request of the same group whose query matches a staged record is refused with
 *   `SAME_BATCH` (advisory and retryable: its retry goes to a later group). One whose query
 *   matches a record of a group in flight waits for that group to settle, and the durable arm
 *   decides (the feed writer does the waiting).
 *   Staged records all count as after the condition's position, so the arm never lets a
 *   conflict through; a staged tag and type set rule most queries out without a record walk.
 * - The durable arm checks everything published. A bounded map of the highest position per tag
 *   settles most items with no I/O; what it cannot settle goes to an index existence check that
 *   stops at the first match. `CONDITION_FAILED` names that position.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { AppendCondition } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { tagHighWaterEntriesMax } from '../../limits.js';
import type { FeedIndex } from '../../query/indexes/feed-index.js';
import {
  findPositions,
  normalizeQuery,
  type Query,
  type QueryItem,
  queryMatcher,
} from '../../query/reading/planner.js';
import type { Snapshot } from '../../query/reading/snapshot.js';

export type { AppendCondition };

/** A staged record as the staged arm sees it. */
type StagedRecord = { readonly type?: string; readonly tags: readonly string[] };

/**
 * What the requests of one group commit have staged so far. Their tags and types are gathered
 * into sets only when a conditional request asks: a seal of 100,000 records would otherwise
 * spend a set insertion on each tag that no condition ever looks at.
 */
export interface StagedGroup {
  records: number;
  readonly batches: (readonly StagedRecord[])[];
  /** The tags and types of the first `folded` batches. */
  readonly tags: Set<string>;
  readonly types: Set<string>;
  folded: number;
}

export function newStagedGroup(): StagedGroup {
  return { records: 0, batches: [], tags: new Set(), types: new Set(), folded: 0 };
}

/** Folds the batches staged since the last call into the group's tag and type sets. */
function foldStaged(staged: StagedGroup): void {
  for (; staged.folded < staged.batches.length; staged.folded++) {
    for (const record of staged.batches[staged.folded]) {
      for (const tag of record.tags) staged.tags.add(tag);
      if (record.type !== undefined) staged.types.add(record.type);
    }
  }
}

/**
 * Whether a staged record may match `item`: the sets rule an item out when one of its tags, or
 * every one of its types, was never staged; only then are the records walked.
 */
function itemMayMatch(item: QueryItem, staged: StagedGroup): boolean {
  if (item.tags && !item.tags.every((tag) => staged.tags.has(tag))) return false;
  if (item.types && !item.types.some((type) => staged.types.has(type))) return false;
  return true;
}

export function validateCondition(
  condition: AppendCondition | undefined,
): { query: Query | undefined; after: number } | undefined {
  if (condition === undefined) return undefined;
  if (typeof condition !== 'object' || condition === null || !('failIfMatch' in condition)) {
    throw new StreamStackError('INVALID_ARGUMENT', 'a condition is { failIfMatch: query, after?: position }');
  }
  const after = condition.after ?? 0;
  if (!Number.isSafeInteger(after) || after < 0)
    throw new StreamStackError('INVALID_ARGUMENT', "a condition's after is a position (a non-negative integer)");
  return { query: normalizeQuery(condition.failIfMatch), after };
}

/**
 * The highest position of each tag and type seen, bounded, in two generations of at most half
 * the bound each: raises go to the young one, and when it is full the old one is dropped whole,
 * the floor rising to the highest position raised into it (positions only grow, so that is the
 * position of its last raise). A name in neither has its highest position at or below the floor,
 * whether it was dropped or never seen, which this map does not know and need not: the floor is
 * an upper bound either way.
 *
 * Dropping a generation is one assignment. The map kept before, ordered by raise and cut in half
 * when full, copied 100,000 entries in one turn: a stall of 30 to 70 ms every few seals of
 * records with fresh tags.
 */
export class HighWater {
  private young = new Map<string, number>();
  private old = new Map<string, number>();
  /** The highest position raised into each generation. */
  private youngTop: number;
  private oldTop: number;
  private floor: number;

  constructor(
    floor: number,
    /** Names remembered at most, over both generations. */
    private readonly entriesMax = tagHighWaterEntriesMax,
  ) {
    this.floor = floor;
    this.youngTop = floor;
    this.oldTop = floor;
  }

  raise(name: string, position: number): void {
    if (this.young.size >= this.entriesMax / 2 && !this.young.has(name)) {
      this.floor = Math.max(this.floor, this.oldTop);
      this.old = this.young;
      this.oldTop = this.youngTop;
      this.young = new Map();
    }
    this.young.set(name, position);
    this.youngTop = Math.max(this.youngTop, position);
  }

  /** No record carrying `name` lies above this position. */
  upperBound(name: string): number {
    return this.young.get(name) ?? this.old.get(name) ?? this.floor;
  }

  /** Names remembered, in both generations (for tests). */
  get size(): number {
    return this.young.size + this.old.size;
  }
}

export class ConditionChecker {
  private readonly tags: HighWater;
  private readonly types: HighWater;

  /** `knownUpTo`: positions up to here were published before the maps started (unknown). */
  constructor(
    private readonly kernels: Kernels,
    knownUpTo: number,
  ) {
    this.tags = new HighWater(knownUpTo);
    this.types = new HighWater(knownUpTo);
  }

  /** Notes a published record. */
  note(position: number, type: string | undefined, tags: readonly string[]): void {
    for (const tag of tags) this.tags.raise(tag, position);
    if (type !== undefined) this.types.raise(type, position);
  }

  /** The staged arm: `SAME_BATCH` when a record staged in `staged` matches the query. */
  checkStaged(query: Query | undefined, staged: StagedGroup): void {
    if (this.stagedMatch(query, staged)) {
      throw new StreamStackError('SAME_BATCH', 'a request written with this one matches this condition; retry', {
        details: { retryable: true },
      });
    }
  }

  /** Whether a record staged in `staged` matches the query (none: every record does). */
  stagedMatch(query: Query | undefined, staged: StagedGroup): boolean {
    if (staged.records === 0) return false;
    if (query === undefined) return true;
    foldStaged(staged);
    const items = query.items.filter((item) => itemMayMatch(item, staged));
    const narrowed = { items };
    if (items.length === 0) return false;
    const matches = queryMatcher(narrowed);
    return staged.batches.some((batch) => batch.some(matches));
  }

  stage(staged: StagedGroup, records: readonly StagedRecord[]): void {
    staged.records += records.length;
    staged.batches.push(records);
  }

  /** The durable arm: `CONDITION_FAILED` with the first matching position after `after`. */
  async checkDurable(query: Query | undefined, after: number, snapshot: Snapshot, index: FeedIndex): Promise<void> {
    if (after >= snapshot.watermark.position) return;
    let open = query;
    if (query) {
      // Items the high-water maps rule out need no I/O: every record carrying all of an item's
      // tags (or one of its types) lies at or below the lowest of their upper bounds.
      const items = query.items.filter((item) => {
        const bound = item.tags
          ? Math.min(...item.tags.map((tag) => this.tags.upperBound(tag)))
          : Math.max(...item.types!.map((type) => this.types.upperBound(type)));
        return bound > after;
      });
      if (items.length === 0) return;
      open = { items };
    }
    const [first] = open ? await findPositions(this.kernels, snapshot, index, open, after, { limit: 1 }) : [after + 1];
    if (first !== undefined) {
      throw new StreamStackError(
        'CONDITION_FAILED',
        `a record matching the condition lies at position ${first}, after ${after}`,
        {
          details: { position: first, after },
        },
      );
    }
  }
}
