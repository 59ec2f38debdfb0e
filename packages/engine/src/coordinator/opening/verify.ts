/**
 * `verify`: reads a feed's files without changing them and reports what is wrong. It checks
 * every frame's CRC (by scanning every segment), the commit chain (each commit's parent is the
 * one before, positions are dense), every manifest entry against the pack directory that stored
 * its payload (location and CRC-32C of the bytes), and the WAL against history (a published
 * stream's WAL batches hold the records its commit holds). Every record's payload must lie in its
 * own segment. A segment tiering evicted is opened by its summary (its local file holds only its
 * header): its runs are read back from object storage when verify is given it, and its objects
 * are checked block by block against their descriptor (`verify-remote.ts`). It repairs nothing.
 */
import path from 'node:path';
// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { FeedVerification, VerificationCode, VerificationProblem } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import type { ProgressReporter } from '../../progress.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import {
  baseOfSegmentName,
  FeedLayout,
  groupSuffix,
  segmentSuffix,
  subscriptionSuffix,
} from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import { History } from '../../storage/history-log.js';
import type { CommitRun } from '../../storage/history-runs.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import type { PayloadLocation } from '../../storage/records.js';
import { remoteSegmentFilesOf } from '../../storage/remote-segment-file.js';
import type { Corruption } from '../../storage/runs.js';
import { StateLog, stateLogNames } from '../../storage/state-log.js';
import { Wal, type WalEvent } from '../../storage/wal.js';
import { CompactionLog } from '../maintenance/compaction-state.js';
import { horizonWithFloor, retainedFloor } from '../maintenance/history-floors.js';
import { MergeLog } from '../maintenance/merge-state.js';
import { type RetentionFloor, RetentionLog, untrimmed } from '../maintenance/retention-state.js';
import { type EvictedSegment, evictedSegments } from '../maintenance/tiering-state.js';
import { openGroupLog } from '../reading/subscription-groups.js';
import { openSubscriptionLog } from '../reading/subscriptions.js';
import { feedTagOf } from './data-directory.js';
import { type Report, verifyIndexFiles, verifySummaries } from './verify-derived.js';
import { verifyRemote } from './verify-remote.js';

export type { FeedVerification, VerificationCode, VerificationProblem };

/**
 * Where each history segment's bytes start if the segments were laid end to end, and their sum:
 * verify counts its progress in bytes of history read, and reads every segment twice (its frames
 * scanned, then its records checked against their packs).
 */
export interface HistoryLayout {
  readonly bytes: number;
  readonly startOf: ReadonlyMap<number, number>;
}

/** The layout of the history segment files of the feed in `directory` (empty when it has none). */
export async function historyLayout(kernels: Kernels, directory: string): Promise<HistoryLayout> {
  const history = feedStores(kernels, directory).history;
  const startOf = new Map<number, number>();
  let bytes = 0;
  // No history folder lists as empty: the verification reports what is missing.
  const names = (await history.list().catch((): string[] => [])).filter((name) => name.endsWith(segmentSuffix.history));
  const bases = names
    .map((name) => ({ name, base: baseOfSegmentName(name) }))
    .filter((entry) => entry.base !== undefined);
  for (const { name, base } of bases.sort((a, b) => a.base! - b.base!)) {
    startOf.set(base!, bytes);
    // Gone since it was listed (a trim of the writer's): it counts as empty.
    bytes += (await history.size(name)) ?? 0;
  }
  return { bytes, startOf };
}

/** How one feed's verification reports progress: into the store's reporter, from `offset` on. */
export interface FeedProgress {
  readonly reporter: ProgressReporter<{ feed: string }>;
  readonly offset: number;
  readonly layout: HistoryLayout;
}

const locationKey = (location: PayloadLocation) => `${location.segment}:${location.offset}:${location.length}`;

