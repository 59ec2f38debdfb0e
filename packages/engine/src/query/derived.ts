/**
 * The fingerprint index, derived in memory from the published history: the first position of
 * every fingerprint, which answers "is this the first occurrence?" for deduplicated reads over
 * the whole history. It is extended lazily, up to the snapshot a read asks about, one commit run
 * at a time. (Point lookups by key go through `key-index.ts`.)
 */
import type { Snapshot } from './snapshot.js';

/** Winner order for latest-per-key: the highest version, then the highest position. */
export function beats(a: { version: number; position: number }, b: { version: number; position: number }): boolean {
  return a.version > b.version || (a.version === b.version && a.position > b.position);
}

const latin1 = new TextDecoder('latin1');

/** A fingerprint as a Map key: its bytes as a Latin-1 string (one character per byte). */
export function fingerprintKey(fingerprint: Uint8Array): string {
  return latin1.decode(fingerprint);
}

export class DerivedIndexes {
  /** Commits folded in so far (1..indexed). */
  private indexed = 0;
  private readonly firstPositions = new Map<string, number>();
  /** Extensions run one at a time, so two reads never fold the same commit twice. */
  private extending: Promise<void> = Promise.resolve();

  /** Folds in every commit up to the snapshot's watermark. */
  extend(snapshot: Snapshot): Promise<void> {
    const target = snapshot.watermark.commit;
    if (this.indexed >= target) return this.extending;
    this.extending = this.extending.then(async () => {
      while (this.indexed < target) {
        const commit = snapshot.commits.at(this.indexed + 1);
        const run = await snapshot.history.readRun(commit);
        for (let index = 0; index < run.entries.length; index++) {
          const entry = run.entries[index];
          const position = commit.firstPosition + index;
          const fingerprint = fingerprintKey(entry.fingerprint);
          if (!this.firstPositions.has(fingerprint)) this.firstPositions.set(fingerprint, position);
        }
        this.indexed++;
      }
    });
    return this.extending;
  }

  /** Commits folded in so far. */
  get indexedCommits(): number {
    return this.indexed;
  }

  /** The first position at which `fingerprint` occurs in the history folded in. */
  firstPosition(fingerprint: Uint8Array): number | undefined {
    return this.firstPositions.get(fingerprintKey(fingerprint));
  }
}
