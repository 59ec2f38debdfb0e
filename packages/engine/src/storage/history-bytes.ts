/**
 * The bytes of one feed's history segments as its reads get them, and the payloads among them.
 * A sealed segment is read through the segment store, by its name, and the active one in place,
 * as the local file it still is; synchronously while the bytes are at hand, and through
 * `whenAtHand` where a segment may have been evicted to object storage. A payload is a range of
 * those bytes checked by its CRC; recently read regions (the runs a scan read, the blocks around
 * payloads) are kept in the payload cache, for the records that repeat a payload stored by
 * another run. The run and entry reads (`history-runs.ts`, `history-entries.ts`) read through
 * this object; opening the segments and writing them is `history-log.ts`.
 */
import path from 'node:path';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import {
  atHandFetchesMax,
  coalescedReadBytesMax,
  coalescedReadGapBytes,
  payloadCacheBlockBytes,
  payloadCacheBytesMax,
} from '../limits.js';
import { equalBytes } from './commit-run.js';
import { segmentSuffix } from './feed-layout.js';
import type { CommitRun } from './history-runs.js';
import { PayloadCache } from './payload-cache.js';
import type { PayloadLocation } from './records.js';
import type { SegmentFile } from './segment.js';
import type { SegmentSet } from './segment-set.js';
import { NotAtHand, type TieredHistoryStore } from './tiered-history-store.js';

export class HistoryBytes {
  constructor(
    private readonly kernels: Kernels,
    private readonly segments: SegmentSet,
    /** Where sealed segments are read from (see `History.store`). */
    private readonly store: TieredHistoryStore,
  ) {}

  /**
   * The segment each store name was last given for: the store finds the open file to read a
   * name through here, in one lookup, where searching the set cost every payload read of a
   * scan a walk over all the segments.
   */
  private readonly named = new Map<string, SegmentFile>();

  /** Recently read segment bytes, for payloads referenced from other runs. */
  readonly cache = new PayloadCache(payloadCacheBytesMax);

  /**
   * The store's name of `segment` when it is sealed; undefined for the active segment, which is
   * still appended to in place and so is read as the local file it is. Called in the same
   * synchronous step as the `byBase` that found the segment, so the name is that segment's (a
   * merge that reuses the name switches segments only between reads).
   */
  private sealedName(segment: SegmentFile): string | undefined {
    if (segment === this.segments.active) return undefined;
    // Named and then read in one synchronous step: the store's lookup finds this very segment,
    // even where a merge gave its name to a new one meanwhile.
    const name = storeName(segment);
    this.named.set(name, segment);
    return name;
  }

  /** Reads `length` bytes at `offset` of `segment`: through the store once it is sealed. */
  read(segment: SegmentFile, offset: number, length: number): Promise<Uint8Array> {
    const name = this.sealedName(segment);
    return name === undefined ? segment.read(offset, length) : this.store.read(name, offset, length);
  }

  /** `read` into a buffer of a `RunBufferPool`. */
  readInto(segment: SegmentFile, into: Uint8Array, offset: number): Promise<Uint8Array> {
    const name = this.sealedName(segment);
    return name === undefined ? segment.readInto(into, offset) : this.store.readInto(name, into, offset);
  }

  /**
   * `read`, synchronously: only for the point lookups and index fetches that cannot await (a
   * `get`, `readPayloadsSync`), which a store offers while it has the bytes at hand
   * (`SyncSegmentReads`).
   */
  private readSync(segment: SegmentFile, offset: number, length: number): Uint8Array {
    const name = this.sealedName(segment);
    return name === undefined ? segment.readSync(offset, length) : this.store.readSync(name, offset, length);
  }

  /**
   * Reads up to `into.length` bytes synchronously, returning how many: manifest entries for an
   * index fetch, and pack dedup's comparison while a seal is laid out, which cannot await.
   */
  readSyncInto(segment: SegmentFile, into: Uint8Array, offset: number): number {
    const name = this.sealedName(segment);
    return name === undefined ? segment.readSyncInto(into, offset) : this.store.readSyncInto(name, into, offset);
  }

