/**
 * Lays out a fork of a feed: a new feed whose history is the source's commits up to `at`, sharing
 * the source's segments instead of copying them. Every sealed segment wholly before the one
 * holding `at` is hard-linked, with its summary, index and dictionaries (immutable files: a
 * merge, trim or compaction of either feed replaces or unlinks names, never writes into them).
 * The segment holding `at` is hard-linked too, whole, and cut (`segment-cuts.ts`): the fork holds
 * it up to the end of `at`'s commit frame, with a summary of its own naming those commits. Its
 * index and dictionaries, which would describe the source's later records too, are built by the
 * fork. The fork then writes to a new segment of its own. This holds when that segment is the
 * source's active one, which the source goes on writing: nothing before a durable commit frame
 * changes, and nothing after the cut is read. The fork keeps the source's feed tag, which the
 * shared segments carry in their headers.
 *
 * The fork is laid out in a directory of its own beside the feeds and put in place by one
 * rename, so a crash leaves no fork or a whole one.
 *
 * @example
 * await writer.retentionKeeper().serial(() => layOutFork(writer, restoring, { name: 'b', at: 40, createdAt, source: 'a' }));
 */
import fs from 'node:fs';
import path from 'node:path';
import { assert, StreamStackError } from '../../errors.js';
import { frameHeaderBytes, frameLengthMask, segmentBytesFirst, segmentHeaderBytes } from '../../limits.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { FeedLayout, segmentFile, segmentSuffix, summaryFileOf } from '../../storage/feed-layout.js';
import { scanGroups, sealGroup } from '../../storage/groups.js';
import {
  readFileRangeSync,
  SegmentFile,
  SegmentKind,
  syncDirectory,
  writeSmallFileSync,
} from '../../storage/segment.js';
import { cutFor, readSegmentCuts, type SegmentCut, writeSegmentCuts } from '../../storage/segment-cuts.js';
import { commitFrameHeader, writeSummary } from '../../storage/segment-summary.js';
import { StateLog } from '../../storage/state-log.js';
import { CompactionLog } from '../maintenance/compaction-state.js';
import { RetentionLog } from '../maintenance/retention-state.js';
import type { FeedWriter } from '../writing/feed-writer.js';
import { recordLease } from '../writing/lease.js';
import { feedTagOf } from './data-directory.js';

/** Where a fork comes from, kept in its directory (`fork.json`) for `info()`. */
export interface ForkOrigin {
  /** The feed it was forked from. */
  readonly feed: string;
  /** The last commit of the source it holds. */
  readonly at: number;
}

export interface ForkLayout {
  /** Sealed segments shared with the source, and their bytes. */
  readonly linkedSegments: number;
  readonly linkedBytes: number;
  /** Bytes of the segment holding `at`, copied. */
  readonly copiedBytes: number;
}

/**
 * Lays the fork of `source` (an open writer) at commit `at` out in `target`, an empty directory,
 * durably. Run it in the source's maintenance queue (`retentionKeeper().serial`), so no trim,
 * merge or compaction of the source changes its files meanwhile.
 */
