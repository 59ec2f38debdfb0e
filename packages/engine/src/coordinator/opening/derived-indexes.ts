/**
 * What a feed derives from its published records, kept together: the tag and type index, the
 * key index, the fingerprint dictionaries (each fingerprint's first occurrence, for whole-history
 * dedup) and the condition high-water maps. They are opened together (the active segment's
 * records replayed into all of them in one pass), fed together by the publish indexer, a slice
 * at a time after each commit is published, and flushed together.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { FeedIndex, type IndexRebuild } from '../../query/indexes/feed-index.js';
import { KeyIndex, removeDictionaryFiles } from '../../query/indexes/key-index.js';
import { segmentsOf } from '../../query/indexes/sealed-segments.js';
import {
  readTailCheckpoint,
  type TailCheckpoint,
  tailCheckpointName,
  writeTailCheckpoint,
} from '../../query/indexes/tail-checkpoint.js';
import { type Query, queryMatcher } from '../../query/reading/planner.js';
import { type CommitRecord, entryPosition } from '../../storage/commit-record.js';
import { fingerprintKey } from '../../storage/commit-run.js';
import { baseOfSegmentName, FeedLayout, segmentSuffix } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import type { ManifestEntry, RecordData } from '../../storage/records.js';
import { removeSegmentFilesBelow } from '../../storage/segment-set.js';
import { LocalSegmentStore, type SegmentStore } from '../../storage/segment-store.js';
import type { KeyIndexes } from '../maintenance/compaction-selection.js';
import { removeRewriteLeftovers } from '../maintenance/segment-rewrite.js';
import { ConditionChecker } from '../writing/conditions.js';
import { type PublishedRun, PublishIndexer } from '../writing/publish-indexer.js';

/** The fields of a published record the derived indexes take. */
export type IndexedRecord = Pick<RecordData, 'type' | 'tags' | 'key' | 'version' | 'tombstone'>;

export class DerivedIndexes {
  /**
   * Folds published records into the indexes, a slice at a time after the commit is published:
   * whatever reads them waits for `caughtUp()` first.
   */
  private readonly indexer = new PublishIndexer<IndexedRecord>((run, index) => {
    const { commit } = run;
    const record = run.records[index];
    const locator = run.runStart + run.entryOffsets[index];
    const position = commit.firstPosition + index;
    this.index.add(commit, record.type, record.tags, locator, position);
    this.keys.add(commit, record.key, record.version, record.tombstone, locator, position);
    this.fingerprints.add(commit, run.fingerprints[index], 0, false, locator, position);
    // Conditions are checked by the writer alone: a view (a reader, a follower) keeps no maps.
    if (!this.readOnly) this.conditions.note(position, record.type, record.tags);
  });

  private constructor(
    /** The tag and type index: sealed segments from their files, the active one in memory. */
    readonly index: FeedIndex,
    /** The key index: sealed segments' dictionaries, the active segment's keys in memory. */
    readonly keys: KeyIndex,
    /** Each fingerprint's first occurrence, per sealed segment. */
    readonly fingerprints: KeyIndex,
    /** The condition high-water maps, which start empty at the watermark. */
    readonly conditions: ConditionChecker,
    /** The index folder's files, each named for the segment it derives from. */
    readonly store: SegmentStore,
    private readonly readOnly: boolean,
    private readonly kernels: Kernels,
  ) {}

