/**
 * Which dictionaries keep their sections in memory: each entry counts its bytes, and past the
 * bound the least recently used go first. A use is a stamp on the entry (one store), not a
 * reordering: a dedup scan asks every cached dictionary about every record, and moving each to
 * the end of an ordered map at every ask cost a fifth of the scan. Eviction, which is rare (a
 * dictionary's sections are read in), looks for the oldest stamp among the entries.
 *
 * @example
 * const cache = new DictionaryCache<Slot>(64 << 20, (slot) => slot.drop());
 * cache.remember(slot, slot.bytes); // its sections were read in
 * cache.use(slot); // a lookup used them
 */
export class DictionaryCache<Entry extends { lastUsed?: number }> {
  private readonly sizes = new Map<Entry, number>();
  private heldBytes = 0;
  private clock = 0;

  constructor(
    private readonly bytesMax: number,
    /** Lets go of an entry's sections: called for each entry the bound pushes out. */
    private readonly evict: (entry: Entry) => void,
  ) {}

  /** Marks `entry` as just used. */
  use(entry: Entry): void {
    entry.lastUsed = ++this.clock;
  }

  /**
   * Accounts for `entry` holding `bytes` now (its sections just read in), as just used, then
   * evicts the least recently used others while the bound is passed.
   */
  remember(entry: Entry, bytes: number): void {
    this.heldBytes += bytes - (this.sizes.get(entry) ?? 0);
    this.sizes.set(entry, bytes);
    this.use(entry);
    while (this.heldBytes > this.bytesMax) {
      let oldest: Entry | undefined;
      for (const candidate of this.sizes.keys()) {
        if (candidate !== entry && (oldest === undefined || (candidate.lastUsed ?? 0) < (oldest.lastUsed ?? 0)))
          oldest = candidate;
      }
      if (!oldest) break;
      this.forget(oldest);
      this.evict(oldest);
    }
  }

  /** Stops accounting for `entry` (its sections were let go of elsewhere). */
  forget(entry: Entry): void {
    const bytes = this.sizes.get(entry);
    if (bytes === undefined) return;
    this.sizes.delete(entry);
    this.heldBytes -= bytes;
  }

  /** Entries held and their bytes. */
  get holding(): { entries: number; bytes: number } {
    return { entries: this.sizes.size, bytes: this.heldBytes };
  }
}
