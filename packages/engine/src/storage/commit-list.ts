/**
 * A feed's commit records, in chain order, in memory only as far as they must be. The commits of
 * the active segment (and of any segment without a sound summary) are held as records; those of
 * a summarized segment are read from its summary a page at a time, and the pages read last are
 * kept in a bounded cache (`commitPagesCachedMax`). So a feed of millions of small commits keeps
 * a few hundred bytes per segment, not per commit, and opening it reads no commit records.
 *
 * The list is append-only in commit numbers: a part of it may change form (held records become
 * a summary once it is written) but never content, so a read that saw `length` commits keeps
 * seeing the same ones.
 *
 * It is longer than 500 lines because held records, summaries and their page cache are one list:
 * every lookup by commit, position or stream goes through the same segment extents.
 */
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { commitPagesCachedMax, summaryPageCommits } from '../limits.js';
import {
  decodeCommitPage,
  encodeCommitPage,
  type SummaryContent,
  sourceOfPages,
  streamHash,
  streamHashesOf,
} from './commit-pages.js';
import { type CommitRecord, commitRecord, isCompactedRun } from './commit-record.js';
import type { LostCommits } from './history-recovery.js';
import type { SyncSegmentReads } from './segment-store.js';
import { decodeSummaryPage, readSummaryPage, type SummaryHead, summaryStreamCandidates } from './segment-summary.js';

/**
 * Consecutive commits of one segment (or stand-ins for lost ones, segment −1). Their records are
 * in pages of `pageCommits`: a summarized segment's are read from its summary; a held part keeps
 * its full pages encoded in memory (about 50 bytes a commit instead of several hundred as
 * objects) and its newest commits, fewer than a page, as records.
 */
interface Part {
  readonly firstCommit: number;
  /** The first position of its first commit. */
  readonly firstPosition: number;
  readonly segment: number;
  readonly pageCommits: number;
  /** Full pages (and a summary's last one): each one's last position and run bytes. */
  readonly pages: { readonly lastPosition: number; readonly runBytes: number }[];
  /** Held parts: the encoded full pages, and the commits after them. */
  readonly encoded?: Uint8Array[];
  readonly open: CommitRecord[];
  /**
   * Held parts: the records of the newest full page, kept until the next page fills. Readers
   * that follow the head ask for the commits just behind it, and would otherwise decode (and
   * cache) every page the moment it is encoded.
   */
  newestPage?: CommitRecord[];
  /**
   * Held parts: the `streamHash` of each commit's stream id in the full pages, by its index in
   * the part (4 bytes a commit, where a map cost 30 to 60), hashed a page at a time when the page
   * is encoded. A lookup scans them, and the newest commits by id: only the active segment is
   * held, and looking a stream up by id is rare next to appending. A finished segment's summary
   * takes them as its stream table.
   */
  streamHashes?: Uint32Array;
  /** Held parts: the highest epoch and compacted commit of its commits, for its summary's head. */
  epochMax: number;
  compactedMax: number;
  /** Held parts: every commit starts right after the one before, so a summary may stand for them. */
  contiguous: boolean;
  readonly summary?: SummaryHead;
  count: number;
  lastPosition: number;
}

/** A held part's pages have no segment end to check runs against yet. */
const heldPageEnd = Number.MAX_SAFE_INTEGER;

/** How a sealed segment's commits are held: their range, and whether they are summarized. */
export interface SegmentExtent {
  readonly segment: number;
  readonly firstCommit: number;
  readonly commits: number;
  /** The last position of its last commit. */
  readonly lastPosition: number;
  readonly summarized: boolean;
}

/**
 * Stand-ins for commits corruption took. Those a surviving summary names (`known`, the first of
 * them, in order) keep their own positions and epochs; of the rest, the first carries all the
 * remaining positions (so position searches land on it), the others none. Every read of any of
 * them fails with `CORRUPT`.
 */
export function lostCommits(lost: LostCommits, known: readonly CommitRecord[] = []): CommitRecord[] {
  const standIns: CommitRecord[] = [];
  let next = { commit: lost.from, position: lost.fromPosition };
  for (const commit of known) {
    assert(
      commit.commit === next.commit &&
        commit.firstPosition === next.position &&
        commit.commit <= lost.to &&
        commit.lastPosition <= lost.toPosition,
      'known lost commits follow the chain',
    );
    standIns.push(standIn(commit.commit, commit.firstPosition, commit.lastPosition, commit.epoch, lost.damage));
    next = { commit: commit.commit + 1, position: commit.lastPosition + 1 };
  }
  for (let commit = next.commit; commit <= lost.to; commit++) {
    const first = commit === next.commit;
    standIns.push(standIn(commit, first ? next.position : lost.toPosition + 1, lost.toPosition, 0, lost.damage));
  }
  return standIns;
}

