/**
 * A tiered segment's descriptor: the small object that makes a sealed segment visible in object
 * storage, and the remote layout it belongs to. A sealed segment's files (its history segment,
 * summary, tag index and dictionaries) go up first, each as an immutable object named by the
 * segment's ordinal; then the descriptor is created with put-if-absent under the same ordinal.
 * Whoever finds a descriptor can read every file it names, and check every block of them against
 * the CRCs it carries.
 *
 * Ordinals count up, one per segment a writer ever tiered, and are never reused: a merge or key
 * compaction that rewrites segments publishes the result under a new ordinal whose descriptor
 * names the ordinals it replaces. So an object name is written once, by one upload (retries of
 * it write the same bytes), and a late put-if-absent can never bring back a name that was retired.
 *
 * A feed's objects live under `feeds/<name>/<tag>/` of the configured prefix (the tag tells a
 * feed from an earlier one of the same name): `segments/<ordinal>-<file>` for the files,
 * `descriptors/<ordinal>` for the descriptors, and `boundary`, the lowest ordinal and position a
 * trim kept, written before anything below it is deleted. Beside the tag folders, `feeds/<name>/feed.json`
 * holds the feed's `feed.json` as its writer has it: how a follower on another machine learns
 * which tag folder is the feed's now.
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';

/** Digits of an ordinal in an object name, so names sort as ordinals do. */
const ordinalDigits = 16;

/** The folder, under the configured prefix, of one feed's objects. */
export function feedObjectPrefix(feed: string, feedTag: number): string {
  return `${feedNameObjectPrefix(feed)}${feedTag.toString(16).padStart(8, '0')}/`;
}

/** The folder, under the configured prefix, of every feed's objects (a folder per feed name). */
export const feedsObjectPrefix = 'feeds/';

/** The folder, under the configured prefix, of every generation of the feed `feed` (its tag folders and `feed.json`). */
export function feedNameObjectPrefix(feed: string): string {
  return `${feedsObjectPrefix}${feed}/`;
}

/** The object, in `feedNameObjectPrefix`, that holds the feed's `feed.json`: its tag, so its folder. */
export const feedConfigObjectName = 'feed.json';

/** The sub-folders of a feed's objects. */
export const objectFolders = { segments: 'segments/', descriptors: 'descriptors/' } as const;

/** The name of the feed's trim boundary object, directly under the feed's folder. */
export const boundaryObjectName = 'boundary';

/** An ordinal as object names spell it. */
export function ordinalName(ordinal: number): string {
  return String(ordinal).padStart(ordinalDigits, '0');
}

/** The object name of the file `file` (a local file name, `<base>.hist`) of the segment tiered as `ordinal`. */
export function segmentObjectName(ordinal: number, file: string): string {
  return `${ordinalName(ordinal)}-${file}`;
}

/** One file of a tiered segment, as its descriptor names it. */
export interface DescribedFile {
  /** Its local name (`0000000000000001.hist`); the object is `segmentObjectName(ordinal, name)`. */
  readonly name: string;
  readonly bytes: number;
  /** The CRC-32 of each block of `blockBytes` (the last one shorter), in order. */
  readonly blockCrcs: readonly number[];
}

/** What a descriptor says of its segment. */
export interface SegmentDescriptor {
  readonly format: 1;
  readonly feed: string;
  readonly feedTag: number;
  readonly ordinal: number;
  /** The segment's base (its first position) and last position. */
  readonly base: number;
  readonly lastPosition: number;
  readonly firstCommit: number;
  readonly lastCommit: number;
  /** The segment's fingerprint (`segmentSource`): a rewrite of the same base has another. */
  readonly source: number;
  /** Ordinals of segments this one rewrote (a merge, a key compaction): they are retired. */
  readonly replaces: readonly number[];
  /** The writer lease's epoch when the segment was tiered, and the writer's id. */
  readonly epoch: number;
  readonly writer: string;
  readonly blockBytes: number;
  readonly files: readonly DescribedFile[];
  /** Milliseconds since the epoch. */
  readonly createdAt: number;
  /**
   * The writer's floor when the segment went up: its key and fingerprint dictionaries hold
   * winners and first occurrences over the history from there on. A follower whose floor is
   * higher (a trim since) builds them again rather than use them. Absent in older descriptors.
   */
  readonly floorPosition?: number;
  /**
   * True for the descriptor of a segment retired before it was ever visible (a rewrite or trim
   * took it while it was going up): it names no files, and is there so that ordinals have no
   * holes for a reader walking them.
   */
  readonly retired?: true;
}

/** The trim boundary: nothing below `lowOrdinal` or `lowPosition` is kept. */
export interface TrimBoundary {
  readonly format: 1;
  readonly lowOrdinal: number;
  readonly lowPosition: number;
  /**
   * The first commit kept (the retention floor's commit, at `lowPosition`), so a follower's
   * history starts where the writer's does; absent in boundaries written before followers.
   */
  readonly lowCommit?: number;
}

