/**
 * Queries and the planner (docs/architecture.md, Reading). A query is an OR of items; an item matches a record whose
 * type is any of its `types` (when given) and that carries all of its `tags` (when given); a
 * query with no items matches every record (the DCB specification's meaning). For each segment
 * the range touches, the planner compares an estimate of the result — exact posting lengths from
 * the term dictionary — with the width of the range, and takes the index or a scan of the log.
 * Both return the same positions; the estimate only decides which is faster.
 */

// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { Plan, Query, QueryItem } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { queryItemsMax, scanEntryCostPostings } from '../../limits.js';
import { type CommitRecord, entryPosition } from '../../storage/commit-record.js';
import type { ManifestEntry } from '../../storage/records.js';
import type { FeedIndex, SegmentIndex } from '../indexes/feed-index.js';
import { QueryTerms } from '../indexes/segment-terms.js';
import { assertIntact, type Snapshot } from './snapshot.js';

export type { Plan, Query, QueryItem };

export interface FindOptions {
  readonly plan?: Plan;
  /** Stop after this many positions. */
  readonly limit?: number;
  /** The last position to look at (default: the snapshot's watermark). */
  readonly until?: number;
}

/** Checks a query's shape; returns undefined for "matches everything". */
export function normalizeQuery(input: unknown): Query | undefined {
  if (input === undefined || input === null) return undefined;
  if (typeof input !== 'object') throw new StreamStackError('INVALID_ARGUMENT', 'a query is an object');
  const raw = input as { items?: unknown; types?: unknown; tags?: unknown };
  const items = raw.items === undefined ? [raw] : raw.items;
  if (!Array.isArray(items) || items.length > queryItemsMax) {
    throw new StreamStackError('INVALID_ARGUMENT', `a query has an array of at most ${queryItemsMax} items`);
  }
  const checked = items.map((item: unknown) => {
    const { types, tags } = (item ?? {}) as { types?: unknown; tags?: unknown };
    for (const [name, list] of [
      ['types', types],
      ['tags', tags],
    ] as const) {
      if (
        list !== undefined &&
        (!Array.isArray(list) || !list.every((value) => typeof value === 'string' && value.length > 0))
      ) {
        throw new StreamStackError('INVALID_ARGUMENT', `a query item's ${name} is an array of non-empty strings`);
      }
    }
    return {
      ...(Array.isArray(types) && types.length > 0 ? { types: types as string[] } : {}),
      ...(Array.isArray(tags) && tags.length > 0 ? { tags: tags as string[] } : {}),
    };
  });
  // A single empty item, or an empty list, matches everything: no filtering at all.
  if (checked.length === 0 || checked.some((item) => !item.types && !item.tags)) return undefined;
  return { items: checked };
}

/** True when a record matches the query (the scan path's test, and the oracle's). */
export function matches(query: Query | undefined, record: { type?: string; tags: readonly string[] }): boolean {
  if (!query) return true;
  return query.items.some(
    (item) =>
      (!item.types || (record.type !== undefined && item.types.includes(record.type))) &&
      (!item.tags || item.tags.every((tag) => record.tags.includes(tag))),
  );
}

/**
 * `matches` for one query over many records, made once: items with tags are found through the
 * record's own tags (an item can match only a record carrying its first tag), the rest by type.
 * A condition of a hundred items tested against each record of a seal would otherwise walk all
 * hundred items per record.
 */
export function queryMatcher(
  query: Query | undefined,
): (record: { type?: string; tags: readonly string[] }) => boolean {
  if (!query) return () => true;
  const byFirstTag = new Map<string, QueryItem[]>();
  const byTypeOnly: QueryItem[] = [];
  for (const item of query.items) {
    if (!item.tags) {
      byTypeOnly.push(item);
      continue;
    }
    const listed = byFirstTag.get(item.tags[0]);
    if (listed) listed.push(item);
    else byFirstTag.set(item.tags[0], [item]);
  }
  const typeOnly = byTypeOnly.length > 0 ? { items: byTypeOnly } : undefined;
  return (record) => {
    if (typeOnly && matches(typeOnly, record)) return true;
    for (const tag of record.tags) {
      const items = byFirstTag.get(tag);
      if (items && matches({ items }, record)) return true;
    }
    return false;
  };
}

/**
 * The commits holding positions in [from, to], in order, read as they are reached: the first is
 * found by binary search on last positions (commits without records are skipped).
 */
export function* commitsInRange(snapshot: Snapshot, from: number, to: number): Generator<CommitRecord> {
  const head = snapshot.watermark.commit;
  for (let at = snapshot.commits.firstEndingAtOrAfter(from, head); at <= head; at++) {
    const commit = snapshot.commits.at(at);
    if (commit.firstPosition > to) return;
    if (commit.records > 0) yield commit;
  }
}

/** The commit holding `position`, if a published commit does. */
export function commitHolding(snapshot: Snapshot, position: number): CommitRecord | undefined {
  for (const commit of commitsInRange(snapshot, position, position)) return commit;
  return undefined;
}

