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
 */
import { assert } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { commitPagesCachedMax } from '../limits.js';
import type { CommitRecord } from './history.js';
import type { LostCommits } from './history-log.js';
import { readSummaryPage, summaryStreamCandidates, type SummaryHead } from './segment-summary.js';

/** Consecutive commits held as records, all of one segment (or all stand-ins, segment −1). */
interface HeldPart {
  readonly kind: 'held';
  readonly firstCommit: number;
  readonly segment: number;
  readonly commits: CommitRecord[];
  readonly streams: Map<string, number>;
}

/** The commits of a summarized segment: read from its summary when needed. */
interface SummaryPart {
  readonly kind: 'summary';
  readonly firstCommit: number;
  readonly segment: number;
  readonly head: SummaryHead;
}

type Part = HeldPart | SummaryPart;

function partLength(part: Part): number {
  return part.kind === 'held' ? part.commits.length : part.head.commitCount;
}

function partLastPosition(part: Part): number {
  if (part.kind === 'summary') return part.head.lastPosition;
  return part.commits[part.commits.length - 1].lastPosition;
}

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
 * Stand-ins for commits corruption took: the first carries all their positions (so position
 * searches land on it), the others none; every read of any of them fails with `CORRUPT`.
 */
export function lostCommits(lost: LostCommits): CommitRecord[] {
  const standIns: CommitRecord[] = [];
  for (let commit = lost.from; commit <= lost.to; commit++) {
    const first = commit === lost.from;
    standIns.push({
      commit,
      stream: '',
      parent: commit - 1,
      records: first ? lost.toPosition - lost.fromPosition + 1 : 0,
      firstPosition: first ? lost.fromPosition : lost.toPosition + 1,
      lastPosition: lost.toPosition,
      openedAt: 0,
      sealedAt: 0,
      epoch: 0,
      oneShot: false,
      segment: -1,
      runStart: 0,
      runBytes: 0,
      manifests: [],
      packs: [],
      damage: lost.damage,
    });
  }
  return standIns;
}

export class CommitList {
  private readonly parts: Part[] = [];
  private count = 0;
  private epochHighest = 0;
  /** Stand-ins for the commits corruption made unreadable (always held). */
  readonly lost: CommitRecord[] = [];
  /** Decoded summary pages by `segment:page`, least recently used first. */
  private readonly pages = new Map<string, CommitRecord[]>();
  /** Summary pages read since the list was made (tests check that opening reads none). */
  pagesRead = 0;

  constructor(private readonly kernels: Kernels) {}

  /** Commits in the list: commit numbers run from 1 to this. */
  get length(): number {
    return this.count;
  }

  /** Commits held as records (the rest are read from summaries). */
  get heldCommits(): number {
    let held = 0;
    for (const part of this.parts) if (part.kind === 'held') held += part.commits.length;
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

  /** Adds the next commit (a stand-in for a lost one included), held as a record. */
  push(commit: CommitRecord): void {
    assert(commit.commit === this.count + 1, 'commits join the list in chain order');
    const last = this.parts[this.parts.length - 1];
    let part: HeldPart;
    if (last?.kind === 'held' && last.segment === commit.segment) part = last;
    else {
      part = { kind: 'held', firstCommit: commit.commit, segment: commit.segment, commits: [], streams: new Map() };
      this.parts.push(part);
    }
    part.commits.push(commit);
    if (commit.damage) this.lost.push(commit);
    else part.streams.set(commit.stream, commit.commit);
    this.count++;
    this.epochHighest = Math.max(this.epochHighest, commit.epoch);
  }

  /** Adds a summarized segment's commits, which follow the list's last. */
  pushSummary(head: SummaryHead): void {
    assert(head.baseCommit === this.count + 1, 'a summarized segment follows the list in chain order');
    if (head.commitCount === 0) return;
    this.parts.push({ kind: 'summary', firstCommit: head.baseCommit, segment: head.base, head });
    this.count += head.commitCount;
    this.epochHighest = Math.max(this.epochHighest, head.epochMax);
  }

  /**
   * The segment's summary is on disk: its held commits are let go and read from the summary from
   * now on. Nothing changes unless the summary holds exactly the commits the list holds.
   */
  summarized(head: SummaryHead): void {
    const at = this.parts.findIndex((part) => part.kind === 'held' && part.segment === head.base);
    if (at < 0 || this.parts.some((part, index) => index !== at && part.segment === head.base)) return;
    const part = this.parts[at] as HeldPart;
    if (part.firstCommit !== head.baseCommit || part.commits.length !== head.commitCount || partLastPosition(part) !== head.lastPosition) return;
    this.parts[at] = { kind: 'summary', firstCommit: part.firstCommit, segment: part.segment, head };
  }

  /** The part holding commit `commit` (1 ≤ commit ≤ length). */
  private partOf(commit: number): Part {
    assert(commit >= 1 && commit <= this.count, `commit ${commit} is in the list`);
    let low = 0;
    let high = this.parts.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >>> 1;
      if (this.parts[middle].firstCommit <= commit) low = middle;
      else high = middle - 1;
    }
    return this.parts[low];
  }

