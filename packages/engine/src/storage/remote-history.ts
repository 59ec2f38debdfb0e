/**
 * A tiered feed's history as object storage holds it, found the way a reader on another machine
 * finds it: the boundary object, then the descriptors walked by GET from the boundary's ordinal,
 * one ordinal after another until one is not there yet. No LIST: every ordinal from the
 * boundary's up has a descriptor (the writer keeps them without holes, see `history-tiering.ts`),
 * so the first missing one is the end. A refresh goes on from where the last one stopped, so in
 * steady state it costs three requests (the boundary, the next ordinal's 404, the boundary again)
 * plus one per new segment. A walk through many reads several ordinals at once, as many as it
 * found in a row (up to `descriptorReadsAtOnceMax`): what it read past the first hole is dropped,
 * exactly as if it had stopped there.
 *
 * The live segments are the descriptors not retired, not replaced by a later one, and not ending
 * before the boundary's position, in order of position; they follow each other without a gap or
 * an overlap, or the walk reports `CORRUPT`.
 *
 * @example
 * const remote = new RemoteHistory(objects.root);
 * const { live } = await remote.refresh(); // live[0].base === the feed's low position
 */
import { StreamStackError } from '../errors.js';
import { descriptorReadsAtOnceMax } from '../limits.js';
import type { ObjectSegmentStore } from './object-segment-store.js';
import {
  boundaryObjectName,
  decodeBoundary,
  decodeDescriptor,
  objectFolders,
  ordinalName,
  type SegmentDescriptor,
  type TrimBoundary,
} from './segment-descriptor.js';
import { isMissingFile } from './segment-store.js';

/** What a refresh found. */
export interface RemoteHistoryView {
  readonly boundary: TrimBoundary;
  /** The segments a reader uses, by position. */
  readonly live: readonly SegmentDescriptor[];
  /** The first ordinal with no descriptor yet: where the next refresh probes. */
  readonly nextOrdinal: number;
  /** Requests the refresh made. */
  readonly requests: number;
}

const noBoundary: TrimBoundary = { format: 1, lowOrdinal: 1, lowPosition: 1 };

export class RemoteHistory {
  /** Descriptors read so far, by ordinal (all from the boundary's ordinal up). */
  private readonly known = new Map<number, SegmentDescriptor>();
  private nextOrdinal = 1;
  private readonly descriptors: ObjectSegmentStore;

  /** `root` is the feed's folder of objects (`feedObjectPrefix` under the store's prefix). */
  constructor(private readonly root: ObjectSegmentStore) {
    this.descriptors = root.within(objectFolders.descriptors);
  }

  /** Reads the boundary and the descriptors created since the last refresh. */
  async refresh(): Promise<RemoteHistoryView> {
    let requests = 0;
    for (let attempt = 0; ; attempt++) {
      requests++;
      const boundary = await this.readBoundary();
      for (const ordinal of this.known.keys()) if (ordinal < boundary.lowOrdinal) this.known.delete(ordinal);
      this.nextOrdinal = Math.max(this.nextOrdinal, boundary.lowOrdinal);
      let moved = false;
      let inARow = 0;
      for (;;) {
        const atOnce = Math.min(Math.max(inARow, 1), descriptorReadsAtOnceMax);
        const first = this.nextOrdinal;
        requests += atOnce;
        const read = await Promise.all(Array.from({ length: atOnce }, (_, at) => this.readDescriptor(first + at)));
        const hole = read.indexOf(undefined);
        for (const descriptor of hole === -1 ? read : read.slice(0, hole)) {
          this.known.set(this.nextOrdinal, descriptor as SegmentDescriptor);
          this.nextOrdinal++;
        }
        if (hole === -1) {
          inARow += atOnce;
          continue;
        }
        // A hole is the end, unless a trim moved the boundary past it meanwhile (it deletes
        // descriptors below the boundary it has already written): then read the boundary again.
        requests++;
        moved = (await this.readBoundary()).lowOrdinal > boundary.lowOrdinal;
        break;
      }
      if (moved && attempt < 3) continue;
      return { boundary, live: this.liveOf(boundary), nextOrdinal: this.nextOrdinal, requests };
    }
  }

  private liveOf(boundary: TrimBoundary): SegmentDescriptor[] {
    const all = [...this.known.values()];
    const replaced = new Set(all.flatMap((descriptor) => descriptor.replaces));
    const live = all
      .filter(
        (descriptor) =>
          !descriptor.retired && !replaced.has(descriptor.ordinal) && descriptor.lastPosition >= boundary.lowPosition,
      )
      .sort((a, b) => a.base - b.base);
    for (let at = 0; at < live.length; at++) {
      const expected = at === 0 ? undefined : live[at - 1]!.lastPosition + 1;
      if (expected !== undefined && live[at]!.base !== expected)
        throw new StreamStackError(
          'CORRUPT',
          `the descriptors under ${this.descriptors.prefix} leave positions ${expected} to ${live[at]!.base - 1} without a segment`,
          { details: { object: this.descriptors.prefix + ordinalName(live[at]!.ordinal) } },
        );
    }
    return live;
  }

  private async readBoundary(): Promise<TrimBoundary> {
    try {
      const { bytes } = await this.root.readStart(boundaryObjectName, Number.POSITIVE_INFINITY);
      return decodeBoundary(bytes, this.root.prefix + boundaryObjectName);
    } catch (error) {
      if (isMissingFile(error)) return noBoundary;
      throw error;
    }
  }

  private async readDescriptor(ordinal: number): Promise<SegmentDescriptor | undefined> {
    const name = ordinalName(ordinal);
    try {
      const descriptor = decodeDescriptor(
        (await this.descriptors.readStart(name, Number.POSITIVE_INFINITY)).bytes,
        this.descriptors.prefix + name,
      );
      if (descriptor.ordinal !== ordinal)
        throw new StreamStackError(
          'CORRUPT',
          `the descriptor ${this.descriptors.prefix}${name} names ordinal ${descriptor.ordinal}`,
          {
            details: { object: this.descriptors.prefix + name },
          },
        );
      return descriptor;
    } catch (error) {
      if (isMissingFile(error)) return undefined;
      throw error;
    }
  }
}