  /**
   * Opens the indexes of the feed in `directory` over its recovered `history`, rebuilding what
   * is missing or damaged (reported in `index.rebuilt`). `watermark` is the published position.
   */
  static async open(
    kernels: Kernels,
    directory: string,
    history: History,
    watermark: number,
    readOnly: boolean,
    /** A trim was recorded and not finished: the dictionaries hold winners over what it removed. */
    trimPending = false,
    /**
     * A read-only open found a segment rewritten (a merge, a key compaction) and its switch-over
     * not finished: that segment's derived files describe what lay there before.
     */
    rewrittenBase?: number,
    /**
     * Sealed segments a takeover wrote back from their slots, with no derived files yet: their
     * dictionaries are built after the open, as a fork's cut segment's are, so the new writer
     * acknowledges without waiting for them (lookups do). Their tag indexes are built now: an
     * append waits for those anyway, for the feed's types.
     */
    restoredBases: ReadonlySet<number> = new Set(),
  ): Promise<DerivedIndexes> {
    const indexDirectory = new FeedLayout(directory).index;
    const rebuilt: IndexRebuild[] = [];
    const store = new LocalSegmentStore(kernels, indexDirectory);
    // Nothing below the floor is ever read again; whatever a trim left there goes (one listing).
    if (!readOnly) await removeSegmentFilesBelow(store, history.floorPosition);
    // A rewrite's derived files that a crash left before its switch-over (`segment-rewrite.ts`):
    // local scratch files, never in the store.
    if (!readOnly) await removeRewriteLeftovers(indexDirectory);
    if (trimPending && !readOnly) await removeDictionaryFiles(store);
    // A rewrite's stale dictionary would also feed the ones after it: all are rebuilt in memory.
    const stale = (trimPending && readOnly) || rewrittenBase !== undefined;
    // A fork's cut segment has no derived files of its own at first: they are built after the
    // open, so that a fork opens in the time its layout takes (reads that need them wait).
    const cut = history.segments.cutBases;
    const dictionariesLater = new Set([...cut, ...restoredBases]);
    // The active segment's tails as the feed last closed with them: only later commits are replayed.
    const checkpoint = await activeCheckpoint(kernels, store, history, readOnly, rebuilt);
    const keys = await KeyIndex.open(
      kernels,
      indexDirectory,
      history,
      rebuilt,
      readOnly,
      'latest',
      stale,
      dictionariesLater,
      checkpoint?.keys,
    );
    const fingerprints = await KeyIndex.open(
      kernels,
      indexDirectory,
      history,
      rebuilt,
      readOnly,
      'first',
      stale,
      dictionariesLater,
      checkpoint?.fingerprints,
    );
    const index = await FeedIndex.open(
      kernels,
      indexDirectory,
      history,
      readOnly,
      (commit, entry, locator, position) => addActiveEntry(keys, fingerprints, commit, entry, locator, position),
      new Set(rewrittenBase === undefined ? [] : [rewrittenBase]),
      cut,
      checkpoint && { tail: checkpoint.tail, after: checkpoint.commit },
    );
    index.rebuilt.unshift(...rebuilt);
    keys.reportTo(index.rebuilt);
    fingerprints.reportTo(index.rebuilt);
    keys.checkWholeLater();
    fingerprints.checkWholeLater();
    const conditions = new ConditionChecker(kernels, watermark);
    const derived = new DerivedIndexes(index, keys, fingerprints, conditions, store, readOnly, kernels);
    derived.checkpointed = checkpoint?.commit;
    return derived;
  }

  /**
   * The key and fingerprint dictionaries alone, opened read-only over `history` with the active
   * segment's records replayed into them: what a rewrite worker's snapshot asks a key
   * compaction's selection of (the tag index is not needed there).
   */
  static async openKeyIndexes(kernels: Kernels, directory: string, history: History): Promise<KeyIndexes> {
    const indexDirectory = new FeedLayout(directory).index;
    const rebuilt: IndexRebuild[] = [];
    const keys = await KeyIndex.open(kernels, indexDirectory, history, rebuilt, true, 'latest');
    const fingerprints = await KeyIndex.open(kernels, indexDirectory, history, rebuilt, true, 'first');
    const { active } = segmentsOf(history);
    if (active) {
      for await (const run of history.runs.readRuns(active.commits())) {
        run.entries.forEach((entry, at) => {
          addActiveEntry(
            keys,
            fingerprints,
            run.commit,
            entry,
            run.entryOffsets[at],
            entryPosition(run.commit, at, entry.seq),
          );
        });
      }
    }
    return { keys, fingerprints };
  }

  /**
   * Takes a published run. Its type names count toward the type limit of the very next request,
   * so they are noted now; the rest follows a slice at a time.
   */
  push(run: PublishedRun<IndexedRecord>, types: Iterable<string>): void {
    for (const type of types) this.index.typeNames.add(type);
    this.indexer.push(run);
  }

  /**
   * Undefined, or a promise to await before writing more records (then ask again): index files
   * built after the open, whose types count toward the type limit (`FeedIndex.buildsPending`),
   * the records waiting to be folded in (`PublishIndexer.roomInBacklog`), and the keys sealed
   * segments hold until their dictionaries are built (`KeyBuildBacklog.roomInBacklog`), each
   * within its bound.
   */
  roomInBacklog(): Promise<void> | undefined {
    return (
      this.index.buildsPending() ??
      this.indexer.roomInBacklog() ??
      this.keys.roomInBacklog() ??
      this.fingerprints.roomInBacklog()
    );
  }

  /** Resolves once the indexes and condition maps hold every run pushed so far. */
  caughtUp(): Promise<void> {
    return this.indexer.caughtUp();
  }

  /** Whether `caughtUp()` would resolve at once: every published record is in the indexes. */
  get isCaughtUp(): boolean {
    return this.indexer.idle;
  }

  /**
   * Whether a published record the indexes have not folded in yet matches `query` at a position
   * after `after`: with none, the indexes as they are now hold every match a condition could
   * find. True also when the indexer stopped (a fold failed): the caller then waits for it, and
   * its failure answers.
   */
  unindexedMatch(query: Query | undefined, after: number): boolean {
    const matches = queryMatcher(query);
    return (
      this.indexer.someQueued(
        (run, index) => run.commit.firstPosition + index > after && matches(run.records[index]),
      ) ?? true
    );
  }

