/**
 * A tiered file read back from object storage: whole blocks of its descriptor's `blockBytes`
 * (several MiB, so a scan costs a request per block, never one per record), each checked against
 * the CRC its descriptor carries before any byte of it is used, kept in a bounded cache shared by
 * a store's files (least recently used out first), with the next block fetched ahead while a
 * reader goes through a file in order. A block that fails its CRC is `CORRUPT`, naming the object
 * and the block, and is never cached: a wrong byte is never an answer.
 *
 * This is what a segment evicted from the local disk, and a follower's history, read through.
 *
 * @example
 * const file = new RemoteSegmentFile(kernels, segments, descriptor, 'f.hist', cache);
 * const bytes = await file.read(4096, 200);
 */
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { remoteBlockCacheBytes } from '../limits.js';
import { baseOfSegmentName } from './feed-layout.js';
import type { ObjectSegmentStore } from './object-segment-store.js';
import {
  type DescribedFile,
  decodeDescriptor,
  feedObjectPrefix,
  objectFolders,
  ordinalName,
  type SegmentDescriptor,
  segmentObjectName,
} from './segment-descriptor.js';

/** Counts of a cache's use, for `/metrics` and the benchmark. */
export interface BlockCacheCounters {
  hits: number;
  misses: number;
  /** Blocks fetched ahead of a reader going through a file in order. */
  readAhead: number;
  requests: number;
  bytesFetched: number;
}

/** Verified blocks of remote files, least recently used out first, within `bytesMax`. */
export class BlockCache {
  private readonly blocks = new Map<string, Uint8Array>();
  private bytes = 0;
  readonly counters: BlockCacheCounters = { hits: 0, misses: 0, readAhead: 0, requests: 0, bytesFetched: 0 };

  constructor(readonly bytesMax: number) {
    assert(Number.isSafeInteger(bytesMax) && bytesMax > 0, 'a block cache holds some bytes');
  }

  get(key: string): Uint8Array | undefined {
    const block = this.blocks.get(key);
    if (block) {
      // Map keeps insertion order: taking it out and back in makes it the most recent.
      this.blocks.delete(key);
      this.blocks.set(key, block);
    }
    return block;
  }

  set(key: string, block: Uint8Array): void {
    const before = this.blocks.get(key);
    if (before) {
      this.blocks.delete(key);
      this.bytes -= before.length;
    }
    this.blocks.set(key, block);
    this.bytes += block.length;
    for (const [oldest, bytes] of this.blocks) {
      if (this.bytes <= this.bytesMax || oldest === key) break;
      this.blocks.delete(oldest);
      this.bytes -= bytes.length;
    }
  }

  /** Bytes held now. */
  get size(): number {
    return this.bytes;
  }
}

export class RemoteSegmentFile {
  private readonly file: DescribedFile;
  private readonly object: string;
  /** Blocks being fetched, so two readers of one block make one request. */
  private readonly inFlight = new Map<number, Promise<Uint8Array>>();
  /** The block the last read ended in: a read of the next one is a reader going in order. */
  private lastBlock = -2;

  constructor(
    private readonly kernels: Kernels,
    private readonly segments: ObjectSegmentStore,
    private readonly descriptor: SegmentDescriptor,
    name: string,
    private readonly cache: BlockCache,
  ) {
    const file = descriptor.files.find((candidate) => candidate.name === name);
    if (!file)
      throw new StreamStackError('CORRUPT', `the descriptor of ordinal ${descriptor.ordinal} names no file ${name}`, {
        details: { ordinal: descriptor.ordinal, file: name },
      });
    this.file = file;
    this.object = segmentObjectName(descriptor.ordinal, name);
  }

  /** The file's size, as its descriptor says. */
  get size(): number {
    return this.file.bytes;
  }

  /** Reads exactly `length` bytes at `offset`; past the end is `CORRUPT`, as a local file's is. */
  async read(offset: number, length: number): Promise<Uint8Array> {
    this.checkRange(offset, length);
    const { blockBytes } = this.descriptor;
    const first = Math.floor(offset / blockBytes);
    const last = Math.floor((offset + Math.max(length, 1) - 1) / blockBytes);
    const blocks = await Promise.all(Array.from({ length: last - first + 1 }, (_, at) => this.block(first + at)));
    this.aheadOf(first, last);
    return this.assemble(blocks, offset - first * blockBytes, length);
  }

  /** The `length` bytes from `start` of the first of `blocks` on: a view of one block, or a copy across several. */
  private assemble(blocks: readonly Uint8Array[], start: number, length: number): Uint8Array {
    if (blocks.length === 1) return blocks[0]!.subarray(start, start + length);
    const bytes = new Uint8Array(length);
    let at = 0;
    for (const [index, block] of blocks.entries()) {
      const from = index === 0 ? start : 0;
      const piece = block.subarray(from, Math.min(block.length, from + length - at));
      bytes.set(piece, at);
      at += piece.length;
    }
    return bytes;
  }

  /**
   * `read`, synchronously, when every block of the range is cached; undefined when one is not
   * (the caller fetches it with `read` first).
   */
  readCached(offset: number, length: number): Uint8Array | undefined {
    this.checkRange(offset, length);
    const { blockBytes } = this.descriptor;
    const first = Math.floor(offset / blockBytes);
    const last = Math.floor((offset + Math.max(length, 1) - 1) / blockBytes);
    const blocks: Uint8Array[] = [];
    for (let block = first; block <= last; block++) {
      const cached = this.cache.get(this.keyOf(block));
      if (!cached) return undefined;
      blocks.push(cached);
    }
    return this.assemble(blocks, offset - first * blockBytes, length);
  }

