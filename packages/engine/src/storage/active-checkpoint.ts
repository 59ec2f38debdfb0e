/**
 * Active checkpoints: the active history segment's commits and stored payloads as the feed last
 * closed with them, so that the next open reads the segment only after where it ended then,
 * instead of decoding every commit frame of it (most of the open of a feed of small commits:
 * 0.6 s for 100,000 one-record commits). The commits are held as a summary of the segment up to
 * that end holds them (`encodeSummary`), so the feed takes them as encoded pages; the payloads
 * are those pack deduplication remembers of the segment.
 *
 * A checkpoint is derived, like a summary: it is taken only when the segment still holds its
 * last group's header and its last commit frame, sound, ending exactly where the checkpoint says
 * the segment ended; one that is missing, stale or damaged is passed over and the segment read
 * whole, as before checkpoints existed. The bytes before that end were confirmed durable before
 * the checkpoint was written: damage there is corruption, which reads find, never a torn write.
 * A feed that wrote after it reads only what came after (a crash leaves the last checkpoint a
 * prefix of the segment: segments are only appended to).
 *
 * File `<base>.ckpt` beside the segment, little-endian: `"SSACTV01"`, `u32` format version (1),
 * `u64` where the segment's last group starts, `u32` the summary's length, the summary
 * (docs/formats.md, Segment summaries; its `end` is where the segment ended), `u32` payload
 * count, per payload `u32` CRC-32C · `u64` offset · `u32` length, then a `u32` CRC-32 of every
 * byte before it.
 *
 * @example
 * const found = await readActiveCheckpoint(kernels, store, segment.header);
 * if (found.checkpoint) commits.pushHeld(found.checkpoint.head, found.checkpoint.summaryBytes);
 */
import type { Kernels } from '../kernels/kernels.js';
import { segmentHeaderBytes } from '../limits.js';
import { ByteReader, ByteWriter } from './codec.js';
import type { SummaryContent } from './commit-pages.js';
import { segmentFileName, segmentSuffix } from './feed-layout.js';
import type { SegmentHeader } from './segment.js';
import { isMissingFile, type SegmentStore } from './segment-store.js';
import { decodeSummaryHead, encodeSummary, type SummaryHead } from './segment-summary.js';

/** The payloads a run may reference in the segment: each one's CRC-32C, offset and length. */
export interface StoredPayloads {
  readonly count: number;
  readonly crcs: Uint32Array;
  readonly offsets: Float64Array;
  readonly lengths: Uint32Array;
}

/** What a checkpoint holds: the segment's commits (as a summary to `head.end`) and its payloads. */
export interface ActiveCheckpoint {
  readonly head: SummaryHead;
  /** Where the segment's last group before `head.end` starts. */
  readonly lastGroupOffset: number;
  /** The summary's bytes whole: its pages are taken as they are (`CommitList.pushHeld`). */
  readonly summaryBytes: Uint8Array;
  readonly payloads: StoredPayloads;
}

const magic = new TextEncoder().encode('SSACTV01');
const formatVersion = 1;
/** Bytes a payload takes in the file: CRC, offset, length. */
const payloadEntryBytes = 16;

/** The store's name of the checkpoint of the segment at `base`. */
export function activeCheckpointName(base: number): string {
  return segmentFileName(base, segmentSuffix.activeCheckpoint);
}

/**
 * Writes the checkpoint of the active segment `header` names, which ends at `end` and holds
 * `content` and `payloads`, durably through `store` (replacing the one before).
 */
