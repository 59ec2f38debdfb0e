/**
 * Reading commit runs out of a segment without the rest of the history: the runs of consecutive
 * commits read a stretch at a time, a run decoded into columns (payloads stored by other runs
 * left unread), and a compacted run's retired fingerprints. `HistoryRuns` reads a history's runs
 * through these, and so does a rewrite's worker, which reads back the one segment it wrote to
 * build the segment's derived files — with the same functions, so they come out byte for byte as
 * a rebuild from the history would make them.
 */
import { StreamStackError } from '../errors.js';
import { yieldToEventLoop } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { manifestRunFields } from '../kernels/manifest-columns.js';
import { frameHeaderBytes, frameLengthMask, runsReadBytesMax } from '../limits.js';
import type { CommitRecord } from './commit-record.js';
import { type RetiredFingerprint, readRetiredFrame } from './commit-run.js';
import { FrameKind } from './frame-kinds.js';
import { type ScannedFrame, scanFrames } from './framing.js';
import {
  type DecoderLayout,
  type DecoderRun,
  decoderLayout,
  type RunColumns,
  RunColumnsDecoder,
} from './run-columns.js';
import type { SegmentFile } from './segment.js';

/**
 * What a derived file's build reads a segment's runs through: the whole history, or one segment
 * file on its own (see `SegmentRuns`). Payloads are never read: a build wants keys, tags, types,
 * versions, flags, fingerprints and places.
 */
export interface SegmentRunSource {
  /** Each of `commits` (consecutive, readable, of one segment) with its run's bytes. */
  runsInStretches(commits: readonly CommitRecord[]): AsyncGenerator<{ commit: CommitRecord; bytes: Uint8Array }>;
  /** A run's records as columns, at most `rowsMax` rows at a time, payloads stored elsewhere unread. */
  runColumns(commit: CommitRecord, bytes: Uint8Array, rowsMax: number, payloads: false): AsyncGenerator<RunColumns>;
  /** The fingerprints a key-compacted run retired (empty for any other run). */
  readRetired(commit: CommitRecord, runBytes?: Uint8Array): Promise<RetiredFingerprint[]>;
  /** The file of the segment at `base`, for errors. */
  fileFor(base: number): string;
}

/** Fails with `CORRUPT` when `commit` is a stand-in for a commit that corruption took. */
export function assertReadable(commit: CommitRecord): void {
  if (!commit.damage) return;
  const { file, offset, reason } = commit.damage;
  throw new StreamStackError(
    'CORRUPT',
    `commit ${commit.commit} cannot be read: ${file} is corrupt at offset ${offset} (${reason})`,
    {
      details: { file, offset, commit: commit.commit },
    },
  );
}

/** A `CORRUPT` error from decoding bytes read at `file:offset`, with that place in its details. */
export function withPlace(error: unknown, file: string, offset: number): unknown {
  if (!(error instanceof StreamStackError) || error.code !== 'CORRUPT' || typeof error.details.file === 'string')
    return error;
  return new StreamStackError('CORRUPT', error.message, { cause: error, details: { ...error.details, file, offset } });
}

/** Whether `next` may join a stretch of runs that begins with `first` (one read of at most `runsReadBytesMax`). */
export function joinsStretch(first: CommitRecord, next: CommitRecord, bytesMax = runsReadBytesMax): boolean {
  return (
    !first.damage &&
    !next.damage &&
    next.segment === first.segment &&
    next.runStart + next.runBytes - first.runStart <= bytesMax
  );
}

/** Each run of a stretch (`commits`, read as `bytes` from the first run's start) as a view of it. */
export function runsOfStretch(commits: readonly CommitRecord[], bytes: Uint8Array): Uint8Array[] {
  if (commits.length === 1) return [bytes];
  const first = commits[0].runStart;
  return commits.map((commit) => bytes.subarray(commit.runStart - first, commit.runStart - first + commit.runBytes));
}

/** `commits` cut into stretches that are each read at once (see `joinsStretch`). */
export function* stretchesOf(commits: readonly CommitRecord[]): Generator<readonly CommitRecord[]> {
  for (let at = 0; at < commits.length; ) {
    let end = at + 1;
    while (end < commits.length && joinsStretch(commits[at], commits[end])) end++;
    yield commits.slice(at, end);
    at = end;
  }
}

