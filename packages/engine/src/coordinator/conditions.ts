/**
 * Append conditions (docs/architecture.md, Conditions; the DCB model): "fail if any record matching this query lies
 * after position p". Checked in two arms, never with a false negative.
 *
 * - The staged arm settles conflicts inside one group commit: requests laid into the same
 *   write cannot see each other in the published history, so each accepted request stages its
 *   tags, and a later request whose query shares any tag with them (or, having no tags, any
 *   staged record at all) is refused with `SAME_BATCH`. Conservative and tag-only on purpose:
 *   it may refuse what a precise check would allow, and the refusal is advisory and retryable.
 * - The durable arm checks everything published. A bounded map of the highest position per tag
 *   settles most items with no I/O; what it cannot settle goes to an index existence check that
 *   stops at the first match. `CONDITION_FAILED` names that position.
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { tagHighWaterEntriesMax } from '../limits.js';
import type { FeedIndex } from '../query/feed-index.js';
import { findPositions, normalizeQuery, type Query } from '../query/planner.js';
import type { Snapshot } from '../query/snapshot.js';

export interface AppendCondition {
  /** The query no record after `after` may match. */
  readonly failIfMatch: unknown;
  /** A position: only records after it count. 0 (the default) means the whole history. */
  readonly after?: number;
}

/**
 * What the requests of one group commit have staged so far. Their tags are gathered into a set
 * only when a conditional request asks: a seal of 100,000 records would otherwise spend a set
 * insertion on each tag that no condition ever looks at.
 */
export interface StagedGroup {
  records: number;
  readonly batches: (readonly { readonly tags: readonly string[] }[])[];
  /** The tags of the first `tagsFolded` batches. */
  readonly tags: Set<string>;
  tagsFolded: number;
}

export function newStagedGroup(): StagedGroup {
  return { records: 0, batches: [], tags: new Set(), tagsFolded: 0 };
}

/** Every tag staged in the group so far. */
function stagedTags(staged: StagedGroup): Set<string> {
  for (; staged.tagsFolded < staged.batches.length; staged.tagsFolded++) {
    for (const record of staged.batches[staged.tagsFolded]) for (const tag of record.tags) staged.tags.add(tag);
  }
  return staged.tags;
}

export function validateCondition(condition: AppendCondition | undefined): { query: Query | undefined; after: number } | undefined {
  if (condition === undefined) return undefined;
  if (typeof condition !== 'object' || condition === null || !('failIfMatch' in condition)) {
    throw new StreamStackError('INVALID_ARGUMENT', 'a condition is { failIfMatch: query, after?: position }');
  }
  const after = condition.after ?? 0;
  if (!Number.isSafeInteger(after) || after < 0) throw new StreamStackError('INVALID_ARGUMENT', 'a condition\'s after is a position (a non-negative integer)');
  return { query: normalizeQuery(condition.failIfMatch), after };
}

/**
 * The highest position of each tag and type seen, bounded. Entries are kept in the order they
 * were last raised, which is ascending by position (positions only grow), so the first entry is
 * always the lowest; past the bound it is evicted and the floor rises to it. A tag that is not in
 * the map has its highest position at or below the floor — whether it was evicted or never seen,
 * which this map does not know and need not: the floor is an upper bound either way.
 */
class HighWater {
  private highest = new Map<string, number>();
  private floor: number;

  constructor(floor: number) {
    this.floor = floor;
  }

  raise(name: string, position: number): void {
    this.highest.delete(name);
    this.highest.set(name, position);
    if (this.highest.size > tagHighWaterEntriesMax) this.evictOldestHalf();
  }

  /**
   * Drops the older half of the map and raises the floor to the highest position dropped.
   * Evicting one entry per raise instead walks, every time, the slots V8 leaves at the front of
   * a Map for deleted entries — quadratic over a seal of many new tags. Rebuilding the map once
   * per half a bound of raises keeps every raise O(1) amortized; the floor rises a little more,
   * which only sends a few more conditions to the index.
   */
  private evictOldestHalf(): void {
    const entries = [...this.highest];
    const dropped = entries.length - Math.floor(tagHighWaterEntriesMax / 2);
    this.floor = Math.max(this.floor, entries[dropped - 1][1]);
    this.highest = new Map(entries.slice(dropped));
  }

  /** No record carrying `name` lies above this position. */
  upperBound(name: string): number {
    return this.highest.get(name) ?? this.floor;
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

  /** The staged arm: `SAME_BATCH` when the query may conflict with what the group staged. */
  checkStaged(query: Query | undefined, staged: StagedGroup): void {
    if (staged.records === 0) return;
    const tags = query ? stagedTags(staged) : undefined;
    const conflict = !query || query.items.some((item) => (item.tags ? item.tags.some((tag) => tags!.has(tag)) : true));
    if (conflict) {
      throw new StreamStackError('SAME_BATCH', 'a request in the same group commit may match this condition; retry', {
        details: { retryable: true },
      });
    }
  }

  stage(staged: StagedGroup, records: readonly { tags: readonly string[] }[]): void {
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
    const [first] = open
      ? await findPositions(this.kernels, snapshot, index, open, after, { limit: 1 })
      : [after + 1];
    if (first !== undefined) {
      throw new StreamStackError('CONDITION_FAILED', `a record matching the condition lies at position ${first}, after ${after}`, {
        details: { position: first, after },
      });
    }
  }
}