export async function layOutFork(
  source: FeedWriter,
  target: string,
  fork: { readonly name: string; readonly createdAt: number; readonly origin: ForkOrigin },
): Promise<ForkLayout> {
  const { at } = fork.origin;
  const kernels = source.kernels;
  const snapshot = source.snapshot();
  const to = new FeedLayout(target);
  fs.mkdirSync(target, { recursive: true });
  if (at === 0) {
    // An empty fork: nothing to share, only where it came from.
    writeForkFiles(source, target, fork);
    await syncDirectory(target);
    return { linkedSegments: 0, linkedBytes: 0, copiedBytes: 0 };
  }
  source.assertNotTrimmed(at, 'at');
  assert(at >= snapshot.commits.low && at <= snapshot.watermark.commit, 'a fork point is a kept, published commit');
  const record = snapshot.commits.at(at);
  const from = new FeedLayout(source.directory);
  for (const folder of [to.history, to.index, to.wal, to.state]) fs.mkdirSync(folder, { recursive: true });

  const sourceCuts = readSegmentCuts(kernels, source.directory);
  const cuts: SegmentCut[] = [];
  let linkedSegments = 0;
  let linkedBytes = 0;
  const link = (segment: SegmentFile, withFiles: boolean) => {
    const base = segment.header.base;
    fs.linkSync(from.historySegment(base), to.historySegment(base));
    linkedSegments++;
    linkedBytes += fs.statSync(to.historySegment(base)).size;
    // A segment the source holds only up to its own fork point is held so by the fork too.
    const cut = cutFor(sourceCuts, segment.header);
    if (cut) cuts.push(cut);
    if (withFiles) linkDerivedFiles(from, to, base);
  };
  for (const segment of snapshot.history.segments.segments) {
    if (segment.header.base >= record.segment) break;
    link(segment, true);
  }

  const holding = snapshot.history.segments.byBase(record.segment);
  let copiedBytes = 0;
  if (record.lastPosition < holding.header.base) {
    // Nothing but empty commits of the segment up to the fork point: the fork's next segment
    // would take its name. The little there is is copied, as the fork's active segment.
    copiedBytes = copyActivePrefix(source, holding, record, to);
  } else {
    const cut = await shareHoldingSegment(source, holding, record, to, link);
    if (cut) cuts.splice(0, cuts.length, ...cuts.filter((other) => other.base !== cut.base), cut);
    // The fork writes its own commits to a segment of its own, small at first as any log's is.
    const next = await SegmentFile.create(kernels, to.historySegment(record.lastPosition + 1), {
      kind: SegmentKind.History,
      base: record.lastPosition + 1,
      baseCommit: at + 1,
      capacity: segmentBytesFirst,
      feedTag: feedTagOf(source.directory),
    });
    next.close();
  }
  writeSegmentCuts(kernels, target, cuts);

  // The fork starts where the source's history stands: the same floor, policy and horizon.
  const retention = await RetentionLog.open(kernels, target, false);
  try {
    await retention.write({
      policy: source.retentionKeeper().info().policy,
      floor: { commit: snapshot.commits.low, position: snapshot.commits.lowPosition },
      pending: false,
    });
  } finally {
    retention.close();
  }
  const horizon = source.compaction().horizon;
  if (horizon > 0) {
    const compaction = await CompactionLog.open(kernels, target, false);
    try {
      await compaction.write({ horizon });
    } finally {
      compaction.close();
    }
  }
  const epoch = snapshot.commits.epochMax;
  if (epoch > 0) {
    // Commits were written under leases: the fork's lease log starts released at the highest
    // epoch the history holds, so the fork's first lease is above it, and its log is not lost.
    const log = await StateLog.open(kernels, to.stateLog('lease'), false);
    try {
      await recordLease(log, { epoch, holder: '', token: '', expiresAt: 0, released: true });
    } finally {
      log.close();
    }
  }
  writeForkFiles(source, target, fork);
  for (const folder of [to.history, to.index, to.wal, to.state, target]) await syncDirectory(folder);
  return { linkedSegments, linkedBytes, copiedBytes };
}

/**
 * Shares the segment holding the fork point `record`: whole, with its files, when the point
 * ends it and it is sealed; else whole and cut after the point's commit frame, with a summary
 * of the fork's own naming the commits up to it. Returns the cut, if one was made.
 */
async function shareHoldingSegment(
  source: FeedWriter,
  holding: SegmentFile,
  record: CommitRecord,
  to: FeedLayout,
  link: (segment: SegmentFile, withFiles: boolean) => void,
): Promise<SegmentCut | undefined> {
  const snapshot = source.snapshot();
  const inSegment = snapshot.commits.commitsInSegment(holding.header.base);
  if (holding !== snapshot.history.segments.active && inSegment[inSegment.length - 1]?.commit === record.commit) {
    link(holding, true);
    return undefined;
  }
  const { offset, end } = checkedCommitFrame(source.kernels, holding, record);
  link(holding, false);
  const { base, baseCommit, capacity } = holding.header;
  const commits = inSegment.filter((commit) => commit.commit <= record.commit);
  await writeSummary(
    source.kernels,
    summaryFileOf(to.historySegment(base)),
    { base, baseCommit, capacity, end, commits },
    holding.header,
  );
  return {
    base,
    baseCommit,
    capacity,
    feedTag: holding.header.feedTag ?? 0,
    commit: record.commit,
    lastPosition: record.lastPosition,
    frameOffset: offset,
    end,
  };
}

