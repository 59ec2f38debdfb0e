/**
 * Recovery of a segment's runs (DESIGN §5): a run is committed if and only if every frame since
 * the previous commit point validates by CRC and the run ends in a valid commit marker whose
 * sequence follows the previous one. Everything after the last commit point is a torn tail.
 */
import type { Kernels } from '../kernels/kernels.js';
import { segmentHeaderBytes } from '../limits.js';
import { scanFrames, type ScannedFrame } from './framing.js';
import type { SegmentFile } from './segment.js';

export interface Run<M> {
  /** The frames before the marker. */
  readonly frames: readonly ScannedFrame[];
  readonly marker: ScannedFrame;
  /** What the marker decoded to. */
  readonly decoded: M;
}

/** What recovery cut off the end of a segment. */
export interface TornTail {
  readonly file: string;
  /** Where the last commit point ends, and so where the cut starts. */
  readonly offset: number;
  /** How many bytes after it were not zero (torn or unacknowledged frames). */
  readonly bytes: number;
}

export interface RecoveredSegment<M> {
  readonly runs: Run<M>[];
  /** Offset just past the last committed run: where the next run goes. */
  readonly end: number;
  readonly tornTail?: TornTail;
}

/**
 * Finds the committed runs of a segment, given a function that decodes a marker frame (or says,
 * by returning undefined, that it is not a valid marker in sequence). `expectNext` receives each
 * accepted marker so the decoder can check the next one follows it.
 */
export function findRuns<M>(
  kernels: Kernels,
  bytes: Uint8Array,
  file: string,
  decodeMarker: (frame: ScannedFrame, frames: readonly ScannedFrame[]) => M | undefined,
  isMarker: (frame: ScannedFrame) => boolean,
): RecoveredSegment<M> {
  const frames = scanFrames(kernels, bytes, segmentHeaderBytes, bytes.length);
  const runs: Run<M>[] = [];
  let pending: ScannedFrame[] = [];
  let end = segmentHeaderBytes;
  for (const frame of frames) {
    if (!isMarker(frame)) {
      pending.push(frame);
      continue;
    }
    const decoded = decodeMarker(frame, pending);
    if (decoded === undefined) break;
    runs.push({ frames: pending, marker: frame, decoded });
    pending = [];
    end = frame.dataEnd;
  }
  let lastNonZero = bytes.length - 1;
  while (lastNonZero >= end && bytes[lastNonZero] === 0) lastNonZero--;
  const tornBytes = lastNonZero + 1 - end;
  return tornBytes > 0 ? { runs, end, tornTail: { file, offset: end, bytes: tornBytes } } : { runs, end };
}

/**
 * Makes a recovered segment writable again: zeros the torn tail (so no stale frame can ever be
 * read as part of a later run) and restores the preallocation if the file was cut short.
 */
export async function repairTail(
  kernels: Kernels,
  segment: SegmentFile,
  fileBytes: number,
  recovered: RecoveredSegment<unknown>,
): Promise<void> {
  if (recovered.tornTail) {
    await segment.zeroRange(kernels, recovered.tornTail.offset, recovered.tornTail.offset + recovered.tornTail.bytes);
  }
  if (fileBytes < segment.header.capacity) {
    await segment.zeroRange(kernels, fileBytes, segment.header.capacity);
  }
  segment.writeOffset = recovered.end;
}
