/**
 * Reading commit runs out of a segment without the rest of the history: the runs of consecutive
 * commits read a stretch at a time, a run decoded into columns (payloads stored by other runs
 * left unread), and a compacted run's retired fingerprints. `History` reads its segments through
 * these, and so does a rewrite's worker, which reads back the one segment it wrote to build the
 * segment's derived files — with the same functions, so they come out byte for byte as a rebuild
 * from the history would make them.
 */
import { StreamStackError } from '../errors.js';
import { yieldToEventLoop } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { runsReadBytesMax } from '../limits.js';
import type { CommitRecord } from './commit-record.js';
import { type RetiredFingerprint, readRetiredFrame } from './commit-run.js';
import { FrameKind } from './frame-kinds.js';
import { scanFrames } from './framing.js';
import { type RunColumns, RunColumnsDecoder } from './run-columns.js';
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

/** `commits` cut into stretches that are each read at once (see `joinsStretch`). */
export function* stretchesOf(commits: readonly CommitRecord[]): Generator<readonly CommitRecord[]> {
  for (let at = 0; at < commits.length; ) {
    let end = at + 1;
    while (end < commits.length && joinsStretch(commits[at], commits[end])) end++;
    yield commits.slice(at, end);
    at = end;
  }
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
    const frames = scanFrames(kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${file} is damaged`, {
        details: { file, offset: commit.runStart + frameEnd },
      });
    }
    return new RunColumnsDecoder(
      kernels,
      bytes,
      frames,
      commit.entries,
      `${file}:${commit.runStart}`,
      commit.entries !== commit.records ? commit.lastPosition : undefined,
    );
  } catch (error) {
    throw withPlace(error, file, commit.runStart);
  }
}

/** The next batch of at most `rowsMax` rows from `decoder`, its errors placed in `file`. */
export function nextColumns(
  decoder: RunColumnsDecoder,
  file: string,
  commit: CommitRecord,
  rowsMax: number,
): RunColumns {
  try {
    return decoder.next(rowsMax, commit.firstPosition);
  } catch (error) {
    throw withPlace(error, file, commit.runStart);
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
    while (!decoder.done) yield nextColumns(decoder, this.segment.file, commit, rowsMax);
  }

  readRetired(commit: CommitRecord, runBytes: Uint8Array): Promise<RetiredFingerprint[]> {
    return retiredOfRun(this.kernels, this.segment.file, commit, runBytes);
  }

  fileFor(): string {
    return this.segment.file;
  }
}
