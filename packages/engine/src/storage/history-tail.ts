/**
 * The unsealed tail of a history, copied byte for byte from the process that writes it to a
 * follower on another machine. The writer hands out the durable groups of its active segment, and
 * of a finished segment not yet in object storage while it is still whole locally, its
 * `SegmentEnd` included (`readTailGroups`): whole groups only, each checked before it leaves. The
 * follower writes them at the same offsets of its own copy of the segment, and its read-only view
 * takes the commits they add (`catchUpCommits`), checked again: every group sound, every run
 * exactly the frames its commit record names, the commits continuing the chain, and a
 * `SegmentEnd` naming the commit after the last. The view then opens the next segment in place
 * (`SegmentSet.adoptNext`) once the follower has its first bytes. So a follower's tail is always
 * a prefix of the writer's history, and a segment roll costs it no wait for the upload.
 *
 * @example
 * const tail = await readTailGroups(kernels, activeSegment, 0, 4 << 20); // on the writer
 * const commits = await catchUpCommits(kernels, history); // on the follower, after writing them
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { segmentHeaderBytes } from '../limits.js';
import type { CommitRecord } from './commit-record.js';
import { FrameKind } from './frame-kinds.js';
import type { ScannedFrame } from './framing.js';
import { type Group, scanGroups } from './groups.js';
import type { History } from './history-log.js';
import { commitOfRun } from './history-recovery.js';
import { readSegmentTrailer, type SegmentTrailer } from './runs.js';
import type { SegmentFile } from './segment.js';

/** Durable groups of a writer's segment, from an offset on. */
export interface TailGroups {
  /** The bytes from `from` to `end`: the segment's header first when `from` is 0. */
  readonly bytes: Uint8Array;
  readonly from: number;
  readonly end: number;
  /** For a finished segment whose `SegmentEnd` the bytes end with: where the history goes on. */
  readonly next?: SegmentTrailer;
}

/**
 * Reads the sound groups of `segment` (a writer's active segment, or with `finished` a sealed one
 * still whole locally) from `from` up to its durable end (and `visibleEnd`, where a replicated
 * feed's stored slots end), at most `bytesMax` of them unless one
 * group alone is larger (it is then sent whole). The active segment's groups stop before a
 * `SegmentEnd` (the segment is being finished: the next request finds it sealed); a finished
 * one's include it, and say where the history goes on. `from` must be 0 or where a group starts;
 * `CORRUPT` when the bytes there are not sound groups.
 */
export async function readTailGroups(
  kernels: Kernels,
  segment: SegmentFile,
  from: number,
  bytesMax: number,
  finished = false,
  visibleEnd = Number.POSITIVE_INFINITY,
): Promise<TailGroups> {
  const start = Math.max(from, segmentHeaderBytes);
  if (from > segment.durableEnd)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `offset ${from} is past the durable end (${segment.durableEnd}) of ${segment.file}: the copy asking is not of this history`,
      { details: { offset: from, durableEnd: segment.durableEnd } },
    );
  // A replicated feed's groups are handed out once their slots are stored too (`visibleEnd`).
  const durableEnd = Math.min(segment.durableEnd, visibleEnd);
  // The header goes with the first group: a segment with none may still be replaced by one of
  // another capacity at the same base (see `SegmentSet.roll`).
  if (durableEnd <= start) return { bytes: new Uint8Array(0), from, end: from };
  let limit = Math.min(durableEnd, start + bytesMax);
  let groups = await groupsBetween(kernels, segment, from, start, limit);
  if (groups.whole.length === 0 && limit < durableEnd) {
    // One group larger than a response's bound: it goes whole, for a group is never split.
    limit = durableEnd;
    const all = await groupsBetween(kernels, segment, from, start, limit);
    groups = { bytes: all.bytes, whole: all.whole.slice(0, 1) };
  }
  let end = start;
  let next: SegmentTrailer | undefined;
  for (const group of groups.whole) {
    const segmentEnd = group.frames.find((frame) => frame.kind === FrameKind.SegmentEnd);
    if (segmentEnd && !finished) break;
    end = group.end;
    if (segmentEnd) {
      next = readSegmentTrailer(groups.bytes, segmentEnd, segment.file);
      break;
    }
  }
  if (groups.whole.length === 0)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `offset ${start} of ${segment.file} is not where a sound group starts`,
      {
        details: { offset: start },
      },
    );
  return { bytes: groups.bytes.subarray(from, end), from, end, ...(next ? { next } : {}) };
}