/** The stand-in for lost commit `commit` at positions `firstPosition`..`lastPosition` (none when first > last). */
function standIn(
  commit: number,
  firstPosition: number,
  lastPosition: number,
  epoch: number,
  damage: LostCommits['damage'],
): CommitRecord {
  const records = lastPosition - firstPosition + 1;
  return commitRecord(
    {
      commit,
      stream: '',
      parent: commit - 1,
      records,
      firstPosition,
      lastPosition,
      openedAt: 0,
      sealedAt: 0,
      message: undefined,
      epoch,
      oneShot: false,
      runBytes: 0,
      manifests: [],
      packs: [],
      entries: records,
      retired: [],
    },
    -1,
    0,
    damage,
  );
}

/** The error for commit `commit`, which a trim removed: the feed's history starts at `low`. */
export function trimmedError(commit: number, low: number): StreamStackError {
  return new StreamStackError('TRIMMED', `commit ${commit} was trimmed: the history starts at commit ${low}`, {
    details: { commit, lowMark: low },
  });
}

/** The error for a cursor below the key-compaction horizon: what it would read was compacted. */
export function compactedError(name: string, cursor: number, horizon: number): StreamStackError {
  return new StreamStackError(
    'COMPACTED',
    `${name} ${cursor} lies in compacted history: only each key's winner as of commit ${horizon} is kept before it, so cursors run from ${horizon} (or the start)`,
    { details: { cursor, horizon } },
  );
}

export class CommitList {
  private readonly parts: Part[] = [];
  private count = 0;
  private epochHighest = 0;
  /** Stand-ins for the commits corruption made unreadable (always held). */
  readonly lost: CommitRecord[] = [];
  /** Decoded summary pages by `segment:page`, least recently used first. */
  private readonly pages = new Map<number, CommitRecord[]>();
  /** Summary pages read since the list was made (tests check that opening reads none). */
  pagesRead = 0;
  /** Pages decoded since the list was made, cached or not (tests check that finishing a segment decodes none). */
  pagesDecoded = 0;

  /** The first commit still in the list: 1, or the retention floor once history was trimmed. */
  private first: number;
  /** The first position of the first commit. */
  private firstPosition: number;

  constructor(
    private readonly kernels: Kernels,
    /** The first commit and position the list will hold (the retention floor). */
    floor: { readonly commit: number; readonly position: number },
    /**
     * Where a summarized segment's pages and stream table are read from: the store its summary
     * is in, synchronously, as the lookups that need them cannot await (see `readSummaryPage`).
     */
    private readonly summaries: SyncSegmentReads,
  ) {
    assert(
      Number.isSafeInteger(floor.commit) && floor.commit >= 1 && floor.position >= 1,
      'a commit list starts at a commit number',
    );
    this.first = floor.commit;
    this.firstPosition = floor.position;
    this.count = floor.commit - 1;
  }

  /**
   * The key-compaction horizon H (0: never compacted). Segments wholly at or before H hold only
   * each key's winner as of H, so a cursor from the low mark up to H − 1 (a read, a
   * subscription, a condition, `asOf`) fails with `COMPACTED`; the start (`low − 1`) and H on
   * are kept.
   */
  get horizon(): number {
    return this.compactedTo;
  }

  /** Moves the horizon (never back): from this call on, cursors below it fail. */
  setHorizon(horizon: number): void {
    assert(Number.isSafeInteger(horizon) && horizon >= this.compactedTo, 'the compaction horizon only moves forward');
    this.compactedTo = horizon;
  }

  private compactedTo = 0;

  /** The first position still held. */
  get lowPosition(): number {
    return this.firstPosition;
  }

