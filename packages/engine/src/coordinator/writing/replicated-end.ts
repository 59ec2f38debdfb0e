/**
 * How far a replicated feed's history may be handed to followers (its tail): a group is durable
 * for a replicated feed once its slot is stored, not once the local fsync is done, and a
 * follower must never read a commit that a takeover could leave out. History groups are noted
 * as they are written and marked stored in the order they were written, so the visible end
 * never passes a group whose slot is still on its way (or failed).
 *
 * @example
 * replicatedEnd.note(activeBase, activeDurableEnd, durable, groupBytes);
 * readTailGroups(kernels, segment, from, bytesMax, false, replicatedEnd.visibleEnd(segment.header.base));
 */
import type { GroupLocation } from './group-commit.js';

export class ReplicatedEnd {
  /** History groups written whose slots are not all stored yet. */
  private pending = 0;
  /** Where the stored groups end, while some are pending; 'all' when none is. */
  private visible: { segment: number; offset: number } | 'all' = 'all';
  private stored: Promise<void> = Promise.resolve();
  /** Set once a group's slot failed: nothing after it is handed out. */
  private failed = false;

  /**
   * Notes a history group just written (not yet durable) while the active segment is `segment`
   * and durable to `durableEnd`; `durable` resolves with where it landed once its slot is stored
   * too, and it spans `bytes` there.
   */
  note(segment: number, durableEnd: number, durable: Promise<GroupLocation>, bytes: number): void {
    if (this.visible === 'all') this.visible = { segment, offset: durableEnd };
    this.pending++;
    this.stored = this.stored.then(async () => {
      try {
        const at = await durable;
        if (this.failed) return;
        this.pending--;
        this.visible = this.pending === 0 ? 'all' : { segment: at.segment, offset: at.offset + bytes };
      } catch {
        this.failed = true;
      }
    });
  }

  /** Where the bytes of the history segment at `base` that may be handed out end. */
  visibleEnd(base: number): number {
    if (this.failed) return 0;
    const visible = this.visible;
    if (visible === 'all' || base < visible.segment) return Number.POSITIVE_INFINITY;
    return base === visible.segment ? visible.offset : 0;
  }
}
