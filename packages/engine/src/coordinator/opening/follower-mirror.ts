/**
 * A follower's local copy of a feed another machine writes and tiers: the feed's directory laid
 * out as its writer's would be once every sealed segment is evicted, so the ordinary read-only
 * open reads it. For each live segment object storage holds, its summary, tag index and
 * dictionaries are fetched (checked block by block against its descriptor), its history segment
 * kept as its 48-byte header (itself CRC-checked), and the tiering log names it `evicted` under
 * its ordinal: its records are read from object storage in checked blocks, as an evicted
 * segment's are on the writer. The retention log holds the writer's floor, from the boundary.
 *
 * A sync walks the descriptors from where the last one stopped (`RemoteHistory`: GETs, no LIST),
 * removes what the writer retired, fetches what is new, then writes the tiering log: files first,
 * the log last, so the log never names a file not all there. Files a crash left that the log does
 * not name are removed before anything else. A feed whose name now belongs to another feed (its
 * tag changed) is laid out again from nothing.
 *
 * After the last segment object storage holds come the segments copied from the writer
 * (`writeTail`): those it finished, whole, and the one it is writing, the tail. A sync deletes
 * the copies of segments object storage now holds, before it fetches their evicted form under
 * the same names.
 *
 * @example
 * const mirror = await FollowerMirror.open(kernels, objectStore, 'orders', feedDirectory);
 * const { changed } = await mirror.sync(); // then open the feed read-only over feedDirectory
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { ioError, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { followerSegmentsReplacedInPlaceMax, segmentHeaderBytes, tieringBlockBytes } from '../../limits.js';
import { baseOfSegmentName, FeedLayout, segmentFileName, segmentSuffix } from '../../storage/feed-layout.js';
import { feedStores } from '../../storage/feed-stores.js';
import type { ObjectSegmentStore } from '../../storage/object-segment-store.js';
import { RemoteHistory, type RemoteHistoryView } from '../../storage/remote-history.js';
import { BlockCache, RemoteSegmentFile } from '../../storage/remote-segment-file.js';
import { decodeSegmentHeader, SegmentKind, syncDirectory } from '../../storage/segment.js';
import {
  feedConfigObjectName,
  feedNameObjectPrefix,
  feedObjectPrefix,
  objectFolders,
  type SegmentDescriptor,
  segmentObjectName,
} from '../../storage/segment-descriptor.js';
import { isMissingFile } from '../../storage/segment-store.js';
import { stateLogCopySuffix } from '../../storage/state-log.js';
import { RetentionLog } from '../maintenance/retention-state.js';
import { indexFiles } from '../maintenance/segment-upload.js';
import { type TierEntry, TieringLog } from '../maintenance/tiering-state.js';
import { feedTagOf } from './data-directory.js';
import { TailCopy } from './follower-tail-copy.js';
import { type SeedCounters, SegmentSeed } from './segment-seed.js';

/** The writer id a follower's tiering log carries: it uploads nothing under it. */
const followerWriter = 'follower';

/** What a sync did. */
export interface MirrorSync {
  /** Whether the local copy changed (a view opened before it is out of date). */
  readonly changed: boolean;
  /** Requests made to the object store. */
  readonly requests: number;
  /** The last commit the live segments hold (0 for none). */
  readonly lastCommit: number;
}

/** The feed's `feed.json` as its writer published it, or undefined when object storage has none. */
export async function publishedFeedConfig(
  objectStore: ObjectSegmentStore,
  feed: string,
): Promise<{ bytes: Uint8Array; tag: number } | undefined> {
  const folder = objectStore.within(feedNameObjectPrefix(feed));
  let bytes: Uint8Array;
  try {
    bytes = (await folder.readStart(feedConfigObjectName, Number.POSITIVE_INFINITY)).bytes;
  } catch (error) {
    if (isMissingFile(error)) return undefined;
    throw error;
  }
  let tag: unknown;
  try {
    tag = (JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) as { tag?: unknown }).tag;
  } catch {
    tag = undefined;
  }
  if (!Number.isSafeInteger(tag) || (tag as number) < 1)
    throw new StreamStackError('CORRUPT', `${folder.prefix}${feedConfigObjectName} names no feed tag`, {
      details: { object: folder.prefix + feedConfigObjectName },
    });
  return { bytes, tag: tag as number };
}

export class FollowerMirror {
  private readonly remote: RemoteHistory;
  private readonly segments: ObjectSegmentStore;
  /** Blocks of derived files being fetched: two, the one checked and the next. */
  private readonly cache = new BlockCache(2 * tieringBlockBytes);
  /** The segments copied from the writer: the tail, and those it finished before it. */
  private readonly tail: TailCopy;
  /** Segments fetched since a sync last said the copy changed that only replaced copies from the writer. */
  private replacedInPlace = 0;
  /** Another copy of the feed on this node, whose files are taken where they are the described ones. */
  private readonly seed: SegmentSeed | undefined;

