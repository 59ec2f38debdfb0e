/**
 * The payload cache keeps its byte bound in heap terms: each region is charged its overhead as
 * well as its bytes, so the tiny runs of one-event commits, cached by readers that follow the
 * head, cannot hold several times the bound.
 */
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { PayloadCache } from '../../packages/engine/src/storage/payload-cache.js';
import type { SegmentFile } from '../../packages/engine/src/storage/segment.js';

const segment = { durableEnd: 1 << 30 } as unknown as SegmentFile;

describe('payload cache', () => {
  it('charges each region its overhead, so small regions stay within the bound', () => {
    const bytesMax = 64 * 1024;
    const cache = new PayloadCache(bytesMax);
    const regionBytes = 100;
    for (let at = 0; at < 10_000; at++)
      cache.add(segment, at * regionBytes, new Uint8Array(regionBytes).fill(at % 251));
    expect(cache.heldBytes).toBeLessThanOrEqual(bytesMax);
    // The newest regions are held, the oldest let go: as many as fit with their overhead.
    const held = Math.floor(bytesMax / (regionBytes + limits.payloadCacheRegionBytes));
    const newest = 9_999;
    expect(cache.find(segment, newest * regionBytes, regionBytes)?.[0]).toBe(newest % 251);
    expect(cache.find(segment, (newest - held + 1) * regionBytes, regionBytes)).toBeDefined();
    expect(cache.find(segment, (newest - held - 1) * regionBytes, regionBytes)).toBeUndefined();
    expect(cache.heldBytes).toBe(held * (regionBytes + limits.payloadCacheRegionBytes));
  });

  it('holds a large region whole and charges it once', () => {
    const cache = new PayloadCache(1024 * 1024);
    cache.add(segment, 0, new Uint8Array(512 * 1024).fill(7));
    expect(cache.heldBytes).toBe(512 * 1024 + limits.payloadCacheRegionBytes);
    expect(cache.find(segment, 1000, 10)).toEqual(new Uint8Array(10).fill(7));
    cache.clear();
    expect(cache.heldBytes).toBe(0);
    expect(cache.find(segment, 1000, 10)).toBeUndefined();
  });
});
