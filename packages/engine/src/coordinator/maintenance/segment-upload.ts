/**
 * One tiered segment's objects: its local files read and checksummed block by block through the
 * descriptor they are uploaded from, stored under its ordinal, then its descriptor created with
 * put-if-absent; and the descriptor of a segment retired before it was ever visible. What
 * `HistoryTiering` runs for each segment, apart from deciding when and which.
 */
import fsp from 'node:fs/promises';
import { StreamStackError } from '../../errors.js';
import { tieringBlockBytes } from '../../limits.js';
import { publishFeedConfig } from '../../storage/feed-config-object.js';
import { segmentFileName, segmentSuffix } from '../../storage/feed-layout.js';
import {
  type DescribedFile,
  decodeDescriptor,
  encodeDescriptor,
  ordinalName,
  type SegmentDescriptor,
  segmentObjectName,
} from '../../storage/segment-descriptor.js';
import { isMissingFile, withReadHandle } from '../../storage/segment-store.js';
import type { FeedObjects, TieringContext } from './history-tiering.js';
import type { TierEntry, TieringState } from './tiering-state.js';

/** The files of a sealed segment that go up, by the store that holds them locally. */
export const historyFiles = [segmentSuffix.history, segmentSuffix.summary] as const;
export const indexFiles = [
  segmentSuffix.tagIndex,
  segmentSuffix.keyDictionary,
  segmentSuffix.fingerprintDictionary,
] as const;

/** What went up since the feed was opened. */
export interface UploadCounters {
  uploadedObjects: number;
  uploadedBytes: number;
  /** Requests made to the object store, whatever for. */
  requests: number;
}

export class SegmentUploads {
  readonly counters: UploadCounters = { uploadedObjects: 0, uploadedBytes: 0, requests: 0 };

  /** Whether this process has seen the feed's `feed.json` in object storage. */
  private feedConfigPublished = false;

  constructor(
    private readonly context: TieringContext,
    private readonly objectsOf: () => FeedObjects,
  ) {}

  private get objects(): FeedObjects {
    return this.objectsOf();
  }

  /**
   * Puts the feed's `feed.json` beside its objects before its first descriptor: a follower reads
   * it to find the feed's tag folder. Read first and put only when it differs (a new feed of the
   * name replaces the pointer to the old one's folder), so a reopening writer costs one request.
   */
  async publishFeedConfig(): Promise<void> {
    if (this.feedConfigPublished) return;
    const bytes = new Uint8Array(await fsp.readFile(this.context.feedConfigFile));
    this.counters.requests += await publishFeedConfig(this.objects.feedFolder, bytes);
    this.feedConfigPublished = true;
  }

  /** The local files of the segment at `base`, by store, that exist now. */
  async localFiles(base: number): Promise<{ name: string; path: string }[]> {
    const { history, index } = this.context.stores;
    const found: { name: string; path: string }[] = [];
    for (const [store, suffixes] of [
      [history, historyFiles],
      [index, indexFiles],
    ] as const) {
      for (const suffix of suffixes) {
        const name = segmentFileName(base, suffix);
        const path = store.localPath(name);
        if (path !== undefined && (await store.size(name)) !== undefined) found.push({ name, path });
      }
    }
    return found;
  }

  /** Whether all five files of the segment at `base` are written (a derived file may still be building). */
  async complete(base: number): Promise<boolean> {
    return (await this.localFiles(base)).length === historyFiles.length + indexFiles.length;
  }

  async localBytes(base: number): Promise<number> {
    let total = 0;
    for (const file of await this.localFiles(base)) total += (await fsp.stat(file.path)).size;
    return total;
  }

  /**
   * Uploads the entry's files, then creates its descriptor; `gone` when its segment left the
   * local history first (the next listing retires it). Runs in the maintenance queue.
   */
  async upload(state: TieringState, entry: TierEntry): Promise<'visible' | 'gone'> {
    const { history } = this.context;
    const objects = this.objects;
    // The floor the dictionaries were built over (they hold winners from it on): taken before
    // they are read, in the maintenance queue, where no trim moves it.
    const floorPosition = history.retainedStart.position;
    const files = await this.localFiles(entry.base);
    // Gone between the listing and now (a trim or merge ran first): the pass goes on, and
    // retires it.
    if (!files.some((file) => file.name.endsWith(segmentSuffix.history))) return 'gone';
    // An upload a crash cut may have created its descriptor already: then its objects are
    // visible, and putting them again could replace a derived file's bytes with a rebuilt one's
    // that the descriptor's CRCs do not match. An ordinal given out by this process has none of
    // its own, but another writer (one that took a replicated feed over, while this one had not
    // yet noticed) may have made it visible: a visible segment's files are never put over. One
    // GET per segment.
    this.counters.requests++;
    const existing = await this.descriptorOf(entry.ordinal);
    if (existing) {
      this.acceptFound(existing, entry, state);
      return this.visible(existing);
    }
    // The files go up side by side: a segment is visible once the slowest is stored, and the
    // small derived files need not queue behind the history segment.
    const described: DescribedFile[] = await Promise.all(files.map((file) => this.uploadFile(entry.ordinal, file)));
    const commits = history.commits.commitsInSegment(entry.base);
    const descriptor = this.describe(entry, state, {
      floorPosition,
      firstCommit: commits[0]?.commit ?? 0,
      lastCommit: commits[commits.length - 1]?.commit ?? 0,
      replaces: state.entries
        .filter(
          (other) => other.state === 'replaced' && other.base <= entry.lastPosition && other.lastPosition >= entry.base,
        )
        .map((other) => other.ordinal),
      files: described,
    });
    const name = ordinalName(entry.ordinal);
    this.counters.requests++;
    if (await objects.descriptors.putIfAbsent(name, encodeDescriptor(descriptor))) return this.visible(descriptor);
    this.counters.requests++;
    const found = await this.descriptorOf(entry.ordinal);
    if (!found)
      throw new StreamStackError(
        'IO',
        `the descriptor ${objects.descriptors.prefix}${name} was refused as present, then not found`,
      );
    this.acceptFound(found, entry, state);
    return this.visible(found);
  }