  private constructor(
    private readonly kernels: Kernels,
    readonly feed: string,
    private readonly directory: string,
    readonly feedTag: number,
    root: ObjectSegmentStore,
    seedDirectory: string | undefined,
  ) {
    this.seed = SegmentSeed.of(kernels, seedDirectory, feedTag);
    this.remote = new RemoteHistory(root);
    this.tail = new TailCopy(kernels, directory, feedTag);
    this.segments = root.within(objectFolders.segments);
  }

  /**
   * The mirror of `feed` in `directory` (a feed directory of the follower's store): made from
   * nothing, or from a copy left by an earlier run when it is of the same feed. `FEED_NOT_FOUND`
   * when object storage holds no such feed and no copy is there. A sync takes the files of
   * `seedDirectory` (another copy of the feed on this node, see `SegmentSeed`) that are the ones
   * object storage holds instead of fetching them.
   */
  static async open(
    kernels: Kernels,
    objectStore: ObjectSegmentStore,
    feed: string,
    directory: string,
    seedDirectory?: string,
  ): Promise<FollowerMirror> {
    const layout = new FeedLayout(directory);
    const localTag = fs.existsSync(layout.config) ? feedTagOf(directory) : undefined;
    const mirrorOf = (tag: number) =>
      new FollowerMirror(kernels, feed, directory, tag, objectStore.within(feedObjectPrefix(feed, tag)), seedDirectory);
    let published: { bytes: Uint8Array; tag: number } | undefined;
    try {
      published = await publishedFeedConfig(objectStore, feed);
    } catch (error) {
      // Object storage out of reach: a copy an earlier run left is read as it is.
      const unreachable = error instanceof StreamStackError && error.code === 'UNAVAILABLE';
      if (!unreachable || localTag === undefined) throw error;
      return mirrorOf(localTag);
    }
    if (!published) {
      if (localTag === undefined)
        throw new StreamStackError('FEED_NOT_FOUND', `object storage holds no feed named ${feed}`, {
          details: { feed },
        });
      // The writer's feed was deleted or never tiered: the copy is what there is.
      return mirrorOf(localTag);
    }
    if (localTag !== published.tag) {
      // Another feed of the name, or none yet: its copy is laid out from nothing.
      await fsp.rm(directory, { recursive: true, force: true });
      for (const folder of [layout.history, layout.index, layout.state]) await fsp.mkdir(folder, { recursive: true });
      await writeDurably(layout.config, published.bytes);
      await syncDirectory(path.dirname(directory));
    }
    return mirrorOf(published.tag);
  }

  /** What the seed gave the syncs so far (all zero without one). */
  get seeded(): SeedCounters {
    return this.seed?.counters ?? { filesReused: 0, bytesReused: 0, filesRefused: 0 };
  }

  /** Whether a sync has laid out the copy (its tiering log is written): it can be read as it is. */
  get hasCopy(): boolean {
    const file = new FeedLayout(this.directory).stateLog('tiering');
    return fs.existsSync(file) || fs.existsSync(`${file}${stateLogCopySuffix}`);
  }

