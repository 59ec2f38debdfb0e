/**
 * Recently read bytes of history segments, kept so that a payload stored once and referenced by
 * many records (a repeated payload is stored once per segment) is read from memory instead of
 * with one positional read per record. It holds whole regions — the runs a scan just read, and
 * blocks read around payloads it did not hold — up to a byte bound, oldest out first. Each
 * region is charged its heap overhead too, so many small ones stay within the bound.
 *
 * Only bytes the disk has confirmed are kept (below the segment's `durableEnd`), and segment
 * bytes below that never change, so a held region is never stale. Regions belong to one open
 * `SegmentFile`: a segment deleted and created again is a different file object.
 */
import { assert } from '../errors.js';
import { payloadCacheRegionBytes } from '../limits.js';
import type { SegmentFile } from './segment.js';

/** Regions before the nearest one that a lookup also tries. */
const overlapTries = 4;

interface Region {
  readonly segment: SegmentFile;
  readonly start: number;
  readonly bytes: Uint8Array;
}

export class PayloadCache {
  /** Each segment's regions, sorted by start. */
  private readonly bySegment = new Map<SegmentFile, Region[]>();
  /** Every region held, oldest first, from `oldest` on (evicted entries before it). */
  private readonly order: Region[] = [];
  private oldest = 0;
  private bytesHeld = 0;

  constructor(private readonly bytesMax: number) {}

  /** Bytes held now, overheads included (for tests and memory accounting). */
  get heldBytes(): number {
    return this.bytesHeld;
  }

  /** The bytes `[offset, offset + length)` of `segment` when a held region covers them. */
  find(segment: SegmentFile, offset: number, length: number): Uint8Array | undefined {
    const regions = this.bySegment.get(segment);
    if (!regions) return undefined;
    // Regions may overlap (a block around a run), so a few before the nearest are tried too.
    const nearest = lastStartingAtOrBefore(regions, offset);
    for (let at = nearest; at >= 0 && at > nearest - overlapTries; at--) {
      const region = regions[at];
      const from = offset - region.start;
      if (from + length <= region.bytes.length) return region.bytes.subarray(from, from + length);
    }
    return undefined;
  }

  /**
   * Holds `bytes`, which are `segment`'s bytes from `start`, cut at what the disk confirmed.
   * Regions larger than the whole cache are not held.
   */
  add(segment: SegmentFile, start: number, bytes: Uint8Array): void {
    const usable = Math.min(bytes.length, segment.durableEnd - start);
    if (usable <= 0 || usable > this.bytesMax) return;
    const region = { segment, start, bytes: usable === bytes.length ? bytes : bytes.subarray(0, usable) };
    let regions = this.bySegment.get(segment);
    if (!regions) {
      regions = [];
      this.bySegment.set(segment, regions);
    }
    regions.splice(lastStartingAtOrBefore(regions, start) + 1, 0, region);
    this.order.push(region);
    this.bytesHeld += usable + payloadCacheRegionBytes;
    while (this.bytesHeld > this.bytesMax) this.evictOldest();
  }

  private evictOldest(): void {
    const region = this.order[this.oldest];
    this.order[this.oldest++] = undefined as unknown as Region;
    if (this.oldest > 1024 && this.oldest * 2 > this.order.length) {
      this.order.splice(0, this.oldest);
      this.oldest = 0;
    }
    const regions = this.bySegment.get(region.segment)!;
    let at = lastStartingAtOrBefore(regions, region.start);
    while (at >= 0 && regions[at] !== region) at--;
    assert(at >= 0, 'a held region is in its segment list');
    regions.splice(at, 1);
    if (regions.length === 0) this.bySegment.delete(region.segment);
    this.bytesHeld -= region.bytes.length + payloadCacheRegionBytes;
  }

  /** Forgets everything (the history closed). */
  clear(): void {
    this.bySegment.clear();
    this.order.length = 0;
    this.oldest = 0;
    this.bytesHeld = 0;
  }
}

/** The index of the last region whose start is at most `offset`, or −1. */
function lastStartingAtOrBefore(regions: readonly Region[], offset: number): number {
  let low = 0;
  let high = regions.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (regions[middle].start <= offset) low = middle + 1;
    else high = middle;
  }
  return low - 1;
}
