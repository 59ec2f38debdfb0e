/**
 * Reads the manifest entries of one feed's history by where they lie: what a point lookup (a
 * `get`, whose key index names an entry's offset) and an index fetch (whose hits name theirs)
 * read, rather than whole runs. Synchronously while the bytes are at hand, for the lookups that
 * answer in the turn they are asked, and through `whenAtHand` where a segment may have been
 * evicted. The bytes come through `HistoryBytes` (`history-bytes.ts`); whole runs are read by
 * `history-runs.ts`.
 */
import type { Kernels } from '../kernels/kernels.js';
import { coalescedReadBytesMax, coalescedReadGapBytes, remotePointReadBytesMax } from '../limits.js';
import { readManifestEntryAt } from './commit-run.js';
import type { HistoryBytes } from './history-bytes.js';
import type { ManifestEntry } from './records.js';
import { withPlace } from './run-reads.js';
import type { SegmentSet } from './segment-set.js';
import { NotAtHand } from './tiered-history-store.js';

/** First read window for a single manifest entry: most entries are a few dozen bytes. */
const entryReadBytesInitial = 1024;
/** Largest window tried: the largest entry (64 tags of 256 bytes, a 1 KiB key…) fits. */
const entryReadBytesMax = 64 * 1024;

export class HistoryEntries {
  constructor(
    private readonly kernels: Kernels,
    private readonly segments: SegmentSet,
    private readonly bytes: HistoryBytes,
  ) {}

  /**
   * `readEntrySync`, for a segment that may be evicted. A point lookup reads the entry and then
   * its payload, which, for a record whose payload was new in its run, lies before the entry in
   * the same run (packs come before manifests): so a miss fetches back towards the run's start,
   * up to `remotePointReadBytesMax` in all, and the payload read that follows usually finds its
   * bytes at hand instead of making a second request in turn.
   */
  entryAt(segment: number, offset: number, runStart: number): Promise<ManifestEntry> {
    return this.bytes.whenAtHand(
      () => this.readEntrySync(segment, offset, runStart),
      (miss) => {
        const end = miss.offset + miss.length;
        const start = Math.min(miss.offset, Math.max(runStart, end - remotePointReadBytesMax));
        return new NotAtHand(miss.file, start, end - start);
      },
    );
  }

  /** `readEntriesSync`, for a segment that may be evicted. */
  entriesAt(
    segment: number,
    offsets: readonly number[],
    runStarts: number | readonly number[],
  ): Promise<ManifestEntry[]> {
    return this.bytes.whenAtHand(() => this.readEntriesSync(segment, offsets, runStarts));
  }

  /**
   * Reads the manifest entry at `offset` of segment `segment` (whose run starts at `runStart`),
   * for fetching single records by position. Entries are small; a read window that turns out
   * too short is made four times as large and tried again.
   */
  readEntrySync(segment: number, offset: number, runStart: number): ManifestEntry {
    const file = this.segments.byBase(segment);
    let window = entryReadBytesInitial;
    for (;;) {
      // The common window reuses one scratch buffer: an entry's fields are copied out of it.
      const scratch = window === entryReadBytesInitial ? this.entryScratch : new Uint8Array(window);
      const length = this.bytes.readSyncInto(
        file,
        scratch.subarray(0, Math.min(window, file.header.capacity - offset)),
        offset,
      );
      try {
        const entry = readManifestEntryAt(
          this.crc32c,
          scratch.subarray(0, length),
          0,
          segment,
          runStart,
          `manifest entry at ${file.file}:${offset}`,
        );
        // The fingerprint is a view of the scratch buffer, which the next read overwrites.
        return { ...entry, fingerprint: entry.fingerprint.slice() };
      } catch (error) {
        if (length < window || window >= entryReadBytesMax) throw withPlace(error, file.file, offset);
        window *= 4;
      }
    }
  }

  private readonly entryScratch = new Uint8Array(entryReadBytesInitial);

  /**
   * The manifest entries at `offsets` (ascending) of segment `segment`, as `readEntrySync` reads
   * them one at a time, but with one read for each stretch of entries lying within
   * `coalescedReadGapBytes` of each other (an index fetch's hits, sorted by where they lie).
   * `runStarts` is where the run of each entry starts, or of all of them when they share one.
   */
  readEntriesSync(segment: number, offsets: readonly number[], runStarts: number | readonly number[]): ManifestEntry[] {
    const file = this.segments.byBase(segment);
    const runStartOf = (at: number) => (typeof runStarts === 'number' ? runStarts : runStarts[at]);
    const entries = new Array<ManifestEntry>(offsets.length);
    for (let first = 0; first < offsets.length; ) {
      let last = first + 1;
      while (
        last < offsets.length &&
        offsets[last] >= offsets[last - 1] &&
        offsets[last] - offsets[last - 1] <= coalescedReadGapBytes &&
        offsets[last] + entryReadBytesInitial - offsets[first] <= coalescedReadBytesMax
      ) {
        last++;
      }
      if (last === first + 1) {
        entries[first] = this.readEntrySync(segment, offsets[first], runStartOf(first));
      } else {
        const start = offsets[first];
        // A short read (a file cut short) leaves the entries past its end to be read alone.
        const window = new Uint8Array(
          Math.min(offsets[last - 1] + entryReadBytesInitial, file.header.capacity) - start,
        );
        const bytes = window.subarray(0, this.bytes.readSyncInto(file, window, start));
        for (let at = first; at < last; at++) {
          try {
            entries[at] = readManifestEntryAt(
              this.crc32c,
              bytes,
              offsets[at] - start,
              segment,
              runStartOf(at),
              `manifest entry at ${file.file}:${offsets[at]}`,
            );
          } catch {
            // An entry running past the read (a long one), or a damaged one: read alone, which
            // widens its window or reports the damage with its place.
            entries[at] = this.readEntrySync(segment, offsets[at], runStartOf(at));
          }
        }
      }
      first = last;
    }
    return entries;
  }

  private readonly crc32c = (bytes: Uint8Array): number => this.kernels.crc32c(bytes);
}
