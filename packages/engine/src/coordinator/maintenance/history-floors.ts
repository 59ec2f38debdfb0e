/**
 * State that must never go back, derived from the history as well as remembered
 * (docs/faults.md, State that never goes back). The low mark and the key-compaction horizon are
 * each kept in a state log of two files; losing both files must not move either back, or reads
 * would take a trimmed range for lost commits, or compacted (sparse) history for whole history.
 *
 * - The **low mark's floor** is where the oldest history segment starts: its header names its
 *   first commit and position. A feed whose retention log has no record but whose history starts
 *   after commit 1 was trimmed, unless files derived from the segments before it remain (a trim
 *   deletes those with their segment): then they were lost, and recovery reports it.
 * - The **horizon's floor** is the newest commit whose run key compaction thinned: it thins
 *   only runs at or before its horizon, and marks each in its commit record (and the segment's
 *   summary names the newest).
 *
 * Each floor raises what the log says, and a log below its floor is reported by `verify`.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { segmentHeaderBytes } from '../../limits.js';
import type { CommitList } from '../../storage/commit-list.js';
import { baseOfSegmentName, FeedLayout, segmentSuffix } from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import type { Corruption } from '../../storage/runs.js';
import { decodeSegmentHeader } from '../../storage/segment.js';
import type { RetentionFloor, RetentionLog } from './retention-state.js';

/**
 * Where the oldest history segment of the feed in `directory` starts, from its header; undefined
 * when there is none, or its header cannot be read (recovery then reports that damage itself).
 */
export async function oldestSegmentStart(kernels: Kernels, directory: string): Promise<RetentionFloor | undefined> {
  const stores = feedStores(kernels, directory);
  const names = await stores.history.list().catch(() => []);
  const bases = names
    .filter((name) => name.endsWith(segmentSuffix.history))
    .map((name) => baseOfSegmentName(name))
    .filter((base) => base !== undefined);
  // Segments are named by their first position: a history starting at position 1 was never
  // trimmed, and opening it reads no header twice.
  if (bases.length === 0 || Math.min(...bases) <= 1) return bases.length === 0 ? undefined : { commit: 1, position: 1 };
  const oldestBase = Math.min(...bases);
  // A trim deletes a segment with its summary, index and dictionaries; damage that took the
  // oldest segments leaves theirs. Where any remain below the oldest segment, its commits were
  // lost, not trimmed, and recovery reports them as lost.
  const indexNames = await stores.index.list().catch(() => []);
  if ([...names, ...indexNames].some((name) => (baseOfSegmentName(name) ?? oldestBase) < oldestBase)) return undefined;
  const oldest = names.find((name) => name.endsWith(segmentSuffix.history) && baseOfSegmentName(name) === oldestBase)!;
  try {
    const header = decodeSegmentHeader(kernels, await stores.history.read(oldest, 0, segmentHeaderBytes), oldest);
    return { commit: header.baseCommit, position: header.base };
  } catch {
    return undefined;
  }
}

/** The low mark the history opens from, and the problem with the log when it had to be derived. */
export interface RetainedFloor {
  readonly floor: RetentionFloor;
  readonly problem?: Corruption;
}

/**
 * The retention floor: the log's, or — when the log holds no record at all — where the oldest
 * segment starts, which the log then takes as its own. A log with a record is trusted: a segment missing above its floor is damage,
 * and recovery reports those commits as lost.
 */
export async function retainedFloor(
  kernels: Kernels,
  directory: string,
  retention: RetentionLog,
): Promise<RetainedFloor> {
  if (retention.recorded) return { floor: retention.state.floor };
  const oldest = await oldestSegmentStart(kernels, directory);
  if (!oldest || oldest.commit <= 1) return { floor: retention.state.floor };
  const file = new FeedLayout(directory).stateLog('retention');
  retention.adoptFloor(oldest);
  return {
    floor: oldest,
    problem: {
      file,
      offset: 0,
      reason: `no retention record says why the history starts at commit ${oldest.commit}: both copies of the retention log, or the oldest history segments, were lost (read as trimmed)`,
    },
  };
}

/**
 * The horizon as recovery sets it: at least the newest commit whose run key compaction thinned,
 * and the problem with the log when it said less.
 */
export function horizonWithFloor(
  commits: CommitList,
  recorded: number,
  directory: string,
): { horizon: number; problem?: Corruption } {
  const floor = commits.compactedFloor;
  if (floor <= recorded) return { horizon: recorded };
  return {
    horizon: floor,
    problem: {
      file: new FeedLayout(directory).stateLog('compaction'),
      offset: 0,
      reason: `the key-compaction horizon it records (${recorded}) is below the compacted history, which runs to commit ${floor}: the log was lost or went back`,
    },
  };
}
