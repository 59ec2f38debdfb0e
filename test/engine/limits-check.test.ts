/**
 * The bounds in `limits.ts` check their relations when the module loads (`limits-check.ts`):
 * the shipped set passes, and a set with any one relation broken is refused, naming it.
 */
import { describe, expect, it } from 'vitest';
import { isStreamStackError } from '../../packages/engine/src/index.js';
import * as limits from '../../packages/engine/src/limits.js';
import { checkLimits, type LimitValues } from '../../packages/engine/src/limits-check.js';

/** The message `checkLimits` refuses `values` with, or undefined when it accepts them. */
function refusal(values: LimitValues): string | undefined {
  try {
    checkLimits(values);
    return undefined;
  } catch (error) {
    expect(isStreamStackError(error) && error.code).toBe('INTERNAL');
    return (error as Error).message;
  }
}

describe('limits', () => {
  it('the shipped bounds pass their checks', () => {
    expect(refusal(limits)).toBeUndefined();
  });

  const broken: [string, Partial<LimitValues>, string][] = [
    ['a default segment below the minimum', { segmentBytesDefault: limits.segmentBytesMin / 2 }, 'segmentBytesDefault'],
    ['a first segment above the minimum', { segmentBytesFirst: limits.segmentBytesMin * 2 }, 'segmentBytesFirst'],
    ['segments past u32 offsets', { segmentBytesMax: 2 ** 32, mergedSegmentBytesMax: 2 ** 32 }, 'u32'],
    ['a merged segment larger than any segment', { mergedSegmentBytesMax: limits.segmentBytesMax * 2 }, 'merge'],
    [
      'a key bound no record of the smallest segment can hold',
      { keyBytesMax: limits.segmentBytesMin / 4 },
      'keyBytesMax',
    ],
    ['a commit message bound past a record', { messageBytesMax: limits.segmentBytesMin }, 'messageBytesMax'],
    ['more types than a u16 id', { typesPerFeedMax: 0x10000 }, 'typesPerFeedMax'],
    ['a default lease longer than the longest', { leaseTtlMsDefault: limits.leaseTtlMsMax + 1 }, 'leaseTtlMsDefault'],
    ['an empty index cache', { indexCacheBytesMax: 0 }, 'indexCacheBytesMax'],
    ['a tag filter smaller than the smallest filter', { tagFilterBytesMax: 4 }, 'tagFilterBytesMax'],
    ['no group in flight', { groupsInFlightMax: 0 }, 'groupsInFlightMax'],
    ['no key held for a dictionary build', { keyBuildBacklogKeysMax: 0 }, 'keyBuildBacklogKeysMax'],
    [
      'a backlog smaller than a slice',
      { publishIndexBacklogRecordsMax: limits.publishIndexSliceRecords - 1 },
      'backlog',
    ],
    [
      'a payload cache smaller than its block',
      { payloadCacheBytesMax: limits.payloadCacheBlockBytes / 2 },
      'payload cache',
    ],
    ['a key table that is not a power of two', { keyTableSlotsInitial: 1000 }, 'keyTableSlotsInitial'],
    [
      'a direct write piece off the alignment',
      { exportDirectWriteBytes: limits.exportDirectWriteBytes + 512 },
      'alignment',
    ],
    ['a control bit inside the length', { frameLengthMask: 0xffff_ffff }, 'length word'],
    [
      'more sparse hits fetched together than a read may miss',
      { fetchSparseHitsMax: limits.atHandFetchesMax },
      'fetchSparseHitsMax',
    ],
  ];
  for (const [what, change, named] of broken) {
    it(`refuses ${what}`, () => {
      const message = refusal({ ...limits, ...change });
      expect(message).toContain('limits.ts: ');
      expect(message).toContain(named);
    });
  }
});