  /**
   * Fails with `TRIMMED` when cursor `cursor` (a commit number, named `name` in the message)
   * lies before the commit just before the low mark: what a read after it would start with is
   * gone. Cursors from `low - 1` on are kept.
   */
  assertCursorKept(cursor: number, name: string): void {
    const low = this.first;
    if (Number.isSafeInteger(cursor) && cursor >= low && cursor < this.compactedTo)
      throw compactedError(name, cursor, this.compactedTo);
    if (!Number.isSafeInteger(cursor) || cursor < 0 || cursor >= low - 1) return;
    throw new StreamStackError(
      'TRIMMED',
      `${name} ${cursor} lies in trimmed history: the history starts at commit ${low}, so cursors run from ${low - 1}`,
      {
        details: { cursor, lowMark: low },
      },
    );
  }

  /**
   * The last position of commit `cursor`, as a cursor means it: what a read after it starts
   * past. 0 for 0; for the commit just before the low mark, the position before the low one.
   */
  positionAfter(cursor: number): number {
    if (cursor === 0 && this.first === 1) return 0;
    if (cursor === this.first - 1) return this.firstPosition - 1;
    return this.at(cursor).lastPosition;
  }

  /** The highest commit number in the list (the list holds `low` to this). */
  get length(): number {
    return this.count;
  }

  /**
   * The segment of the newest commit (undefined while the list is empty), without decoding the
   * page it may sit in: the writer asks after every commit whether it started a segment.
   */
  get lastSegment(): number | undefined {
    return this.parts.at(-1)?.segment;
  }

  /** The first commit still held: commits before it were trimmed. */
  get low(): number {
    return this.first;
  }

  /**
   * Lets go of every commit before `firstCommit`, which starts history segment `segment`: a
   * trim removed the segments before it. Commits after it are untouched, so a read that holds
   * later commits goes on; one that asks for a trimmed commit gets `TRIMMED`.
   */
  trimBefore(firstCommit: number, segment: number): void {
    assert(firstCommit > this.first || segment >= this.firstPosition, 'a trim moves the floor forward');
    assert(firstCommit >= this.first && firstCommit <= this.count + 1, 'a trim keeps a suffix of the list');
    const kept = this.parts.filter((part) => part.firstCommit >= firstCommit);
    assert(kept.length === 0 || kept[0].firstCommit === firstCommit, 'a trim cuts the list between parts');
    assert(
      kept.every((part) => part.segment < 0 || part.segment >= segment),
      'a trim keeps the segments from its floor on',
    );
    this.parts.splice(0, this.parts.length, ...kept);
    this.lost.splice(0, this.lost.length, ...this.lost.filter((commit) => commit.commit >= firstCommit));
    // Page keys are commit numbers: the trimmed parts' pages are never asked for again.
    this.pages.clear();
    this.first = firstCommit;
    this.firstPosition = segment;
  }

  /** Commits held in memory, encoded or as records (the rest are read from summaries). */
  get heldCommits(): number {
    let held = 0;
    for (const part of this.parts) if (!part.summary) held += part.count;
    return held;
  }

  /** Summary pages in the cache now. */
  get pagesCached(): number {
    return this.pages.size;
  }

  /** The highest epoch any commit was written under. */
  get epochMax(): number {
    return this.epochHighest;
  }

  /**
   * The newest commit whose run key compaction thinned, or 0: key compaction thins only runs at
   * or before its horizon, so the horizon is at least this, whatever the compaction log says.
   * (Not the end of that run's segment: a merge may join a compacted segment to later ones.)
   */
  get compactedFloor(): number {
    return this.compactedNewest;
  }

  private compactedNewest = 0;

