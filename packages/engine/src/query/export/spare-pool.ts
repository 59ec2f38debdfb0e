/**
 * Buffers an export file was converted in, kept on their thread for the next file: a file's
 * worth of new pages faulted in and zeroed for every file cost an export as much as a tenth of
 * its time. Like the shared buffers of `export-offthread.ts`, they are dropped once no file has
 * given one back for `exportSpareBuffersKeepMs`, so a process that exported once does not hold
 * them for good.
 *
 * @example
 * const arenas = new SparePool<ColumnArena>(2);
 * const arena = arenas.take(() => new ColumnArena());
 * try { convert(arena); } finally { arenas.give(arena); }
 */
import { exportSpareBuffersKeepMs } from '../../limits.js';

export class SparePool<T> {
  private readonly spares: T[] = [];
  private dropTimer: NodeJS.Timeout | undefined;

  /** Keeps at most `keepMax` spares: as many as files are written on one thread at once. */
  constructor(private readonly keepMax: number) {}

  /** A spare, or a new one from `make`. */
  take(make: () => T): T {
    clearTimeout(this.dropTimer);
    return this.spares.pop() ?? make();
  }

  /** Keeps `spare` for the next file; the caller no longer uses it. */
  give(spare: T): void {
    if (this.spares.length < this.keepMax) this.spares.push(spare);
    clearTimeout(this.dropTimer);
    this.dropTimer = setTimeout(() => this.spares.splice(0), exportSpareBuffersKeepMs).unref();
  }

  /** How many spares are kept now (for tests). */
  get size(): number {
    return this.spares.length;
  }
}
