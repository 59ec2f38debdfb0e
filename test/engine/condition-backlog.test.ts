/**
 * A condition does not wait for the derived indexes to fold in the records published just
 * before it: it looks at those records itself, and only a match among them waits, so the first
 * matching position is named from the indexes. Appends follow each other here as a producer's
 * do, each right after the last is acknowledged, while the indexes still lack it; every answer
 * is checked against a model of the feed's tags.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DerivedIndexes } from '../../packages/engine/src/coordinator/opening/derived-indexes.js';
import { StreamStackError } from '../../packages/engine/src/errors.js';
import { openStore, temporaryDirectory } from '../support/store.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Appends in the run, and tags in rotation among them. */
const appends = 300;
const tagsInRotation = 7;

describe('a condition over records the indexes have not folded in yet', () => {
  it('is answered from those records, and waits only when one of them matches', async () => {
    const answers = { matched: 0, clear: 0 };
    const unindexedMatch = DerivedIndexes.prototype.unindexedMatch;
    vi.spyOn(DerivedIndexes.prototype, 'unindexedMatch').mockImplementation(function (
      this: DerivedIndexes,
      ...args: Parameters<typeof unindexedMatch>
    ) {
      const found = unindexedMatch.apply(this, args);
      answers[found ? 'matched' : 'clear']++;
      return found;
    });
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    /** The model: each tag's positions. */
    const positions = new Map<string, number[]>();
    let head = 0;
    for (let n = 0; n < appends; n++) {
      const tag = `t${n % tagsInRotation}`;
      // Three kinds, in turn: a fresh tag (passes), the tag of the append just before this one
      // after its position - 1 (fails on it), and a rotating tag after a random earlier position.
      const asked =
        n % 3 === 0 ? `fresh-${n}` : n % 3 === 1 ? `t${(n - 1) % tagsInRotation}` : `t${(n * 5) % tagsInRotation}`;
      const after = n % 3 === 1 ? Math.max(0, head - 1) : Math.floor((head * ((n * 7919) % 100)) / 100);
      const expected = (positions.get(asked) ?? []).find((position) => position > after);
      const appended = feed.append([{ payload: `record ${n}`, tags: [tag] }], {
        condition: { failIfMatch: { tags: [asked] }, after },
      });
      if (expected === undefined) {
        const commit = await appended;
        head = commit.lastPosition;
        positions.set(tag, [...(positions.get(tag) ?? []), head]);
      } else {
        const error = await appended.then(
          () => undefined,
          (caught: unknown) => caught,
        );
        expect(error, `append ${n}: ${asked} after ${after}`).toBeInstanceOf(StreamStackError);
        expect((error as StreamStackError).code).toBe('CONDITION_FAILED');
        expect((error as StreamStackError).details.position, `append ${n}`).toBe(expected);
      }
    }
    // Both answers were reached: most conditions looked at unfolded records and found none,
    // and those on the record just before found it there and waited for the indexes.
    expect(answers.clear).toBeGreaterThan(appends / 3);
    expect(answers.matched).toBeGreaterThan(10);
    expect((await feed.info()).records).toBe(head);
    await store.close();
  });
});