/** A descriptor's bytes: JSON, so an operator can read one with any S3 tool. */
export function encodeDescriptor(descriptor: SegmentDescriptor): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(descriptor));
}

const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
const isCrc = (value: unknown): value is number => isCount(value) && value <= 0xffff_ffff;

/** Reads a descriptor; `CORRUPT` naming `object` when it is not one this build can trust. */
export function decodeDescriptor(bytes: Uint8Array, object: string): SegmentDescriptor {
  const bad = (why: string) =>
    new StreamStackError('CORRUPT', `the segment descriptor ${object} ${why}`, { details: { object } });
  let value: Record<string, unknown>;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (cause) {
    throw Object.assign(bad('is not JSON'), { cause });
  }
  if (typeof value !== 'object' || value === null || value.format !== 1) throw bad('is of an unknown format');
  for (const field of [
    'feedTag',
    'ordinal',
    'base',
    'lastPosition',
    'firstCommit',
    'lastCommit',
    'epoch',
    'blockBytes',
    'createdAt',
  ])
    if (!isCount(value[field])) throw bad(`has no valid ${field}`);
  if (typeof value.feed !== 'string' || typeof value.writer !== 'string') throw bad('names no feed or writer');
  if (!isCrc(value.source)) throw bad('has no valid source');
  if (!Array.isArray(value.replaces) || !value.replaces.every(isCount)) throw bad('has no valid replaces');
  if ((value.blockBytes as number) < 1) throw bad('has no valid blockBytes');
  if (value.floorPosition !== undefined && !isCount(value.floorPosition)) throw bad('has no valid floorPosition');
  const files = value.files;
  if (value.retired !== undefined && value.retired !== true) throw bad('has no valid retired');
  if (!Array.isArray(files) || (files.length === 0) !== (value.retired === true))
    throw bad(value.retired ? 'is retired but names files' : 'names no files');
  for (const file of files as Record<string, unknown>[]) {
    if (typeof file?.name !== 'string' || !isCount(file.bytes) || !Array.isArray(file.blockCrcs))
      throw bad('describes a file badly');
    if (!file.blockCrcs.every(isCrc) || file.blockCrcs.length !== blocksOf(file.bytes, value.blockBytes as number))
      throw bad(`has the wrong block CRCs for ${file.name}`);
  }
  return value as unknown as SegmentDescriptor;
}

/**
 * A descriptor's local copy (`segmentSuffix.descriptor`): the CRC-32 of its bytes (`u32le`),
 * then the bytes `encodeDescriptor` makes. The CRC tells a copy a crash cut short or the disk
 * damaged, which is then read from object storage again instead of trusted.
 */
export function encodeDescriptorCopy(kernels: Pick<Kernels, 'crc32'>, descriptor: SegmentDescriptor): Uint8Array {
  const json = encodeDescriptor(descriptor);
  const bytes = new Uint8Array(4 + json.length);
  new DataView(bytes.buffer).setUint32(0, kernels.crc32(json), true);
  bytes.set(json, 4);
  return bytes;
}

/** Reads a local copy (`encodeDescriptorCopy`); `CORRUPT` naming `file` when it fails its CRC or is no descriptor. */
export function decodeDescriptorCopy(
  kernels: Pick<Kernels, 'crc32'>,
  bytes: Uint8Array,
  file: string,
): SegmentDescriptor {
  const json = bytes.subarray(4);
  if (bytes.length < 4 || new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true) !== kernels.crc32(json))
    throw new StreamStackError('CORRUPT', `the descriptor copy ${file} fails its CRC`, { details: { file } });
  return decodeDescriptor(json, file);
}

/** How many blocks of `blockBytes` a file of `bytes` is checked in (an empty file: one, empty). */
export function blocksOf(bytes: number, blockBytes: number): number {
  return Math.max(1, Math.ceil(bytes / blockBytes));
}

/** A boundary's bytes. */
export function encodeBoundary(boundary: TrimBoundary): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(boundary));
}

/** Reads a boundary; `CORRUPT` naming `object` when it is not one. */
export function decodeBoundary(bytes: Uint8Array, object: string): TrimBoundary {
  let value: Record<string, unknown> | undefined;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch {
    value = undefined;
  }
  if (
    value?.format !== 1 ||
    !isCount(value.lowOrdinal) ||
    !isCount(value.lowPosition) ||
    (value.lowCommit !== undefined && !isCount(value.lowCommit))
  )
    throw new StreamStackError('CORRUPT', `the trim boundary ${object} is not one this build can read`, {
      details: { object },
    });
  return value as unknown as TrimBoundary;
}
