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
import { remoteBlockCacheBytes, remotePieceBytes, remoteReadAheadBlocks } from '../limits.js';
import { baseOfSegmentName, segmentFileName, segmentSuffix } from './feed-layout.js';
import type { ObjectSegmentStore } from './object-segment-store.js';
import {
  type DescribedFile,
  decodeDescriptor,
  decodeDescriptorCopy,
  encodeDescriptorCopy,
  feedObjectPrefix,
  objectFolders,
  ordinalName,
  type SegmentDescriptor,
  segmentObjectName,
} from './segment-descriptor.js';
import type { SegmentStore } from './segment-store.js';

/** Counts of a cache's use, for `/metrics` and the benchmark. */
export interface BlockCacheCounters {
  hits: number;
  misses: number;
  /** Blocks fetched ahead of a reader going through a file in order. */
  readAhead: number;
  /** Ranged GETs of blocks and pieces, and GETs of descriptors not kept locally. */
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

  /** Whether `key` is cached, without making it the most recent. */
  has(key: string): boolean {
    return this.blocks.has(key);
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

/** Reads in order after the first before a file's blocks are fetched ahead (see `aheadOf`). */
const readsInOrderBeforeAhead = 2;

export class RemoteSegmentFile {
  private readonly file: DescribedFile;
  private readonly object: string;
  /** Blocks being fetched, so two readers of one block make one request. */
  private readonly inFlight = new Map<number, Promise<Uint8Array>>();
  /** The block the last read ended in: a read of the next one is a reader going in order. */
  private lastBlock = -2;
  /** Reads in a row that went on in order. */
  private readsInOrder = 0;

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

  /**
   * A reader going in order (this read began in or just after the last one's block, for the
   * `readsInOrderBeforeAhead`th time in a row) gets the next `remoteReadAheadBlocks` blocks
   * fetched ahead.
   */
  private aheadOf(first: number, last: number): void {
    const inOrder = first === this.lastBlock || first === this.lastBlock + 1;
    this.lastBlock = last;
    this.readsInOrder = inOrder ? this.readsInOrder + 1 : 0;
    // A read or two in order is a reader wanting a few records (and the stretch a scan prefetches
    // after its first); from the third on it is a scan, worth fetching ahead for.
    if (this.readsInOrder < readsInOrderBeforeAhead) return;
    for (let next = last + 1; next <= last + remoteReadAheadBlocks; next++) {
      if (next * this.descriptor.blockBytes >= this.file.bytes) return;
      if (this.cache.has(this.keyOf(next)) || this.inFlight.has(next)) continue;
      this.cache.counters.readAhead++;
      // Fetched ahead; a failure shows when a reader asks for the block, not here.
      this.fetch(next).catch(() => undefined);
    }
  }

  /**
   * The range from the cache without a request, for a synchronous reader: from verified blocks,
   * or else from pieces (`fetchPieces`); undefined when part of it is in neither.
   */
  readAtHand(offset: number, length: number): Uint8Array | undefined {
    const blocks = this.readCached(offset, length);
    if (blocks) return blocks;
    const first = Math.floor(offset / remotePieceBytes);
    const last = Math.floor((offset + Math.max(length, 1) - 1) / remotePieceBytes);
    const pieces: Uint8Array[] = [];
    for (let piece = first; piece <= last; piece++) {
      const cached = this.cache.get(this.pieceKeyOf(piece));
      if (!cached) return undefined;
      pieces.push(cached);
    }
    return this.assemble(pieces, offset - first * remotePieceBytes, length);
  }

  /**
   * Fetches the pieces (`remotePieceBytes` each) that hold the range, in one ranged GET, into the
   * cache, where `readAtHand` finds them. Pieces are NOT checked against the descriptor's block
   * CRCs (that takes a whole block): only readers that check every byte they use by a CRC of its
   * own read them — a manifest entry carries its CRC-32C, a payload its pack's.
   */
  async fetchPieces(offset: number, length: number): Promise<void> {
    this.checkRange(offset, length);
    const first = Math.floor(offset / remotePieceBytes);
    const last = Math.floor((offset + Math.max(length, 1) - 1) / remotePieceBytes);
    const start = first * remotePieceBytes;
    const end = Math.min(this.file.bytes, (last + 1) * remotePieceBytes);
    if (end <= start) return;
    this.cache.counters.misses++;
    this.cache.counters.requests++;
    const bytes = await this.segments.read(this.object, start, end - start);
    this.cache.counters.bytesFetched += bytes.length;
    for (let piece = first; piece <= last; piece++) {
      const from = (piece - first) * remotePieceBytes;
      // Copied out: a piece kept alone must not hold the whole response alive.
      this.cache.set(this.pieceKeyOf(piece), bytes.slice(from, Math.min(bytes.length, from + remotePieceBytes)));
    }
  }

  private pieceKeyOf(piece: number): string {
    return `${this.segments.prefix}${this.object}@${piece}`;
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
    /** The feed's tag: a local copy of another feed's descriptor (a feed made anew) is not used. */
    private readonly feedTag: number,
  ) {}

  /**
   * The remote file `name` of the segment tiered as `ordinal`. Its descriptor comes from the
   * local copy in `copies` when there is a sound one of that ordinal, else by GET.
   */
  async file(name: string, ordinal: number, copies?: SegmentStore): Promise<RemoteSegmentFile> {
    const descriptor = await this.descriptor(ordinal, name, copies);
    const base = baseOfSegmentName(name);
    if (descriptor.retired || descriptor.base !== base)
      throw new StreamStackError(
        'CORRUPT',
        `${this.folders.descriptors.prefix}${ordinalName(ordinal)} does not describe the segment ${name}`,
        { details: { object: this.folders.descriptors.prefix + ordinalName(ordinal) } },
      );
    return new RemoteSegmentFile(this.kernels, this.folders.segments, descriptor, name, this.cache);
  }

  /**
   * Keeps `descriptor`, confirmed in object storage, as a local copy in `copies` beside its
   * segment, so reads of the segment once evicted need no request for it (`file`).
   */
  async keep(descriptor: SegmentDescriptor, copies: SegmentStore): Promise<void> {
    await copies.put(descriptorCopyName(descriptor.base), encodeDescriptorCopy(this.kernels, descriptor));
  }

  private descriptor(ordinal: number, file: string, copies: SegmentStore | undefined): Promise<SegmentDescriptor> {
    let pending = this.descriptors.get(ordinal);
    if (!pending) {
      const name = ordinalName(ordinal);
      pending = this.copyOf(ordinal, file, copies).then(async (kept) => {
        if (kept) return kept;
        this.cache.counters.requests++;
        const { bytes } = await this.folders.descriptors.readStart(name, Number.POSITIVE_INFINITY);
        this.cache.counters.bytesFetched += bytes.length;
        return decodeDescriptor(bytes, this.folders.descriptors.prefix + name);
      });
      this.descriptors.set(ordinal, pending);
      // A failure (the store down) is not remembered: the next read asks again.
      pending.catch(() => this.descriptors.delete(ordinal));
    }
    return pending;
  }

  /**
   * The local copy of the descriptor of `ordinal`, the segment `file`; undefined when there is
   * none, or none to trust: missing, failing its CRC, or of another ordinal (a merge's segment
   * took the name since) — the descriptor is then read from object storage.
   */
  private async copyOf(
    ordinal: number,
    file: string,
    copies: SegmentStore | undefined,
  ): Promise<SegmentDescriptor | undefined> {
    const base = baseOfSegmentName(file);
    if (!copies || base === undefined) return undefined;
    const name = descriptorCopyName(base);
    try {
      const { bytes } = await copies.readStart(name, Number.POSITIVE_INFINITY);
      const kept = decodeDescriptorCopy(this.kernels, bytes, copies.localPath(name) ?? name);
      return kept.ordinal === ordinal && kept.base === base && kept.feedTag === this.feedTag ? kept : undefined;
    } catch {
      // A copy is only a shortcut: whatever is wrong with it, object storage has the descriptor.
      return undefined;
    }
  }
}

/** The name of the local copy of the descriptor of the segment at `base`. */
function descriptorCopyName(base: number): string {
  return segmentFileName(base, segmentSuffix.descriptor);
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
    feedTag,
  );
}