/**
 * The planner's choice for one segment's range of `width` records: the path that does less work
 * finding the positions. The index path's work is every posting list an item intersects, read
 * whole (`tagCount`), or one pass over the range of the type column; the scan's is every manifest
 * entry of the range, each worth `scanEntryCostPostings` of those.
 */
export function autoPlan(query: Query, tagCount: (tag: string) => number, width: number): 'index' | 'scan' {
  let indexCost = 0;
  for (const item of query.items)
    indexCost += item.tags ? item.tags.reduce((sum, tag) => sum + tagCount(tag), 0) : width;
  return indexCost <= width * scanEntryCostPostings ? 'index' : 'scan';
}

function indexPath(kernels: Kernels, segment: SegmentIndex, query: Query, low: number, high: number): Uint32Array {
  let result: Uint32Array | undefined;
  for (const item of query.items) {
    let positions: Uint32Array;
    const ids = item.types
      ? new Set(item.types.map((type) => segment.typeId(type)).filter((id) => id !== undefined))
      : undefined;
    const column = segment.typeColumn;
    if (item.tags) {
      // Tags by posting lists, smallest first so every intersection is as cheap as it can be.
      const lists = item.tags.map((tag) => segment.tagPositions(tag)).sort((a, b) => a.length - b.length);
      positions = lists[0];
      for (let index = 1; index < lists.length && positions.length > 0; index++)
        positions = kernels.intersect(positions, lists[index]);
      if (ids) positions = positions.filter((relative) => ids.has(column[relative]));
    } else {
      // Types by the dense column: one sequential pass over the range.
      const found = new Uint32Array(high - low);
      let count = 0;
      if (ids && ids.size > 0) {
        for (let relative = low; relative < high; relative++) if (ids.has(column[relative])) found[count++] = relative;
      }
      positions = found.subarray(0, count);
    }
    let first = 0;
    while (first < positions.length && positions[first] < low) first++;
    let last = positions.length;
    while (last > first && positions[last - 1] >= high) last--;
    positions = positions.subarray(first, last);
    result = result ? kernels.union(result, positions) : positions;
  }
  return result ?? new Uint32Array(0);
}

async function scanPath(snapshot: Snapshot, query: Query, from: number, to: number, limit: number): Promise<number[]> {
  const out: number[] = [];
  for (const commit of commitsInRange(snapshot, from, to)) {
    const run = await snapshot.history.runs.readRun(commit);
    run.entries.forEach((entry: ManifestEntry, index) => {
      const position = entryPosition(commit, index, entry.seq);
      if (position >= from && position <= to && out.length < limit && matches(query, entry)) out.push(position);
    });
    if (out.length >= limit) break;
  }
  return out;
}

/**
 * The positions after `after` (up to the snapshot's watermark) that match `query`, ascending.
 * Segments wholly at or before `after` are skipped by their base alone, and those where no item
 * of the query can match by their types and tag filters (unloaded sealed ones too); in the rest,
 * only the items that may match are looked up. A condition of a hundred fresh tags is one pass
 * over the filters.
 */
export async function findPositions(
  kernels: Kernels,
  snapshot: Snapshot,
  index: FeedIndex,
  query: Query,
  after: number,
  options: FindOptions = {},
): Promise<number[]> {
  const until = Math.min(options.until ?? snapshot.watermark.position, snapshot.watermark.position);
  // An index knows nothing of records corruption took: an answer over them could be wrong.
  assertIntact(snapshot, after + 1, until, until === snapshot.watermark.position);
  let limit = options.limit ?? Number.POSITIVE_INFINITY;
  const out: number[] = [];
  // A scan asked for stays the index's independent check: no filter decides what it reads.
  const filtered = options.plan !== 'scan';
  const terms = filtered ? new QueryTerms(query.items) : undefined;
  for (const segment of await index.segmentsFor(after + 1, until, terms)) {
    if (limit <= 0) break;
    const from = Math.max(after + 1, segment.base);
    const to = Math.min(until, segment.base + segment.count - 1);
    if (from > to) continue;
    const items = terms ? terms.itemsMayMatchIn(segment) : query.items;
    if (items.length === 0) continue;
    const narrowed = items.length === query.items.length ? query : { items };
    const low = from - segment.base;
    const high = to - segment.base + 1;
    const width = high - low;
    let plan = options.plan ?? 'auto';
    if (plan === 'auto') plan = autoPlan(narrowed, (tag) => segment.tagCount(tag), width);
    const found =
      plan === 'index'
        ? Array.from(
            indexPath(kernels, segment, narrowed, low, high).subarray(0, Math.min(limit, 2 ** 32 - 1)),
            (relative) => segment.base + relative,
          )
        : await scanPath(snapshot, narrowed, from, to, limit);
    for (const position of found) {
      if (limit-- <= 0) break;
      out.push(position);
    }
  }
  return out;
}
