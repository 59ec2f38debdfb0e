/**
 * Groups (docs/formats.md, docs/faults.md): every write to a WAL or history segment is one group,
 * a `GroupHeader` frame followed by the group's frames. The header carries the byte length of
 * the frames after it, the group's own offset, and how far the segment was confirmed durable
 * when the group was written. So recovery walks a segment group by group, knows where the last
 * writes began, and can look past damage for sound groups after it: damage that a later sound
 * group says was already confirmed cannot be a torn tail. Groups are pipelined (the next one is
 * written while the one before is still being synced), so the unconfirmed tail — the region a
 * power loss may tear — may hold more than one group, and each group names where it starts.
 *
 * A group is sound when its header frame passes its CRC, names its own offset, and the frames
 * after it pass their CRCs and tile its length exactly.
 */
import { assert } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameControlBit, frameHeaderBytes } from '../limits.js';
import { ByteReader, type ByteWriter } from './codec.js';
import { FrameKind } from './frame-kinds.js';
import { FrameBuilder, type ScannedFrame, scanFrames } from './framing.js';

/**
 * Data bytes of a group header frame: kind, `u32` bytes after the frame, `u64` own offset, `u64`
 * confirmed end (every byte of the segment before it was durable when the group was written).
 */
const groupHeaderDataBytes = 1 + 4 + 8 + 8;
/** Bytes of a whole group header frame. */
export const groupHeaderBytes = frameHeaderBytes + groupHeaderDataBytes;
/** The length word of every group header frame: fixed, which makes headers cheap to look for. */
const groupHeaderWord = (groupHeaderDataBytes | frameControlBit) >>> 0;
/** Bytes of a group that holds only a `SegmentEnd` frame (kind and two `u64`s). */
export const segmentEndGroupBytes = groupHeaderBytes + frameHeaderBytes + 1 + 8 + 8;
/** Bytes compared at a time when checking that the space after the last group is zeros. */
const zeroCheckChunkBytes = 64 * 1024;
const zeroChunk = Buffer.alloc(zeroCheckChunkBytes);

/** A frame builder whose every batch is one group: it starts each with a group header. */
export class GroupBuilder extends FrameBuilder {
  constructor(frameDataBytesMax: number) {
    super(frameDataBytesMax);
    this.clear();
  }

  /** The log's own control frames laid in this group (not part of any run). */
  private logControlFrames = 0;

  override clear(): void {
    super.clear();
    this.logControlFrames = 0;
    this.begin(FrameKind.GroupHeader, true).u32(0).u64(0).u64(0);
    this.end();
  }

  /** Lays one of the log's own control frames (`SegmentEnd`, `LiveSegments`). */
  logControl(kind: FrameKind.SegmentEnd | FrameKind.LiveSegments, write: (writer: ByteWriter) => void): void {
    write(this.begin(kind, true));
    this.end();
    this.logControlFrames++;
  }

  /** Frames laid for runs: all but the group header and the log's control frames. */
  get runFrameCount(): number {
    return this.frameCount - 1 - this.logControlFrames;
  }

  /** True when nothing but the header was laid: there is nothing to write. */
  get isEmpty(): boolean {
    return this.frameCount === 1;
  }
}

/**
 * Fills in a finished group's length, its offset and the segment's confirmed end (both known
 * only once the segment it goes to is chosen) and its header's CRC. Called on the bytes of
 * `GroupBuilder.finish`.
 */
export function sealGroup(kernels: Kernels, bytes: Uint8Array, offset: number, confirmed: number): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  assert(
    view.getUint32(0, true) === groupHeaderWord && bytes[frameHeaderBytes] === FrameKind.GroupHeader,
    'a group starts with its header',
  );
  assert(confirmed <= offset, 'a group was written after the bytes confirmed before it');
  view.setUint32(frameHeaderBytes + 1, bytes.length - groupHeaderBytes, true);
  view.setUint32(frameHeaderBytes + 5, offset % 0x1_0000_0000, true);
  view.setUint32(frameHeaderBytes + 9, Math.floor(offset / 0x1_0000_0000), true);
  view.setUint32(frameHeaderBytes + 13, confirmed % 0x1_0000_0000, true);
  view.setUint32(frameHeaderBytes + 17, Math.floor(confirmed / 0x1_0000_0000), true);
  view.setUint32(4, kernels.crc32(bytes.subarray(frameHeaderBytes, groupHeaderBytes)), true);
}

/** A group holding just one of the log's control frames. */
export function controlGroup(
  kind: FrameKind.SegmentEnd | FrameKind.LiveSegments,
  write: (writer: ByteWriter) => void,
): GroupBuilder {
  const builder = new GroupBuilder(controlGroupBytesMax);
  builder.logControl(kind, write);
  return builder;
}