/** The commit chain, and every manifest entry against its pack. Returns each stream's run. */
async function verifyHistory(
  kernels: Kernels,
  history: History,
  commits: readonly CommitRecord[],
  payloadCrcs: ReadonlyMap<string, number>,
  report: Report,
  /** Where the retained history starts: the first commit's parent and first position follow from it. */
  floor: { readonly commit: number; readonly position: number },
  /** Called as each commit is reached, for progress. */
  reached: (commit: CommitRecord) => void = () => undefined,
): Promise<Map<string, CommitRun>> {
  const runs = new Map<string, CommitRun>();
  let previous: CommitRecord | undefined;
  for (const commit of commits) {
    reached(commit);
    if (commit.damage) {
      // Reported with the corruption that took it.
      previous = commit;
      continue;
    }
    const where = { file: history.segments.fileFor(commit.segment), offset: commit.runStart };
    const expectedParent = previous?.commit ?? floor.commit - 1;
    if (commit.parent !== expectedParent) {
      report(
        'CHAIN',
        `commit ${commit.commit} names parent ${commit.parent}, but the commit before it is ${expectedParent}`,
        where,
      );
    }
    const expectedFirst = (previous?.lastPosition ?? floor.position - 1) + 1;
    if (commit.firstPosition !== expectedFirst) {
      report(
        'CHAIN',
        `commit ${commit.commit} starts at position ${commit.firstPosition}, expected ${expectedFirst}`,
        where,
      );
    }
    previous = commit;
    // An evicted segment's packs were not scanned (its summary stood for it): its runs are read
    // back and checked frame by frame when object storage is at hand, and its objects block by
    // block (`verifyRemote`); its payloads have no pack CRCs here to be held against.
    const evicted = history.store.isEvicted(path.basename(history.segments.fileFor(commit.segment)));
    if (evicted && !history.store.cache) continue;
    let run: CommitRun;
    try {
      run = await history.runs.readRun(commit);
    } catch (error) {
      report('CORRUPT', error instanceof Error ? error.message : String(error), where);
      continue;
    }
    runs.set(commit.stream, run);
    if (evicted) continue;
    for (const [index, entry] of run.entries.entries()) {
      if (entry.payload.segment !== commit.segment) {
        // Every segment holds the payloads its records need, so it can stand on its own.
        report(
          'MANIFEST',
          `commit ${commit.commit} record ${index + 1} points at a payload in another segment (${entry.payload.segment})`,
          where,
        );
        continue;
      }
      const crc = payloadCrcs.get(locationKey(entry.payload));
      if (crc === undefined) {
        report('MANIFEST', `commit ${commit.commit} record ${index + 1} points at bytes no pack holds`, where);
        continue;
      }
      const bytes = await history.bytes.readPayload(entry.payload, run);
      if (kernels.crc32c(bytes) !== crc) {
        report(
          'MANIFEST',
          `commit ${commit.commit} record ${index + 1}: payload bytes disagree with their pack's CRC`,
          {
            file: history.segments.fileFor(entry.payload.segment),
            offset: entry.payload.offset,
          },
        );
      }
    }
  }
  return runs;
}

/**
 * The WAL against history: a stream's batches continue each other, and when the WAL still holds
 * a published stream from its opening on, they add up to its commit. (Segments before the open
 * stream's are deleted, so the start of an older stream may be gone.)
 */
function verifyWal(wal: Wal, events: readonly WalEvent[], runs: ReadonlyMap<string, CommitRun>, report: Report): void {
  const openedInWal = new Set<string>();
  const walRecords = new Map<string, { count: number; nextSeq: number; file: string }>();
  for (const event of events) {
    if (event.kind === 'open') openedInWal.add(event.stream);
    if (event.kind !== 'batch') continue;
    const file = wal.segments.fileFor(event.segment);
    const seen = walRecords.get(event.stream) ?? {
      count: 0,
      nextSeq: openedInWal.has(event.stream) ? 1 : event.firstSeq,
      file,
    };
    if (event.firstSeq !== seen.nextSeq) {
      report('WAL', `stream ${event.stream}: a batch starts at seq ${event.firstSeq}, expected ${seen.nextSeq}`, {
        file,
      });
    }
    seen.count += event.records.length;
    seen.nextSeq = event.firstSeq + event.records.length;
    walRecords.set(event.stream, seen);
  }
  for (const [stream, seen] of walRecords) {
    const run = runs.get(stream);
    if (run && openedInWal.has(stream) && run.commit.records !== seen.count) {
      report(
        'WAL',
        `stream ${stream} has ${seen.count} records in the WAL but its commit ${run.commit.commit} holds ${run.commit.records}`,
        {
          file: seen.file,
        },
      );
    }
  }
}