/** Links a sealed segment's derived files that are there; the fork's open rebuilds the others. */
function linkDerivedFiles(from: FeedLayout, to: FeedLayout, base: number): void {
  const derived: [string, string][] = [
    [summaryFileOf(from.historySegment(base)), summaryFileOf(to.historySegment(base))],
    [from.tagIndex(base), to.tagIndex(base)],
    [
      segmentFile(from.index, base, segmentSuffix.keyDictionary),
      segmentFile(to.index, base, segmentSuffix.keyDictionary),
    ],
    [
      segmentFile(from.index, base, segmentSuffix.fingerprintDictionary),
      segmentFile(to.index, base, segmentSuffix.fingerprintDictionary),
    ],
  ];
  for (const [file, link] of derived) {
    try {
      fs.linkSync(file, link);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/**
 * Where `record`'s commit frame lies in `segment`, checked after reading as it was before
 * writing: the frame the record names is there. `CORRUPT` otherwise.
 */
function checkedCommitFrame(
  kernels: FeedWriter['kernels'],
  segment: { readonly file: string },
  record: CommitRecord,
): { offset: number; end: number } {
  const { offset, header } = commitFrameHeader(kernels, record);
  const end = offset + frameHeaderBytes + (new DataView(header.buffer).getUint32(0, true) & frameLengthMask);
  const onDisk = readFileRangeSync(segment.file, offset, frameHeaderBytes);
  if (!onDisk.every((byte, index) => byte === header[index])) {
    throw new StreamStackError('CORRUPT', `${segment.file}: commit ${record.commit} is not at offset ${offset}`, {
      details: { file: segment.file, offset },
    });
  }
  return { offset, end };
}

/** A fork's `fork.json`, and its `feed.json` with the source's tag. */
function writeForkFiles(
  source: FeedWriter,
  target: string,
  fork: { readonly name: string; readonly createdAt: number; readonly origin: ForkOrigin },
): void {
  writeSmallFileSync(path.join(target, forkOriginFile), `${JSON.stringify(fork.origin)}\n`);
  const tag = feedTagOf(source.directory);
  writeSmallFileSync(
    new FeedLayout(target).config,
    `${JSON.stringify({ name: fork.name, createdAt: fork.createdAt, formatVersion: 1, ...(tag === 0 ? {} : { tag }) })}\n`,
  );
}

/** The name of a fork's origin file in its feed directory. */
export const forkOriginFile = 'fork.json';

/** A fork's origin, or undefined for a feed that is not one (or whose file cannot be read). */
export function readForkOrigin(feedDirectory: string): ForkOrigin | undefined {
  try {
    const origin = JSON.parse(fs.readFileSync(path.join(feedDirectory, forkOriginFile), 'utf8')) as ForkOrigin;
    return typeof origin.feed === 'string' && Number.isSafeInteger(origin.at)
      ? { feed: origin.feed, at: origin.at }
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Copies the bytes of `segment` up to the end of `record`'s commit frame into the fork's history,
 * zeros after them up to the segment's capacity, as an active segment whose writer stopped there.
 * When `record` is not the last commit of its group, the group is cut after it and sealed again.
 */
function copyActivePrefix(
  source: FeedWriter,
  segment: { readonly file: string; readonly durableEnd: number; readonly header: { base: number; capacity: number } },
  record: CommitRecord,
  to: FeedLayout,
): number {
  const kernels = source.kernels;
  const { offset, header } = commitFrameHeader(kernels, record);
  const end = offset + frameHeaderBytes + (new DataView(header.buffer).getUint32(0, true) & frameLengthMask);
  const bytes = new Uint8Array(segment.durableEnd);
  const fd = fs.openSync(segment.file, 'r');
  try {
    fs.readSync(fd, bytes, 0, bytes.length, 0);
  } finally {
    fs.closeSync(fd);
  }
  // Checked after reading, as it was before writing: the commit frame is where its record says.
  const onDisk = bytes.subarray(offset, offset + frameHeaderBytes);
  if (end > bytes.length || !onDisk.every((byte, index) => byte === header[index])) {
    throw new StreamStackError('CORRUPT', `${segment.file}: commit ${record.commit} is not at offset ${offset}`, {
      details: { file: segment.file, offset },
    });
  }
  const { groups } = scanGroups(kernels, bytes, segmentHeaderBytes, bytes.length);
  const group = groups.find((candidate) => candidate.offset < end && end <= candidate.end);
  if (!group?.frames.some((frame) => frame.dataEnd === end)) {
    throw new StreamStackError(
      'CORRUPT',
      `${segment.file}: commit ${record.commit} does not end a frame of a sound group`,
      {
        details: { file: segment.file, offset },
      },
    );
  }
  const copy = bytes.slice(0, end);
  if (group.end !== end) sealGroup(kernels, copy.subarray(group.offset, end), group.offset, group.confirmed);
  const file = to.historySegment(segment.header.base);
  const out = fs.openSync(file, 'w');
  try {
    fs.writeSync(out, copy, 0, copy.length, 0);
    fs.ftruncateSync(out, segment.header.capacity);
    fs.fsyncSync(out);
  } finally {
    fs.closeSync(out);
  }
  return copy.length;
}