  /** A summary page's commits, from the cache or read now. */
  private page(part: SummaryPart, page: number): CommitRecord[] {
    const key = `${part.segment}:${page}`;
    let commits = this.pages.get(key);
    if (commits) {
      this.pages.delete(key);
    } else {
      commits = readSummaryPage(this.kernels, part.head, page);
      this.pagesRead++;
      if (this.pages.size >= commitPagesCachedMax) this.pages.delete(this.pages.keys().next().value!);
    }
    this.pages.set(key, commits);
    return commits;
  }

  /** Commit `commit`'s record (1 ≤ commit ≤ length). */
  at(commit: number): CommitRecord {
    const part = this.partOf(commit);
    const index = commit - part.firstCommit;
    if (part.kind === 'held') return part.commits[index];
    const pageCommits = part.head.pageCommits;
    const record = this.page(part, Math.floor(index / pageCommits))[index % pageCommits];
    assert(record.commit === commit, 'a summary page holds the commits its head says');
    return record;
  }

  /** Commits `from` to `to` (inclusive), in order. */
  *range(from: number, to: number): Generator<CommitRecord> {
    for (let commit = from; commit <= to; commit++) yield this.at(commit);
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
      if (partLastPosition(this.parts[middle]) < position) low = middle + 1;
      else high = middle;
    }
    if (low === this.parts.length) return Math.min(this.count, limit) + 1;
    const part = this.parts[low];
    let first = part.firstCommit;
    let last = part.firstCommit + partLength(part) - 1;
    if (part.kind === 'summary') {
      const pages = part.head.pages;
      let page = 0;
      let pageHigh = pages.length - 1;
      while (page < pageHigh) {
        const middle = (page + pageHigh) >>> 1;
        if (pages[middle].lastPosition < position) page = middle + 1;
        else pageHigh = middle;
      }
      first = part.firstCommit + page * part.head.pageCommits;
      last = Math.min(last, first + part.head.pageCommits - 1);
    }
    while (first < last) {
      const middle = (first + last) >>> 1;
      if (this.at(middle).lastPosition < position) first = middle + 1;
      else last = middle;
    }
    return Math.min(first, limit + 1);
  }

  /** The commit stream `id` was sealed into, if it was: newest segments first. */
  commitOfStream(id: string): number | undefined {
    for (let at = this.parts.length - 1; at >= 0; at--) {
      const part = this.parts[at];
      if (part.kind === 'held') {
        const found = part.streams.get(id);
        if (found !== undefined) return found;
        continue;
      }
      for (const index of summaryStreamCandidates(this.kernels, part.head, id)) {
        if (this.at(part.firstCommit + index).stream === id) return part.firstCommit + index;
      }
    }
    return undefined;
  }

  /** Bytes of the runs of commits `from` to `to` (inclusive): whole pages from their heads. */
  runBytes(from: number, to: number): number {
    let sum = 0;
    for (let commit = from; commit <= to; ) {
      const part = this.partOf(commit);
      if (part.kind === 'summary') {
        const { pageCommits, pages } = part.head;
        const page = Math.floor((commit - part.firstCommit) / pageCommits);
        const pageFirst = part.firstCommit + page * pageCommits;
        const pageLast = pageFirst + Math.min(pageCommits, part.head.commitCount - page * pageCommits) - 1;
        if (commit === pageFirst && pageLast <= to) {
          sum += pages[page].runBytes;
          commit = pageLast + 1;
          continue;
        }
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
        out[out.length - 1] = { ...previous, commits: part.firstCommit + partLength(part) - previous.firstCommit, lastPosition: partLastPosition(part) };
        continue;
      }
      out.push({
        segment: part.segment,
        firstCommit: part.firstCommit,
        commits: partLength(part),
        lastPosition: partLastPosition(part),
        summarized: part.kind === 'summary',
      });
    }
    return out;
  }

  /** The readable commits of history segment `segment`, in order (a summarized one's are read). */
  commitsInSegment(segment: number): CommitRecord[] {
    const out: CommitRecord[] = [];
    for (const part of this.parts) {
      if (part.segment !== segment) continue;
      // Pushed one by one: a segment may hold more commits than a spread can pass as arguments.
      if (part.kind === 'held') for (const commit of part.commits) out.push(commit);
      else for (let page = 0; page < part.head.pages.length; page++) for (const commit of readSummaryPage(this.kernels, part.head, page)) out.push(commit);
    }
    return out;
  }
}
