/**
 * `queryMatcher` answers as `matches` does, for any query and record: it only finds the items to
 * test through the record's tags first. Queries of 1 to 120 items (a condition of a hundred
 * fresh tags is the case it is for), each of 0 to 3 tags and 0 to 2 types from small alphabets so
 * that records often match; records of 0 to 4 tags.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { matches, normalizeQuery, queryMatcher } from '../../packages/engine/src/query/reading/planner.js';

const tag = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f');
const type = fc.constantFrom('x', 'y', 'z');
const item = fc.record(
  {
    tags: fc.uniqueArray(tag, { minLength: 0, maxLength: 3 }),
    types: fc.uniqueArray(type, { minLength: 0, maxLength: 2 }),
  },
  { requiredKeys: [] },
);
const record = fc.record(
  { tags: fc.uniqueArray(tag, { minLength: 0, maxLength: 4 }), type: fc.option(type, { nil: undefined }) },
  { requiredKeys: ['tags'] },
);

describe('queryMatcher', () => {
  it('matches exactly the records `matches` matches', () => {
    const reached = { matched: 0, missed: 0, typeOnlyItems: 0, everything: 0 };
    fc.assert(
      fc.property(
        fc.array(item, { minLength: 1, maxLength: 120 }),
        fc.array(record, { minLength: 1, maxLength: 20 }),
        (items, records) => {
          const query = normalizeQuery({ items });
          if (query === undefined) reached.everything++;
          else if (query.items.some((each) => !each.tags)) reached.typeOnlyItems++;
          const compiled = queryMatcher(query);
          for (const each of records) {
            const expected = matches(query, each);
            expect(compiled(each)).toBe(expected);
            reached[expected ? 'matched' : 'missed']++;
          }
        },
      ),
      { numRuns: 400 },
    );
    // Both answers, queries with type-only items, and queries that match everything were met.
    expect(reached.matched).toBeGreaterThan(100);
    expect(reached.missed).toBeGreaterThan(100);
    expect(reached.typeOnlyItems).toBeGreaterThan(10);
    expect(reached.everything).toBeGreaterThan(10);
  });
});