  /** Brings the local copy up to what object storage holds now. */
  async sync(): Promise<MirrorSync> {
    const view = await this.remote.refresh();
    const log = await TieringLog.open(this.kernels, this.directory, false);
    try {
      const state = log.stateOr(() => followerWriter);
      // Segment files the log does not name are strays, but the copies of the writer's made in
      // this run (after a restart, those too: they were never synced, and are copied again).
      await this.removeStrays(state.entries, this.tail.localBases());
      const wanted = new Map(view.live.map((descriptor) => [descriptor.ordinal, descriptor]));
      const kept = state.entries.filter((entry) => wanted.has(entry.ordinal));
      const have = new Set(kept.map((entry) => entry.ordinal));
      const added = view.live.filter((descriptor) => !have.has(descriptor.ordinal));
      const floorChanged = await this.writeFloor(view);
      const lastCommit = view.live.at(-1)?.lastCommit ?? 0;
      let requests = view.requests;
      if (added.length === 0 && kept.length === state.entries.length && !floorChanged) {
        await this.tail.place(tailOf(state.entries, view));
        return { changed: this.tail.takeReplaced(), requests, lastCommit };
      }
      if (kept.length < state.entries.length) {
        // What the writer retired leaves the log first, then the disk.
        await log.write({ ...state, entries: kept, lowOrdinal: Math.max(state.lowOrdinal, view.boundary.lowOrdinal) });
        const keptBases = new Set(kept.map((entry) => entry.base));
        await this.removeBases(
          state.entries.filter((entry) => !wanted.has(entry.ordinal) && !keptBases.has(entry.base)).map((e) => e.base),
        );
      }
      const entries: TierEntry[] = [...kept];
      for (const descriptor of added) {
        entries.push({
          ordinal: descriptor.ordinal,
          base: descriptor.base,
          lastPosition: descriptor.lastPosition,
          source: descriptor.source,
          bytes: descriptor.files.reduce((sum, file) => sum + file.bytes, 0),
          state: 'evicted',
        });
      }
      entries.sort((a, b) => a.base - b.base);
      // The copies of the writer's segments that object storage now holds go first: one fetched
      // at the same base replaces its file.
      const dropped = await this.tail.place(tailOf(entries, view));
      for (const descriptor of added) requests += await this.fetchSegment(descriptor, floorOf(view).position);
      const latest = log.stateOr(() => followerWriter);
      await log.write({
        writer: latest.writer,
        nextOrdinal: Math.max(latest.nextOrdinal, view.nextOrdinal),
        lowOrdinal: Math.max(latest.lowOrdinal, view.boundary.lowOrdinal),
        entries,
      });
      // Segments that only replace copies a view already reads, the same commits, need no new
      // view, which would build the indexes of the copy's tail again; they count toward the
      // bound on what the view holds in memory for them, past which it is opened anew.
      const inPlace =
        !this.tail.takeReplaced() &&
        kept.length === state.entries.length &&
        !floorChanged &&
        added.every((descriptor) => dropped.includes(descriptor.base));
      this.replacedInPlace = inPlace ? this.replacedInPlace + added.length : 0;
      if (this.replacedInPlace > followerSegmentsReplacedInPlaceMax) this.replacedInPlace = 0;
      return { changed: this.replacedInPlace === 0, requests, lastCommit };
    } finally {
      log.close();
    }
  }

  /**
   * Writes the writer's floor (from the boundary, or the first live segment's start) to the
   * retention log when it moved, and removes the dictionaries built over what it cut; returns
   * whether it did.
   */
  private async writeFloor(view: RemoteHistoryView): Promise<boolean> {
    const { commit, position } = floorOf(view);
    const retention = await RetentionLog.open(this.kernels, this.directory, false);
    try {
      const floor = retention.state.floor;
      if (floor.commit === commit && floor.position === position) return false;
      if (commit < floor.commit || position < floor.position) return false;
      // Every dictionary here holds winners over history the trim cut: the views build them
      // again over what is left (the writer's own rebuilds never go up).
      const { index } = feedStores(this.kernels, this.directory);
      await index.deleteAll((await index.list()).filter(isDictionaryName));
      await retention.write({ policy: {}, floor: { commit, position }, pending: false });
      return true;
    } finally {
      retention.close();
    }
  }

  /**
   * Fetches one segment's derived files and its header; returns the requests it made. Its
   * dictionaries only when they were built over the history from `floorPosition` (the copy's
   * floor): built before a trim, they are left for the view to build again.
   */
  private async fetchSegment(descriptor: SegmentDescriptor, floorPosition: number): Promise<number> {
    const stores = feedStores(this.kernels, this.directory);
    const dictionariesSound = (descriptor.floorPosition ?? 1) >= floorPosition;
    let requests = 0;
    for (const file of descriptor.files) {
      const suffix = file.name.slice(file.name.lastIndexOf('.'));
      if (!dictionariesSound && isDictionaryName(file.name)) continue;
      const kind = (indexFiles as readonly string[]).includes(suffix) ? 'index' : 'history';
      const store = stores[kind];
      if (suffix === segmentSuffix.history) {
        // The header alone: it carries its own CRC, and says which segment and feed it is.
        // A copy's first block that is the described one holds the same header, checked the same way.
        const object = segmentObjectName(descriptor.ordinal, file.name);
        let header = await this.seed?.header(descriptor, file);
        if (!header) {
          requests++;
          header = await this.segments.read(object, 0, segmentHeaderBytes);
        }
        const decoded = decodeSegmentHeader(this.kernels, header, this.segments.prefix + object);
        if (
          decoded.kind !== SegmentKind.History ||
          decoded.base !== descriptor.base ||
          (decoded.feedTag ?? 0) !== this.feedTag
        )
          throw new StreamStackError(
            'CORRUPT',
            `${this.segments.prefix}${object} is not the segment its descriptor names (base ${descriptor.base})`,
            { details: { object: this.segments.prefix + object } },
          );
        await store.put(file.name, header);
        continue;
      }
      const layout = new FeedLayout(this.directory);
      if (await this.seed?.adopt(descriptor, file, kind, store, kind === 'index' ? layout.index : layout.history))
        continue;
      const reader = new RemoteSegmentFile(this.kernels, this.segments, descriptor, file.name, this.cache);
      requests += Math.ceil(file.bytes / descriptor.blockBytes) || 1;
      await store.put(file.name, file.bytes === 0 ? new Uint8Array(0) : await reader.read(0, file.bytes));
    }
    return requests;
  }

