/**
 * A directory of segments of one log (the WAL, or the history): opens them in order and tells
 * torn tails from corruption (docs/faults.md), keeps exactly one active segment (the last), rolls
 * to a new one when a group does not fit, and deletes whole segments when asked. Segments are
 * named by their base, zero-padded, so that the directory order is the log order.
 *
 * The fault model enforced here: only the last group write of the log can be torn — a damage
 * in the newest segment with no sound group after it (or in the segment before it, when the
 * newest has no data yet: the torn write was that segment's `SegmentEnd`). Every other damage is
 * corruption: a bad header, a name that disagrees with the header, a size other than the
 * capacity, damage with sound groups after it, a finished newest segment (its successor is
 * missing). Corruption is reported, never cut.
 *
 * Segments grow as the log fills: the first has `segmentBytesFirst`, each next one twice the
 * capacity of the one before, up to the log's `capacityMax` (the store's `segmentBytes`). Each is
 * still created whole, at its capacity, and never grown in place.
 *
 * It is longer than 500 lines because a log's segments are one set through their whole life:
 * opened and told torn or corrupt, rolled to a new one, grown, synced and deleted, with the
 * invariants between them (one active segment, bases in order, spares never named) kept here.
 */
import fs from 'node:fs';
import path from 'node:path';
import { assert, ioError, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import {
  frameHeaderBytes,
  frameLengthMask,
  segmentBytesFirst,
  segmentHeaderBytes,
  trimmedSegmentCloseDelayMs,
} from '../limits.js';
import { baseOfSegmentName, segmentFile, segmentFileName, temporarySuffix } from './feed-layout.js';
import { FrameKind } from './frame-kinds.js';
import { controlGroup, groupHeaderAt, groupHeaderBytes, sealGroup, segmentEndGroupBytes } from './groups.js';
import {
  type Corruption,
  type MarkerDecoder,
  type ScannedSegment,
  type SegmentTrailer,
  scanSegment,
  type TornTail,
} from './runs.js';
import { SegmentFile, type SegmentHeader, type SegmentKind } from './segment.js';
import { cutFor, type SegmentCut } from './segment-cuts.js';
import { LocalSegmentStore, type SegmentStore } from './segment-store.js';

/**
 * Deletes every file of `store` named for a segment based below `base` (a history segment, its
 * summary, its index and dictionary files), durably, through the store: what a trim removes, and
 * what recovery deletes again when a trim was interrupted. Returns the count.
 */
export async function removeSegmentFilesBelow(store: SegmentStore, base: number): Promise<number> {
  const below = (await store.list()).filter((name) => {
    const named = baseOfSegmentName(name);
    return named !== undefined && named < base;
  });
  await store.deleteAll(below);
  return below.length;
}

/**
 * The names of the segments of the log in `directory` that recovery reads, in order. Unless
 * read-only, it first deletes what a process that died left: temporary files (spares and
 * half-created segments, never trusted: a segment only gets its name once it is whole; they are
 * always local, beside the segment being written), and, through `store`, the files of segments
 * below the floor or replaced by a finished merge.
 */
async function liveSegmentNames(
  directory: string,
  store: SegmentListing,
  extension: string,
  readOnly: boolean,
  floorBase: number,
  replacedBases: ReadonlySet<number>,
): Promise<string[]> {
  if (!readOnly) {
    for (const name of fs.readdirSync(directory).filter((entry) => entry.endsWith(temporarySuffix)))
      fs.rmSync(path.join(directory, name), { force: true });
  }
  const trimmed = (name: string) => {
    if (!/^\d+$/.test(name.slice(0, -extension.length))) return false;
    const base = Number(name.slice(0, -extension.length));
    return base < floorBase || replacedBases.has(base);
  };
  const listed = (await store.list()).filter((name) => name.endsWith(extension));
  if (!readOnly) await store.deleteAll(listed.filter(trimmed));
  return listed.filter((name) => !trimmed(name)).sort();
}

/** What recovery lists and deletes a log's segments through (a `SegmentStore`, for history). */
export type SegmentListing = Pick<SegmentStore, 'list' | 'deleteAll'>;

/** A segment that opened, with what its bytes hold (damage already told torn or corrupt). */
export interface OpenedSegment<M, R = never> {
  readonly segment: SegmentFile;
  /** The segment's bytes; only from the resume point on when `resumed` is set. */
  readonly bytes: Uint8Array;
  /** Only what lies after the resume point, when `resumed` is set. */
  readonly scanned: ScannedSegment<M>;
  /** What stood in for the segment's bytes up to its `end` (see `SegmentSet.open`'s `resumable`). */
  readonly resumed?: R;
}

/** A checkpoint of the newest segment (`of`), and where to say why the segment did not bear it out. */
export interface Resumable<R extends ResumePoint> {
  of(segment: SegmentFile): Promise<R | undefined>;
  refused(reason: string): void;
}

/**
 * Where the newest segment's bytes were known to end, and the last frame before that end as the
 * segment holds it: a checkpoint of it is taken only when the segment still holds that frame.
 */
export interface ResumePoint {
  readonly end: number;
  /** Where the segment's last group before `end` starts: its header must be sound and end there. */
  readonly lastGroupOffset: number;
  readonly lastFrameOffset: number;
  readonly lastFrameHeader: Uint8Array;
}

/** What the log learns while its segments open, in log order. */
export type SegmentEvent<M, S = never, R = never> =
  | { readonly kind: 'segment'; readonly opened: OpenedSegment<M, R> }
  /** A finished segment whose summary stood in for reading it (see `SegmentSet.open`). */
  | { readonly kind: 'summary'; readonly segment: SegmentFile; readonly summary: S }
  /** A damage inside a segment, or a whole segment (or its successor) unreadable or missing. */
  | { readonly kind: 'corruption'; readonly corruption: Corruption; readonly wholeSegment: boolean };

/** The last non-zero byte in [from, to), plus one; `from` when there is none. */
function nonZeroEnd(bytes: Uint8Array, from: number, to: number): number {
  let end = to;
  while (end > from && bytes[end - 1] === 0) end--;
  return end;
}

/**
 * What a segment read whole holds for a feed that holds it only up to `cut`: the runs and damage
 * before the end of the cut's commit frame, finished there (the log goes on at the commit after
 * the cut). What lies after it is another feed's: neither read nor judged.
 */
function cutScanned<M>(scanned: ScannedSegment<M>, cut: SegmentCut): ScannedSegment<M> {
  const entries = scanned.entries.filter((entry) =>
    entry.kind === 'run' ? entry.run.marker.offset <= cut.frameOffset : entry.offset < cut.end,
  );
  return {
    entries,
    end: Math.min(scanned.end, cut.end),
    dataGroups: scanned.dataGroups,
    trailer: { nextBase: cut.lastPosition + 1, nextBaseCommit: cut.commit + 1 },
  };
}

export class SegmentSet {
  readonly segments: SegmentFile[] = [];
  /** What recovery cut (or, read-only, would cut) when the set was opened. */
  readonly tornTails: TornTail[] = [];
  /** Every corruption found when the set was opened. */
  readonly corruptions: Corruption[] = [];

  private constructor(
    private readonly kernels: Kernels,
    readonly directory: string,
    private readonly kind: SegmentKind,
    private readonly extension: string,
    /** Opened by a reader: nothing on disk is changed through it. */
    readonly readOnly: boolean,
  ) {}

  /** The feed's tag, which new segments carry (0: none, for feeds made before tags). */
  private feedTag = 0;

  /** Segments held only up to a fork point (see `open`). */
  private cuts: ReadonlyMap<number, SegmentCut> = new Map();

  /** The bases of the segments a cut applied to when the set was opened (see `open`). */
  readonly cutBases = new Set<number>();

  /** Sealed segments evicted to object storage (see `open`). */
  private evictedBases: ReadonlySet<number> = new Set();

  /** Where the log's segments are listed and deleted (see `open`, which always sets it). */
  private store!: SegmentListing;

  /**
   * Opens every segment in `directory` (creating the directory if needed, unless read-only),
   * reporting each segment and each corruption to `onEvent` in log order. Read-only, it changes
   * nothing on disk: a torn tail is reported but not cut. It is longer than 100 lines because
   * each of its many inputs is documented where it is declared; the work itself is short.
   */
  static async open<M, S = never, R extends ResumePoint = never>(
    kernels: Kernels,
    directory: string,
    kind: SegmentKind,
    extension: string,
    decoder: MarkerDecoder<M>,
    onEvent: (event: SegmentEvent<M, S, R>) => void,
    readOnly = false,
    /**
     * A finished segment's summary, or undefined when it has none that holds: given one, the
     * segment's bytes are not read at all (its header and size are still checked). The newest
     * segment is always read. Awaited: a summary is read through the segment store.
     */
    summarized?: (segment: SegmentFile) => Promise<(S & { readonly end: number }) | undefined>,
    /**
     * The first base the log keeps (a trim removed the segments before it): files named below
     * it are what an interrupted trim left, deleted now (unless read-only), never read.
     */
    floorBase = 0,
    /**
     * Bases of segments a finished merge replaced (their commits are in the merged segment now)
     * whose files a crash left: deleted now (unless read-only), never read.
     */
    replacedBases: ReadonlySet<number> = new Set(),
    /** The feed's tag (`feedTagOf`): new segments carry it, and one with another is not this feed's. */
    feedTag = 0,
    /**
     * Where the log's segments are listed and deleted: history's segment store; the WAL's own
     * folder, which is never anywhere else.
     */
    store: SegmentListing = new LocalSegmentStore(kernels, directory),
    /**
     * Bases of sealed segments tiering evicted: their files were cut to their headers, and only
     * their summaries stand for them; one without a sound summary is corruption, never read as
     * empty. A file still whole under such a base, exactly its capacity (its cut not made yet,
     * or a merge's new segment under the name), is read as the local file it is.
     */
    evictedBases: ReadonlySet<number> = new Set(),
    /**
     * Whether the newest segment may be finished with its successor not there yet: a read-only
     * view of a log another process writes (or copies) may list the files just before the next
     * segment gets its name. The view then opens the successor when it appears (`adoptNext`).
     * Otherwise (a writer, or `verify`) that successor was lost: corruption.
     */
    successorMayFollow = false,
    /**
     * Segments this log shares with another feed and holds only up to a fork point
     * (`segment-cuts.ts`): read whole, nothing after the cut is theirs, and the segment counts
     * as finished there. Never written to (nor cut as torn): the file is another feed's too.
     */
    cuts: ReadonlyMap<number, SegmentCut> = new Map(),
    /**
     * A checkpoint of the newest segment, or undefined: given one that the segment's bytes
     * bear out (its last frame is there, ending at its `end`), the segment is read only from its
     * `end` on, and the checkpoint stands for what lies before.
     */
    resumable?: Resumable<R>,
  ): Promise<SegmentSet> {
    const set = new SegmentSet(kernels, directory, kind, extension, readOnly);
    set.feedTag = feedTag;
    set.cuts = cuts;
    set.evictedBases = evictedBases;
    set.store = store;
    set.floorBase = floorBase;
    if (!readOnly) fs.mkdirSync(directory, { recursive: true });
    else if (!fs.existsSync(directory)) return set;
    const names = await liveSegmentNames(directory, store, extension, readOnly, floorBase, replacedBases);
    // The newest is read first: whether the segment before it may hold a torn write depends on
    // whether the newest holds data yet. The others are read one at a time, in order.
    const newest =
      names.length > 0 ? await set.openOne<M, S, R>(names[names.length - 1], decoder, undefined, resumable) : undefined;
    for (const [index, name] of names.entries()) {
      const one = index === names.length - 1 ? newest! : await set.openOne<M, S, R>(name, decoder, summarized);
      if ('vanished' in one) continue;
      if ('summary' in one) {
        set.segments.push(one.segment);
        onEvent({ kind: 'summary', segment: one.segment, summary: one.summary });
        continue;
      }
      if ('corruption' in one) {
        set.corruptions.push(one.corruption);
        onEvent({ kind: 'corruption', corruption: one.corruption, wholeSegment: true });
        continue;
      }
      // Only the last write can be torn: in the newest segment, or in the one before it when
      // the newest holds no data yet (that write was the older segment's SegmentEnd).
      // A cut segment was durable where it was cut: damage before the cut is corruption.
      const tornAllowed =
        !one.cut &&
        (index === names.length - 1 ||
          (index === names.length - 2 &&
            newest !== undefined &&
            'scanned' in newest &&
            newest.scanned.dataGroups === 0));
      const scanned = await set.settleDamage(one, tornAllowed);
      set.segments.push(one.segment);
      onEvent({ kind: 'segment', opened: { ...one, scanned } });
      for (const entry of scanned.entries) {
        if (entry.kind === 'damage') {
          set.corruptions.push({
            file: one.segment.file,
            offset: entry.offset,
            reason: entry.reason,
            ...(entry.harmless ? { harmless: true } : {}),
          });
        }
      }
    }
    if (!readOnly) {
      // What recovery found sound may have been only in the page cache of a process that died:
      // it is made durable before any group names it as confirmed.
      for (const segment of set.segments.slice(-2)) await segment.sync(kernels);
    }
    const last = set.active;
    if (newest && 'scanned' in newest && newest.scanned.trailer && last === newest.segment && successorMayFollow) {
      set.activeTrailer = newest.scanned.trailer;
    } else if (newest && 'scanned' in newest && newest.scanned.trailer && last === newest.segment) {
      // The newest segment says the log goes on: the segment after it was lost.
      const corruption = {
        file: set.fileFor(newest.scanned.trailer.nextBase),
        offset: 0,
        reason: `the segment after ${path.basename(newest.segment.file)} is missing`,
      };
      set.corruptions.push(corruption);
      onEvent({ kind: 'corruption', corruption, wholeSegment: true });
    }
    return set;
  }

  /**
   * Opens and scans one segment file, or says why it is corrupt as a whole. Asynchronous for its
   * summary, which is read through the segment store.
   */
  private async openOne<M, S, R extends ResumePoint>(
    name: string,
    decoder: MarkerDecoder<M>,
    summarized?: (segment: SegmentFile) => Promise<(S & { readonly end: number }) | undefined>,
    resumable?: Resumable<R>,
  ): Promise<
    | { segment: SegmentFile; bytes: Uint8Array; scanned: ScannedSegment<M>; cut?: SegmentCut; resumed?: R }
    | { segment: SegmentFile; summary: S }
    | { corruption: Corruption }
    | { vanished: true }
  > {
    const file = path.join(this.directory, name);
    const base = /^\d+$/.test(name.slice(0, -this.extension.length))
      ? Number(name.slice(0, -this.extension.length))
      : Number.NaN;
    let segment: SegmentFile;
    try {
      segment = SegmentFile.open(this.kernels, file, this.readOnly);
    } catch (error) {
      if (error instanceof StreamStackError && error.code === 'CORRUPT')
        return { corruption: { file, offset: 0, reason: error.message } };
      // A reader beside a writer may see a finished WAL segment deleted between listing and
      // opening it: the live list says whether that matters.
      if (this.readOnly && (error as NodeJS.ErrnoException).code === 'ENOENT') return { vanished: true };
      throw ioError(error, `cannot open ${file}`);
    }
    const foreign = this.foreignReason(segment, name, base);
    if (foreign !== undefined) {
      segment.close();
      return { corruption: { file, offset: 0, reason: foreign } };
    }
    const cut = cutFor(this.cuts, segment.header);
    if (cut) this.cutBases.add(base);
    const found = await summarized?.(segment);
    // A summary of a cut segment describes it up to the cut, or it is another feed's.
    const summary = found && cut && found.end !== cut.end ? undefined : found;
    if (this.evictedBases.has(base) && segment.size() !== segment.header.capacity) {
      // Cut: its bytes are in object storage, its summary all there is to open it by here.
      if (summary) {
        segment.writeOffset = summary.end;
        segment.durableEnd = summary.end;
        return { segment, summary };
      }
      segment.close();
      return {
        corruption: {
          file,
          offset: 0,
          reason: `${name} was evicted to object storage and its summary is missing or damaged`,
        },
      };
    }
    if (summary && segment.size() === segment.header.capacity) {
      segment.writeOffset = summary.end;
      segment.durableEnd = summary.end;
      return { segment, summary };
    }
    // A cut segment is another feed's too: it is read whole, up to its cut.
    const point = cut ? undefined : await resumable?.of(segment);
    const borne = point && this.resumesAt(segment, point);
    if (typeof borne === 'string') resumable?.refused(borne);
    const resumed = point && borne && typeof borne !== 'string' ? { point, bytes: borne.bytes } : undefined;
    const bytes = resumed ? resumed.bytes : segment.readAll();
    const limit = Math.min(bytes.length, segment.header.capacity);
    decoder.beginSegment?.(segment.header);
    const read = scanSegment(this.kernels, bytes, limit, file, decoder, resumed?.point.end ?? segmentHeaderBytes);
    // What the checkpoint stands for holds runs: the segment before may not end in a torn write.
    const whole = resumed ? { ...read, dataGroups: read.dataGroups + 1 } : read;
    const scanned = cut ? cutScanned(whole, cut) : whole;
    if (bytes.length !== segment.header.capacity) {
      // A segment gets its name only once its full size is durable, so a different size is
      // damage, never a torn write. It took nothing written when the file is longer, or when it
      // ends past the last sound group with only zeros between (groups are contiguous).
      const reason = `the file is ${bytes.length} bytes, its capacity ${segment.header.capacity}`;
      const last = scanned.entries[scanned.entries.length - 1];
      const harmless =
        bytes.length > segment.header.capacity ||
        (bytes.length > scanned.end && last?.kind !== 'damage') ||
        scanned.trailer !== undefined;
      scanned.entries.push({
        kind: 'damage',
        offset: limit,
        resumeAt: undefined,
        reason,
        ...(harmless ? { harmless: true } : {}),
      });
    }
    segment.writeOffset = scanned.end;
    segment.durableEnd = scanned.end;
    segment.lastGroupOffset = scanned.lastGroup ?? resumed?.point.lastGroupOffset;
    return { segment, bytes, scanned, ...(cut ? { cut } : {}), ...(resumed ? { resumed: resumed.point } : {}) };
  }

  /**
   * The segment's bytes from `point`'s last commit frame on (the rest unread, zeros), when the
   * segment bears the checkpoint out: the group `point` names starts where it says (a sound
   * header) and ends at `point.end`, and the commit frame there is the one `point` holds (its
   * header, its data's CRC), ending there too; why not, when not (the checkpoint is then passed
   * over). The bytes before were confirmed durable when the checkpoint was written, so no power
   * loss since can have torn them: damage there is corruption, which the reads that reach it
   * find (every frame carries its CRC), as in a summarized segment, and never cut.
   */
  private resumesAt(segment: SegmentFile, point: ResumePoint): { bytes: Uint8Array } | string {
    const { lastGroupOffset, lastFrameOffset, end } = point;
    const elsewhere = `the segment does not bear it out: its last group at ${lastGroupOffset} does not end at ${end} with its last commit frame`;
    if (lastGroupOffset < segmentHeaderBytes || lastGroupOffset + groupHeaderBytes > lastFrameOffset) return elsewhere;
    if (end > segment.header.capacity || end > segment.size()) return elsewhere;
    const bytes = segment.readFrom(lastFrameOffset);
    if (bytes.length < end) return elsewhere;
    segment.fill(bytes, lastGroupOffset, lastGroupOffset + groupHeaderBytes);
    if (groupHeaderAt(this.kernels, bytes, lastGroupOffset, end)?.end !== end) return elsewhere;
    const header = bytes.subarray(lastFrameOffset, lastFrameOffset + frameHeaderBytes);
    if (!header.every((byte, at) => byte === point.lastFrameHeader[at])) return elsewhere;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const dataEnd = lastFrameOffset + frameHeaderBytes + (view.getUint32(lastFrameOffset, true) & frameLengthMask);
    if (dataEnd !== end) return elsewhere;
    const data = bytes.subarray(lastFrameOffset + frameHeaderBytes, dataEnd);
    if (this.kernels.crc32(data) !== view.getUint32(lastFrameOffset + 4, true)) return elsewhere;
    return { bytes };
  }

  /** Why the file named `name` is not this log's segment at `base`; undefined when it is. */
  private foreignReason(segment: SegmentFile, name: string, base: number): string | undefined {
    const { header } = segment;
    if (header.kind !== this.kind || header.base !== base || name !== segmentFileName(base, this.extension))
      return `${name} does not hold the segment its name says (kind ${header.kind}, base ${header.base})`;
    const tag = header.feedTag ?? 0;
    // Another feed's segment of the same layout would pass every other check, and its records
    // would be read as this feed's.
    if (tag !== 0 && this.feedTag !== 0 && tag !== this.feedTag)
      return `${name} was written for another feed (tag ${tag}; this feed's is ${this.feedTag})`;
    return undefined;
  }

  /**
   * Decides whether the segment ends in a torn tail (then cut, unless read-only); every other
   * damage stays — corruption. Groups are pipelined, so the writes a power loss may tear are the
   * groups written after the last confirmed byte: a damage starts the torn tail when no sound
   * group after it says its bytes were confirmed (each names how far the segment was confirmed
   * when it was written). Everything from there on — the damage and a sound group written behind
   * it — is cut: those groups were never confirmed, and their runs follow the torn one. Damage
   * before it, which a later group says was confirmed, is corruption and is left as it is.
   */
  private async settleDamage<M>(
    one: { segment: SegmentFile; bytes: Uint8Array; scanned: ScannedSegment<M> },
    tornAllowed: boolean,
  ): Promise<ScannedSegment<M>> {
    const { segment, bytes, scanned } = one;
    // Once a damage may be torn, so may every later one: a group confirming bytes past a later
    // damage would confirm this one's too.
    const at = scanned.entries.findIndex(
      (entry) =>
        entry.kind === 'damage' &&
        !entry.harmless &&
        !entry.wholeGroup &&
        (entry.confirmedAfter === undefined || entry.confirmedAfter <= entry.offset),
    );
    const first = at < 0 ? undefined : scanned.entries[at];
    if (!tornAllowed || !first || first.kind !== 'damage' || bytes.length !== segment.header.capacity) return scanned;
    // The scan notes a damage where the sound groups before it end, so the cut starts there.
    const end = nonZeroEnd(bytes, first.offset, bytes.length);
    // With no sound group after it, the tail starts at or past the last sound group's end (past
    // it when corruption lies between); with one, that group was written behind it.
    assert(
      first.confirmedAfter === undefined ? first.offset >= scanned.end : first.offset < scanned.end,
      'a torn tail starts after the sound groups it does not cut',
    );
    this.tornTails.push({ file: segment.file, offset: first.offset, bytes: end - first.offset });
    if (!this.readOnly) await segment.zeroRange(this.kernels, first.offset, end);
    segment.writeOffset = first.offset;
    segment.durableEnd = first.offset;
    // The cut may have taken the last group; which sound group comes before it is not known.
    if ((segment.lastGroupOffset ?? 0) >= first.offset) segment.lastGroupOffset = undefined;
    return { ...scanned, entries: scanned.entries.slice(0, at), end: first.offset };
  }

  get active(): SegmentFile | undefined {
    return this.segments[this.segments.length - 1];
  }

  /**
   * Read-only: where the log goes on when the active segment is finished (its `SegmentEnd` was
   * read) and the next segment is not opened yet.
   */
  activeTrailer: SegmentTrailer | undefined;

  /**
   * Read-only: opens the segment after the finished active one (`activeTrailer`), which another
   * process wrote since, as the new active segment, empty as far as this set knows: its groups
   * are taken as they are checked (`catchUpCommits`). `CORRUPT` when the file there is not that
   * segment.
   */
  adoptNext(): SegmentFile {
    const trailer = this.activeTrailer;
    assert(this.readOnly && trailer !== undefined, 'a read-only set adopts the segment after a finished one');
    const file = this.fileFor(trailer.nextBase);
    let segment: SegmentFile;
    try {
      segment = SegmentFile.open(this.kernels, file, true);
    } catch (error) {
      if (error instanceof StreamStackError) throw error;
      throw ioError(error, `cannot open ${file}`);
    }
    const { header } = segment;
    const tag = header.feedTag ?? 0;
    if (
      header.kind !== this.kind ||
      header.base !== trailer.nextBase ||
      header.baseCommit !== trailer.nextBaseCommit ||
      (tag !== 0 && this.feedTag !== 0 && tag !== this.feedTag)
    ) {
      segment.close();
      throw new StreamStackError(
        'CORRUPT',
        `${file} is not the segment the one before it names (base ${trailer.nextBase}, commit ${trailer.nextBaseCommit})`,
        { details: { file, offset: 0 } },
      );
    }
    segment.writeOffset = segmentHeaderBytes;
    segment.durableEnd = segmentHeaderBytes;
    this.segments.push(segment);
    this.activeTrailer = undefined;
    return segment;
  }

  fileFor(base: number): string {
    return segmentFile(this.directory, base, this.extension);
  }

  private closed = false;
  /** Segments based below this were trimmed. */
  private floorBase = 0;
  /** Descriptors of trimmed segments, closed a moment after they left (see `remove`). */
  private readonly retiring = new Set<{ segment: SegmentFile; timer: NodeJS.Timeout }>();

  /** The segment with the given base; `TRIMMED` for one a trim removed. */
  byBase(base: number): SegmentFile {
    if (this.closed) throw new StreamStackError('CLOSED', `${this.directory} is closed`);
    const segment = this.segments.find((candidate) => candidate.header.base === base);
    if (!segment && base < this.floorBase) {
      throw new StreamStackError(
        'TRIMMED',
        `the history segment at position ${base} was trimmed: the history starts at position ${this.floorBase}`,
        {
          details: { segment: base, lowPosition: this.floorBase },
        },
      );
    }
    if (!segment) {
      throw new StreamStackError('CORRUPT', `no segment with base ${base} in ${this.directory}`, {
        details: { file: this.fileFor(base), offset: 0 },
      });
    }
    return segment;
  }

  /**
   * The capacity of the segment that follows `previous` (none: the log's first): twice the
   * capacity of `previous`, at least `segmentBytesFirst`, at most `capacityMax`. Only the first
   * segments of a log are small, so a feed of a few records costs a few hundred KiB of disk,
   * while a large one soon rolls full-size segments. Derived from the segments on disk, it goes
   * on where it was after a reopen, and follows a changed `segmentBytes`.
   */
  static grownCapacity(previous: SegmentHeader | undefined, capacityMax: number): number {
    const doubled = previous === undefined ? segmentBytesFirst : previous.capacity * 2;
    return Math.min(capacityMax, Math.max(segmentBytesFirst, doubled));
  }

  /**
   * The active segment when it has room for a group of `bytes` and, after it, the segment's
   * `SegmentEnd`; else undefined (the group needs `roll`). Synchronous, so a group placed here
   * reserves its bytes before anything else is laid out.
   */
  activeWithRoom(bytes: number, capacityMax: number): SegmentFile | undefined {
    if (this.readOnly) throw new StreamStackError('READ_ONLY', `${this.directory} was opened read-only`);
    const needed = bytes + segmentEndGroupBytes;
    const active = this.active;
    if (!active || active.free < needed) return undefined;
    // Past half full, the next segment is zero-filled in the background, at the capacity the
    // roll will ask for. Not behind a segment sized to hold one large group: it is full at once,
    // and the next group may need another such segment.
    if (!this.spare && active.free - needed < active.header.capacity / 2 && active.header.capacity <= capacityMax) {
      this.startSpare(SegmentSet.grownCapacity(active.header, capacityMax));
    }
    return active;
  }

  /**
   * Rolls to a new segment with room for a group of `bytes` (and its `SegmentEnd`): once the
   * groups still in flight in the active segment have settled, the new segment is created whole,
   * then the old one is finished with a `SegmentEnd` naming it, then the new segment's
   * `firstGroup` (the WAL's live list), if any, is written. So a roll never overlaps another
   * write: only the newest segment can hold unconfirmed groups. The new segment's capacity is
   * the next of the log's growing sizes (`grownCapacity`), or what holds all three when they
   * need more.
   */
  async roll(
    bytes: number,
    next: () => Omit<SegmentHeader, 'kind' | 'capacity'>,
    capacityMax: number,
    firstGroup?: (base: number) => Uint8Array,
  ): Promise<SegmentFile> {
    if (this.readOnly) throw new StreamStackError('READ_ONLY', `${this.directory} was opened read-only`);
    const needed = bytes + segmentEndGroupBytes;
    const active = this.active;
    if (active) await active.appendsSettled();
    const header = next();
    const first = firstGroup?.(header.base);
    const replacing = active !== undefined && active.header.base === header.base;
    // An empty active segment that is replaced does not count as a step of growth.
    const previous = replacing ? this.segments[this.segments.length - 2] : active;
    const grown = SegmentSet.grownCapacity(previous?.header, capacityMax);
    const capacity = Math.max(grown, segmentHeaderBytes + (first?.length ?? 0) + needed);
    const full = { ...header, kind: this.kind, capacity, feedTag: this.feedTag };
    if (replacing) {
      // The active segment holds no data (a process rolled to it and died before its first
      // group landed, or it was sized for a group that never came). Its successor starts at the
      // same base, so it takes the same name: the new file is renamed over it.
      this.segments.pop();
      active.close();
    }
    let segment: SegmentFile | undefined;
    const spare = this.spare;
    this.spare = undefined;
    if (spare && capacity === this.spareCapacity && (await spare)) {
      segment = await SegmentFile.fromSpare(this.kernels, this.spareFile, this.fileFor(header.base), full).catch(
        () => undefined,
      );
    }
    segment ??= await SegmentFile.create(this.kernels, this.fileFor(header.base), full);
    if (active && !replacing) await this.finish(active, header);
    this.segments.push(segment);
    if (first) await this.appendGroup(segment, first);
    assert(segment.free >= needed, 'a new segment has room for the group it was made for');
    return segment;
  }

  /** Writes a `SegmentEnd` naming the next segment: from now on the log must go on there. */
  private async finish(segment: SegmentFile, next: Omit<SegmentHeader, 'kind' | 'capacity'>): Promise<void> {
    const builder = controlGroup(FrameKind.SegmentEnd, (writer) => writer.u64(next.base).u64(next.baseCommit));
    await this.appendGroup(segment, builder.finish(this.kernels));
  }

  /**
   * Seals a finished group's header for where it lands (and for how far the segment is
   * confirmed now), reserves its bytes, and resolves once they are durable. The reservation is
   * made before this returns, so the next group may be laid out and written behind it.
   */
  appendGroup(segment: SegmentFile, bytes: Uint8Array): Promise<number> {
    sealGroup(this.kernels, bytes, segment.writeOffset, segment.durableEnd);
    return segment.append(this.kernels, bytes);
  }

  /** A zero-filled file being prepared for the next segment: resolves true once it is ready. */
  private spare: Promise<boolean> | undefined;
  /** The size of the spare: a roll to a segment of another capacity does not use it. */
  private spareCapacity = 0;

  private get spareFile(): string {
    return path.join(this.directory, `spare${this.extension}${temporarySuffix}`);
  }

  private startSpare(capacity: number): void {
    this.spareCapacity = capacity;
    this.spare = SegmentFile.prepareSpare(this.kernels, this.spareFile, capacity).then(
      () => true,
      () => false,
    );
  }

  /** Waits for a spare being prepared and deletes it (on close: a spare is never reused). */
  async dropSpare(): Promise<void> {
    const spare = this.spare;
    this.spare = undefined;
    if (spare) await spare;
    if (!this.readOnly) fs.rmSync(this.spareFile, { force: true });
  }

  /**
   * Removes the segments before `base` for a trim: they leave the set at once (a lookup of one
   * fails with `TRIMMED`), their files are deleted and the deletion made durable; each
   * descriptor stays open `trimmedSegmentCloseDelayMs` longer, so a read already issued on it
   * completes. Never the active segment.
   */
  async trimBefore(base: number): Promise<void> {
    const trimmed = this.segments.filter((segment) => segment.header.base < base);
    assert(!trimmed.includes(this.active!), 'the active segment is never trimmed');
    this.floorBase = Math.max(this.floorBase, base);
    this.segments.splice(0, trimmed.length);
    for (const segment of trimmed) {
      const retiring = { segment, timer: setTimeout(() => this.retire(retiring), trimmedSegmentCloseDelayMs) };
      retiring.timer.unref();
      this.retiring.add(retiring);
    }
    await this.store.deleteAll(trimmed.map((segment) => path.basename(segment.file)));
  }

  /**
   * Puts `merged` (already renamed into place under the first replaced segment's name) where
   * the consecutive sealed segments `replaced` were. They leave the set at once; their
   * descriptors close a moment later (the caller made sure no read holds them). Synchronous,
   * so no lookup sees part of the change.
   */
  swapIn(replaced: readonly SegmentFile[], merged: SegmentFile): void {
    const at = this.segments.indexOf(replaced[0]);
    assert(
      at >= 0 && replaced.every((segment, index) => this.segments[at + index] === segment),
      'a merge replaces consecutive segments',
    );
    assert(at + replaced.length < this.segments.length, 'the active segment is never merged');
    this.segments.splice(at, replaced.length, merged);
    for (const segment of replaced) {
      const retiring = { segment, timer: setTimeout(() => this.retire(retiring), trimmedSegmentCloseDelayMs) };
      retiring.timer.unref();
      this.retiring.add(retiring);
    }
  }

  private retire(retiring: { segment: SegmentFile; timer: NodeJS.Timeout }): void {
    clearTimeout(retiring.timer);
    retiring.segment.closeDeleted();
    this.retiring.delete(retiring);
  }

  /** Deletes whole segments (never the active one), then makes the deletion durable. */
  async remove(segments: readonly SegmentFile[]): Promise<void> {
    if (segments.length === 0) return;
    for (const segment of segments) {
      assert(segment !== this.active, 'the active segment is never removed');
      segment.close();
      const at = this.segments.indexOf(segment);
      if (at >= 0) this.segments.splice(at, 1);
    }
    // Off the event loop (freeing a segment's tens of MiB of blocks takes milliseconds), and
    // durable once for all of them.
    await this.store.deleteAll(segments.map((segment) => path.basename(segment.file)));
  }

  close(): void {
    this.closed = true;
    for (const retiring of [...this.retiring]) this.retire(retiring);
    for (const segment of this.segments) segment.close();
    this.segments.length = 0;
  }
}
