/**
 * A copy of a feed this node already holds, used to lay the feed out again without fetching what
 * it has. A takeover lays a replicated feed out from object storage from nothing (`FollowerMirror`):
 * summaries, tag indexes and dictionaries, about 90 bytes a record, 900 MB for 10^7 records, which
 * was most of its time. A node that wrote the feed before, or took it over before, has
 * most of those files on its disk already, byte for byte what it uploaded.
 *
 * A file of the copy is taken only when it is the file the descriptor names: its size and the
 * CRC-32 of every block equal the descriptor's. It is hard-linked under a temporary name in the
 * new layout first and checked there, then renamed in: a copy whose file is replaced or rewritten
 * meanwhile (its feed is still open, and a merge or trim may run) leaves either the inode that
 * was checked or a file that fails the check and is fetched, never an unchecked one. A file the
 * check refuses, or that cannot be linked (another file system), is fetched as before.
 *
 * @example
 * const seed = SegmentSeed.of(kernels, localFeedDirectory, feedTag);
 * const taken = await seed?.adopt(descriptor, file, 'index', stores.index, new FeedLayout(directory).index);
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Kernels } from '../../kernels/kernels.js';
import { segmentHeaderBytes } from '../../limits.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import type { DescribedFile, SegmentDescriptor } from '../../storage/segment-descriptor.js';
import type { SegmentStore } from '../../storage/segment-store.js';
import { feedTagOf } from './data-directory.js';

/** The suffix of a link made in the new layout before it is checked. */
const seedLinkSuffix = '.seed';

/** What a seed gave a layout. */
export interface SeedCounters {
  /** Files taken from the copy, and their bytes. */
  filesReused: number;
  bytesReused: number;
  /** Files of the copy that were there but failed the check against the descriptor. */
  filesRefused: number;
}

export class SegmentSeed {
  readonly counters: SeedCounters = { filesReused: 0, bytesReused: 0, filesRefused: 0 };

  private constructor(
    private readonly kernels: Kernels,
    private readonly layout: FeedLayout,
  ) {}

  /**
   * The seed of the copy in `directory`, or undefined when there is none there, or it is of
   * another feed of the same name (its tag is not `feedTag`): nothing of it could pass the check.
   */
  static of(kernels: Kernels, directory: string | undefined, feedTag: number): SegmentSeed | undefined {
    if (directory === undefined || !fs.existsSync(new FeedLayout(directory).config)) return undefined;
    if (feedTagOf(directory) !== feedTag) return undefined;
    return new SegmentSeed(kernels, new FeedLayout(directory));
  }

  /**
   * Stores the copy's file `file` of the segment `descriptor` names into `target` (the layout's
   * history or index store, whose folder is `targetFolder`) when it is the described file; returns
   * whether it did. The copy's file is looked for in the folder of the same kind.
   */
  async adopt(
    descriptor: SegmentDescriptor,
    file: DescribedFile,
    kind: 'history' | 'index',
    target: SegmentStore,
    targetFolder: string,
  ): Promise<boolean> {
    const source = path.join(kind === 'history' ? this.layout.history : this.layout.index, file.name);
    const link = path.join(targetFolder, `${file.name}${seedLinkSuffix}`);
    await fsp.mkdir(targetFolder, { recursive: true });
    await fsp.rm(link, { force: true });
    try {
      await fsp.link(source, link);
    } catch {
      // Not there, or on another file system: it is fetched.
      return false;
    }
    try {
      if (!(await this.matches(link, descriptor, file))) {
        this.counters.filesRefused++;
        await fsp.rm(link, { force: true });
        return false;
      }
      await target.putFile(file.name, link);
    } catch (error) {
      await fsp.rm(link, { force: true });
      throw error;
    }
    this.counters.filesReused++;
    this.counters.bytesReused += file.bytes;
    return true;
  }

  /**
   * The 48-byte header of the copy's history segment `file`, when the copy holds that segment
   * whole and its first block is the described one (so the header is the one object storage
   * holds); undefined otherwise (it is fetched).
   */
  async header(descriptor: SegmentDescriptor, file: DescribedFile): Promise<Uint8Array | undefined> {
    const source = path.join(this.layout.history, file.name);
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(source, 'r');
    } catch {
      return undefined;
    }
    try {
      if ((await handle.stat()).size !== file.bytes || file.blockCrcs.length === 0) return undefined;
      const length = Math.min(descriptor.blockBytes, file.bytes);
      const block = new Uint8Array(length);
      if ((await handle.read(block, 0, length, 0)).bytesRead !== length) return undefined;
      if (this.kernels.crc32(block) !== file.blockCrcs[0]) {
        this.counters.filesRefused++;
        return undefined;
      }
      // The caller checks it as it checks a fetched one: the same bytes.
      const header = block.slice(0, segmentHeaderBytes);
      this.counters.filesReused++;
      this.counters.bytesReused += header.length;
      return header;
    } finally {
      await handle.close();
    }
  }

  /** Whether the file at `file` has the described size and every block's CRC-32. */
  private async matches(local: string, descriptor: SegmentDescriptor, file: DescribedFile): Promise<boolean> {
    const handle = await fsp.open(local, 'r');
    try {
      if ((await handle.stat()).size !== file.bytes) return false;
      // One block at a time, so a large dictionary is checked in a block's memory.
      const buffer = new Uint8Array(Math.min(descriptor.blockBytes, file.bytes));
      for (let block = 0; block * descriptor.blockBytes < file.bytes; block++) {
        const offset = block * descriptor.blockBytes;
        const length = Math.min(descriptor.blockBytes, file.bytes - offset);
        const view = buffer.subarray(0, length);
        if ((await handle.read(view, 0, length, offset)).bytesRead !== length) return false;
        if (this.kernels.crc32(view) !== file.blockCrcs[block]) return false;
      }
      return true;
    } finally {
      await handle.close();
    }
  }
}