  /** Adds the next commit (a stand-in for a lost one included), held as a record. */
  push(commit: CommitRecord): void {
    assert(commit.commit === this.count + 1, 'commits join the list in chain order');
    const last = this.parts[this.parts.length - 1];
    let part: Part;
    if (last && !last.summary && last.segment === commit.segment) part = last;
    else {
      part = {
        firstCommit: commit.commit,
        firstPosition: commit.firstPosition,
        segment: commit.segment,
        pageCommits: summaryPageCommits,
        pages: [],
        encoded: [],
        open: [],
        streamHashes: new Uint32Array(summaryPageCommits),
        epochMax: 0,
        compactedMax: 0,
        contiguous: true,
        count: 0,
        lastPosition: commit.firstPosition - 1,
      };
      this.parts.push(part);
    }
    if (commit.firstPosition !== part.lastPosition + 1) part.contiguous = false;
    part.open.push(commit);
    part.count++;
    part.lastPosition = commit.lastPosition;
    part.epochMax = Math.max(part.epochMax, commit.epoch);
    if (!commit.damage && isCompactedRun(commit)) part.compactedMax = commit.commit;
    if (commit.damage) this.lost.push(commit);
    // Stand-ins stay records: there are few, and no page of them could be read back in order.
    if (part.open.length === part.pageCommits && part.segment >= 0) {
      const first = part.pages.length * part.pageCommits;
      if (first + part.pageCommits > part.streamHashes!.length) {
        const grown = new Uint32Array(part.streamHashes!.length * 2);
        grown.set(part.streamHashes!);
        part.streamHashes = grown;
      }
      part.streamHashes!.set(
        streamHashesOf(
          this.kernels,
          part.open.map((held) => held.stream),
        ),
        first,
      );
      part.encoded!.push(encodeCommitPage(this.kernels, part.open));
      part.pages.push({
        lastPosition: part.lastPosition,
        runBytes: part.open.reduce((sum, held) => sum + held.runBytes, 0),
      });
      part.newestPage = [...part.open];
      part.open.length = 0;
    }
    this.count++;
    this.epochHighest = Math.max(this.epochHighest, commit.epoch);
    if (!commit.damage && isCompactedRun(commit)) this.compactedNewest = Math.max(this.compactedNewest, commit.commit);
  }

  /** Adds a summarized segment's commits, which follow the list's last. */
  pushSummary(head: SummaryHead): void {
    assert(head.baseCommit === this.count + 1, 'a summarized segment follows the list in chain order');
    if (head.commitCount === 0) return;
    this.parts.push(this.summaryPart(head));
    this.count += head.commitCount;
    this.epochHighest = Math.max(this.epochHighest, head.epochMax);
    this.compactedNewest = Math.max(this.compactedNewest, head.compactedMax);
  }

  /**
   * Adds the active segment's commits as a checkpoint holds them (`active-checkpoint.ts`: a
   * summary of the segment up to where the feed last closed, `summaryBytes` its bytes whole).
   * They are held, as if pushed one by one, but from their encoded pages: only the page the next
   * commits fill (or the newest full one, which `heldSummaryContent` ends with) is decoded.
   * Replaying them one by one was most of the open of a feed of small commits.
   */
  pushHeld(head: SummaryHead, summaryBytes: Uint8Array): void {
    assert(
      head.baseCommit === this.count + 1 && head.commitCount > 0 && head.pageCommits === summaryPageCommits,
      "held commits follow the list in chain order, in pages of the list's size",
    );
    const pageCommits = head.pageCommits;
    const full = Math.floor(head.commitCount / pageCommits);
    const pageBytes = (page: number) => {
      const { offset, length } = head.pages[page];
      return summaryBytes.slice(offset, offset + length);
    };
    const encoded: Uint8Array[] = [];
    for (let page = 0; page < full; page++) encoded.push(pageBytes(page));
    const open = full < head.pages.length ? decodeSummaryPage(this.kernels, head, full, pageBytes(full)) : [];
    this.pagesDecoded++;
    // The stream table lists each commit's stream hash by its index; the open commits' hashes
    // are taken when their page fills, as for commits pushed one by one.
    const streamHashes = new Uint32Array((full + 1) * pageCommits);
    const table = new DataView(summaryBytes.buffer, summaryBytes.byteOffset + head.streamTableOffset);
    for (let entry = 0; entry < head.commitCount; entry++) {
      const index = table.getUint32(8 * entry + 4, true);
      if (index < full * pageCommits) streamHashes[index] = table.getUint32(8 * entry, true);
    }
    this.parts.push({
      firstCommit: head.baseCommit,
      firstPosition: head.base,
      segment: head.base,
      pageCommits,
      pages: head.pages.slice(0, full).map(({ lastPosition, runBytes }) => ({ lastPosition, runBytes })),
      encoded,
      open,
      ...(open.length === 0 ? { newestPage: decodeSummaryPage(this.kernels, head, full - 1, encoded[full - 1]) } : {}),
      streamHashes,
      epochMax: head.epochMax,
      compactedMax: head.compactedMax,
      contiguous: true,
      count: head.commitCount,
      lastPosition: head.lastPosition,
    });
    this.count += head.commitCount;
    this.epochHighest = Math.max(this.epochHighest, head.epochMax);
    this.compactedNewest = Math.max(this.compactedNewest, head.compactedMax);
  }

