/**
 * The key index of one feed: what `get(key, { asOf })` asks. Sealed history segments each have
 * a key dictionary file (`storage/key-file.ts`) holding, for every key written in the segment,
 * its winner over the whole history up to the segment's end; the active segment's keys are in
 * memory, every occurrence, so an `asOf` inside it is answered too. A lookup walks the segments
 * newest first: the active segment, then sealed dictionaries until one holds the key (their
 * Bloom filters pass the rest without touching their FSTs). An `asOf` inside a sealed segment
 * reads that segment's records up to it, then goes on from the dictionary before it.
 *
 * Dictionary files are derived: built in the background when a segment is sealed (until then
 * the finished segment's keys stay in memory, and writers wait while too many are: see
 * `key-build-backlog.ts`), read lazily by section, kept in a bounded cache,
 * and rebuilt from the history when missing or damaged — byte for byte what either kernel set
 * builds, since the FST is the kernels' and the rest is plain bytes.
 *
 * The same structure, with the order reversed, answers whole-history dedup: a fingerprint
 * dictionary (`.fps`) keeps each fingerprint's first occurrence over the history up to its
 * segment, so the first occurrences within a sealed segment are exactly the winners that lie in
 * it — decided once, when the dictionary is built, and read as a bitmap by a scan.
 *
 * It is longer than 500 lines because both orders (keys' latest, fingerprints' first) share one
 * class over one layout of files, cache and rebuilds; the dictionary format is in
 * `storage/key-file.ts`, its merging in `key-merge.ts` and the in-memory tables in `key-table.ts`.
 */
import path from 'node:path';
import { assert } from '../../errors.js';
import { yieldToEventLoop, yieldWhenDue } from '../../event-loop.js';
import { mapInFlight } from '../../in-flight.js';
import type { Kernels, PackedBytes } from '../../kernels/kernels.js';
import {
  headReadsInFlightMax,
  keyBuildYieldKeys,
  keyCacheBytesMax,
  keyFilterProbes,
  keyWinnersHotReads,
} from '../../limits.js';
import { concatBytes, utf8Concat, utf8DecodeRange, utf8Encode } from '../../storage/codec.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { segmentFile, segmentSuffix } from '../../storage/feed-layout.js';
import type { History } from '../../storage/history-log.js';
import {
  encodeKeyFileColumns,
  type KeyFileHead,
  type KeyFileSource,
  type KeyWinner,
  keyFileHeadBytes,
  loadKeyFileHead,
  parseKeyFileHead,
  prefers,
  readKeySectionAsync,
  type TermOrder,
  WinnerReader,
  winnerAt,
} from '../../storage/key-file.js';
import { LocalSegmentStore, type SegmentStore, type SyncSegmentReads } from '../../storage/segment-store.js';
import { filterMayHold, filterMayHoldHashes, termHashes, termHashesOf } from '../../storage/term-filter.js';
import { DictionaryCache } from './dictionary-cache.js';
import type { IndexRebuild } from './feed-index.js';
import { buildKeyFileOffThread, keyFileOfSegmentOffThread } from './index-builder.js';
import { KeyBuildBacklog } from './key-build-backlog.js';
import type { DictionaryFile, WinnerColumns } from './key-merge.js';
import { deferredReason, derivedMismatch, segmentCommits, segmentSourceOf, segmentsOf } from './sealed-segments.js';
import { SegmentKeys, segmentKeysOf, winnerColumnsOf } from './segment-keys.js';
import { checkWholeOnce } from './whole-checks.js';

/** Each kind of dictionary's file name (a fingerprint's occurrences have no version or tombstone: only positions count). */
const kinds = {
  latest: { extension: segmentSuffix.keyDictionary },
  first: { extension: segmentSuffix.fingerprintDictionary },
} as const;

/** The dictionary of kind `order` of the segment at `base` in the index `directory`: named like the history segment it derives from. */
export function dictionaryFileOf(directory: string, base: number, order: TermOrder): string {
  return segmentFile(directory, base, kinds[order].extension);
}

/**
 * Deletes every key and fingerprint dictionary of the index folder's `store`, durably: what
 * recovery does when a trim stopped before its dictionaries were gone (they hold winners over
 * trimmed history). The next open rebuilds them over the history that is left.
 */
export async function removeDictionaryFiles(store: SegmentStore): Promise<void> {
  const names = await store.list();
  await store.deleteAll(names.filter((name) => Object.values(kinds).some((kind) => name.endsWith(kind.extension))));
}

/** A key looked up as of a position: its bytes and filter hashes made once for the whole walk. */
interface KeyProbe {
  readonly key: string;
  readonly bytes: Uint8Array;
  readonly hashes: [number, number];
  readonly asOfPosition: number;
}

/** What `lookupHeld` and `winnerNow` answer when they cannot answer from memory. */
export const notHeld = Symbol('not held');