  /**
   * Runs the synchronous `read` until it finds every byte at hand: a segment evicted to object
   * storage has its blocks fetched as the read meets them (`NotAtHand`), a local one reads at
   * once. What the asynchronous readers are (`payloadAt` below, `HistoryEntries.entryAt`), for a
   * fetch or a point lookup that may reach evicted history.
   */
  async whenAtHand<T>(read: () => T, widen: (miss: NotAtHand) => NotAtHand = (miss) => miss): Promise<T> {
    const fetched: NotAtHand[] = [];
    let verified = false;
    for (;;) {
      try {
        return read();
      } catch (error) {
        if (error instanceof StreamStackError && error.code === 'CORRUPT' && fetched.length > 0 && !verified) {
          // Bytes fetched in pieces failed a record's CRC: the same ranges come again in blocks
          // checked against the descriptor, so damage in object storage is reported naming the
          // object (and a piece garbled on the way is replaced by sound bytes).
          verified = true;
          for (const miss of fetched) await this.store.fetch(miss.file, miss.offset, miss.length, true);
          continue;
        }
        // Each miss brings one more piece or block; a read that keeps missing has more than the
        // cache holds, which is a bug to report, not a loop.
        if (!(error instanceof NotAtHand) || fetched.length >= atHandFetchesMax) throw error;
        const wanted = widen(error);
        fetched.push(wanted);
        await this.store.fetch(wanted.file, wanted.offset, wanted.length, verified);
      }
    }
  }

  /** `readPayloadsSync`, for segments that may be evicted. */
  payloadsAt(locations: readonly PayloadLocation[]): Promise<Uint8Array[]> {
    return this.whenAtHand(() => this.readPayloadsSync(locations));
  }

  /** `readPayloadSync`, for a segment that may be evicted. */
  payloadAt(location: PayloadLocation): Promise<Uint8Array> {
    return this.whenAtHand(() => this.readPayloadSync(location));
  }

  /**
   * Payloads, each checked by its CRC, as `readPayloadSync` reads them, but with one read for
   * each stretch of payloads of a segment lying within `coalescedReadGapBytes` of each other.
   */
  readPayloadsSync(locations: readonly PayloadLocation[]): Uint8Array[] {
    const payloads = new Array<Uint8Array>(locations.length);
    const order = locations
      .map((_, index) => index)
      .sort((a, b) => locations[a].segment - locations[b].segment || locations[a].offset - locations[b].offset);
    for (let first = 0; first < order.length; ) {
      const head = locations[order[first]];
      const segment = this.segments.byBase(head.segment);
      let end = head.offset + head.length;
      let last = first + 1;
      for (; last < order.length; last++) {
        const next = locations[order[last]];
        if (
          next.segment !== head.segment ||
          next.offset - end > coalescedReadGapBytes ||
          next.offset + next.length - head.offset > coalescedReadBytesMax
        )
          break;
        end = Math.max(end, next.offset + next.length);
      }
      if (last === first + 1) {
        payloads[order[first]] = this.readPayloadSync(head);
      } else {
        const bytes = this.readSync(segment, head.offset, end - head.offset);
        for (let at = first; at < last; at++) {
          const location = locations[order[at]];
          const from = location.offset - head.offset;
          payloads[order[at]] = this.checkPayload(bytes.subarray(from, from + location.length), location, segment.file);
        }
      }
      first = last;
    }
    return payloads;
  }

  /** A payload's bytes, from the run already read when it lies there, else from its segment. */
  async readPayload(location: PayloadLocation, run?: CommitRun): Promise<Uint8Array> {
    if (run && location.segment === run.commit.segment) {
      const start = location.offset - run.commit.runStart;
      if (start >= 0 && start + location.length <= run.bytes.length) {
        return run.bytes.subarray(start, start + location.length);
      }
    }
    const segment = this.segments.byBase(location.segment);
    const cached = this.cachedPayload(segment, location);
    if (cached) return cached;
    // The block around the payload is read and held: the payloads near a repeated one tend to
    // be repeated too, by the records that follow.
    const blockStart = location.offset - (location.offset % payloadCacheBlockBytes);
    const blockEnd = Math.min(blockStart + payloadCacheBlockBytes, segment.durableEnd, segment.header.capacity);
    if (blockEnd < location.offset + location.length) {
      return this.checkPayload(await this.read(segment, location.offset, location.length), location, segment.file);
    }
    // Payloads read side by side (`HistoryRuns.gatherExternal`) often share a block: it is read
    // once.
    const key = `${segment.header.base}:${blockStart}`;
    let reading = this.payloadBlocksReading.get(key);
    if (!reading) {
      reading = this.read(segment, blockStart, blockEnd - blockStart).then((bytes) => {
        this.cache.add(segment, blockStart, bytes);
        return bytes;
      });
      this.payloadBlocksReading.set(key, reading);
      const forget = () => this.payloadBlocksReading.delete(key);
      reading.then(forget, forget);
    }
    const block = await reading;
    const from = location.offset - blockStart;
    return this.checkPayload(block.subarray(from, from + location.length), location, segment.file);
  }

