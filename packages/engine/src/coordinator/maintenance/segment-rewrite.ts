/**
 * One rewrite of consecutive sealed history segments as one file — a merge, or a key
 * compaction's group — with everything the switch-over then renames into place: the segment, its
 * summary, its index file and its key and fingerprint dictionaries, each under a temporary name
 * (`.merge.tmp`) that recovery deletes when a crash leaves it. It runs on a rewrite worker over a
 * read-only snapshot of the feed (`rewrite-worker.ts`), so that decoding, selecting, laying out
 * and indexing millions of records never holds the event loop; or, where no worker can run, on
 * the feed's own thread over its own history. Either way it calls the same functions, so the
 * bytes are the same.
 *
 * The derived files are built by reading the written segment back, with the functions a rebuild
 * uses (`indexTailOf`, `segmentKeysOf`): so they are byte for byte what a rebuild would write, and
 * the segment is checked after it was written. A dictionary is built only when every dictionary
 * before it is a file (`RewriteJob.earlier`); otherwise the feed rebuilds it after the switch.
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { assert } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { keyCacheBytesMax } from '../../limits.js';
import { indexFileOf } from '../../query/indexes/feed-index.js';
import { buildIndexDataOffThread, buildKeyFileOffThread } from '../../query/indexes/index-builder.js';
import { dictionaryFileOf } from '../../query/indexes/key-index.js';
import { buildKeyFileBytes, type DictionaryFile, DictionarySections } from '../../query/indexes/key-merge.js';
import { indexTailOf } from '../../query/indexes/segment-index.js';
import { segmentKeysOf, winnerColumnsOf } from '../../query/indexes/segment-keys.js';
import { segmentSource } from '../../storage/commit-pages.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { FeedLayout, rewriteTemporarySuffix, summaryFileOf } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import { buildIndexData, encodeIndexFile, writeIndexFile } from '../../storage/index-segment.js';
import { type TermOrder, writeKeyFile } from '../../storage/key-file.js';
import { SegmentRuns } from '../../storage/run-reads.js';
import { SegmentFile, type SegmentHeader } from '../../storage/segment.js';
import { type MergedSegment, writeMergedSegment } from '../../storage/segment-merge.js';
import { writeSummary } from '../../storage/segment-summary.js';
import { type KeyIndexes, keyCompactionSelection } from './compaction-selection.js';

/** What a rewrite is to do, as plain data: it crosses to a worker thread. */
export interface RewriteJob {
  readonly kernels: 'native' | 'ts';
  readonly feed: string;
  /** The feed's directory (`history/`, `index/`, `state/` below it). */
  readonly feedDirectory: string;
  /** Where the retained history starts: the snapshot opens from there. */
  readonly floor: { readonly commit: number; readonly position: number };
  /** The bases of the consecutive sealed segments rewritten as one. */
  readonly replaced: readonly number[];
  /** The segment after them: the rewritten one's `SegmentEnd` names it. */
  readonly successor: { readonly base: number; readonly baseCommit: number };
  readonly frameDataBytesMax: number;
  /** The first replaced segment's capacity: the rewritten file's differs (see `merge-state.ts`). */
  readonly capacityToAvoid: number;
  /** A key compaction: what it keeps (see `compaction-selection.ts`). Absent for a merge. */
  readonly keep?: { readonly horizonPosition: number; readonly keyless: 'keep' | 'drop' };
  /**
   * Each kind's dictionaries of the segments before the first replaced one, newest first: what
   * the rewritten segment's dictionary is merged with. Absent when one of them is not a file.
   */
  readonly earlier: { readonly [order in TermOrder]?: readonly DictionaryFile[] };
}

/** What a rewrite wrote. */
export interface RewriteResult {
  readonly header: SegmentHeader;
  /** Where its `SegmentEnd` ends. */
  readonly end: number;
  readonly commits: number;
  /** Records (entries) the rewritten segment holds. */
  readonly records: number;
  /** Positions it covers: its last commit's last position − its base + 1. */
  readonly count: number;
  /** Which derived files were built beside it; the feed rebuilds the others after the switch. */
  readonly built: { readonly index: boolean } & { readonly [order in TermOrder]: boolean };
}

/** The files a rewrite writes, under their temporary names. */
export interface RewriteFiles {
  readonly segment: string;
  readonly summary: string;
  readonly index: string;
  readonly latest: string;
  readonly first: string;
}

/** Every file of a rewrite of the segments from `base`, under its temporary name. */
export function rewriteFiles(feedDirectory: string, base: number): RewriteFiles {
  const layout = new FeedLayout(feedDirectory);
  const segment = layout.historySegment(base);
  const index = layout.index;
  return {
    segment: temporary(segment),
    summary: temporary(summaryFileOf(segment)),
    index: temporary(indexFileOf(index, base)),
    latest: temporary(dictionaryFileOf(index, base, 'latest')),
    first: temporary(dictionaryFileOf(index, base, 'first')),
  };
}