/** A run's frames, verified by their CRCs and found to fill it (`file` names its segment in errors). */
function verifiedFrames(kernels: Kernels, file: string, commit: CommitRecord, bytes: Uint8Array): ScannedFrame[] {
  const frames = scanFrames(kernels, bytes, 0, bytes.length);
  const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
  if (frameEnd !== bytes.length) {
    throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${file} is damaged`, {
      details: { file, offset: commit.runStart + frameEnd },
    });
  }
  return frames;
}

/** A commit's run as a decoder takes it: where it lies in the decoder's bytes, and how it is placed. */
function decoderRun(commit: CommitRecord, frames: readonly ScannedFrame[], start: number): DecoderRun {
  return {
    start,
    end: start + commit.runBytes,
    frames,
    count: commit.entries,
    firstPosition: commit.firstPosition,
    ...(commit.entries !== commit.records ? { sparseLast: commit.lastPosition } : {}),
  };
}

/**
 * Verifies a run's frames and makes the decoder of its records' columns (`file` names the
 * segment in errors). A compacted run places each entry by its seq.
 */
export function runColumnsDecoder(
  kernels: Kernels,
  file: string,
  commit: CommitRecord,
  bytes: Uint8Array,
): RunColumnsDecoder {
  assertReadable(commit);
  try {
    const frames = verifiedFrames(kernels, file, commit, bytes);
    return new RunColumnsDecoder(
      kernels,
      bytes,
      decoderLayout([decoderRun(commit, frames, 0)]),
      `${file}:${commit.runStart}`,
    );
  } catch (error) {
    throw withPlace(error, file, commit.runStart);
  }
}

/**
 * Verifies the runs of `commits` (consecutive, readable, of one segment: a stretch) and makes
 * one decoder over all of them, whose batches span commits: `bytes` is the stretch as read, from
 * the first run's start to the last run's end. The stretch's frames (its runs' and the group
 * headers between them) are verified with one scan; should they not tile it, each run is
 * verified on its own, which names the damage and where it lies.
 */
export function stretchColumnsDecoder(
  kernels: Kernels,
  file: string,
  commits: readonly CommitRecord[],
  bytes: Uint8Array,
): RunColumnsDecoder {
  const first = commits[0].runStart;
  for (const commit of commits) assertReadable(commit);
  const layout =
    stretchLayout(kernels, commits, bytes) ??
    decoderLayout(
      commits.map((commit) => {
        const start = commit.runStart - first;
        try {
          const frames = verifiedFrames(kernels, file, commit, bytes.subarray(start, start + commit.runBytes));
          return decoderRun(
            commit,
            frames.map((frame) => movedFrame(frame, start)),
            start,
          );
        } catch (error) {
          throw withPlace(error, file, commit.runStart);
        }
      }),
    );
  return new RunColumnsDecoder(kernels, bytes, layout, `${file}:${first}`);
}

/** `frame`, `by` bytes further on. */
function movedFrame(frame: ScannedFrame, by: number): ScannedFrame {
  return { ...frame, offset: frame.offset + by, dataStart: frame.dataStart + by, dataEnd: frame.dataEnd + by };
}

/**
 * Where a stretch's frames start, for the checksum kernel: one buffer made outside the V8 heap
 * and used again (see `scanFrames`), grown as a stretch needs.
 */
let stretchFrameOffsets = new Uint32Array(new ArrayBuffer(4 * 4096));

/**
 * The layout of a stretch's runs for a decoder, from one walk over its frames and one checksum
 * kernel call, with no object per frame or run; undefined when the frames do not tile the
 * stretch with each run beginning and ending at a frame's edge, or one fails its CRC.
 */
function stretchLayout(
  kernels: Kernels,
  commits: readonly CommitRecord[],
  bytes: Uint8Array,
): DecoderLayout | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let frames = 0;
  for (let at = 0; at < bytes.length; ) {
    if (at + frameHeaderBytes > bytes.length) return undefined;
    const length = view.getUint32(at, true) & frameLengthMask;
    if (length === 0 || at + frameHeaderBytes + length > bytes.length) return undefined;
    if (frames === stretchFrameOffsets.length) {
      const grown = new Uint32Array(new ArrayBuffer(8 * frames));
      grown.set(stretchFrameOffsets);
      stretchFrameOffsets = grown;
    }
    stretchFrameOffsets[frames++] = at;
    at += frameHeaderBytes + length;
  }
  const offsets = stretchFrameOffsets.subarray(0, frames);
  if (kernels.frameChecksumsVerify(bytes, offsets) >= 0) return undefined;
  // Every manifest frame of the stretch is a run's (group headers and the log's own frames are
  // control frames of other kinds), so the count bounds the layout's frames.
  let manifestCount = 0;
  for (let frame = 0; frame < frames; frame++)
    if (bytes[offsets[frame] + frameHeaderBytes] === FrameKind.Manifest) manifestCount++;
  const layout = {
    manifests: new Uint32Array(3 * manifestCount),
    runFields: new Uint32Array(manifestRunFields * commits.length),
    firstPositions: new Float64Array(commits.length),
    sparseLasts: new Float64Array(commits.length),
  };
  const first = commits[0].runStart;
  let frame = 0;
  let manifest = 0;
  for (let run = 0; run < commits.length; run++) {
    const commit = commits[run];
    const start = commit.runStart - first;
    const end = start + commit.runBytes;
    // Frames before the run (a group's header) are passed over; the run's own must fill it.
    while (frame < frames && offsets[frame] < start) frame++;
    if (frame === frames || offsets[frame] !== start) return undefined;
    layout.runFields[manifestRunFields * run] = manifest;
    layout.runFields[manifestRunFields * run + 1] = commit.entries;
    layout.runFields[manifestRunFields * run + 2] = start;
    layout.runFields[manifestRunFields * run + 3] = end;
    layout.firstPositions[run] = commit.firstPosition;
    layout.sparseLasts[run] = commit.entries !== commit.records ? commit.lastPosition : -1;
    for (; frame < frames && offsets[frame] < end; frame++) {
      const offset = offsets[frame];
      const dataStart = offset + frameHeaderBytes;
      const dataEnd = dataStart + (view.getUint32(offset, true) & frameLengthMask);
      if (dataEnd > end) return undefined;
      if (bytes[dataStart] !== FrameKind.Manifest) continue;
      layout.manifests[3 * manifest] = offset;
      layout.manifests[3 * manifest + 1] = dataStart;
      layout.manifests[3 * manifest + 2] = dataEnd;
      manifest++;
    }
    // The frames tile the stretch, so the run's last one ends where the next frame begins: at its end.
    if (frame === frames && end !== bytes.length) return undefined;
  }
  return layout;
}

/** The next batch of at most `rowsMax` rows from `decoder`, its errors placed in `file` at `offset`. */
export function nextColumns(decoder: RunColumnsDecoder, file: string, offset: number, rowsMax: number): RunColumns {
  try {
    return decoder.next(rowsMax);
  } catch (error) {
    throw withPlace(error, file, offset);
  }
}

/**
 * The fingerprints a key-compacted run retired (its `retired` frames, see `commit-run.ts`), from
 * the run's bytes, checked to ascend by seq within the commit. Empty for every other run.
 */
export async function retiredOfRun(
  kernels: Kernels,
  file: string,
  commit: CommitRecord,
  bytes: Uint8Array,
): Promise<RetiredFingerprint[]> {
  if (commit.retired.length === 0) return [];
  assertReadable(commit);
  try {
    const frames = scanFrames(kernels, bytes, 0, bytes.length);
    const out: RetiredFingerprint[] = [];
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Retired) continue;
      for (const retired of readRetiredFrame(
        bytes,
        frame,
        `retired fingerprints at ${file}:${commit.runStart + frame.offset}`,
      ))
        out.push(retired);
      // A frame holds thousands; a compacted segment may hold millions.
      await yieldToEventLoop();
    }
    let previous = 0;
    for (const item of out) {
      if (item.seq <= previous || item.seq > commit.records) {
        throw new StreamStackError(
          'CORRUPT',
          `commit ${commit.commit} retires a fingerprint at seq ${item.seq}, outside ${previous + 1}..${commit.records}`,
        );
      }
      previous = item.seq;
    }
    return out;
  } catch (error) {
    throw withPlace(error, file, commit.runStart);
  }
}

/**
 * The runs of one segment file on its own, for a derived file's build: what a rewrite's worker
 * reads the segment it just wrote through (the history does not hold that file yet).
 */
export class SegmentRuns implements SegmentRunSource {
  constructor(
    private readonly kernels: Kernels,
    private readonly segment: SegmentFile,
  ) {}

  async *runsInStretches(
    commits: readonly CommitRecord[],
  ): AsyncGenerator<{ commit: CommitRecord; bytes: Uint8Array }> {
    for (const stretch of stretchesOf(commits)) {
      for (const commit of stretch) assertReadable(commit);
      const first = stretch[0];
      const last = stretch[stretch.length - 1];
      const bytes = await this.segment.read(first.runStart, last.runStart + last.runBytes - first.runStart);
      for (const commit of stretch)
        yield {
          commit,
          bytes: bytes.subarray(commit.runStart - first.runStart, commit.runStart - first.runStart + commit.runBytes),
        };
    }
  }

  async *runColumns(commit: CommitRecord, bytes: Uint8Array, rowsMax: number): AsyncGenerator<RunColumns> {
    const decoder = runColumnsDecoder(this.kernels, this.segment.file, commit, bytes);
    while (!decoder.done) yield nextColumns(decoder, this.segment.file, commit.runStart, rowsMax);
  }

  readRetired(commit: CommitRecord, runBytes: Uint8Array): Promise<RetiredFingerprint[]> {
    return retiredOfRun(this.kernels, this.segment.file, commit, runBytes);
  }

  fileFor(): string {
    return this.segment.file;
  }
}
