/**
 * Pack deduplication across a feed: payloads already stored, found by their CRC-32C and
 * confirmed byte for byte, so a repeated payload is referenced instead of stored again.
 */
import { yieldWhenDue } from '../../event-loop.js';
import { payloadDedupEntriesMax } from '../../limits.js';
import { probeTableOf } from '../../query/indexes/key-table.js';
import type { StoredPayloads } from '../../storage/active-checkpoint.js';
import { equalBytes, type NewPayload } from '../../storage/commit-run.js';
import type { PayloadLocation } from '../../storage/records.js';
import { grown } from '../../typed-arrays.js';

/**
 * The map's key: 30 bits of the payload's CRC-32C, so that V8 keeps keys as small integers (a
 * full 32-bit key would be a heap number, hashed and collected like an object). Two payloads
 * that share a key only cost a failed byte comparison.
 */
function keyOf(crc: number): number {
  return crc & 0x3fff_ffff;
}

/**
 * Payloads laid by the runs of one group: not durable yet, so they are compared with the bytes
 * in memory, and located where the group will land. Later runs of the group look them up, and
 * so do the runs of the group pipelined behind it while this one is in flight.
 */
export class GroupPayloads {
  private readonly laid = new Map<number, { bytes: Uint8Array; location: PayloadLocation }>();
  /**
   * Runs laid but not yet in the map: a seal is usually alone in its group, and mapping its
   * 100,000 payloads would be work no later run asks for. They are mapped on the first `find`.
   */
  private readonly pending: { payloads: readonly NewPayload[]; segment: number; runOffset: number }[] = [];

  /** Notes a run's new payloads; the run will lie at `runOffset` of history segment `segment`. */
  addRun(payloads: readonly NewPayload[], segment: number, runOffset: number): void {
    this.pending.push({ payloads, segment, runOffset });
  }

  /** A laid payload with exactly these bytes that lands in history segment `segment`. */
  find(payload: Uint8Array, crc: number, segment: number): PayloadLocation | undefined {
    // Every record of a seal asks, and a `splice` makes a new array each time: mapped only when due.
    if (this.pending.length > 0) this.mapPending();
    const candidate = this.laid.get(keyOf(crc));
    return candidate && candidate.location.segment === segment && equalBytes(candidate.bytes, payload)
      ? candidate.location
      : undefined;
  }

  private mapPending(): void {
    for (const { payloads, segment, runOffset } of this.pending.splice(0)) {
      for (const laid of payloads) {
        this.laid.set(keyOf(laid.crc), {
          bytes: laid.bytes,
          location: { segment, offset: runOffset + laid.offset, length: laid.length, crc: laid.crc },
        });
      }
    }
  }
}

/** A durable run's new payloads, waiting to be mapped: each one's CRC, offset in the run and length. */
interface PendingRun {
  readonly segment: number;
  readonly runStart: number;
  readonly crcs: Uint32Array;
  readonly offsets: Float64Array;
  readonly lengths: Uint32Array;
}

export class PayloadDedup {
  /**
   * The stored payloads of one history segment, the newest remembered: a run only references
   * payloads of the segment it lands in, so those of earlier segments are never found again.
   * Each payload's CRC leads to a slot of the columns below through `table`, a probe table in a
   * typed array (slot + 1, or 0 for empty; at most half full). Location objects, and then a Map
   * of a quarter million entries, lived on the collector's heap for good, and every full
   * collection marked and moved them (tens of milliseconds at a time on the event loop).
   */
  private table = new Int32Array(2048);
  private size = 0;
  private segment = -1;
  private offsets = new Float64Array(1024);
  private lengths = new Uint32Array(1024);
  private crcs = new Uint32Array(1024);
  /**
   * Durable runs whose payloads are not in the map yet: a seal stores up to hundreds of thousands,
   * and mapping them in the turn that acknowledges it stalled the event loop. `fold` maps them a
   * slice at a time before the next run looks anything up. A run waits here as three columns,
   * not as its payloads: after the last seal it may wait for minutes, and 100,000 payload objects
   * and the bytes they hold on to, kept that long, were most of the feed's heap — marked, moved
   * and counted as external memory by every full collection of the event loop's thread.
   */
  private readonly pending: PendingRun[] = [];

  /** `equalsStored` confirms a candidate against the stored bytes. */
  constructor(private readonly equalsStored: (location: PayloadLocation, payload: Uint8Array) => boolean) {}

  /** Remembers a durable payload. */
  remember(crc: number, location: PayloadLocation): void {
    this.rememberAt(crc, location.segment, location.offset, location.length);
  }

  /** Remembers the payloads `payloads` lists (of segment `segment`), in order. */
  rememberColumns(segment: number, payloads: StoredPayloads): void {
    for (let index = 0; index < payloads.count; index++)
      this.rememberAt(payloads.crcs[index], segment, payloads.offsets[index], payloads.lengths[index]);
  }