/** A rewrite's temporary name for `file`. */
function temporary(file: string): string {
  return `${file}${rewriteTemporarySuffix}`;
}

/** Removes every rewrite's derived file left in the index `directory` (an open after a crash). */
export async function removeRewriteLeftovers(directory: string): Promise<void> {
  let names: string[];
  try {
    names = await fsp.readdir(directory);
  } catch {
    return;
  }
  for (const name of names)
    if (name.endsWith(rewriteTemporarySuffix)) await fsp.rm(path.join(directory, name), { force: true });
}

/** Removes a rewrite's files (after a failure, or when the switch was put off). */
export async function removeRewriteFiles(files: RewriteFiles): Promise<void> {
  for (const file of Object.values(files)) await fsp.rm(file, { force: true });
}

/** What a rewrite reads: a history, and for a key compaction its key and fingerprint dictionaries. */
export interface RewriteSource {
  readonly history: History;
  readonly indexes?: KeyIndexes;
}

/**
 * Runs `job` over `source`, writing every file of `rewriteFiles` (removed again if it fails).
 * `offThread` says whether builds may go to the index build worker (not from a worker).
 */
export async function rewriteSegments(
  kernels: Kernels,
  job: RewriteJob,
  source: RewriteSource,
  offThread: boolean,
  signal?: AbortSignal,
  /** Called as the replaced segments' commits are rewritten, with their records so far (entries). */
  onRecords?: (records: number) => void,
): Promise<RewriteResult> {
  const { history } = source;
  const base = job.replaced[0];
  const files = rewriteFiles(job.feedDirectory, base);
  const commits = job.replaced.flatMap((replaced) => history.commits.commitsInSegment(replaced));
  assert(commits.length > 0 && commits[0].firstPosition === base, 'a rewrite starts with the first replaced segment');
  try {
    let select;
    if (job.keep) {
      assert(source.indexes !== undefined, 'a key compaction asks the key dictionaries');
      select = await keyCompactionSelection(
        history,
        source.indexes,
        job.replaced,
        job.keep.horizonPosition,
        job.keep.keyless,
        signal,
      );
    }
    const merged = await writeMergedSegment(
      kernels,
      history,
      job.feed,
      files.segment,
      commits,
      job.successor,
      job.frameDataBytesMax,
      job.capacityToAvoid,
      signal,
      select,
      onRecords,
    );
    await writeSummary(
      kernels,
      files.summary,
      {
        base,
        baseCommit: merged.header.baseCommit,
        capacity: merged.header.capacity,
        end: merged.end,
        commits: merged.commits,
      },
      merged.header,
    );
    const count = merged.commits[merged.commits.length - 1].lastPosition - base + 1;
    const built = await buildDerivedFiles(kernels, job, merged, count, files, offThread, signal);
    return {
      header: merged.header,
      end: merged.end,
      commits: merged.commits.length,
      records: merged.commits.reduce((sum, commit) => sum + commit.entries, 0),
      count,
      built,
    };
  } catch (error) {
    await removeRewriteFiles(files);
    throw error;
  }
}

/** The rewritten segment's index file and dictionaries, built from the segment read back. */
async function buildDerivedFiles(
  kernels: Kernels,
  job: RewriteJob,
  merged: MergedSegment,
  count: number,
  files: RewriteFiles,
  offThread: boolean,
  signal: AbortSignal | undefined,
): Promise<RewriteResult['built']> {
  const base = merged.header.base;
  const segment = SegmentFile.open(kernels, merged.file, true);
  try {
    const runs = new SegmentRuns(kernels, segment);
    const commits: readonly CommitRecord[] = merged.commits;
    const tail = await indexTailOf(runs, base, commits);
    assert(tail.count === count, 'a rewritten segment is indexed at every position it covers');
    const data = offThread
      ? await buildIndexDataOffThread(kernels, tail.source())
      : buildIndexData(kernels, tail.source());
    // The fingerprint the feed will know the segment by once it is switched in: its summary's.
    const source = segmentSource(kernels, commits);
    await writeIndexFile(kernels, files.index, encodeIndexFile(kernels, data, source));
    const built = { index: true, latest: false, first: false };
    for (const order of ['latest', 'first'] as const) {
      signal?.throwIfAborted();
      const earlier = job.earlier[order];
      if (!earlier) continue;
      const { terms, own } = await winnerColumnsOf(await segmentKeysOf(runs, base, order, commits));
      let bytes: Uint8Array;
      try {
        const sections = () => new DictionarySections(kernels, keyCacheBytesMax);
        bytes =
          (offThread
            ? await buildKeyFileOffThread(kernels, order, base, count, source, terms, own, earlier)
            : undefined) ?? buildKeyFileBytes(kernels, order, base, count, source, terms, own, earlier, sections());
      } catch {
        // A dictionary before it failed a check: the feed rebuilds this one after the switch,
        // on its own thread, where damaged dictionaries are rebuilt too.
        continue;
      }
      await writeKeyFile(kernels, files[order], bytes);
      built[order] = true;
    }
    return built;
  } finally {
    segment.close();
  }
}