  /** Payload cache blocks being read, by segment base and offset. */
  private readonly payloadBlocksReading = new Map<string, Promise<Uint8Array>>();

  /** A payload from the cache, checked by its CRC, or undefined when the cache lacks it. */
  cachedPayload(segment: SegmentFile, location: PayloadLocation): Uint8Array | undefined {
    const cached = this.cache.find(segment, location.offset, location.length);
    return cached && this.checkPayload(cached, location, segment.file);
  }

  /** A payload's bytes read on their own, synchronously (point lookups), checked by its CRC. */
  readPayloadSync(location: PayloadLocation): Uint8Array {
    const segment = this.segments.byBase(location.segment);
    return (
      this.cachedPayload(segment, location) ??
      this.checkPayload(this.readSync(segment, location.offset, location.length), location, segment.file)
    );
  }

  /** Scratch for `storedPayloadEquals`, grown to the largest payload compared. */
  private compareScratch = new Uint8Array(4096);

  /**
   * True when the payload stored at `location` has exactly the bytes `payload` has: what pack
   * dedup confirms a candidate with. The bytes come from the payload cache when it holds them,
   * or are read into a reused buffer: a seal of 100,000 records confirms thousands of repeats.
   */
  storedPayloadEquals(location: PayloadLocation, payload: Uint8Array): boolean {
    if (location.length !== payload.length) return false;
    const segment = this.segments.byBase(location.segment);
    const cached = this.cache.find(segment, location.offset, location.length);
    if (cached) return equalBytes(cached, payload);
    if (this.compareScratch.length < location.length) this.compareScratch = new Uint8Array(location.length);
    const into = this.compareScratch.subarray(0, location.length);
    return this.readSyncInto(segment, into, location.offset) === location.length && equalBytes(into, payload);
  }

  private checkPayload(bytes: Uint8Array, location: PayloadLocation, file: string): Uint8Array {
    if (this.kernels.crc32c(bytes) !== location.crc) {
      throw new StreamStackError('CORRUPT', `the payload at ${file}:${location.offset} fails its CRC`, {
        details: { file, offset: location.offset },
      });
    }
    return bytes;
  }

  /** Drops the names of segments the set no longer holds (trimmed, or replaced by a merge). */
  forgetNamesGone(): void {
    const held = new Set(this.segments.segments);
    for (const [name, segment] of this.named) if (!held.has(segment)) this.named.delete(name);
  }

  /**
   * The sealed history segment the store reads `name` through: the one a read last named so,
   * else the one the set holds open under that name; undefined for any other name (a summary).
   */
  segmentNamed(name: string): SegmentFile | undefined {
    return this.named.get(name) ?? heldSegment(this.segments, name);
  }
}

/** Each segment's name in the store, kept: a point lookup should not parse its path again. */
const storeNames = new WeakMap<SegmentFile, string>();

/** The name of `segment` in the store: its file's name, in the folder the store holds. */
function storeName(segment: SegmentFile): string {
  let name = storeNames.get(segment);
  if (name === undefined) storeNames.set(segment, (name = path.basename(segment.file)));
  return name;
}

/**
 * The sealed history segment named `name` that `segments` holds open, for the local store to
 * read through; undefined for any other name (a summary, say).
 */
function heldSegment(segments: SegmentSet, name: string): SegmentFile | undefined {
  // A summary's page is read by name too: it is no segment, and is answered without a walk.
  if (!name.endsWith(segmentSuffix.history)) return undefined;
  return segments.segments.find((segment) => storeName(segment) === name);
}
