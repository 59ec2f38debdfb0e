/**
 * WAL retention: which streams have frames in each WAL segment, and, after a seal or an abort,
 * the deletion of finished WAL segments that hold nothing of the still-open stream. A WAL group
 * naming the segments that stay live is made durable first, so recovery can tell a segment
 * deleted on purpose from one that was lost.
 */
import type { SegmentFile } from '../../storage/segment.js';
import type { Wal } from '../../storage/wal.js';

export class WalRetention {
  /** Which streams have frames in each WAL segment (by base). */
  private readonly streams = new Map<number, Set<string>>();
  private work: Promise<void> = Promise.resolve();

  constructor(
    private readonly wal: Wal,
    /** Makes a WAL group durable that lists the live segments `bases`. */
    private readonly writeLiveList: (bases: readonly number[]) => Promise<void>,
  ) {}

  /** Notes that `stream` has frames in WAL segment `segment`. */
  note(segment: number, stream: string): void {
    const streams = this.streams.get(segment) ?? new Set<string>();
    streams.add(stream);
    this.streams.set(segment, streams);
  }

  /** Schedules the deletion of finished segments holding nothing of the stream `openStream()` names then. */
  schedule(openStream: () => string | undefined): void {
    this.work = this.work
      .catch(() => undefined)
      .then(async () => {
        const open = openStream();
        const finished: SegmentFile[] = this.wal.finishedSegments((segment) => {
          const streams = this.streams.get(segment.header.base);
          return !streams || open === undefined || !streams.has(open);
        });
        if (finished.length === 0) return;
        const bases = new Set(finished.map((segment) => segment.header.base));
        await this.writeLiveList(this.wal.liveBases(bases));
        for (const base of bases) this.streams.delete(base);
        await this.wal.segments.remove(finished);
      });
  }

  /** Resolves once scheduled deletions are done (failures are left to the next one). */
  idle(): Promise<void> {
    return this.work.catch(() => undefined);
  }
}