  /**
   * The payloads remembered of segment `segment` (none when those remembered are another
   * segment's), in the order they were first remembered: what a checkpoint of the segment keeps.
   */
  async columnsOf(segment: number | undefined): Promise<StoredPayloads> {
    await this.fold();
    const count = segment === this.segment ? this.size : 0;
    return {
      count,
      crcs: this.crcs.subarray(0, count),
      offsets: this.offsets.subarray(0, count),
      lengths: this.lengths.subarray(0, count),
    };
  }

  private rememberAt(crc: number, segment: number, offset: number, length: number): void {
    // A payload of an earlier segment than the one remembered could never be found again.
    if (segment < this.segment) return;
    // Bounded: past the bound (or on to a new segment) the map starts over, so a payload first
    // stored long ago may be stored again. That costs bytes, never correctness.
    if (segment > this.segment || this.size >= payloadDedupEntriesMax) {
      this.table.fill(0);
      this.size = 0;
      this.segment = segment;
    }
    const probe = this.probeFor(crc);
    let slot: number;
    if (probe < 0) {
      slot = -probe - 1;
    } else {
      slot = this.size++;
      if (slot === this.offsets.length) this.grow();
      this.table[probe] = slot + 1;
      // Its CRC is what the probe table finds it by, so it is set before any rehash.
      this.crcs[slot] = crc;
      if (this.size * 2 > this.table.length) this.rehash();
    }
    this.offsets[slot] = offset;
    this.lengths[slot] = length;
  }

  /** `-(slot + 1)` when a payload with CRC `crc` holds a slot, else the empty probe where it would go. */
  private probeFor(crc: number): number {
    const unsigned = crc >>> 0;
    const mask = this.table.length - 1;
    // A CRC is already spread evenly over its bits: it is its own hash.
    for (let probe = unsigned & mask; ; probe = (probe + 1) & mask) {
      const held = this.table[probe];
      if (held === 0) return probe;
      if (this.crcs[held - 1] === unsigned) return -held;
    }
  }

  private rehash(): void {
    // A CRC is its own hash (see probeFor).
    this.table = probeTableOf(this.crcs, this.size, this.table.length * 2);
  }

  private grow(): void {
    const size = this.offsets.length * 2;
    this.offsets = grown(this.offsets, size);
    this.lengths = grown(this.lengths, size);
    this.crcs = grown(this.crcs, size);
  }

  /**
   * Remembers the new payloads of a durable run that starts at `runStart` of segment `segment`.
   * Only their CRCs, offsets and lengths are copied (see `pending`); the payloads are not kept.
   */
  rememberRun(payloads: readonly NewPayload[], segment: number, runStart: number): void {
    const count = payloads.length;
    if (count === 0) return;
    const run: PendingRun = {
      segment,
      runStart,
      crcs: new Uint32Array(count),
      offsets: new Float64Array(count),
      lengths: new Uint32Array(count),
    };
    for (let index = 0; index < count; index++) {
      const payload = payloads[index];
      run.crcs[index] = payload.crc;
      run.offsets[index] = payload.offset;
      run.lengths[index] = payload.length;
    }
    this.pending.push(run);
  }

  /** Maps the runs remembered so far, yielding to the event loop between slices. */
  async fold(): Promise<void> {
    for (let run = this.pending.shift(); run; run = this.pending.shift()) {
      for (let index = 0; index < run.crcs.length; ) {
        this.rememberLaid(run, index);
        const pause = yieldWhenDue(++index);
        if (pause) await pause;
      }
    }
  }

  private rememberLaid(run: PendingRun, index: number): void {
    this.rememberAt(run.crcs[index], run.segment, run.runStart + run.offsets[index], run.lengths[index]);
  }

  /**
   * A payload with exactly these bytes stored in history segment `segment`, or undefined. Only
   * payloads of the segment a run lands in are referenced, so every sealed segment holds all the
   * payloads its records need and can be read, moved or deleted on its own. Runs not folded yet
   * are folded here first, in one piece, so no caller ever misses a remembered payload.
   */
  find(payload: Uint8Array, crc: number, segment: number): PayloadLocation | undefined {
    for (let run = this.pending.shift(); run; run = this.pending.shift()) {
      for (let index = 0; index < run.crcs.length; index++) this.rememberLaid(run, index);
    }
    const probe = segment === this.segment ? this.probeFor(crc) : 0;
    if (probe >= 0) return undefined;
    const slot = -probe - 1;
    if (this.lengths[slot] !== payload.length) return undefined;
    const candidate: PayloadLocation = {
      segment,
      offset: this.offsets[slot],
      length: this.lengths[slot],
      crc: this.crcs[slot],
    };
    return this.equalsStored(candidate, payload) ? candidate : undefined;
  }
}