/**
 * Opens the history read-only from `floor`, collecting every commit (stand-ins for lost ones, so
 * the count stays true) and every stored payload's CRC as recovery reads them.
 */
function openHistoryChecked(
  kernels: Kernels,
  directory: string,
  floor: RetentionFloor,
  commits: CommitRecord[],
  payloadCrcs: Map<string, number>,
  onCommit: (commit: CommitRecord) => void,
  /** Segments tiering evicted (base to ordinal): opened by their summaries. */
  evicted: ReadonlyMap<number, EvictedSegment>,
): Promise<History> {
  return History.open(
    kernels,
    new FeedLayout(directory).history,
    {
      onCommit: (commit) => {
        commits.push(commit);
        onCommit(commit);
      },
      onPayload: (crc, location) => payloadCrcs.set(locationKey(location), crc),
      onLost: (lost) => {
        for (let commit = lost.from; commit <= lost.to; commit++) {
          commits.push({
            commit,
            parent: commit - 1,
            firstPosition: lost.fromPosition,
            lastPosition: lost.toPosition,
            damage: lost.damage,
          } as CommitRecord);
        }
      },
    },
    true,
    false,
    floor,
    new Set(),
    feedTagOf(directory),
    evicted,
  );
}

/** What recovery found opening the logs: torn last writes, corruption, and a lost head. */
function reportRecoveryFindings(history: History, wal: Wal, commitCount: number, report: Report): void {
  for (const tail of [...history.segments.tornTails, ...wal.segments.tornTails]) {
    report(
      'TORN_TAIL',
      `${tail.bytes} bytes of a write that never completed (recovery cuts them on the next open)`,
      tail,
    );
  }
  for (const corruption of [...history.corruptions, ...wal.corruptions]) {
    report('CORRUPT', `${corruption.file} is corrupt at offset ${corruption.offset}: ${corruption.reason}`, corruption);
  }
  if (history.headDamage) {
    report(
      'CORRUPT',
      `the history after commit ${commitCount} is lost (${history.headDamage.reason})`,
      history.headDamage,
    );
  }
}

export async function verifyFeed(
  kernels: Kernels,
  feed: string,
  directory: string,
  progress?: FeedProgress,
  objectStore?: ObjectSegmentStore,
): Promise<FeedVerification> {
  // Bytes of history read so far in a pass: up to where the commit reached starts.
  const bytesAt = (pass: 0 | 1, commit: CommitRecord) => {
    if (!progress || commit.damage) return;
    const start = progress.layout.startOf.get(commit.segment);
    if (start !== undefined)
      progress.reporter.advance(progress.offset + pass * progress.layout.bytes + start + commit.runStart, { feed });
  };
  const problems: VerificationProblem[] = [];
  const report: Report = (code, message, where = {}) => problems.push({ code, message, ...where });
  const commits: CommitRecord[] = [];
  const payloadCrcs = new Map<string, number>();
  const events: WalEvent[] = [];
  let history: History | undefined;
  let wal: Wal | undefined;
  let segments = 0;
  let floor = untrimmed.floor;
  let remoteSegments: number | undefined;
  try {
    const retention = await RetentionLog.open(kernels, directory, true);
    const retained = await retainedFloor(kernels, directory, retention);
    floor = retained.floor;
    retention.close();
    if (retained.problem) report('CORRUPT', `${retained.problem.file}: ${retained.problem.reason}`, retained.problem);
    reportLogDamage(retention, report);
    history = await openHistoryChecked(
      kernels,
      directory,
      floor,
      commits,
      payloadCrcs,
      (commit) => bytesAt(0, commit),
      await evictedSegments(kernels, directory),
    );
    if (history.store.evictedCount > 0) {
      // Evicted segments opened by their summaries, which name their commits without a scan:
      // they join the chain in commit order.
      for (const segment of history.segments.segments)
        if (history.store.isEvicted(path.basename(segment.file)))
          commits.push(...history.commits.commitsInSegment(segment.header.base));
      commits.sort((a, b) => a.commit - b.commit);
      // Their runs are read back from object storage when verify is given it.
      if (objectStore)
        history.store.attachRemote(remoteSegmentFilesOf(kernels, objectStore, feed, feedTagOf(directory)));
    }
    wal = await Wal.open(
      kernels,
      new FeedLayout(directory).wal,
      (event) => events.push(event),
      true,
      feedTagOf(directory),
    );
    segments = history.segments.segments.length + wal.segments.segments.length;
    reportRecoveryFindings(history, wal, commits.length, report);
    await verifyHorizon(kernels, directory, history, report);
    const runs = await verifyHistory(kernels, history, commits, payloadCrcs, report, floor, (commit) =>
      bytesAt(1, commit),
    );
    verifyWal(wal, events, runs, report);
    await verifyStateLogs(kernels, directory, report, history.commits.epochMax);
    await verifyIndexFiles(kernels, directory, history, report);
    await verifySummaries(kernels, history, commits, report);
    if (objectStore) remoteSegments = await verifyRemote(kernels, feed, directory, objectStore, report);
  } catch (error) {
    const details = error instanceof StreamStackError ? error.details : {};
    report(
      error instanceof StreamStackError && error.code === 'CORRUPT' ? 'CORRUPT' : 'ERROR',
      error instanceof Error ? error.message : String(error),
      {
        ...(typeof details.file === 'string' ? { file: details.file } : {}),
        ...(typeof details.offset === 'number' ? { offset: details.offset } : {}),
      },
    );
  } finally {
    history?.close();
    wal?.close();
  }
  const last = commits[commits.length - 1];
  return {
    feed,
    ok: problems.length === 0,
    lowMark: floor.commit,
    commits: commits.length,
    records: last ? last.lastPosition : 0,
    segments,
    walEvents: events.length,
    ...(remoteSegments === undefined ? {} : { remoteSegments }),
    problems,
  };
}

