/**
 * The condition checker's high-water map of tags: bounded, and never below a tag's highest
 * position (a condition it settles must never miss a match), exact for the tags raised lately.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HighWater } from '../../packages/engine/src/coordinator/writing/conditions.js';

/** A small bound, so that a run of a few thousand raises drops many generations. */
const entriesMax = 64;

describe('HighWater', () => {
  it('bounds its names and answers an upper bound of each name, exact for names raised lately', () => {
    let generationsDropped = 0;
    let answeredFromFloor = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1_000 }),
        // Up to 3,000 raises over pools of 10 to 400 names: pools under half the bound never
        // drop a generation, larger ones drop dozens.
        fc.integer({ min: 10, max: 400 }).chain((pool) =>
          fc.array(fc.tuple(fc.integer({ min: 0, max: pool - 1 }), fc.integer({ min: 0, max: 3 })), {
            minLength: 1,
            maxLength: 3_000,
            size: 'max',
          }),
        ),
        (floor, raises) => {
          const map = new HighWater(floor, entriesMax);
          const highest = new Map<string, number>();
          /** Distinct names in the order they were last raised, newest last. */
          const recent: string[] = [];
          let position = floor;
          let sizeBefore = 0;
          for (const [name, step] of raises) {
            position += step;
            const tag = `t${name}`;
            map.raise(tag, position);
            highest.set(tag, position);
            const at = recent.indexOf(tag);
            if (at >= 0) recent.splice(at, 1);
            recent.push(tag);
            if (map.size < sizeBefore) generationsDropped++;
            sizeBefore = map.size;
            expect(map.size).toBeLessThanOrEqual(entriesMax);
          }
          for (const [tag, top] of highest) {
            const bound = map.upperBound(tag);
            expect(bound).toBeGreaterThanOrEqual(top);
            if (bound !== top) answeredFromFloor++;
          }
          // The names raised last, up to half the bound, are remembered exactly.
          for (const tag of recent.slice(-entriesMax / 2)) expect(map.upperBound(tag)).toBe(highest.get(tag));
          // A name never raised is at or below the floor, which is at most the last position.
          expect(map.upperBound('never')).toBeGreaterThanOrEqual(floor);
          expect(map.upperBound('never')).toBeLessThanOrEqual(position);
        },
      ),
      { numRuns: 200 },
    );
    // Both branches were reached: generations were dropped, and forgotten names answered by the floor.
    expect(generationsDropped).toBeGreaterThan(100);
    expect(answeredFromFloor).toBeGreaterThan(100);
  });
});
