/**
 * `verify`: reads a feed's files without changing them and reports what is wrong. It checks
 * every frame's CRC (by scanning every segment), the commit chain (each commit's parent is the
 * one before, positions are dense), every manifest entry against the pack directory that stored
 * its payload (location and CRC-32C of the bytes), and the WAL against history (a published
 * stream's WAL batches hold the records its commit holds). Every record's payload must lie in its
 * own segment. It repairs nothing.
 */
import fs from 'node:fs';
import path from 'node:path';
// Public types the HTTP client shares, defined in @streamstack/protocol; re-exported for the engine's own imports.
import type { FeedVerification, VerificationCode, VerificationProblem } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import type { ProgressReporter } from '../../progress.js';
import { derivedMismatch, segmentsOf } from '../../query/indexes/feed-index.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import {
  baseOfSegmentName,
  FeedLayout,
  segmentSuffix,
  subscriptionSuffix,
  summaryFileOf,
} from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import { type CommitRun, History } from '../../storage/history-log.js';
import { readIndexFile, readIndexHead } from '../../storage/index-segment.js';
import { type KeyFileHead, loadKeyFileHead, readKeySectionAsync } from '../../storage/key-file.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import type { PayloadLocation } from '../../storage/records.js';
import type { Corruption } from '../../storage/runs.js';
import { LocalSegmentStore } from '../../storage/segment-store.js';
import { readSummary, type SegmentSummary } from '../../storage/segment-summary.js';
import { StateLog } from '../../storage/state-log.js';
import { Wal, type WalEvent } from '../../storage/wal.js';
import { CompactionLog } from '../maintenance/compaction-state.js';
import { horizonWithFloor, retainedFloor } from '../maintenance/history-floors.js';
import { MergeLog } from '../maintenance/merge-state.js';
import { type RetentionFloor, RetentionLog, untrimmed } from '../maintenance/retention-state.js';
import { openSubscriptionLog } from '../reading/subscriptions.js';
import { feedTagOf } from './data-directory.js';
import { verifyRemote } from './verify-remote.js';

export type { FeedVerification, VerificationCode, VerificationProblem };

/** The files of the index folder `verify` checks: each sealed segment's index and dictionaries. */
const derivedSuffixes = [segmentSuffix.tagIndex, segmentSuffix.keyDictionary, segmentSuffix.fingerprintDictionary];

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

type Report = (code: VerificationCode, message: string, where?: { file?: string; offset?: number }) => void;

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
    let run: CommitRun;
    try {
      run = await history.readRun(commit);
    } catch (error) {
      report('CORRUPT', error instanceof Error ? error.message : String(error), where);
      continue;
    }
    runs.set(commit.stream, run);
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
      const bytes = await history.readPayload(entry.payload, run);
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
    history = await openHistoryChecked(kernels, directory, floor, commits, payloadCrcs, (commit) => bytesAt(0, commit));
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
  const subscriptions = new FeedLayout(directory).subscriptions;
  if (fs.existsSync(subscriptions)) {
    const names = new Set(
      fs
        .readdirSync(subscriptions)
        .map((name) => name.replace(/\.copy$/, ''))
        .filter((name) => name.endsWith(subscriptionSuffix)),
    );
    for (const name of [...names].sort()) {
      logs.push(
        await openSubscriptionLog(
          kernels,
          path.join(subscriptions, name),
          name.slice(0, -subscriptionSuffix.length),
          true,
        ),
      );
    }
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

/**
 * Every index file, key and fingerprint dictionary that exists must load, and its head must
 * describe its sealed segment — the same base, record count and source fingerprint — as a
 * read-write open checks it (a missing one is rebuilt on the next open). Each problem says what
 * really happens to the file: an open rebuilds one whose head fails, and checks dictionaries
 * whole in the background; an index file's sections are checked when a query first loads it.
 */
async function verifyIndexFiles(kernels: Kernels, directory: string, history: History, report: Report): Promise<void> {
  const indexDirectory = new FeedLayout(directory).index;
  if (!fs.existsSync(indexDirectory)) return;
  // The files are read as the feed reads them: through the store of its index folder.
  const store = new LocalSegmentStore(kernels, indexDirectory);
  const sealed = new Map(segmentsOf(history).sealed.map((segment) => [segment.base, segment]));
  for (const name of fs
    .readdirSync(indexDirectory)
    .filter((entry) => derivedSuffixes.some((suffix) => entry.endsWith(suffix)))) {
    const file = path.join(indexDirectory, name);
    const segment = sealed.get(Number(name.slice(0, name.lastIndexOf('.'))));
    const index = name.endsWith(segmentSuffix.tagIndex);
    let whole = false;
    try {
      const head = index ? (await readIndexHead(kernels, store, name))! : (await loadKeyFileHead({ store, name }))!;
      // A segment with gaps from corruption gets no files: opening ignores whatever is there.
      const mismatch = segment && !segment.gaps ? derivedMismatch(head, segment) : undefined;
      if (mismatch !== undefined) {
        report(
          'INDEX',
          `${file} is not the file of its segment (it is rebuilt on the next read-write open): ${mismatch}`,
          { file, offset: 0 },
        );
        continue;
      }
      whole = true;
      if (index) await readIndexFile(kernels, store, name);
      else
        for (const section of [0, 1, 2] as const)
          await readKeySectionAsync(kernels, { store, name }, head as KeyFileHead, section);
    } catch (error) {
      const when =
        whole && index ? 'it is rebuilt when a query first loads it' : 'it is rebuilt on the next read-write open';
      const details = error instanceof StreamStackError ? error.details : {};
      report('INDEX', `${file} is damaged (${when}): ${(error as Error).message}`, {
        file,
        ...(typeof details.offset === 'number' ? { offset: details.offset } : {}),
      });
    }
  }
}

/**
 * Every summary file that exists must describe its segment as the segment's bytes do (a missing
 * one is rebuilt on the next read-write open; so is a damaged one, which opening ignores).
 */
async function verifySummaries(
  kernels: Kernels,
  history: History,
  commits: readonly CommitRecord[],
  report: Report,
): Promise<void> {
  const segments = history.segments.segments;
  for (const segment of segments) {
    const file = summaryFileOf(segment.file);
    if (!fs.existsSync(file)) continue;
    const problem = (reason: string) =>
      report('INDEX', `${file} is damaged (it is rebuilt on the next read-write open): ${reason}`, { file });
    if (segment === history.segments.active) {
      problem('the active segment has no summary');
      continue;
    }
    let summary: SegmentSummary | undefined;
    try {
      // Through the history's store, as opening reads summaries.
      summary = await readSummary(kernels, history.store, path.basename(file), segment.header);
    } catch (error) {
      problem((error as Error).message);
      continue;
    }
    const scanned = commits.filter((commit) => commit.segment === segment.header.base);
    const same =
      summary !== undefined &&
      summary.end === segment.durableEnd &&
      summary.commits.length === scanned.length &&
      summary.commits.every((commit, at) => JSON.stringify(commit) === JSON.stringify(scanned[at]));
    if (!same) problem('it disagrees with the segment');
  }
}