  private summaryPart(head: SummaryHead): Part {
    return {
      firstCommit: head.baseCommit,
      firstPosition: head.base,
      segment: head.base,
      pageCommits: head.pageCommits,
      pages: [...head.pages],
      open: [],
      summary: head,
      epochMax: head.epochMax,
      compactedMax: head.compactedMax,
      contiguous: true,
      count: head.commitCount,
      lastPosition: head.lastPosition,
    };
  }

  /**
   * The segment's summary is on disk: its held commits are let go and read from the summary from
   * now on. Nothing changes unless the summary holds exactly the commits the list holds.
   */
  summarized(head: SummaryHead): void {
    const at = this.parts.findIndex((part) => !part.summary && part.segment === head.base);
    if (at < 0 || this.parts.some((part, index) => index !== at && part.segment === head.base)) return;
    const part = this.parts[at];
    if (
      part.firstCommit !== head.baseCommit ||
      part.count !== head.commitCount ||
      part.lastPosition !== head.lastPosition
    )
      return;
    this.parts[at] = this.summaryPart(head);
  }

  /** The part holding commit `commit` (low ≤ commit ≤ length). */
  private partOf(commit: number): Part {
    if (commit < this.first && commit >= 1) throw trimmedError(commit, this.first);
    assert(commit >= this.first && commit <= this.count, `commit ${commit} is in the list`);
    let low = 0;
    let high = this.parts.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >>> 1;
      if (this.parts[middle].firstCommit <= commit) low = middle;
      else high = middle - 1;
    }
    return this.parts[low];
  }

  /** Decodes page `page` of a part: from its summary, or from the bytes held in memory. */
  private decodePage(part: Part, page: number): CommitRecord[] {
    this.pagesDecoded++;
    if (part.summary) return readSummaryPage(this.kernels, this.summaries, part.summary, page);
    const first = page * part.pageCommits;
    return decodeCommitPage(
      this.kernels,
      part.encoded![page],
      {
        segment: part.segment,
        firstCommit: part.firstCommit + first,
        firstPosition: page === 0 ? part.firstPosition : part.pages[page - 1].lastPosition + 1,
        lastPosition: part.pages[page].lastPosition,
        count: part.pageCommits,
        end: heldPageEnd,
      },
      `the commits held for segment ${part.segment}, page ${page}`,
    );
  }

  /** A page's commits, from the cache or decoded now. */
  private page(part: Part, page: number): CommitRecord[] {
    // A number, not a string: this runs for every commit looked up (a fetch looks up each hit's).
    // A page's first commit names it within its part, and held and summarized parts differ.
    if (part.newestPage && page === part.pages.length - 1) return part.newestPage;
    const key = (part.firstCommit + page * part.pageCommits) * 2 + (part.summary ? 1 : 0);
    let commits = this.pages.get(key);
    if (commits) {
      this.pages.delete(key);
    } else {
      commits = this.decodePage(part, page);
      this.pagesRead++;
      if (this.pages.size >= commitPagesCachedMax) this.pages.delete(this.pages.keys().next().value!);
    }
    this.pages.set(key, commits);
    return commits;
  }

  /**
   * Replaces the commits of consecutive segments `bases` by those of the merged segment that
   * holds them now, read from its summary: the same commits, laid out anew.
   */
  replaceSegments(bases: readonly number[], head: SummaryHead): void {
    const at = this.parts.findIndex((part) => part.segment === bases[0]);
    const replaced = this.parts.slice(at, at + bases.length);
    assert(
      at >= 0 && replaced.length === bases.length && replaced.every((part, index) => part.segment === bases[index]),
      'a merge replaces the parts of consecutive segments',
    );
    const last = replaced[replaced.length - 1];
    assert(
      replaced[0].firstCommit === head.baseCommit &&
        last.firstCommit + last.count - 1 === head.baseCommit + head.commitCount - 1 &&
        last.lastPosition === head.lastPosition,
      'a merged segment holds exactly the commits it replaces',
    );
    this.parts.splice(at, bases.length, this.summaryPart(head));
    // A key compaction's rewrite brings the runs it thinned.
    this.compactedNewest = Math.max(this.compactedNewest, head.compactedMax);
    // Pages are keyed by commit number: the replaced parts' pages would be found for the merged one's.
    this.pages.clear();
  }

  /** Commit `commit`'s record (low ≤ commit ≤ length); `TRIMMED` for a commit before `low`. */
  at(commit: number): CommitRecord {
    if (commit < this.first && commit >= 1) throw trimmedError(commit, this.first);
    const part = this.partOf(commit);
    const index = commit - part.firstCommit;
    const page = Math.floor(index / part.pageCommits);
    const record =
      page < part.pages.length
        ? this.page(part, page)[index % part.pageCommits]
        : part.open[index - part.pages.length * part.pageCommits];
    assert(record?.commit === commit, 'a page holds the commits its place says');
    return record;
  }

  /**
   * The summary content of segment `segment` from what the list holds, without decoding a page:
   * its full pages as they are held encoded, its newest commits encoded now. Undefined unless its
   * commits are one held part, sound and each right after the one before (from `start`, when
   * given) — what a summary may stand for.
   */
  heldSummaryContent(
    segment: number,
    /** Where the segment's header says it starts, when known: the commits must start there. */
    start?: { readonly baseCommit: number; readonly base: number },
  ): SummaryContent | undefined {
    const parts = this.parts.filter((part) => part.segment === segment);
    if (parts.length !== 1 || parts[0].summary || !parts[0].contiguous) return undefined;
    const part = parts[0];
    if (start && (part.firstCommit !== start.baseCommit || part.firstPosition !== start.base)) return undefined;
    if (part.open.some((commit) => commit.damage) || part.count === 0) return undefined;
    const pages = [...part.encoded!];
    const pageTable = [...part.pages];
    const hashed = part.pages.length * part.pageCommits;
    const streamHashes = new Uint32Array(part.count);
    streamHashes.set(part.streamHashes!.subarray(0, hashed));
    if (part.open.length > 0) {
      pages.push(encodeCommitPage(this.kernels, part.open));
      pageTable.push({
        lastPosition: part.lastPosition,
        runBytes: part.open.reduce((sum, held) => sum + held.runBytes, 0),
      });
      streamHashes.set(
        streamHashesOf(
          this.kernels,
          part.open.map((held) => held.stream),
        ),
        hashed,
      );
    }
    let runBytes = 0;
    for (const page of pageTable) runBytes += page.runBytes;
    const last = part.open.at(-1) ?? part.newestPage?.at(-1);
    assert(last?.commit === part.firstCommit + part.count - 1, "a held part's last commit is at hand");
    return {
      count: part.count,
      pages,
      pageTable,
      streamHashes,
      last,
      epochMax: part.epochMax,
      compactedMax: part.compactedMax,
      runBytes,
    };
  }

  /** Segment `segment`'s fingerprint (`segmentSource`) from the pages held for it, if it is whole here. */
  heldSourceOf(segment: number): number | undefined {
    const content = this.heldSummaryContent(segment);
    return content && sourceOfPages(this.kernels, content.pages);
  }

  /**
   * Commits `from` to `to` (inclusive), in order. A page's commits are handed out from the page
   * in hand, not looked up one by one (a scan of one-record commits asked for each commit's part
   * and page, and moved the page to the front of the cache, a quarter of a microsecond a commit);
   * each is still checked against the list's low mark, so a trim under the range ends it.
   */
  *range(from: number, to: number): Generator<CommitRecord> {
    for (let commit = from; commit <= to; ) {
      const part = this.partOf(commit);
      const index = commit - part.firstCommit;
      const page = Math.floor(index / part.pageCommits);
      if (page >= part.pages.length) {
        yield this.at(commit++);
        continue;
      }
      const records = this.page(part, page);
      const pageFirst = part.firstCommit + page * part.pageCommits;
      const end = Math.min(to, pageFirst + records.length - 1);
      for (; commit <= end; commit++) {
        if (commit < this.first) throw trimmedError(commit, this.first);
        const record = records[commit - pageFirst];
        assert(record?.commit === commit, 'a page holds the commits its place says');
        yield record;
      }
    }
  }

  /**
   * The first commit, up to `limit`, whose last position is at or after `position` (limit + 1
   * when there is none): the commit holding `position`, or the first after it.
   */
  firstEndingAtOrAfter(position: number, limit: number): number {
    // The part, by its last position; then the page, by the page table; then the commit.
    let low = 0;
    let high = this.parts.length;
    while (low < high) {
      const middle = (low + high) >>> 1;
      if (this.parts[middle].lastPosition < position) low = middle + 1;
      else high = middle;
    }
    if (low === this.parts.length) return Math.min(this.count, limit) + 1;
    const part = this.parts[low];
    const pages = part.pages;
    let page = 0;
    let pageHigh = pages.length;
    while (page < pageHigh) {
      const middle = (page + pageHigh) >>> 1;
      if (pages[middle].lastPosition < position) page = middle + 1;
      else pageHigh = middle;
    }
    // Then within the page's records, taken once: every fetched hit looks its commit up here.
    const offset = page * part.pageCommits;
    const commits = page < pages.length ? this.page(part, page) : part.open;
    let first = 0;
    let last = Math.min(commits.length, part.count - offset) - 1;
    while (first < last) {
      const middle = (first + last) >>> 1;
      if (commits[middle].lastPosition < position) first = middle + 1;
      else last = middle;
    }
    const found = part.firstCommit + offset + first;
    assert(commits[first]?.commit === found, 'a page holds the commits its place says');
    return Math.min(found, limit + 1);
  }

  /** The commit stream `id` was sealed into, if it was: newest segments first. */
  commitOfStream(id: string): number | undefined {
    let hash: number | undefined;
    for (let at = this.parts.length - 1; at >= 0; at--) {
      const part = this.parts[at];
      let candidates: number[];
      if (part.summary)
        candidates = summaryStreamCandidates(this.kernels, this.summaries, part.summary, id).map(
          (index) => part.firstCommit + index,
        );
      else {
        // Full pages by their hashes; the commits after them, held as records, by their ids.
        hash ??= streamHash(this.kernels, id);
        const hashes = part.streamHashes!;
        const hashed = part.pages.length * part.pageCommits;
        candidates = [];
        for (let index = 0; index < hashed; index++)
          if (hashes[index] === hash) candidates.push(part.firstCommit + index);
        for (const held of part.open) if (held.stream === id) candidates.push(held.commit);
      }
      for (const commit of candidates) {
        const held = this.at(commit);
        if (held.stream === id && !held.damage) return commit;
      }
    }
    return undefined;
  }

  /** Bytes of the runs of commits `from` to `to` (inclusive): whole pages from their tables. */
  runBytes(from: number, to: number): number {
    let sum = 0;
    for (let commit = from; commit <= to; ) {
      const part = this.partOf(commit);
      const page = Math.floor((commit - part.firstCommit) / part.pageCommits);
      const pageFirst = part.firstCommit + page * part.pageCommits;
      const pageLast = Math.min(pageFirst + part.pageCommits, part.firstCommit + part.count) - 1;
      if (page < part.pages.length && commit === pageFirst && pageLast <= to) {
        sum += part.pages[page].runBytes;
        commit = pageLast + 1;
        continue;
      }
      sum += this.at(commit).runBytes;
      commit++;
    }
    return sum;
  }

  /** How each history segment's commits are held, in order (stand-ins are in none). */
  segments(): SegmentExtent[] {
    const out: SegmentExtent[] = [];
    for (const part of this.parts) {
      if (part.segment < 0) continue;
      const previous = out[out.length - 1];
      if (previous?.segment === part.segment) {
        // Held commits of one segment split by stand-ins for commits lost inside it.
        out[out.length - 1] = {
          ...previous,
          commits: part.firstCommit + part.count - previous.firstCommit,
          lastPosition: part.lastPosition,
        };
        continue;
      }
      out.push({
        segment: part.segment,
        firstCommit: part.firstCommit,
        commits: part.count,
        lastPosition: part.lastPosition,
        summarized: part.summary !== undefined,
      });
    }
    return out;
  }

  /** The head of segment `segment`'s summary when its commits are read from it; else undefined. */
  summaryOf(segment: number): SummaryHead | undefined {
    return this.parts.find((part) => part.segment === segment && part.summary)?.summary;
  }

  /** The readable commits of history segment `segment`, in order (a summarized one's are read). */
  commitsInSegment(segment: number): CommitRecord[] {
    const out: CommitRecord[] = [];
    for (const part of this.parts) {
      if (part.segment !== segment) continue;
      // Pushed one by one: a segment may hold more commits than a spread can pass as arguments.
      for (let page = 0; page < part.pages.length; page++)
        for (const commit of this.decodePage(part, page)) out.push(commit);
      for (const commit of part.open) out.push(commit);
    }
    return out;
  }
}
