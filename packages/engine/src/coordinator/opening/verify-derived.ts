/**
 * `verify` of a feed's derived files: every tag index, key and fingerprint dictionary that exists
 * loads and describes its sealed segment, and every summary describes its segment as the
 * segment's bytes do. Each problem says what the engine does about it (they are rebuilt).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { VerificationCode } from '@streamstack/protocol';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { derivedMismatch, segmentsOf } from '../../query/indexes/sealed-segments.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { FeedLayout, segmentSuffix, summaryFileOf } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import { readIndexFile, readIndexHead } from '../../storage/index-segment.js';
import { type KeyFileHead, loadKeyFileHead, readKeySectionAsync } from '../../storage/key-file.js';
import { LocalSegmentStore } from '../../storage/segment-store.js';
import { readSummary, type SegmentSummary } from '../../storage/segment-summary.js';

/** How verify reports a problem: its code, its message, and where. */
export type Report = (code: VerificationCode, message: string, where?: { file?: string; offset?: number }) => void;

/** The files of the index folder `verify` checks: each sealed segment's index and dictionaries. */
const derivedSuffixes = [segmentSuffix.tagIndex, segmentSuffix.keyDictionary, segmentSuffix.fingerprintDictionary];

/**
 * Every index file, key and fingerprint dictionary that exists must load, and its head must
 * describe its sealed segment — the same base, record count and source fingerprint — as a
 * read-write open checks it (a missing one is rebuilt on the next open). Each problem says what
 * really happens to the file: an open rebuilds one whose head fails, and checks dictionaries
 * whole in the background; an index file's sections are checked when a query first loads it.
 */
export async function verifyIndexFiles(
  kernels: Kernels,
  directory: string,
  history: History,
  report: Report,
): Promise<void> {
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
export async function verifySummaries(
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
    // An evicted segment was opened by this very summary, with nothing local to hold it against:
    // its copy in object storage is checked against the descriptor's CRCs instead.
    if (history.store.isEvicted(path.basename(segment.file))) continue;
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