/** Largest control frame: a live list of a few thousand segment bases. */
const controlGroupBytesMax = 64 * 1024;

/** Lays a `LiveSegments` frame: the WAL segments (by base) live from this group on. */
export function writeLiveSegments(builder: GroupBuilder, bases: readonly number[]): void {
  builder.logControl(FrameKind.LiveSegments, (writer) => {
    writer.varint(bases.length);
    for (const base of bases) writer.varint(base);
  });
}

/** A sound group: where it starts and ends, and its frames after the header. */
export interface Group {
  readonly offset: number;
  readonly end: number;
  /** How far the segment was confirmed durable when this group was written. */
  readonly confirmed: number;
  readonly frames: readonly ScannedFrame[];
}

/** Where a segment's bytes stop being sound groups, and where sound groups start again. */
export interface GroupDamage {
  readonly offset: number;
  /** The next sound group after the damage, if any: then the damage cannot be a torn tail. */
  readonly resumeAt: number | undefined;
  readonly reason: string;
}

/**
 * The header of a group at `at` when it is sound (its CRC holds, it names `at` as its offset, its
 * body ends by `limit`): where the group ends and how far the segment was confirmed before it.
 */
export function groupHeaderAt(
  kernels: Kernels,
  bytes: Uint8Array,
  at: number,
  limit: number,
): { end: number; confirmed: number } | undefined {
  if (at + groupHeaderBytes > limit) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(at, true) !== groupHeaderWord || bytes[at + frameHeaderBytes] !== FrameKind.GroupHeader)
    return undefined;
  if (kernels.crc32(bytes.subarray(at + frameHeaderBytes, at + groupHeaderBytes)) !== view.getUint32(at + 4, true))
    return undefined;
  const reader = new ByteReader(bytes, at + frameHeaderBytes + 1, at + groupHeaderBytes, 'group header');
  const bodyBytes = reader.u32();
  const offset = reader.u64();
  const confirmed = reader.u64();
  const end = at + groupHeaderBytes + bodyBytes;
  if (offset !== at || confirmed > offset || bodyBytes === 0 || end > limit) return undefined;
  return { end, confirmed };
}

/** The group at `at` when it is sound, else undefined. */
export function groupAt(kernels: Kernels, bytes: Uint8Array, at: number, limit: number): Group | undefined {
  const header = groupHeaderAt(kernels, bytes, at, limit);
  if (!header) return undefined;
  const { end, confirmed } = header;
  const frames = scanFrames(kernels, bytes, at + groupHeaderBytes, end);
  if (frames.length === 0 || frames[frames.length - 1].dataEnd !== end) return undefined;
  return { offset: at, end, confirmed, frames };
}

/** The first offset in [from, to) whose byte is not zero, or `to`. */
export function firstNonZero(bytes: Uint8Array, from: number, to: number): number {
  let at = from;
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  while (at < to) {
    const length = Math.min(zeroCheckChunkBytes, to - at);
    if (buffer.compare(zeroChunk, 0, length, at, at + length) !== 0) {
      for (let byte = at; byte < at + length; byte++) if (bytes[byte] !== 0) return byte;
    }
    at += length;
  }
  return to;
}

/** The offset of the next sound group at or after `from`, scanning byte by byte. */
function nextGroup(kernels: Kernels, bytes: Uint8Array, from: number, limit: number): number | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = from; at + groupHeaderBytes <= limit; at++) {
    if (view.getUint32(at, true) === groupHeaderWord && groupAt(kernels, bytes, at, limit)) return at;
  }
  return undefined;
}

/**
 * Walks the groups of `bytes[start, limit)`. Sound groups are returned in order; where the bytes
 * are neither a sound group nor zeros to the end, a damage is noted and the walk resumes at the
 * next sound group, if there is one.
 */
export function scanGroups(
  kernels: Kernels,
  bytes: Uint8Array,
  start: number,
  limit: number,
): { groups: Group[]; damages: GroupDamage[] } {
  const groups: Group[] = [];
  const damages: GroupDamage[] = [];
  let at = start;
  while (at < limit) {
    const group = groupAt(kernels, bytes, at, limit);
    if (group) {
      groups.push(group);
      at = group.end;
      continue;
    }
    const nonZero = firstNonZero(bytes, at, limit);
    if (nonZero === limit) break;
    const resumeAt = nextGroup(kernels, bytes, at + 1, limit);
    damages.push({ offset: at, resumeAt, reason: 'bytes that are not a sound group' });
    if (resumeAt === undefined) break;
    at = resumeAt;
  }
  return { groups, damages };
}