/** A sealed segment's dictionary: where it is, and what of it is in memory. */
interface SealedKeys {
  readonly base: number;
  /** Records the segment covers (its last readable position − base + 1). */
  readonly count: number;
  readonly commits: () => readonly CommitRecord[];
  /** Its source fingerprint (`History.sourceOf`), which its dictionary file must carry. */
  readonly source: () => number;
  /** Until its dictionary is built (or, with gaps from corruption, for good): its keys in memory. */
  resident?: SegmentKeys;
  head?: KeyFileHead;
  /** Sections read so far: filter, FST, winners. */
  sections: (Uint8Array | undefined)[];
  /** Held in memory for good (read-only stores cannot write what they rebuilt). */
  pinned: boolean;
  /** For a fingerprint dictionary: which of the segment's records are first occurrences. */
  firsts?: Uint8Array;
  /** Its winners, read one at a time through a descriptor held while the slot is cached. */
  winners?: WinnerReader;
  /** Its dictionary's path, made once: lookups name it in their errors. */
  file?: string;
  /** Winners read one at a time so far: past `keyWinnersHotReads`, the whole section is worth holding. */
  winnerReads?: number;
  /** When a lookup last used its sections (`DictionaryCache`): the cache evicts the oldest. */
  lastUsed?: number;
  /** Set while its dictionary is rebuilt (see `KeyIndex.rebuild`). */
  rebuilding?: Promise<void>;
}

/**
 * Dictionaries of just-sealed segments built on this thread from the keys it held, since the
 * process started: none where the index build worker runs (see `KeyIndex.buildSealed`).
 */
let sealedBuildsFromHeldKeys = 0;

/** How many dictionaries of just-sealed segments were built from keys held on this thread (for tests). */
export function dictionariesBuiltFromHeldKeys(): number {
  return sealedBuildsFromHeldKeys;
}

export class KeyIndex {
  private readonly sealed: SealedKeys[] = [];
  private tail: SegmentKeys | undefined;
  private pending: Promise<void> = Promise.resolve();
  /** Dictionaries with sections in memory, within `keyCacheBytesMax`. */
  private readonly cache = new DictionaryCache<SealedKeys>(keyCacheBytesMax, (slot) => {
    slot.sections = [];
    slot.firsts = undefined;
    slot.winners?.close();
    slot.winners = undefined;
    slot.winnerReads = 0;
  });
  /** The keys sealed segments hold until their dictionaries are built: writers wait on it. */
  readonly backlog = new KeyBuildBacklog();

