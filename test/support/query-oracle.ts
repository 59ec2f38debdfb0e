/**
 * The query semantics written out naively (DCB: an item matches a record of any of its types
 * that carries all of its tags), as the oracle the index and condition tests check against.
 */
import type { QueryItem } from '../../packages/engine/src/index.js';

export function itemMatches(item: QueryItem, record: { type?: string; tags: readonly string[] }): boolean {
  const typeOk =
    !item.types || item.types.length === 0 || (record.type !== undefined && item.types.includes(record.type));
  const tagsOk = !item.tags || item.tags.every((tag) => record.tags.includes(tag));
  return typeOk && tagsOk;
}