  private checkRange(offset: number, length: number): void {
    assert(
      Number.isSafeInteger(offset) && offset >= 0 && Number.isSafeInteger(length) && length >= 0,
      'a read asks for a range',
    );
    if (offset + length > this.file.bytes)
      throw new StreamStackError(
        'CORRUPT',
        `${this.segments.prefix}${this.object} ends at ${this.file.bytes}, before offset ${offset + length}`,
        { details: { object: this.segments.prefix + this.object, offset: this.file.bytes } },
      );
  }

  private keyOf(block: number): string {
    return `${this.segments.prefix}${this.object}#${block}`;
  }

  /** A reader going in order (this read began in or just after the last one's block) gets the next block fetched ahead. */
  private aheadOf(first: number, last: number): void {
    const inOrder = first === this.lastBlock || first === this.lastBlock + 1;
    this.lastBlock = last;
    const next = last + 1;
    if (!inOrder || next * this.descriptor.blockBytes >= this.file.bytes) return;
    if (this.cache.get(this.keyOf(next)) || this.inFlight.has(next)) return;
    this.cache.counters.readAhead++;
    // Fetched ahead; a failure shows when a reader asks for the block, not here.
    this.fetch(next).catch(() => undefined);
  }

  /** Block `block`, from the cache or fetched and checked. */
  private async block(block: number): Promise<Uint8Array> {
    const cached = this.cache.get(this.keyOf(block));
    if (cached) {
      this.cache.counters.hits++;
      return cached;
    }
    this.cache.counters.misses++;
    return this.fetch(block);
  }

  private fetch(block: number): Promise<Uint8Array> {
    const pending = this.inFlight.get(block);
    if (pending) return pending;
    const promise = (async () => {
      const { blockBytes } = this.descriptor;
      const offset = block * blockBytes;
      const length = Math.min(blockBytes, this.file.bytes - offset);
      this.cache.counters.requests++;
      const bytes = length === 0 ? new Uint8Array(0) : await this.segments.read(this.object, offset, length);
      this.cache.counters.bytesFetched += length;
      if (this.kernels.crc32(bytes) !== this.file.blockCrcs[block])
        throw new StreamStackError(
          'CORRUPT',
          `${this.segments.prefix}${this.object} fails its CRC in block ${block} (bytes ${offset} to ${offset + length})`,
          { details: { object: this.segments.prefix + this.object, block, offset } },
        );
      this.cache.set(this.keyOf(block), bytes);
      return bytes;
    })();
    this.inFlight.set(block, promise);
    const forget = () => {
      if (this.inFlight.get(block) === promise) this.inFlight.delete(block);
    };
    promise.then(forget, forget);
    return promise;
  }
}

/**
 * The remote files of one feed's tiered segments: each descriptor read once (by GET, one request)
 * and checked to describe the segment asked for, then its files read through one shared cache.
 */
export class RemoteSegmentFiles {
  private readonly descriptors = new Map<number, Promise<SegmentDescriptor>>();

  constructor(
    private readonly kernels: Kernels,
    /** The feed's folders of objects (`feedObjectPrefix` under the store's prefix). */
    readonly objects: ObjectSegmentStore,
    private readonly folders: { readonly segments: ObjectSegmentStore; readonly descriptors: ObjectSegmentStore },
    readonly cache: BlockCache,
  ) {}

  async file(name: string, ordinal: number): Promise<RemoteSegmentFile> {
    const descriptor = await this.descriptor(ordinal);
    const base = baseOfSegmentName(name);
    if (descriptor.retired || descriptor.base !== base)
      throw new StreamStackError(
        'CORRUPT',
        `${this.folders.descriptors.prefix}${ordinalName(ordinal)} does not describe the segment ${name}`,
        { details: { object: this.folders.descriptors.prefix + ordinalName(ordinal) } },
      );
    return new RemoteSegmentFile(this.kernels, this.folders.segments, descriptor, name, this.cache);
  }

  private descriptor(ordinal: number): Promise<SegmentDescriptor> {
    let pending = this.descriptors.get(ordinal);
    if (!pending) {
      const name = ordinalName(ordinal);
      pending = this.folders.descriptors
        .readStart(name, Number.POSITIVE_INFINITY)
        .then(({ bytes }) => decodeDescriptor(bytes, this.folders.descriptors.prefix + name));
      this.descriptors.set(ordinal, pending);
      // A failure (the store down) is not remembered: the next read asks again.
      pending.catch(() => this.descriptors.delete(ordinal));
    }
    return pending;
  }
}

/** The remote files of the feed `feed` (tagged `feedTag`) in `objectStore`, with a cache of their own. */
export function remoteSegmentFilesOf(
  kernels: Kernels,
  objectStore: ObjectSegmentStore,
  feed: string,
  feedTag: number,
): RemoteSegmentFiles {
  const root = objectStore.within(feedObjectPrefix(feed, feedTag));
  return new RemoteSegmentFiles(
    kernels,
    root,
    { segments: root.within(objectFolders.segments), descriptors: root.within(objectFolders.descriptors) },
    new BlockCache(remoteBlockCacheBytes),
  );
}