  private constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly history: History,
    private readonly readOnly: boolean,
    /** Where rebuilt dictionaries are reported (the feed's index rebuilds). */
    private rebuilt: IndexRebuild[],
    readonly order: TermOrder,
  ) {
    this.store = new LocalSegmentStore(kernels, directory);
  }

  /**
   * Where the dictionaries are: written whole, durably, as sealed segments' derived files are
   * (see `SegmentStore.put`), and read back through it too (heads, sections, and single winners
   * through a file it keeps at hand: `WinnerReader`).
   */
  private readonly store: SegmentStore & SyncSegmentReads;

  /** Reports later rebuilds to `list` (the feed's one list of index rebuilds). */
  reportTo(list: IndexRebuild[]): void {
    this.rebuilt = list;
  }

  fileFor(base: number): string {
    return dictionaryFileOf(this.directory, base, this.order);
  }

  /** `fileFor(slot.base)`, made once per slot: a point lookup joining the path each time spent a microsecond on it. */
  private slotFile(slot: SealedKeys): string {
    slot.file ??= this.fileFor(slot.base);
    return slot.file;
  }

  /** The store's name of the dictionary of the segment at `base`. */
  private nameFor(base: number): string {
    return path.basename(this.fileFor(base));
  }

  /** The dictionary of the segment at `base`, as its store holds it. */
  private sourceFor(base: number): KeyFileSource {
    return { store: this.store, name: path.basename(this.fileFor(base)) };
  }

  /**
   * Opens the key index: each sealed segment's dictionary head is read (a missing or damaged
   * one is rebuilt now, in segment order, since each builds on the one before). The active
   * segment's keys are added by the caller, through `add`, as it replays that segment.
   */
  static async open(
    kernels: Kernels,
    directory: string,
    history: History,
    rebuilt: IndexRebuild[],
    readOnly = false,
    order: TermOrder = 'latest',
    /** The files were built over history a trim removed (read-only, a trim not finished): not used. */
    stale = false,
    /**
     * Segments whose missing dictionaries are built in the background after the open, in
     * segment order, when they are the newest sealed ones (a fork's cut segment: see
     * `FeedIndex.open`; those a takeover wrote back from their slots). Lookups wait for them.
     */
    deferredBases: ReadonlySet<number> = new Set(),
    /** The active segment's occurrences as a checkpoint holds them (the caller replays what came after). */
    activeTail?: SegmentKeys,
  ): Promise<KeyIndex> {
    const index = new KeyIndex(kernels, directory, history, readOnly, rebuilt, order);
    const { sealed, active } = segmentsOf(history);
    const deferred: SealedKeys[] = [];
    // The heads are read side by side; what they say is then taken in segment order.
    const heads = await mapInFlight(sealed, headReadsInFlightMax, (segment) =>
      segment.gaps || stale
        ? Promise.resolve(undefined)
        : loadKeyFileHead(index.sourceFor(segment.base)).catch((error: unknown) =>
            error instanceof Error ? error : new Error(String(error)),
          ),
    );
    for (const [at, segment] of sealed.entries()) {
      const slot: SealedKeys = {
        base: segment.base,
        count: segment.count,
        commits: segment.commits,
        source: segment.source,
        sections: [],
        pinned: false,
      };
      index.sealed.push(slot);
      if (segment.gaps) {
        // Records corruption took: the dictionary would be wrong once repaired, so it is
        // never written; the readable keys stay in memory (and reads over the gap fail).
        slot.resident = await index.readSegmentKeys(slot);
        continue;
      }
      let reason: string | undefined = stale ? 'the history before it was trimmed' : undefined;
      const head = heads[at];
      if (head instanceof Error) reason = head.message;
      else if (!head) reason ??= 'missing';
      else {
        reason = derivedMismatch(head, segment);
        if (reason === undefined) slot.head = head;
      }
      // Only the newest sealed dictionaries wait, in order: each is built over those before it,
      // so one that is built now first has those before it built.
      if (reason === 'missing' && deferredBases.has(segment.base)) {
        deferred.push(slot);
        continue;
      }
      for (const waiting of deferred.splice(0)) await index.rebuild(waiting, 'missing');
      if (reason !== undefined) await index.rebuild(slot, reason);
    }
    if (deferred.length > 0) index.rebuildLater(deferred);
    if (active) index.tail = activeTail ?? new SegmentKeys(active.base, order);
    return index;
  }

  /**
   * Opening read only the heads. A section is checked by its CRC when a read loads it, but a
   * point lookup reads one winner, so damage elsewhere in a winners section would stay for good
   * (and `verify` report it for good): a read-write open calls this, once its rebuilds are
   * reported where the feed's are, to check every dictionary whole in the background (after the
   * builds already queued) and rebuild one that fails, as `verify` says it will.
   */
  checkWholeLater(): void {
    if (this.readOnly) return;
    this.pending = this.pending.then(() => this.checkWhole()).catch(() => undefined);
  }

  /**
   * Reads every sealed dictionary's sections, each checked by its CRC (the FST by its own
   * checksum too), and rebuilds one that fails. A dictionary held in memory has no file to check.
   */
  private async checkWhole(): Promise<void> {
    for (const slot of [...this.sealed]) {
      const head = slot.head;
      if (!head || slot.resident || slot.pinned) continue;
      // A file another feed's open checked (a fork's shared dictionary) is not read again.
      const reason = await checkWholeOnce(this.slotFile(slot), async () => {
        for (const section of [0, 1, 2] as const) {
          try {
            await readKeySectionAsync(this.kernels, this.sourceFor(slot.base), head, section);
          } catch (error) {
            return (error as Error).message;
          }
        }
        return undefined;
      });
      // Replaced or rebuilt meanwhile (a lookup met the damage first): the new file is sound.
      if (reason !== undefined && slot.head === head && this.sealed.includes(slot)) await this.rebuild(slot, reason);
    }
  }

  /** Every occurrence of every key in a sealed segment, read from its history (see `segmentKeysOf`). */
  private readSegmentKeys(slot: SealedKeys): Promise<SegmentKeys> {
    return segmentKeysOf(this.history.runs, slot.base, this.order, slot.commits());
  }

  /**
   * Builds a sealed segment's dictionary from its history segment, writes it, reports it. A
   * rebuild asked for while one of the same dictionary is under way (a lookup meeting damage
   * while the open's whole check rebuilds it) waits for that one: two would write the same
   * temporary file at once.
   */
  private rebuild(slot: SealedKeys, reason: string): Promise<void> {
    if (slot.rebuilding) return slot.rebuilding;
    const done = this.rebuildNow(slot, reason).finally(() => {
      if (slot.rebuilding === done) slot.rebuilding = undefined;
    });
    slot.rebuilding = done;
    return done;
  }

  private async rebuildNow(slot: SealedKeys, reason: string): Promise<void> {
    const bytes = await this.buildFromSegmentOffThread(slot);
    if (bytes) await this.install(slot, bytes);
    else await this.build(slot, await this.readSegmentKeys(slot));
    this.rebuilt.push({ segment: slot.base, file: this.fileFor(slot.base), reason });
  }

  /**
   * The dictionary of `slot`, read from its history segment and built on the worker, when it
   * can be (the segment has a summary, and every dictionary before it is a file); undefined
   * otherwise. A segment's terms listed and encoded here are hundreds of thousands of strings:
   * even made a slice at a time, their garbage was left for this thread's collector, whose
   * next full collection (a memory-reducing one, once the thread went quiet) held the event
   * loop for 50–100 ms.
   */
  private async buildFromSegmentOffThread(slot: SealedKeys): Promise<Uint8Array | undefined> {
    const files = this.filesOf(this.sealed.slice(0, this.sealed.indexOf(slot)).reverse());
    // The worker opens the segment by path: one the store keeps no local file of is built from
    // its keys read here, through the store (see `History.localPathOf`).
    const local = this.history.localPathOf(slot.base);
    if (!files || local === undefined) return undefined;
    const segment = {
      ...local,
      base: slot.base,
      count: slot.count,
      source: slot.source(),
    };
    return keyFileOfSegmentOffThread(this.kernels, this.order, segment, files);
  }

  /**
   * Builds the dictionary of a segment just sealed: on the worker from the segment's file once
   * its summary is written (see `buildFromSegmentOffThread`), or else from its keys held here.
   */
  private async buildSealed(slot: SealedKeys, keys: SegmentKeys): Promise<void> {
    await this.history.summariesWritten();
    const bytes = await this.buildFromSegmentOffThread(slot);
    if (bytes) return this.install(slot, bytes);
    sealedBuildsFromHeldKeys++;
    await this.build(slot, keys);
  }

  /**
   * The merge and encoding on this thread (no worker, or dictionaries before that are not files
   * yet, or one that failed a check — the walk rebuilds it), yielding now and then.
   */
  private async buildHere(
    slot: SealedKeys,
    before: number,
    terms: PackedBytes,
    columns: WinnerColumns,
  ): Promise<Uint8Array> {
    const winners: WinnerColumns = {
      positions: columns.positions.slice(),
      versions: columns.versions.slice(),
      locators: columns.locators.slice(),
      tombstones: columns.tombstones.slice(),
    };
    const { bytes: termBytes, ends } = terms;
    for (let index = 0; index < ends.length && before >= 0; index++) {
      const start = index === 0 ? 0 : ends[index - 1];
      const bytes = termBytes.subarray(start, ends[index]);
      // Terms were encoded from well-formed keys (or fingerprints' Latin-1 characters), so each
      // decodes back to the key it was.
      const key = utf8DecodeRange(termBytes, start, ends[index]);
      assert(key !== undefined, `term ${index} of a dictionary build is UTF-8`);
      const own: KeyWinner = {
        position: winners.positions[index],
        version: winners.versions[index],
        locator: winners.locators[index],
        tombstone: winners.tombstones[index] === 1,
      };
      const earlier = await this.walk(
        { key, bytes, hashes: termHashes(bytes), asOfPosition: slot.base - 1 },
        before,
        undefined,
      );
      if (earlier && prefers(this.order, earlier, own)) {
        winners.positions[index] = earlier.position;
        winners.versions[index] = earlier.version;
        winners.locators[index] = earlier.locator;
        winners.tombstones[index] = earlier.tombstone ? 1 : 0;
      }
      // A segment holds hundreds of thousands of keys: appends and reads go on meanwhile.
      if ((index + 1) % keyBuildYieldKeys === 0) await yieldToEventLoop();
    }
    return encodeKeyFileColumns(this.kernels, slot.base, slot.count, slot.source(), terms, winners);
  }

  /**
   * Builds the dictionary of `slot` from its keys: each key's winner in the segment against its
   * winner in the history before it. Written to its file (unless read-only), then held.
   */
  private async build(slot: SealedKeys, keys: SegmentKeys): Promise<void> {
    const before = this.sealed.indexOf(slot) - 1;
    const { terms, own } = await winnerColumnsOf(keys);
    // On the worker when every dictionary before is a file it can read: the merge walks them
    // all for each of the segment's hundreds of thousands of terms.
    const files = this.filesOf(this.sealed.slice(0, before + 1).reverse());
    let bytes: Uint8Array | undefined;
    if (files)
      bytes = await buildKeyFileOffThread(
        this.kernels,
        this.order,
        slot.base,
        slot.count,
        slot.source(),
        terms,
        own,
        files,
      ).catch(() => undefined);
    await this.install(slot, bytes ?? (await this.buildHere(slot, before, terms, own)));
  }

  /** Takes `bytes`, built for `slot`, as its dictionary: written to its file (unless read-only), then held. */
  private async install(slot: SealedKeys, bytes: Uint8Array): Promise<void> {
    const file = this.fileFor(slot.base);
    // Checked before writing as an open checks the file it finds after reading: a dictionary
    // names the range and the source of its own segment.
    const head = parseKeyFileHead(bytes.subarray(0, keyFileHeadBytes), bytes.length, file);
    assert(derivedMismatch(head, slot) === undefined, 'a dictionary is built from its own segment');
    if (!this.readOnly) await this.store.put(path.basename(file), bytes);
    slot.head = head;
    // The file was replaced: a descriptor held on the one before would read its old bytes.
    slot.winners?.close();
    slot.winners = undefined;
    // The filter and the FST stay in memory; winners are read one at a time when needed — from
    // the file, so a store that cannot write it (read-only) keeps them in memory too: the file
    // there, if any, is not this dictionary.
    slot.sections = head.sections
      .slice(0, this.readOnly ? 3 : 2)
      .map(({ offset, length }) => bytes.slice(offset, offset + length));
    slot.pinned = this.readOnly;
    slot.resident = undefined;
    slot.firsts = undefined;
    if (!slot.pinned) this.remember(slot);
  }

  /** Notes a published record (of the active segment; a new segment seals the one before). */
  add(
    commit: CommitRecord,
    key: string | undefined,
    version: number | undefined,
    tombstone: boolean,
    locator: number,
    position: number,
  ): void {
    if (!this.tail || this.tail.base !== commit.segment) this.startSegment(commit.segment);
    const tail = this.tail!;
    tail.lastCommit = commit;
    if (key !== undefined) tail.add(key, position, version ?? 0, tombstone, locator);
  }

  private startSegment(base: number): void {
    const previous = this.tail;
    this.tail = new SegmentKeys(base, this.order);
    const last = previous?.lastCommit;
    if (!previous || !last) return;
    // Its keys stay in memory until its dictionary is built, and get no more.
    previous.seal();
    const slot: SealedKeys = {
      base: previous.base,
      count: last.lastPosition - previous.base + 1,
      commits: segmentCommits(this.history, previous.base),
      source: segmentSourceOf(this.history, previous.base),
      resident: previous,
      sections: [],
      pinned: false,
    };
    this.sealed.push(slot);
    // Built in the background, in segment order (each builds on the one before): until it is
    // done, lookups read the finished segment's keys from memory. A dictionary is derived, so
    // a crash or failure before it lands only means it is rebuilt on the next open. Its keys
    // count toward the backlog writers wait on until the build settles, failed or not: a
    // failed build's keys stay held for good, and no later build would ever take them.
    const held = previous.occurrences;
    this.backlog.hold(held);
    this.pending = this.pending
      .then(() => new Promise<void>((resolve) => setImmediate(resolve)))
      .then(() => this.buildSealed(slot, previous))
      .catch(() => undefined)
      .finally(() => this.backlog.settle(held));
  }

  /** Undefined, or a promise to await before writing more records: see `KeyBuildBacklog.roomInBacklog`. */
  roomInBacklog(): Promise<void> | undefined {
    return this.backlog.roomInBacklog();
  }

  /**
   * The winner of `key` over positions up to `asOfPosition`, tombstones included, or undefined
   * when the key was never written there.
   */
  async winner(key: string, asOfPosition: number): Promise<KeyWinner | undefined> {
    if (this.rebasing) await this.rebasing;
    const bytes = utf8Encode(key);
    const tail = this.tail;
    const best = tail && tail.base <= asOfPosition ? tail.winnerUpTo(key, asOfPosition) : undefined;
    return this.walk({ key, bytes, hashes: termHashes(bytes), asOfPosition }, this.sealed.length - 1, best);
  }

  /**
   * `winner`, answered in this turn from what is in memory; `notHeld` when a rebase is under way
   * or a dictionary it reaches must be read first (then `winner` answers).
   */
  winnerNow(key: string, asOfPosition: number): KeyWinner | undefined | typeof notHeld {
    if (this.rebasing) return notHeld;
    const bytes = utf8Encode(key);
    const tail = this.tail;
    const best = tail && tail.base <= asOfPosition ? tail.winnerUpTo(key, asOfPosition) : undefined;
    const step = this.walkHeld({ key, bytes, hashes: termHashes(bytes), asOfPosition }, this.sealed.length - 1, best);
    return 'winner' in step ? step.winner : notHeld;
  }

  /**
   * Which of `keys` occur in a segment after the one at `base`, the active one included: for a
   * fingerprint dictionary, the fingerprints a later record repeats. Each dictionary's terms are
   * its own segment's, so every later one is asked — dictionary by dictionary, over the keys still
   * unresolved, each filter and FST loaded once and probed for all of them (asking dictionary
   * after dictionary per key instead reloads sections the cache cannot hold all of).
   */
  async occurringAfter(keys: readonly string[], base: number): Promise<Set<string>> {
    if (this.rebasing) await this.rebasing;
    const found = new Set<string>();
    // Keys are encoded and hashed once, a slice at a time (a group holds millions).
    const pieces: { bytes: Uint8Array; ends: Uint32Array; hashes: Uint32Array }[] = [];
    for (let first = 0; first < keys.length; first += keyBuildYieldKeys) {
      const piece = utf8Concat(keys.slice(first, first + keyBuildYieldKeys));
      pieces.push({ ...piece, hashes: termHashesOf(this.kernels, piece.bytes, piece.ends) });
      await yieldToEventLoop();
    }
    const pieceOf = (index: number) => pieces[Math.floor(index / keyBuildYieldKeys)];
    const keyBytes = (index: number) => {
      const { bytes, ends } = pieceOf(index);
      const at = index % keyBuildYieldKeys;
      return bytes.subarray(at === 0 ? 0 : ends[at - 1], ends[at]);
    };
    const hashOf = (index: number, which: 0 | 1) => pieceOf(index).hashes[2 * (index % keyBuildYieldKeys) + which];
    let unresolved = new Uint32Array(keys.length);
    for (let index = 0; index < keys.length; index++) unresolved[index] = index;
    let count = keys.length;
    const keep = async (test: (index: number) => boolean) => {
      let kept = 0;
      for (let walk = 0; walk < count; walk++) {
        if (walk > 0 && walk % keyBuildYieldKeys === 0) await yieldToEventLoop();
        const index = unresolved[walk];
        if (test(index)) found.add(keys[index]);
        else unresolved[kept++] = index;
      }
      count = kept;
    };
    const tail = this.tail;
    if (tail && tail.base > base)
      await keep((index) => tail.winnerUpTo(keys[index], Number.POSITIVE_INFINITY) !== undefined);
    for (const slot of this.sealed) {
      if (count === 0) break;
      if (slot.base <= base || slot.count === 0) continue;
      const resident = slot.resident;
      if (resident) {
        await keep((index) => resident.winnerUpTo(keys[index], Number.POSITIVE_INFINITY) !== undefined);
        continue;
      }
      const filter = await this.section(slot, 0);
      const fst = await this.section(slot, 1);
      const before = unresolved;
      let kept = 0;
      // A window of keys at a time, the event loop getting a turn between windows: the keys the
      // filter may hold are looked up in the FST in one kernel call.
      for (let first = 0; first < count; first += keyBuildYieldKeys) {
        if (first > 0) await yieldToEventLoop();
        const last = Math.min(count, first + keyBuildYieldKeys);
        const candidates: number[] = [];
        for (let walk = first; walk < last; walk++) {
          const index = before[walk];
          if (filterMayHoldHashes(filter, hashOf(index, 0), hashOf(index, 1), keyFilterProbes)) candidates.push(walk);
        }
        const ordinals =
          candidates.length === 0
            ? new Float64Array(0)
            : this.kernels.fstGetMany(fst, concatBytes(candidates.map((walk) => keyBytes(before[walk]))));
        let candidate = 0;
        for (let walk = first; walk < last; walk++) {
          const index = before[walk];
          // `fstGetMany` gives -1 for a key the FST lacks.
          if (candidates[candidate] === walk && ordinals[candidate++] !== -1) found.add(keys[index]);
          else before[kept++] = index;
        }
      }
      unresolved = before;
      count = kept;
    }
    return found;
  }

  /** Walks sealed segments from index `from` down, newest first, improving on `best`. */
  private async walk(probe: KeyProbe, from: number, best: KeyWinner | undefined): Promise<KeyWinner | undefined> {
    const { key, bytes, hashes, asOfPosition } = probe;
    for (let at = from; ; ) {
      const step = this.walkHeld(probe, at, best);
      if ('winner' in step) return step.winner;
      // The dictionary (or segment's keys) at `step.at` is read in first.
      const slot = this.sealed[step.at];
      best = step.best;
      at = step.at - 1;
      if (slot.base + slot.count - 1 > asOfPosition) {
        const found = (await this.readSegmentKeys(slot)).winnerUpTo(key, asOfPosition);
        if (found && prefers(this.order, found, best)) best = found;
        continue;
      }
      const found = await this.lookup(slot, bytes, hashes);
      // The dictionary's winner covers every segment up to this one: the walk ends here.
      if (found) return prefers(this.order, found, best) ? found : best;
    }
  }

  /**
   * The walk over the sealed segments from `from` down, as far as memory answers it without a
   * turn of the event loop: the winner, or the segment whose keys must be read in first (and the
   * best winner of those after it).
   */
  private walkHeld(
    probe: KeyProbe,
    from: number,
    best: KeyWinner | undefined,
  ): { readonly winner: KeyWinner | undefined } | { readonly at: number; readonly best: KeyWinner | undefined } {
    const { key, bytes, hashes, asOfPosition } = probe;
    for (let at = from; at >= 0; at--) {
      const slot = this.sealed[at];
      if (slot.base > asOfPosition || slot.count === 0) continue;
      if (slot.resident || slot.base + slot.count - 1 > asOfPosition) {
        // Not (yet) a dictionary, or one that covers records after `asOf`: its occurrences.
        if (!slot.resident) return { at, best };
        const found = slot.resident.winnerUpTo(key, asOfPosition);
        if (found && prefers(this.order, found, best)) best = found;
        continue;
      }
      const found = this.lookupHeld(slot, bytes, hashes);
      if (found === notHeld) return { at, best };
      // The dictionary's winner covers every segment up to this one: the walk ends here.
      if (found) return { winner: prefers(this.order, found, best) ? found : best };
    }
    return { winner: best };
  }

  /**
   * `lookup` for a dictionary whose filter and FST are in memory, synchronously; `notHeld` when
   * they are not (or the winner fails its check: `lookup` then rebuilds the dictionary).
   */
  private lookupHeld(
    slot: SealedKeys,
    bytes: Uint8Array,
    hashes: [number, number],
  ): KeyWinner | undefined | typeof notHeld {
    const [filter, fst, table] = slot.sections;
    if (!filter || !fst) return notHeld;
    if (!slot.pinned) this.touch(slot);
    if (!filterMayHold(filter, hashes, keyFilterProbes)) return undefined;
    const ordinal = this.kernels.fstGet(fst, bytes);
    if (ordinal === undefined) return undefined;
    const file = this.slotFile(slot);
    // The section is read in by the asynchronous lookup.
    if (!table && this.winnersWorthHolding(slot)) return notHeld;
    try {
      if (table) return winnerAt(table, ordinal, file);
      return this.readWinner(slot, ordinal);
    } catch {
      return notHeld;
    }
  }

  /** One winner read on its own, counted towards holding the whole section. */
  private readWinner(slot: SealedKeys, ordinal: number): KeyWinner {
    slot.winnerReads = (slot.winnerReads ?? 0) + 1;
    slot.winners ??= new WinnerReader(this.kernels, this.sourceFor(slot.base), slot.head!, Number.POSITIVE_INFINITY);
    return slot.winners.at(ordinal);
  }

  /**
   * Whether a dictionary's winners are looked up often enough to hold the whole section (a
   * point lookup then reads nothing but its record), and it fits the cache without pushing
   * anything out: holding it must never cost another dictionary its filter and FST.
   */
  private winnersWorthHolding(slot: SealedKeys): boolean {
    return (
      (slot.winnerReads ?? 0) >= keyWinnersHotReads &&
      slot.head !== undefined &&
      this.cache.holding.bytes + slot.head.sections[2].length <= keyCacheBytesMax
    );
  }

  /** The dictionary's winner for a key, or undefined when the segment lacks the key. */
  private async lookup(slot: SealedKeys, bytes: Uint8Array, hashes: [number, number]): Promise<KeyWinner | undefined> {
    const filter = await this.section(slot, 0);
    if (!filterMayHold(filter, hashes, keyFilterProbes)) return undefined;
    const ordinal = this.kernels.fstGet(await this.section(slot, 1), bytes);
    if (ordinal === undefined) return undefined;
    // The winners section is megabytes, and lookups walk many segments: one winner is read on
    // its own (checked by its own CRC) unless the section is in memory already.
    const file = this.slotFile(slot);
    const table = slot.sections[2] ?? (this.winnersWorthHolding(slot) ? await this.section(slot, 2) : undefined);
    try {
      if (table) return winnerAt(table, ordinal, file);
      return this.readWinner(slot, ordinal);
    } catch (error) {
      await this.rebuild(slot, (error as Error).message);
      return this.lookup(slot, bytes, hashes);
    }
  }

  /** A dictionary section, from memory or its file; a section that fails its check is rebuilt. */
  private async section(slot: SealedKeys, which: 0 | 1 | 2): Promise<Uint8Array> {
    const held = slot.sections[which];
    if (held) {
      if (!slot.pinned) this.touch(slot);
      return held;
    }
    try {
      const head = slot.head!;
      const bytes = await readKeySectionAsync(this.kernels, this.sourceFor(slot.base), head, which);
      // Rebuilt or replaced while the read was under way: what was read is not its file's now.
      if (slot.head !== head) return this.section(slot, which);
      slot.sections[which] = bytes;
    } catch (error) {
      await this.rebuild(slot, (error as Error).message);
      return this.section(slot, which);
    }
    if (!slot.pinned) this.remember(slot);
    return slot.sections[which]!;
  }

  private touch(slot: SealedKeys): void {
    this.cache.use(slot);
  }

  /** Accounts for a dictionary's sections in memory, dropping the least recently used past the bound. */
  private remember(slot: SealedKeys): void {
    this.cache.remember(
      slot,
      slot.sections.reduce((sum, section) => sum + (section?.length ?? 0), slot.firsts?.length ?? 0),
    );
  }

  /** Releases the descriptors lookups hold (the feed is closing). */
  close(): void {
    for (const slot of this.sealed) {
      slot.winners?.close();
      slot.winners = undefined;
    }
  }

  /**
   * For a fingerprint dictionary: whether each record at `positions` (ascending, in one commit
   * of history segment `segment`, with `term(i)` the fingerprint of the i-th) is the first occurrence of
   * its fingerprint in the whole history. A sealed segment with a dictionary answers from its
   * bitmap of first occurrences (built from its winners once, then cached); the active segment,
   * or one whose dictionary is not built yet, asks each fingerprint's winner.
   */
  async firstOccurrences(
    segment: number,
    positions: ArrayLike<number>,
    term: (index: number) => string,
  ): Promise<Uint8Array> {
    if (this.rebasing) await this.rebasing;
    const out = new Uint8Array(positions.length);
    const slot = this.sealed.find((candidate) => candidate.base === segment);
    if (slot && !slot.resident && slot.head) {
      // A sealed segment's answer is a bitmap: no record's term is needed.
      const firsts = slot.firsts ?? (await this.firstsBitmap(slot));
      for (let index = 0; index < positions.length; index++) {
        const relative = positions[index] - slot.base;
        out[index] = (firsts[relative >>> 3] >> (relative & 7)) & 1;
      }
      return out;
    }
    for (let index = 0; index < positions.length; index++) {
      const key = term(index);
      // Most answers need no turn of the event loop: the tail and the dictionaries in memory.
      let winner = this.winnerHeld(key);
      if (winner === notHeld) winner = await this.winner(key, Number.POSITIVE_INFINITY);
      out[index] = winner?.position === positions[index] ? 1 : 0;
    }
    return out;
  }

  /**
   * `winner(key, ∞)` from what is in memory alone (the tail, segments' keys held before their
   * dictionaries are built, dictionaries whose filter and FST are cached), or `notHeld` when
   * the walk would have to read.
   */
  private winnerHeld(key: string): KeyWinner | undefined | typeof notHeld {
    const bytes = utf8Encode(key);
    const hashes = termHashes(bytes);
    let best = this.tail?.winnerUpTo(key, Number.POSITIVE_INFINITY);
    for (let at = this.sealed.length - 1; at >= 0; at--) {
      const slot = this.sealed[at];
      if (slot.count === 0) continue;
      if (slot.resident) {
        const found = slot.resident.winnerUpTo(key, Number.POSITIVE_INFINITY);
        if (found && prefers(this.order, found, best)) best = found;
        continue;
      }
      const found = this.lookupHeld(slot, bytes, hashes);
      if (found === notHeld) return notHeld;
      // The dictionary's winner covers every segment up to this one: the walk ends here.
      if (found) return prefers(this.order, found, best) ? found : best;
    }
    return best;
  }

  /** The bitmap of a sealed segment's first occurrences: its winners that lie in it. */
  private async firstsBitmap(slot: SealedKeys): Promise<Uint8Array> {
    const table = await this.section(slot, 2);
    const firsts = new Uint8Array(Math.ceil(slot.count / 8));
    const file = this.fileFor(slot.base);
    try {
      for (let ordinal = 0; ordinal < slot.head!.keys; ordinal++) {
        // A segment holds hundreds of thousands of fingerprints, each checked by its CRC: reads
        // go on meanwhile, after every slice of `eventLoopSliceMs` (8,192 at a time held the
        // event loop 70 ms on a slow machine).
        const pause = yieldWhenDue(ordinal);
        if (pause) await pause;
        const relative = winnerAt(table, ordinal, file).position - slot.base;
        if (relative >= 0 && relative < slot.count) firsts[relative >>> 3] |= 1 << (relative & 7);
      }
    } catch (error) {
      await this.rebuild(slot, (error as Error).message);
      return this.firstsBitmap(slot);
    }
    slot.firsts = firsts;
    if (!slot.pinned) this.remember(slot);
    return firsts;
  }

  /**
   * Drops the dictionaries of the segments before `base` (a trim removed them) and rebuilds the
   * rest over the history that is left: each holds winners (or first occurrences) over the
   * history up to its segment, and that history now starts at `base`. So a key whose winner was
   * trimmed has the winner of what is kept, and a fingerprint whose first occurrence was trimmed
   * is first at its next occurrence. Every dictionary file goes first (the trimmed ones and
   * those built over the trimmed history: `removed` resolves once that is durable); the rebuilds
   * run in the background, in segment order (`rebuilt`), and lookups wait for them.
   */
  trimBefore(base: number): { removed: Promise<void>; rebuilt: Promise<void> } {
    const removed = this.pending.then(async () => {
      for (const slot of this.sealed) {
        slot.winners?.close();
        slot.winners = undefined;
        this.forget(slot);
      }
      if (!this.readOnly) await this.store.deleteAll(this.sealed.map((slot) => this.nameFor(slot.base)));
      this.sealed.splice(0, this.sealed.length, ...this.sealed.filter((slot) => slot.base >= base));
      for (const slot of this.sealed) if (!slot.resident) slot.head = undefined;
    });
    const rebuilt = removed.then(async () => {
      for (const slot of this.sealed) {
        // Keys held resident (a segment with gaps) cover only the segment's own records.
        if (!slot.resident) await this.rebuild(slot, 'the history before it was trimmed');
      }
    });
    const done = rebuilt.catch(() => undefined);
    this.pending = done;
    this.rebasing = done;
    void done.then(() => {
      if (this.rebasing === done) this.rebasing = undefined;
    });
    return { removed, rebuilt };
  }

  /**
   * Replaces the dictionaries of consecutive segments `bases` by one for the rewritten segment at
   * `bases[0]` holding `count` records: its keys are the union of theirs, with the winners the
   * last of them held (over the history up to the rewritten segment's end). It is `prebuilt` (the
   * rewrite built it beside the segment: renamed into place) or rebuilt in the background, in
   * order with the other builds; lookups wait for it. `swapped` resolves once the replaced
   * segments' files are gone and the new one (if prebuilt) is in place, durably; `ready` once the
   * dictionary answers.
   */
  replaceSegments(
    bases: readonly number[],
    count: number,
    prebuilt?: string,
  ): { swapped: Promise<void>; ready: Promise<void> } {
    const swapped = this.pending.then(async () => {
      const at = this.sealed.findIndex((slot) => slot.base === bases[0]);
      assert(
        at >= 0 && bases.every((base, index) => this.sealed[at + index]?.base === base),
        'a merge replaces consecutive dictionaries',
      );
      for (const slot of this.sealed.slice(at, at + bases.length)) {
        slot.winners?.close();
        this.forget(slot);
      }
      const slot: SealedKeys = {
        base: bases[0],
        count,
        commits: segmentCommits(this.history, bases[0]),
        source: segmentSourceOf(this.history, bases[0]),
        sections: [],
        pinned: false,
      };
      this.sealed.splice(at, bases.length, slot);
      if (!this.readOnly) {
        // The first one's file describes the segment that was there: replaced or gone.
        await this.store.deleteAll(bases.slice(prebuilt === undefined ? 0 : 1).map((base) => this.nameFor(base)));
        if (prebuilt !== undefined) await this.store.putFile(this.nameFor(bases[0]), prebuilt);
      }
      return slot;
    });
    const ready = swapped.then(async (slot) => {
      if (prebuilt !== undefined && (await this.adopt(slot))) return;
      await this.rebuild(slot, 'its segment was merged');
    });
    const done = ready.catch(() => undefined);
    this.pending = done;
    this.rebasing = done;
    void done.then(() => {
      if (this.rebasing === done) this.rebasing = undefined;
    });
    return { swapped: swapped.then(() => undefined), ready };
  }

  /** Takes a dictionary file a rewrite built as `slot`'s when its head says it is (else false: rebuild it). */
  private async adopt(slot: SealedKeys): Promise<boolean> {
    try {
      const head = await loadKeyFileHead(this.sourceFor(slot.base));
      if (!head || derivedMismatch(head, slot) !== undefined) return false;
      slot.head = head;
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The dictionaries of the segments before the one at `base`, newest first, when every one of
   * them is a file a build elsewhere can read (none held in memory only); else undefined.
   */
  earlierFiles(base: number): DictionaryFile[] | undefined {
    const at = this.sealed.findIndex((slot) => slot.base === base);
    return at < 0 ? undefined : this.filesOf(this.sealed.slice(0, at).reverse());
  }

  private filesOf(slots: readonly SealedKeys[]): DictionaryFile[] | undefined {
    if (!slots.every((slot) => slot.head && !slot.resident && !slot.pinned)) return undefined;
    // Build workers open them by path: the store's local file of each, when it keeps one.
    const files = slots.map((slot) => ({
      file: this.store.localPath(path.basename(this.fileFor(slot.base))),
      head: slot.head!,
    }));
    return files.every((held): held is DictionaryFile => held.file !== undefined) ? files : undefined;
  }

  /** Set while dictionaries are rebuilt after a trim or an open (`rebuildLater`): lookups wait for it. */
  private rebasing: Promise<void> | undefined;

  /** Rebuilds `slots`' dictionaries in the background, in order; lookups wait for them. */
  private rebuildLater(slots: readonly SealedKeys[]): void {
    const done = this.pending
      .then(async () => {
        for (const slot of slots) await this.rebuild(slot, deferredReason);
      })
      .catch(() => undefined);
    this.pending = done;
    this.rebasing = done;
    void done.then(() => {
      if (this.rebasing === done) this.rebasing = undefined;
    });
  }

  /** Lets go of a dictionary's sections in memory. */
  private forget(slot: SealedKeys): void {
    this.cache.forget(slot);
    slot.sections = [];
    slot.firsts = undefined;
  }

  /** The active segment's occurrences (what a checkpoint holds), if there is an active segment. */
  get activeTail(): SegmentKeys | undefined {
    return this.tail;
  }

  /** Dictionaries with sections in memory now, and their bytes (for tests and memory accounting). */
  get cacheUse(): { segments: number; bytes: number } {
    const { entries, bytes } = this.cache.holding;
    return { segments: entries, bytes };
  }

  /** Resolves once dictionaries being built in the background are on disk. */
  flushed(): Promise<void> {
    return this.pending;
  }
}
