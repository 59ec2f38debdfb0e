/**
 * The segments a follower's copy holds from its writer rather than from object storage: the tail
 * (the segment the writer is writing), and before it the segments the writer finished and has
 * not uploaded yet, copied whole with their `SegmentEnd`. Their bytes come from the writer's
 * `GET /v1/feeds/{feed}/history/tail` (`readTailGroups`) and are written at the offsets they have
 * there (`write`); the feed's view checks them again as it takes them. Nothing here is synced to
 * disk: a follower that restarts deletes these copies and makes them again. A sync of the copy
 * lines them up after the last segment object storage holds (`place`).
 *
 * @example
 * const tail = new TailCopy(kernels, feedDirectory, feedTag);
 * await tail.place({ base, commit }); // after object storage's last segment
 * await tail.write(answer); // what the writer sent for tail.wanted
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { segmentBytesMin } from '../../limits.js';
import { FeedLayout, segmentFileName, segmentSuffix, temporarySuffix } from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import { decodeSegmentHeader, SegmentFile, SegmentKind } from '../../storage/segment.js';

export class TailCopy {
  /** Where the copy's tail segment starts (known once a sync has looked at object storage). */
  private at: { readonly base: number; readonly commit: number } | undefined;
  /**
   * How far the tail segment holds its writer's bytes; undefined until the first copy of it is
   * made here (a run before may have left any part of it: it is copied again from the start).
   */
  private end: number | undefined;
  /** Set when the tail segment's file was replaced: a view open on the one before sees no more of it. */
  private replaced = false;
  /** The capacity the tail segment's header gives: the writer's groups never pass it. */
  private capacity = 0;
  /**
   * Bases of the segments before the tail segment that were copied whole from the writer, its
   * `SegmentEnd` included, and that object storage does not hold yet, in order: the writer
   * finished them, and the copy went on in the next without waiting for their upload. Kept in
   * memory only: like the tail, they are copied again after a restart.
   */
  private finished: number[] = [];

  constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly feedTag: number,
  ) {}

  /** Bases of the segments copied from the writer in this run: the finished ones, then the tail. */
  localBases(): number[] {
    return this.at ? [...this.finished, this.at.base] : [...this.finished];
  }

  /**
   * Lines the writer's segments copied here up after `remote`, where object storage's segments
   * end: copies of segments it now holds are deleted (their objects stand for them), the rest
   * are kept when they start right there; otherwise (nothing copied yet, or a merge changed the
   * segments) the tail starts again at `remote`, from nothing. Then, when no finished segment
   * lies before the tail and its file is not there, the empty tail segment is made: it is where
   * the writer's active segment would be, for the open reads the newest segment as the active
   * one, which must not be a sealed one. Returns the bases of the finished copies deleted while
   * the rest stayed lined up: a view that holds them reads on from its open files.
   */
  async place(remote: { base: number; commit: number }): Promise<number[]> {
    const copied = this.localBases();
    const kept = copied.filter((base) => base >= remote.base);
    const lined = kept[0] === remote.base;
    const gone = lined ? copied.filter((base) => base < remote.base) : copied;
    if (gone.length > 0) {
      await feedStores(this.kernels, this.directory).history.deleteAll(
        gone.map((base) => segmentFileName(base, segmentSuffix.history)),
      );
      // Started again: a view may hold the tail deleted here as its active segment.
      if (!lined) this.replaced = true;
    }
    if (lined) {
      this.finished = this.finished.filter((base) => base >= remote.base);
    } else {
      this.finished = [];
      this.at = remote;
      this.end = undefined;
    }
    const dropped = lined ? gone : [];
    const at = this.at!;
    const file = new FeedLayout(this.directory).historySegment(at.base);
    if (this.finished.length > 0 || fs.existsSync(file)) return dropped;
    this.end = undefined;
    const segment = await SegmentFile.create(this.kernels, file, {
      kind: SegmentKind.History,
      base: at.base,
      baseCommit: at.commit,
      capacity: segmentBytesMin,
      feedTag: this.feedTag,
    });
    segment.close();
    return dropped;
  }

  /** Where the copy's tail segment starts (its base and first commit), once a sync placed it. */
  get placed(): { readonly base: number; readonly commit: number } | undefined {
    return this.at;
  }

  /**
   * What the copy asks its writer for next: the tail segment's base and the offset its bytes
   * reach (0: from the start, header included). Undefined before a sync has placed the tail.
   */
  get wanted(): { readonly base: number; readonly from: number } | undefined {
    return this.at && { base: this.at.base, from: this.end ?? 0 };
  }

  /**
   * Notes that the view cannot take what was copied (it is more than a segment behind: it opened
   * while the copy moved on): the next sync says the copy changed, and a new view opens.
   */
  markReplaced(): void {
    this.replaced = true;
  }

  /** Whether the tail segment's file was replaced since the last call (a view must open again). */
  takeReplaced(): boolean {
    const replaced = this.replaced;
    this.replaced = false;
    return replaced;
  }

  /**
   * Writes groups its writer sent (`readTailGroups`) into the tail segment, at the offsets they
   * have there. From offset 0 the segment is made anew from the writer's header (checked against
   * the segment the tail should be), then named; after that, groups are written in place. When
   * they end with the segment's `SegmentEnd` (`next`), the segment is kept as a finished one and
   * the tail goes on in the next. Returns how far the groups reach in their segment, or
   * undefined when they are for another segment or offset than the copy's (a sync moved the tail
   * meanwhile): they are dropped.
   */
  async write(tail: {
    base: number;
    from: number;
    end: number;
    bytes: Uint8Array;
    next?: { readonly nextBase: number; readonly nextBaseCommit: number };
  }): Promise<number | undefined> {
    const at = this.at;
    if (!at || tail.base !== at.base || tail.from !== (this.end ?? 0)) return undefined;
    if (tail.bytes.length !== tail.end - tail.from)
      throw new StreamStackError(
        'IO',
        `the writer sent ${tail.bytes.length} bytes of a tail ${tail.from}..${tail.end}`,
      );
    const file = new FeedLayout(this.directory).historySegment(at.base);
    if (tail.from === 0) {
      const header = decodeSegmentHeader(this.kernels, tail.bytes, `the writer's segment ${at.base}`);
      if (
        header.kind !== SegmentKind.History ||
        header.base !== at.base ||
        header.baseCommit !== at.commit ||
        (header.feedTag ?? 0) !== this.feedTag ||
        header.capacity < tail.end
      )
        throw new StreamStackError(
          'CORRUPT',
          `the writer's active segment (base ${header.base}, commit ${header.baseCommit}) is not the one after object storage's last (base ${at.base}, commit ${at.commit})`,
          { details: { base: at.base } },
        );
      const temporary = `${file}${temporarySuffix}`;
      // Sized to its capacity as a segment must be, but sparse: a cache copied again after a
      // restart needs none of the zero-filling that makes a writer's segment durable.
      await fsp.rm(temporary, { force: true });
      await fsp.writeFile(temporary, new Uint8Array(0));
      await fsp.truncate(temporary, header.capacity);
      await writeAt(temporary, tail.bytes, 0);
      // A view may hold the file this one replaces (the empty tail, or an older copy); one that
      // finished the segment before opens this one when it takes its groups.
      if (fs.existsSync(file)) this.replaced = true;
      await fsp.rename(temporary, file);
      this.capacity = header.capacity;
    } else {
      if (tail.end > this.capacity)
        throw new StreamStackError(
          'CORRUPT',
          `the writer sent groups up to offset ${tail.end} of segment ${at.base}, past its capacity ${this.capacity}`,
          { details: { base: at.base } },
        );
      await writeAt(file, tail.bytes, tail.from);
    }
    this.end = tail.end;
    if (tail.next) {
      if (tail.next.nextBase <= at.base)
        throw new StreamStackError(
          'CORRUPT',
          `the writer's segment ${at.base} ends naming the segment at ${tail.next.nextBase} next`,
          { details: { base: at.base } },
        );
      this.finished.push(at.base);
      this.at = { base: tail.next.nextBase, commit: tail.next.nextBaseCommit };
      this.end = undefined;
      this.capacity = 0;
    }
    return tail.end;
  }
}

/**
 * Writes `bytes` at `offset` of `file`, not synced: a tail is copied again from its start after
 * a restart, so what a crash tore is never read.
 */
async function writeAt(file: string, bytes: Uint8Array, offset: number): Promise<void> {
  const handle = await fsp.open(file, 'r+');
  try {
    for (let done = 0; done < bytes.length; ) {
      const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, offset + done);
      done += bytesWritten;
    }
  } finally {
    await handle.close();
  }
}