  /** Where the history after object storage's starts (base and first commit), once a sync placed it. */
  get tailPlaced(): { readonly base: number; readonly commit: number } | undefined {
    return this.tail.placed;
  }

  /**
   * What the copy asks its writer for next: the tail segment's base and the offset its bytes
   * reach (0: from the start, header included). Undefined before a sync has placed the tail.
   */
  get tailWanted(): { readonly base: number; readonly from: number } | undefined {
    return this.tail.wanted;
  }

  /** The current view cannot take the copy's tail: a new view must be opened (see `TailCopy.markReplaced`). */
  viewBehind(): void {
    this.tail.markReplaced();
  }

  /** Writes groups its writer sent into the copy (see `TailCopy.write`). */
  writeTail(tail: Parameters<TailCopy['write']>[0]): Promise<number | undefined> {
    return this.tail.write(tail);
  }

  /** Removes segment files whose base no log entry names (what a crash left mid-sync), but those of `copied`. */
  private async removeStrays(entries: readonly TierEntry[], copied: readonly number[]): Promise<void> {
    const named = new Set(entries.map((entry) => entry.base));
    for (const base of copied) named.add(base);
    const layout = new FeedLayout(this.directory);
    for (const folder of [layout.history, layout.index]) {
      let names: string[];
      try {
        names = await fsp.readdir(folder);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw ioError(error, `cannot list ${folder}`);
      }
      const strays = names.filter((name) => {
        const base = baseOfSegmentName(name);
        return base !== undefined && !named.has(base);
      });
      for (const name of strays) await fsp.rm(path.join(folder, name), { force: true });
      if (strays.length > 0) await syncDirectory(folder);
    }
  }

  /** Removes every file of the segments at `bases`. */
  private async removeBases(bases: readonly number[]): Promise<void> {
    if (bases.length === 0) return;
    const stores = feedStores(this.kernels, this.directory);
    await stores.history.deleteAll(
      bases.flatMap((base) => [
        segmentFileName(base, segmentSuffix.history),
        segmentFileName(base, segmentSuffix.summary),
      ]),
    );
    await stores.index.deleteAll(bases.flatMap((base) => indexFiles.map((suffix) => segmentFileName(base, suffix))));
  }
}

/** The writer's floor as a view of object storage says it: the boundary's, or the first live segment's start. */
function floorOf(view: RemoteHistoryView): { commit: number; position: number } {
  const first = view.live[0];
  const position = Math.max(view.boundary.lowPosition, first?.base ?? 1);
  const commit =
    view.boundary.lowCommit !== undefined && view.boundary.lowPosition >= position
      ? view.boundary.lowCommit
      : (first?.firstCommit ?? 1);
  return { commit, position };
}

/** Whether `name` is a key or fingerprint dictionary's. */
function isDictionaryName(name: string): boolean {
  return name.endsWith(segmentSuffix.keyDictionary) || name.endsWith(segmentSuffix.fingerprintDictionary);
}

/**
 * Where the empty tail segment of a copy with `entries` lies: after the last segment, or at the
 * floor when there is none.
 */
function tailOf(entries: readonly TierEntry[], view: RemoteHistoryView): { base: number; commit: number } {
  const last = entries.reduce<TierEntry | undefined>(
    (newest, entry) => (newest === undefined || entry.base > newest.base ? entry : newest),
    undefined,
  );
  if (!last) return { base: view.boundary.lowPosition, commit: view.boundary.lowCommit ?? 1 };
  const descriptor = view.live.find((candidate) => candidate.ordinal === last.ordinal);
  return { base: last.lastPosition + 1, commit: (descriptor?.lastCommit ?? 0) + 1 };
}

/** Writes `bytes` to `file` durably (a temporary name, fsync, rename). */
async function writeDurably(file: string, bytes: Uint8Array): Promise<void> {
  const temporary = `${file}.tmp`;
  const handle = await fsp.open(temporary, 'w');
  try {
    await handle.writeFile(bytes);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fsp.rename(temporary, file);
}