  /** Whether the indexes hold every run pushed so far now, in this turn. */
  get indexedAll(): boolean {
    return this.indexer.idle;
  }

  /** Resolves once every run pushed is folded in and the files built meanwhile are on disk. */
  async flushed(): Promise<void> {
    await this.indexer.caughtUp();
    await this.index.flushed();
    await this.keys.flushed();
    await this.fingerprints.flushed();
  }

  /**
   * Drops what the indexes derived from the history before `base` (a trim removed it): the
   * index files of those segments, and every key and fingerprint dictionary, which are rebuilt
   * over the history that is left. Call it before the history lets go of the commits: from this
   * call on, key lookups and dedup wait for the rebuilt dictionaries, so none answers with a
   * winner that is gone. `removed` resolves once the files are deleted, durably; `rebuilt` once
   * the dictionaries are back.
   */
  trimBefore(base: number): { removed: Promise<void>; rebuilt: Promise<void> } {
    const keys = this.keys.trimBefore(base);
    const fingerprints = this.fingerprints.trimBefore(base);
    const removed = (async () => {
      await this.index.trimBefore(base);
      await keys.removed;
      await fingerprints.removed;
      if (!this.readOnly) await removeSegmentFilesBelow(this.store, base);
    })();
    return { removed, rebuilt: Promise.all([removed, keys.rebuilt, fingerprints.rebuilt]).then(() => undefined) };
  }

  /**
   * Writes the active segment's tails as a checkpoint (`tail-checkpoint.ts`), holding every
   * commit up to `last` (the last one published, all folded in: call it once the feed is idle),
   * so the next open replays none of them. Nothing is written for a history with damage, whose
   * tails hold stand-ins. A checkpoint is derived: if writing it fails, the next open replays.
   */
  async writeCheckpoint(history: History, last: CommitRecord | undefined): Promise<void> {
    const base = history.segments.active?.header.base;
    const tail = this.index.activeTail;
    const keys = this.keys.activeTail;
    const fingerprints = this.fingerprints.activeTail;
    if (this.readOnly || !last || base === undefined || last.segment !== base || !tail || !keys || !fingerprints)
      return;
    // A feed that wrote nothing since its checkpoint (one only read, as most are) writes none.
    if (!checkpointable(history) || !this.indexer.idle || last.commit === this.checkpointed) return;
    await writeTailCheckpoint(this.kernels, this.store, base, last, { tail, keys, fingerprints }).then(
      () => {
        this.checkpointed = last.commit;
      },
      () => undefined,
    );
  }

  /** The last commit the active segment's checkpoint on disk holds, when the feed knows one. */
  private checkpointed: number | undefined;

  /** Releases what the indexes hold open. */
  close(): void {
    this.keys.close();
    this.fingerprints.close();
  }
}

/** Whether the history is whole, so its tails hold no stand-ins: only then are they checkpointed. */
function checkpointable(history: History): boolean {
  // A torn tail is no damage: what it cut was never acknowledged, and a checkpoint names only
  // commits the disk had confirmed.
  return history.commits.lost.length === 0 && history.corruptions.length === 0 && history.headDamage === undefined;
}

/**
 * The checkpoint of the active segment's tails, when one holds (a damaged one is reported in
 * `rebuilt`, as the segment is replayed instead); the checkpoints of segments sealed since are
 * deleted (unless read-only). A history with damage takes none and deletes none.
 */
async function activeCheckpoint(
  kernels: Kernels,
  store: SegmentStore,
  history: History,
  readOnly: boolean,
  rebuilt: IndexRebuild[],
): Promise<TailCheckpoint | undefined> {
  const base = history.segments.active?.header.base;
  // A history with damage keeps every file as it is: which segment is the active one is then
  // not known for sure, and a checkpoint is derived, never worth a guess.
  if (base === undefined || !checkpointable(history)) return undefined;
  if (!readOnly) {
    // The segments sealed since their checkpoints were written.
    const stale = (await store.list()).filter(
      (name) => name.endsWith(segmentSuffix.tailCheckpoint) && (baseOfSegmentName(name) ?? base) < base,
    );
    await store.deleteAll(stale);
  }
  const { checkpoint, problem } = await readTailCheckpoint(kernels, store, history, base);
  if (problem !== undefined)
    rebuilt.push({ segment: base, file: tailCheckpointName(base), reason: `tail checkpoint: ${problem}` });
  return checkpoint;
}

/** Adds a record of the active segment, replayed on open, to the key and fingerprint dictionaries. */
function addActiveEntry(
  keys: KeyIndex,
  fingerprints: KeyIndex,
  commit: CommitRecord,
  entry: ManifestEntry,
  locator: number,
  position: number,
): void {
  keys.add(commit, entry.key, entry.version, entry.tombstone, locator, position);
  fingerprints.add(commit, fingerprintKey(entry.fingerprint), 0, false, locator, position);
}