  /**
   * A segment made visible by `descriptor`: a copy of it stays beside the segment, for reads once
   * it is evicted. The copy is only a shortcut, so failing to write it (a full disk) does not
   * fail the upload: the descriptor is visible already, and a retry would put the segment's
   * objects again under an ordinal that has one. A copy not written whole is not renamed in,
   * and reads then take the descriptor from object storage.
   */
  private async visible(descriptor: SegmentDescriptor): Promise<'visible'> {
    try {
      await this.context.history.store.keepDescriptor(descriptor);
    } catch {
      // Nothing to report: the segment is visible and readable, at one request more once evicted.
    }
    return 'visible';
  }

  /** Checksums the local file `file` block by block, then stores it from the same descriptor. */
  private uploadFile(ordinal: number, file: { name: string; path: string }): Promise<DescribedFile> {
    return withReadHandle(
      file.path,
      (error) => new StreamStackError('IO', `cannot open ${file.path} to upload it`, { cause: error }),
      async (handle) => {
        const { size } = await handle.stat();
        const blockCrcs = await this.blockCrcs(handle, size);
        await this.objects.segments.copyFrom(segmentObjectName(ordinal, file.name), handle, file.path, size);
        this.counters.requests += this.objects.segments.requestsToStore(size);
        this.counters.uploadedObjects++;
        this.counters.uploadedBytes += size;
        return { name: file.name, bytes: size, blockCrcs };
      },
    );
  }

  /** The descriptor of a segment retired before it was visible: it names no files. */
  retiredDescriptor(entry: TierEntry, state: TieringState): SegmentDescriptor {
    return this.describe(entry, state, { firstCommit: 0, lastCommit: 0, replaces: [], files: [], retired: true });
  }

  /** The entry's descriptor, with what only the caller knows: its commits, what it replaces, its files. */
  private describe(
    entry: TierEntry,
    state: TieringState,
    own: Pick<SegmentDescriptor, 'firstCommit' | 'lastCommit' | 'replaces' | 'files' | 'retired' | 'floorPosition'>,
  ): SegmentDescriptor {
    return {
      format: 1,
      feed: this.context.feed,
      feedTag: this.context.feedTag,
      ordinal: entry.ordinal,
      base: entry.base,
      lastPosition: entry.lastPosition,
      firstCommit: own.firstCommit,
      lastCommit: own.lastCommit,
      source: entry.source,
      replaces: own.replaces,
      epoch: this.context.epoch(),
      writer: state.writer,
      blockBytes: tieringBlockBytes,
      files: own.files,
      createdAt: this.context.clock(),
      ...(own.floorPosition === undefined ? {} : { floorPosition: own.floorPosition }),
      ...(own.retired ? { retired: true as const } : {}),
    };
  }

  /** The descriptor of `ordinal`, or undefined when there is none. */
  private async descriptorOf(ordinal: number): Promise<SegmentDescriptor | undefined> {
    const { descriptors } = this.objects;
    const name = ordinalName(ordinal);
    try {
      return decodeDescriptor(
        (await descriptors.readStart(name, Number.POSITIVE_INFINITY)).bytes,
        descriptors.prefix + name,
      );
    } catch (error) {
      if (isMissingFile(error)) return undefined;
      throw error;
    }
  }

  /**
   * A descriptor found under the entry's ordinal: this writer's own for this segment, from an
   * upload a crash cut after it, counts as done; any other means two writers tier one feed.
   */
  private acceptFound(found: SegmentDescriptor, entry: TierEntry, state: TieringState): void {
    if (found.writer === state.writer && found.base === entry.base && found.source === entry.source) return;
    const object = this.objects.descriptors.prefix + ordinalName(entry.ordinal);
    throw new StreamStackError(
      'FENCED',
      `the descriptor ${object} was made by another writer (${found.writer}): two writers tier feed ${this.context.feed}`,
      { details: { object, writer: found.writer } },
    );
  }

  /** The CRC-32 of each `tieringBlockBytes` block of the file open at `handle`. */
  private async blockCrcs(handle: fsp.FileHandle, size: number): Promise<number[]> {
    const crcs: number[] = [];
    const block = new Uint8Array(Math.min(tieringBlockBytes, Math.max(size, 1)));
    for (let offset = 0; offset < size || crcs.length === 0; offset += tieringBlockBytes) {
      const length = Math.min(tieringBlockBytes, size - offset);
      let at = 0;
      while (at < length) {
        const { bytesRead } = await handle.read(block, at, length - at, offset + at);
        if (bytesRead === 0) throw new StreamStackError('IO', `a file to upload ended at ${offset + at}, not ${size}`);
        at += bytesRead;
      }
      crcs.push(this.context.kernels.crc32(block.subarray(0, length)));
    }
    return crcs;
  }
}