export async function writeActiveCheckpoint(
  kernels: Kernels,
  store: SegmentStore,
  header: SegmentHeader,
  end: number,
  lastGroupOffset: number,
  content: SummaryContent,
  payloads: StoredPayloads,
): Promise<void> {
  const { base, baseCommit, capacity } = header;
  const summary = encodeSummary(kernels, { base, baseCommit, capacity, end, content });
  const writer = new ByteWriter(summary.length + payloads.count * payloadEntryBytes + 64);
  writer.raw(magic).u32(formatVersion).u64(lastGroupOffset).u32(summary.length).raw(summary).u32(payloads.count);
  for (let index = 0; index < payloads.count; index++)
    writer.u32(payloads.crcs[index]).u64(payloads.offsets[index]).u32(payloads.lengths[index]);
  const body = writer.finish();
  const bytes = new Uint8Array(body.length + 4);
  bytes.set(body);
  new DataView(bytes.buffer).setUint32(body.length, kernels.crc32(body), true);
  // Checked before writing as reading checks it after: the file reads back as what was meant.
  const back = decodeActiveCheckpoint(kernels, bytes, header, activeCheckpointName(base));
  if ('problem' in back || back.head.end !== end || back.lastGroupOffset !== lastGroupOffset)
    throw new Error(`the checkpoint of segment ${base} does not read back as written`);
  await store.put(activeCheckpointName(base), bytes);
}

/**
 * The checkpoint of the segment `header` names, when `store` holds one whose bytes hold
 * together (the caller checks it against the segment's own bytes); `problem` says why one that
 * is there was not taken.
 */
export async function readActiveCheckpoint(
  kernels: Kernels,
  store: SegmentStore,
  header: SegmentHeader,
): Promise<{ checkpoint?: ActiveCheckpoint; problem?: string }> {
  const name = activeCheckpointName(header.base);
  let bytes: Uint8Array;
  try {
    bytes = (await store.readStart(name, Number.POSITIVE_INFINITY)).bytes;
  } catch (error) {
    if (isMissingFile(error)) return {};
    return { problem: (error as Error).message };
  }
  const decoded = decodeActiveCheckpoint(kernels, bytes, header, name);
  return 'problem' in decoded ? { problem: decoded.problem } : { checkpoint: decoded };
}

function decodeActiveCheckpoint(
  kernels: Kernels,
  bytes: Uint8Array,
  header: SegmentHeader,
  name: string,
): ActiveCheckpoint | { problem: string } {
  try {
    if (bytes.length < magic.length + 16) return { problem: 'shorter than its head' };
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (kernels.crc32(bytes.subarray(0, bytes.length - 4)) !== view.getUint32(bytes.length - 4, true))
      return { problem: 'CRC mismatch' };
    const reader = new ByteReader(bytes, 0, bytes.length - 4, `active checkpoint ${name}`);
    if (!reader.raw(magic.length).every((byte, at) => byte === magic[at])) return { problem: 'bad magic' };
    const version = reader.u32();
    if (version !== formatVersion) return { problem: `unknown format version ${version}` };
    const lastGroupOffset = reader.u64();
    const summaryBytes = reader.raw(reader.u32()).slice();
    const head = decodeSummaryHead(kernels, summaryBytes, header, name);
    if (head.commitCount === 0) return { problem: 'it holds no commit' };
    if (lastGroupOffset < segmentHeaderBytes || lastGroupOffset > head.lastFrameOffset)
      return { problem: `its last group at ${lastGroupOffset} cannot hold its last commit frame` };
    const count = reader.u32();
    if (count * payloadEntryBytes !== reader.remaining) return { problem: `${count} payloads do not fill it` };
    const payloads = {
      count,
      crcs: new Uint32Array(count),
      offsets: new Float64Array(count),
      lengths: new Uint32Array(count),
    };
    for (let index = 0; index < count; index++) {
      payloads.crcs[index] = reader.u32();
      payloads.offsets[index] = reader.u64();
      payloads.lengths[index] = reader.u32();
      if (payloads.offsets[index] < segmentHeaderBytes || payloads.offsets[index] + payloads.lengths[index] > head.end)
        return { problem: `payload ${index} lies outside the segment's written part` };
    }
    reader.expectEnd();
    return { head, lastGroupOffset, summaryBytes, payloads };
  } catch (error) {
    return { problem: (error as Error).message };
  }
}
