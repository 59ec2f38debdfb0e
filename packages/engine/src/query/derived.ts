/**
 * Derived, in-memory indexes over the published history, rebuilt from the logs and extended as
 * commits are published (the logs are the truth; everything else is derived):
 * - the key index: every occurrence of every key (commit, position, version, tombstone, entry),
 *   which answers point lookups and latest-per-key without scanning;
 * - the fingerprint index: the first position of every fingerprint, which answers "is this the
 *   first occurrence?" for deduplicated reads over the whole history.
 * Both are extended lazily, up to the snapshot a read asks about, one commit run at a time.
 */
import type { ManifestEntry } from '../storage/records.js';
import type { Snapshot } from './snapshot.js';

export interface KeyOccurrence {
  readonly commit: number;
  readonly position: number;
  readonly version: number;
  readonly tombstone: boolean;
  readonly entry: ManifestEntry;
}

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
  private readonly keys = new Map<string, KeyOccurrence[]>();
  private readonly firstPositions = new Map<string, number>();
  /** Extensions run one at a time, so two reads never fold the same commit twice. */
  private extending: Promise<void> = Promise.resolve();

  /** Folds in every commit up to the snapshot's watermark. */
  extend(snapshot: Snapshot): Promise<void> {
    const target = snapshot.watermark.commit;
    if (this.indexed >= target) return this.extending;
    this.extending = this.extending.then(async () => {
      while (this.indexed < target) {
        const commit = snapshot.commits[this.indexed];
        const run = await snapshot.history.readRun(commit);
        for (let index = 0; index < run.entries.length; index++) {
          const entry = run.entries[index];
          const position = commit.firstPosition + index;
          const fingerprint = fingerprintKey(entry.fingerprint);
          if (!this.firstPositions.has(fingerprint)) this.firstPositions.set(fingerprint, position);
          if (entry.key === undefined) continue;
          const occurrence = { commit: commit.commit, position, version: entry.version ?? 0, tombstone: entry.tombstone, entry };
          const list = this.keys.get(entry.key);
          if (list) list.push(occurrence);
          else this.keys.set(entry.key, [occurrence]);
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

  /** The winning occurrence of `key` among commits up to `asOf`, tombstones included. */
  winner(key: string, asOf: number): KeyOccurrence | undefined {
    const list = this.keys.get(key);
    if (!list) return undefined;
    let best: KeyOccurrence | undefined;
    for (const occurrence of list) {
      if (occurrence.commit > asOf) break;
      if (!best || beats(occurrence, best)) best = occurrence;
    }
    return best;
  }

  /** The first position at which `fingerprint` occurs in the history folded in. */
  firstPosition(fingerprint: Uint8Array): number | undefined {
    return this.firstPositions.get(fingerprintKey(fingerprint));
  }
}
