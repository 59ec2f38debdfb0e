/**
 * Recovery of one segment's groups into runs (docs/faults.md). A group holds one or more runs,
 * each ended by its marker (a WAL commit marker, a history commit record); a group may also hold
 * the log's own control frames (`SegmentEnd`, `LiveSegments`). What recovery finds here is only
 * what the bytes say; which damage is a torn tail and which is corruption is decided by the
 * segment set, which knows whether this segment is the newest.
 */
import type { Kernels } from '../kernels/kernels.js';
import { segmentHeaderBytes } from '../limits.js';
import { ByteReader } from './codec.js';
import { FrameKind } from './frame-kinds.js';
import type { ScannedFrame } from './framing.js';
import { type Group, scanGroups } from './groups.js';
import type { SegmentHeader } from './segment.js';

export interface Run<M> {
  /** The frames before the marker. */
  readonly frames: readonly ScannedFrame[];
  readonly marker: ScannedFrame;
  /** What the marker decoded to. */
  readonly decoded: M;
}

/** What recovery cut off the end of a segment: the bytes of a write that never completed. */
export interface TornTail {
  readonly file: string;
  /** Where the torn write began, and so where the cut starts. */
  readonly offset: number;
  /** How many bytes from there to the last non-zero byte were cut. */
  readonly bytes: number;
}

/** Damage that is not a torn tail: corruption, never cut, reported with its file and offset. */
export interface Corruption {
  readonly file: string;
  readonly offset: number;
  readonly reason: string;
  /**
   * True when the damage cannot have taken anything written (bytes past a finished segment's
   * end, or past its capacity): it is reported, and changes no read.
   */
  readonly harmless?: boolean;
}

/** What a segment's bytes hold, in log order: runs, and the places where damage broke them. */
export type SegmentEntry<M> =
  | { readonly kind: 'run'; readonly run: Run<M> }
  | {
      readonly kind: 'damage';
      readonly offset: number;
      readonly resumeAt: number | undefined;
      readonly reason: string;
      /** Nothing written can have been lost here (see `Corruption.harmless`). */
      readonly harmless?: boolean;
      /**
       * The furthest any sound group after the damage says the segment was confirmed durable
       * when it was written (undefined when none follows): damage below it hit confirmed bytes.
       */
      readonly confirmedAfter?: number;
      /** The damage is a sound group whose content does not decode: written whole, never torn. */
      readonly wholeGroup?: boolean;
    };

/** Where the log goes on after this segment, from its `SegmentEnd` frame. */
export interface SegmentTrailer {
  readonly nextBase: number;
  readonly nextBaseCommit: number;
}

export interface ScannedSegment<M> {
  readonly entries: SegmentEntry<M>[];
  /** Offset just past the last sound group: where the next group goes. */
  readonly end: number;
  /** Groups that hold runs (not only the log's control frames). */
  readonly dataGroups: number;
  readonly trailer?: SegmentTrailer;
  /** The last `LiveSegments` list in the segment. */
  readonly liveSegments?: readonly number[];
  /** Where the last sound group starts, when there is one. */
  readonly lastGroup?: number;
}

export interface MarkerDecoder<M> {
  /** Called before a segment's runs are decoded, with its header. */
  beginSegment?(header: SegmentHeader): void;
  isMarker(frame: ScannedFrame): boolean;
  /** Decodes a marker, or returns undefined when it does not match the frames of its run. */
  decode(bytes: Uint8Array, frame: ScannedFrame, runFrames: readonly ScannedFrame[]): M | undefined;
}

const isLogControl = (frame: ScannedFrame) =>
  frame.kind === FrameKind.SegmentEnd || frame.kind === FrameKind.LiveSegments;

/** Splits a sound group into runs; undefined when its frames do not make whole runs. */
function groupRuns<M>(bytes: Uint8Array, group: Group, decoder: MarkerDecoder<M>): Run<M>[] | undefined {
  const runs: Run<M>[] = [];
  let pending: ScannedFrame[] = [];
  for (const frame of group.frames) {
    if (isLogControl(frame)) continue;
    if (!decoder.isMarker(frame)) {
      pending.push(frame);
      continue;
    }
    const decoded = decoder.decode(bytes, frame, pending);
    if (decoded === undefined) return undefined;
    runs.push({ frames: pending, marker: frame, decoded });
    pending = [];
  }
  return pending.length === 0 ? runs : undefined;
}

