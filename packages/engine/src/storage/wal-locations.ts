/**
 * Where an open stream's acknowledged records lie in the WAL, one entry per record, in seq order,
 * as columns: a stream appended a batch at a time holds millions of records before its seal,
 * and an object per record (`{ segment, dataStart, dataEnd }`, about 56 bytes with its slot in
 * an array, and work for every full collection) made a long `--stream` load's memory grow by
 * some 200 bytes a record once the collector's headroom was counted. Here a record costs the
 * two offsets (8 bytes, doubled at most by growth); segments change rarely, so each is kept
 * once, with the index of its first record.
 */
import { grown } from '../typed-arrays.js';

/** Where an acknowledged record lies in the WAL. */
export interface WalLocation {
  readonly segment: number;
  readonly dataStart: number;
  readonly dataEnd: number;
}

export class WalLocations {
  private starts = new Uint32Array(64);
  private ends = new Uint32Array(64);
  private count = 0;
  /** The segments the records lie in, in order, and the index of each one's first record. */
  private readonly segments: number[] = [];
  private readonly firsts: number[] = [];

  /** Records held. */
  get length(): number {
    return this.count;
  }

  push(location: WalLocation): void {
    if (this.count === this.starts.length) {
      this.starts = grown(this.starts, this.count * 2);
      this.ends = grown(this.ends, this.count * 2);
    }
    if (this.segments.length === 0 || this.segments[this.segments.length - 1] !== location.segment) {
      this.segments.push(location.segment);
      this.firsts.push(this.count);
    }
    this.starts[this.count] = location.dataStart;
    this.ends[this.count] = location.dataEnd;
    this.count++;
  }

  /** Where the record at `index` lies (0 ≤ index < length). */
  at(index: number): WalLocation {
    return { segment: this.segmentAt(index), dataStart: this.starts[index], dataEnd: this.ends[index] };
  }

  /** The segment of the record at `index`. */
  segmentAt(index: number): number {
    // The last segment whose first record is at or before `index`: segments are few.
    let at = this.firsts.length - 1;
    while (at > 0 && this.firsts[at] > index) at--;
    return this.segments[at];
  }

  dataStartAt(index: number): number {
    return this.starts[index];
  }

  dataEndAt(index: number): number {
    return this.ends[index];
  }

  /** The records from `index` on, copied: later pushes to this list do not reach it. */
  slice(index: number): WalLocations {
    const copy = new WalLocations();
    const from = Math.min(Math.max(0, index), this.count);
    copy.count = this.count - from;
    copy.starts = grown(this.starts.subarray(from, this.count), Math.max(64, copy.count));
    copy.ends = grown(this.ends.subarray(from, this.count), Math.max(64, copy.count));
    for (const span of this.spans()) {
      if (span.to <= from) continue;
      copy.segments.push(span.segment);
      copy.firsts.push(Math.max(span.from, from) - from);
    }
    return copy;
  }

  /**
   * Runs of consecutive records in one segment, from `from` (inclusive) to `to` (exclusive): what
   * a read takes in one span.
   */
  *spans(): Generator<{ segment: number; from: number; to: number }> {
    for (let at = 0; at < this.segments.length; at++) {
      const to = at + 1 < this.firsts.length ? this.firsts[at + 1] : this.count;
      if (to > this.firsts[at]) yield { segment: this.segments[at], from: this.firsts[at], to };
    }
  }
}