/**
 * The lease log and every subscription log: damage that is not a torn last write. A lease log with
 * no record under a history written with leases (`epochMax` above 0) lost both its files: fencing
 * still holds (the epoch floor comes from the history), but the log is gone.
 */
async function verifyStateLogs(kernels: Kernels, directory: string, report: Report, epochMax: number): Promise<void> {
  const lease = await StateLog.open(kernels, new FeedLayout(directory).stateLog('lease'), true);
  if (lease.last === undefined && epochMax > 0) {
    report(
      'CORRUPT',
      `${lease.file}: both files are missing, though commits were written under lease epoch ${epochMax}`,
      { file: lease.file, offset: 0 },
    );
  }
  const logs = [lease];
  const { subscriptions, groups } = new FeedLayout(directory);
  for (const name of stateLogNames(subscriptions, subscriptionSuffix)) {
    logs.push(await openSubscriptionLog(kernels, path.join(subscriptions, `${name}${subscriptionSuffix}`), name, true));
  }
  for (const name of stateLogNames(groups, groupSuffix)) {
    logs.push(await openGroupLog(kernels, path.join(groups, `${name}${groupSuffix}`), name, true));
  }
  for (const log of logs) {
    log.close();
    reportLogDamage(log, report);
  }
  // The merge log: damage to one of its two files, which the newest record survived.
  const merges = await MergeLog.open(kernels, directory, true);
  merges.close();
  reportLogDamage(merges, report);
}

/** Damage to one file of a state log that the newest record survived, and a torn last write. */
function reportLogDamage(
  log: { readonly corruptions: readonly Corruption[]; readonly tornTails: readonly Corruption[] },
  report: Report,
): void {
  for (const tail of log.tornTails)
    report(
      'TORN_TAIL',
      `${tail.file}: a write that never completed at offset ${tail.offset} (cut on the next open)`,
      tail,
    );
  for (const corruption of log.corruptions)
    report('CORRUPT', `${corruption.file} is corrupt at offset ${corruption.offset}: ${corruption.reason}`, corruption);
}

/** The compaction log: damage to one of its files, and a horizon below the compacted history. */
async function verifyHorizon(kernels: Kernels, directory: string, history: History, report: Report): Promise<void> {
  const compaction = await CompactionLog.open(kernels, directory, true);
  compaction.close();
  reportLogDamage(compaction, report);
  const { problem } = horizonWithFloor(history.commits, compaction.horizon, directory);
  if (problem) report('CORRUPT', `${problem.file}: ${problem.reason}`, problem);
}
