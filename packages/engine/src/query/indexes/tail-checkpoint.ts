/**
 * Tail checkpoints: what the indexes hold of the active history segment (the tag and type tail,
 * the key and fingerprint occurrences), written when the feed closes, so that the next open
 * replays only the commits after it instead of every record of the active segment (about 8 µs a
 * record, most of a large feed's open). A checkpoint is derived like an index file: it names the
 * last commit it holds — where that commit's frame lies in the segment and the frame's header as
 * the segment holds it — and is taken only when the active segment holds that very commit; one
 * that is missing, stale (another segment, another commit there) or damaged is passed over and the
 * segment replayed, as before checkpoints existed. A feed that wrote after it replays only what
 * came after (a crash leaves the last checkpoint a prefix of the segment).
 *
 * File `<base>.tail` in the index folder, little-endian: `"SSTAIL01"`, `u32` format version (2),
 * `u64` base, `u64` commit, `u64` its last position, `u64` the commit frame's offset, the frame's
 * 8-byte header, then the tail, the keys and the fingerprints (`TailIndex.writeTo`,
 * `SegmentKeys.writeTo`), then a `u32` CRC-32 of every byte before it.
 *
 * @example
 * const found = await readTailCheckpoint(kernels, store, history, active.base);
 * if (found.checkpoint) replayAfter(found.checkpoint.commit);
 */
import os from 'node:os';
import type { Kernels } from '../../kernels/kernels.js';
import { frameHeaderBytes } from '../../limits.js';
import { ByteReader, ByteWriter } from '../../storage/codec.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { segmentFileName, segmentSuffix } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import type { SegmentStore } from '../../storage/segment-store.js';
import { isMissingFile } from '../../storage/segment-store.js';
import { commitFrameHeader } from '../../storage/segment-summary.js';
import { TailIndex } from './segment-index.js';
import { SegmentKeys } from './segment-keys.js';

/** What a checkpoint holds: the active segment's tails as they were after `commit`. */
export interface TailCheckpoint {
  readonly commit: number;
  readonly tail: TailIndex;
  readonly keys: SegmentKeys;
  readonly fingerprints: SegmentKeys;
}

const magic = new TextEncoder().encode('SSTAIL01');
const formatVersion = 2;

/**
 * Checkpoints hold typed-array columns as they lie in memory: a big-endian machine writes none
 * and reads none (it replays, as before checkpoints).
 */
export const tailCheckpointsUsable = os.endianness() === 'LE';

/** The store's name of the checkpoint of the segment at `base`. */
export function tailCheckpointName(base: number): string {
  return segmentFileName(base, segmentSuffix.tailCheckpoint);
}

/**
 * Writes the checkpoint of the active segment at `base` holding everything up to `commit` (the
 * last commit published), durably, through `store`.
 */
export async function writeTailCheckpoint(
  kernels: Kernels,
  store: SegmentStore,
  base: number,
  commit: CommitRecord,
  tails: Omit<TailCheckpoint, 'commit'>,
): Promise<void> {
  if (!tailCheckpointsUsable) return;
  // Checked before writing as reading checks it after: the tail holds every position to the commit.
  if (commit.segment !== base || tails.tail.base !== base || tails.tail.count !== commit.lastPosition - base + 1)
    throw new Error(`a tail checkpoint of segment ${base} holds its positions up to commit ${commit.commit}`);
  const { offset, header } = commitFrameHeader(kernels, commit);
  const writer = new ByteWriter(1024 * 1024);
  writer.raw(magic).u32(formatVersion).u64(base).u64(commit.commit).u64(commit.lastPosition).u64(offset).raw(header);
  tails.tail.writeTo(writer);
  tails.keys.writeTo(writer);
  tails.fingerprints.writeTo(writer);
  const body = writer.finish();
  const crc = new ByteWriter(4).u32(kernels.crc32(body)).finish();
  const bytes = new Uint8Array(body.length + 4);
  bytes.set(body);
  bytes.set(crc, body.length);
  await store.put(tailCheckpointName(base), bytes);
}

/**
 * The checkpoint of the active segment at `base` in `store`, when there is one that holds: its
 * commit is in the segment, at the offset and with the frame header it names. `problem` says why
 * a checkpoint that is there was not taken (undefined: taken, or none).
 */
export async function readTailCheckpoint(
  kernels: Kernels,
  store: SegmentStore,
  history: History,
  base: number,
): Promise<{ checkpoint?: TailCheckpoint; problem?: string }> {
  if (!tailCheckpointsUsable) return {};
  let bytes: Uint8Array;
  try {
    bytes = (await store.readStart(tailCheckpointName(base), Number.POSITIVE_INFINITY)).bytes;
  } catch (error) {
    if (isMissingFile(error)) return {};
    return { problem: (error as Error).message };
  }
  try {
    const reader = new ByteReader(bytes, 0, bytes.length - 4, `tail checkpoint ${tailCheckpointName(base)}`);
    if (bytes.length < magic.length + 4 || kernels.crc32(bytes.subarray(0, bytes.length - 4)) !== crcOf(bytes))
      return { problem: 'CRC mismatch' };
    if (!reader.raw(magic.length).every((byte, at) => byte === magic[at])) return { problem: 'bad magic' };
    if (reader.u32() !== formatVersion) return { problem: 'another format version' };
    if (reader.u64() !== base) return { problem: 'another segment' };
    const number = reader.u64();
    const lastPosition = reader.u64();
    const offset = reader.u64();
    const frame = reader.raw(frameHeaderBytes);
    const commit = heldCommit(history, base, number);
    if (!commit || commit.lastPosition !== lastPosition) return { problem: `commit ${number} is not in the segment` };
    const held = commitFrameHeader(kernels, commit);
    if (held.offset !== offset || !held.header.every((byte, at) => byte === frame[at]))
      return { problem: `commit ${number} is not where the checkpoint names it` };
    const tail = TailIndex.readFrom(reader, base);
    const keys = SegmentKeys.readFrom(reader, base, 'latest');
    const fingerprints = SegmentKeys.readFrom(reader, base, 'first');
    reader.expectEnd();
    if (tail.count !== lastPosition - base + 1) return { problem: `its tail holds ${tail.count} positions` };
    keys.lastCommit = commit;
    fingerprints.lastCommit = commit;
    return { checkpoint: { commit: number, tail, keys, fingerprints } };
  } catch (error) {
    return { problem: (error as Error).message };
  }
}

/** The CRC a checkpoint's last four bytes hold. */
function crcOf(bytes: Uint8Array): number {
  return new DataView(bytes.buffer, bytes.byteOffset + bytes.length - 4, 4).getUint32(0, true);
}

/** Commit `number` when the history holds it in the segment at `base`; else undefined. */
function heldCommit(history: History, base: number, number: number): CommitRecord | undefined {
  const list = history.commits;
  if (number < list.low || number > list.length || number < 1) return undefined;
  const commit = list.at(number);
  return commit.segment === base ? commit : undefined;
}