/**
 * The segment's bytes read up to `limit` (only those from `from` filled in: the header too when it
 * is 0), and the whole groups from `start` among them.
 */
async function groupsBetween(
  kernels: Kernels,
  segment: SegmentFile,
  from: number,
  start: number,
  limit: number,
): Promise<{ bytes: Uint8Array; whole: Group[] }> {
  // Offsets in the scan are the segment's own: the bytes before `from` are left unread.
  const bytes = Buffer.allocUnsafe(limit);
  await segment.readInto(bytes.subarray(from, limit), from);
  const { groups, damages } = scanGroups(kernels, bytes, start, limit);
  // A group cut by `limit` shows as damage at its start: the groups before it are whole.
  const firstDamage = damages[0]?.offset ?? Number.POSITIVE_INFINITY;
  return { bytes, whole: groups.filter((group) => group.end <= firstDamage) };
}

/**
 * Takes what another process wrote to the active segment of `history` (a read-only view) since
 * it was opened or last caught up: checks the groups from the segment's durable end to `end`, and
 * returns the commits they add, in order, and where the history goes on when they end with the
 * segment's `SegmentEnd` (which must name the position and commit after the last). The segment's
 * durable end moves past them. `CORRUPT` when a group is damaged, a commit does not continue the
 * chain, or anything follows a `SegmentEnd`; nothing moves then.
 */
export async function catchUpCommits(
  kernels: Kernels,
  history: History,
  end: number,
): Promise<{ commits: CommitRecord[]; next?: SegmentTrailer }> {
  const segment = history.segments.active;
  if (!segment) return { commits: [] };
  const start = segment.durableEnd;
  if (end <= start) return { commits: [] };
  if (history.segments.activeTrailer) throw corruptAt(segment.file, start, 'groups after the segment end');
  const bytes = Buffer.allocUnsafe(end);
  await segment.readInto(bytes.subarray(start, end), start);
  const { groups, damages } = scanGroups(kernels, bytes, start, end);
  const corrupt = (offset: number, reason: string) => corruptAt(segment.file, offset, reason);
  if (damages.length > 0) throw corrupt(damages[0].offset, damages[0].reason);
  const commits: CommitRecord[] = [];
  // `positionAfter(n)` is the last position of commit n: the next commit starts one past it.
  let expected = {
    commit: history.commits.length + 1,
    position: history.commits.positionAfter(history.commits.length) + 1,
  };
  let next: SegmentTrailer | undefined;
  for (const group of groups) {
    let pending: ScannedFrame[] = [];
    for (const frame of group.frames) {
      if (next) throw corrupt(frame.offset, 'a frame after the segment end');
      if (frame.kind === FrameKind.SegmentEnd) {
        next = readSegmentTrailer(bytes, frame, segment.file);
        if (next.nextBase !== expected.position || next.nextBaseCommit !== expected.commit)
          throw corrupt(
            frame.offset,
            `the segment end names commit ${next.nextBaseCommit} at position ${next.nextBase} next, not commit ${expected.commit} at position ${expected.position}`,
          );
        continue;
      }
      if (frame.kind === FrameKind.LiveSegments) continue;
      if (frame.kind !== FrameKind.Commit) {
        pending.push(frame);
        continue;
      }
      const commit = commitOfRun(bytes, frame, pending, segment.header.base);
      if (!commit) throw corrupt(frame.offset, 'a run whose frames its commit record does not name');
      if (commit.commit !== expected.commit || commit.firstPosition !== expected.position)
        throw corrupt(
          frame.offset,
          `commit ${commit.commit} at position ${commit.firstPosition} does not continue the history (commit ${expected.commit}, position ${expected.position})`,
        );
      commits.push(commit);
      expected = { commit: commit.commit + 1, position: commit.lastPosition + 1 };
      pending = [];
    }
    if (pending.length > 0) throw corrupt(group.offset, 'a group with frames of no run');
  }
  const last = groups.at(-1);
  if (last) {
    segment.writeOffset = last.end;
    segment.durableEnd = last.end;
  }
  if (next) history.segments.activeTrailer = next;
  return { commits, ...(next ? { next } : {}) };
}

function corruptAt(file: string, offset: number, reason: string): StreamStackError {
  return new StreamStackError('CORRUPT', `${file} is corrupt at offset ${offset}: ${reason}`, {
    details: { file, offset },
  });
}
