/**
 * An open stream's record locations kept as columns (`WalLocations`): every location pushed is
 * given back as it was, across segments and growth, in the spans a read takes, and a slice from
 * a seq on is a copy that later pushes do not reach.
 */
import { describe, expect, it } from 'vitest';
import { type WalLocation, WalLocations } from '../../packages/engine/src/storage/wal-locations.js';

function pushed(count: number): { list: WalLocations; locations: WalLocation[] } {
  const list = new WalLocations();
  const locations: WalLocation[] = [];
  let segment = 1;
  let offset = 48;
  for (let index = 0; index < count; index++) {
    // A new segment every 70 records or so, with offsets starting over.
    if (index % 70 === 69) {
      segment += 5;
      offset = 48;
    }
    const location = { segment, dataStart: offset + 8, dataEnd: offset + 8 + 20 + (index % 7) };
    offset = location.dataEnd;
    list.push(location);
    locations.push(location);
  }
  return { list, locations };
}

describe('WalLocations', () => {
  it('gives back every location pushed, and the spans of one segment each', () => {
    const { list, locations } = pushed(300);
    expect(list.length).toBe(300);
    expect(Array.from({ length: 300 }, (_, index) => list.at(index))).toEqual(locations);
    const spans = [...list.spans()];
    expect(spans.map((span) => span.to - span.from).reduce((sum, length) => sum + length, 0)).toBe(300);
    for (const span of spans) {
      for (let index = span.from; index < span.to; index++) expect(locations[index].segment).toBe(span.segment);
    }
    expect(new Set(spans.map((span) => span.segment)).size).toBe(spans.length);
  });

  it('slices from a record on into a copy later pushes do not reach', () => {
    const { list, locations } = pushed(300);
    for (const from of [0, 1, 69, 70, 150, 299, 300, 400]) {
      const slice = list.slice(from);
      expect(Array.from({ length: slice.length }, (_, index) => slice.at(index))).toEqual(locations.slice(from));
      expect([...slice.spans()].reduce((sum, span) => sum + span.to - span.from, 0)).toBe(slice.length);
    }
    const slice = list.slice(290);
    list.push({ segment: 99, dataStart: 56, dataEnd: 70 });
    expect(slice.length).toBe(10);
    expect(list.at(300)).toEqual({ segment: 99, dataStart: 56, dataEnd: 70 });
  });
});