/** Where the log goes on, from a sound `SegmentEnd` frame of `file`. */
export function readSegmentTrailer(bytes: Uint8Array, frame: ScannedFrame, file: string): SegmentTrailer {
  const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, `${file}:${frame.offset}`);
  const trailer = { nextBase: reader.u64(), nextBaseCommit: reader.u64() };
  reader.expectEnd();
  return trailer;
}

/** Reads the log's control frames of a sound group. */
function readControl(bytes: Uint8Array, group: Group, file: string): { trailer?: SegmentTrailer; live?: number[] } {
  const found: { trailer?: SegmentTrailer; live?: number[] } = {};
  for (const frame of group.frames) {
    if (!isLogControl(frame)) continue;
    if (frame.kind === FrameKind.SegmentEnd) {
      found.trailer = readSegmentTrailer(bytes, frame, file);
      continue;
    }
    const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, `${file}:${frame.offset}`);
    const count = reader.varint();
    found.live = [];
    for (let index = 0; index < count; index++) found.live.push(reader.varint());
    reader.expectEnd();
  }
  return found;
}

/** Reads a segment's groups (`bytes` from `start` up to `limit`, its capacity) into runs and damage. */
export function scanSegment<M>(
  kernels: Kernels,
  bytes: Uint8Array,
  limit: number,
  file: string,
  decoder: MarkerDecoder<M>,
  /** Where the groups to read start: after the header, or where a checkpoint of the segment ends. */
  start = segmentHeaderBytes,
): ScannedSegment<M> {
  const { groups, damages } = scanGroups(kernels, bytes, start, limit);
  const entries: SegmentEntry<M>[] = [];
  let dataGroups = 0;
  let trailer: SegmentTrailer | undefined;
  let liveSegments: number[] | undefined;
  let damageAt = 0;
  /** Where the segment's `SegmentEnd` group ends: nothing written can lie after it. */
  let finishedAt = Number.POSITIVE_INFINITY;
  // The furthest confirmed end named by the groups from each one on, for the damage before them.
  const confirmedFrom: number[] = new Array<number>(groups.length);
  for (let index = groups.length - 1; index >= 0; index--) {
    confirmedFrom[index] = Math.max(groups[index].confirmed, index + 1 < groups.length ? confirmedFrom[index + 1] : 0);
  }
  let groupAt = 0;
  const noteDamage = (offset: number, resumeAt: number | undefined, reason: string, wholeGroup = false) => {
    while (groupAt < groups.length && groups[groupAt].offset <= offset) groupAt++;
    entries.push({
      kind: 'damage',
      offset,
      resumeAt,
      reason,
      ...(offset >= finishedAt ? { harmless: true } : {}),
      ...(groupAt < groups.length ? { confirmedAfter: confirmedFrom[groupAt] } : {}),
      ...(wholeGroup ? { wholeGroup } : {}),
    });
  };
  for (const group of groups) {
    while (damageAt < damages.length && damages[damageAt].offset < group.offset) {
      const damage = damages[damageAt++];
      noteDamage(damage.offset, damage.resumeAt, damage.reason);
    }
    const runs = groupRuns(bytes, group, decoder);
    let control: ReturnType<typeof readControl> | undefined;
    try {
      control = readControl(bytes, group, file);
    } catch {
      control = undefined;
    }
    if (!runs || !control || trailer) {
      // A group whose CRCs hold but whose content does not make sense (or that follows the
      // segment's end) was written whole by someone else's hand: it is corruption.
      noteDamage(
        group.offset,
        group.end,
        trailer ? 'a group after the segment was finished' : 'a group whose runs do not decode',
        true,
      );
      continue;
    }
    if (runs.length > 0) dataGroups++;
    for (const run of runs) entries.push({ kind: 'run', run });
    if (control.trailer) {
      trailer = control.trailer;
      finishedAt = group.end;
    }
    if (control.live) liveSegments = control.live;
  }
  for (const damage of damages.slice(damageAt)) noteDamage(damage.offset, damage.resumeAt, damage.reason);
  const lastGroup = groups[groups.length - 1];
  return {
    entries,
    end: lastGroup ? lastGroup.end : start,
    dataGroups,
    ...(trailer ? { trailer } : {}),
    ...(liveSegments ? { liveSegments } : {}),
    ...(lastGroup ? { lastGroup: lastGroup.offset } : {}),
  };
}
