/**
 * Segment files: a 48-byte header, then frames, in a file preallocated to its capacity so that
 * an fdatasync after an append does not also have to grow the file (and journal its new size).
 *
 * Header, little-endian: magic "STRMSTAK" (8) · kind u32 · format version u32 · base u64 ·
 * base commit u64 · capacity u64 · feed tag u32 · crc32 of the 44 bytes before u32. The feed tag
 * names the feed the segment was written for (0 in segments written before feeds had one): a
 * segment of another feed, put in place of one of this feed's, is told from it by its tag.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { assert, ioError, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { readSlabBytes, readSlabPieceBytesMax, segmentHeaderBytes, zeroFillChunkBytes } from '../limits.js';
import { ByteReader, ByteWriter } from './codec.js';
import { temporarySuffix } from './feed-layout.js';

const magic = new TextEncoder().encode('STRMSTAK');
/**
 * Version 3: every write is a group whose header names how far the segment was confirmed durable
 * when it was written (docs/formats.md); version 2 headers lacked that, and are not read.
 */
export const segmentFormatVersion = 3;

export const enum SegmentKind {
  Wal = 1,
  History = 2,
}

export interface SegmentHeader {
  readonly kind: SegmentKind;
  /** WAL: the first group-commit sequence in the segment. History: its first position. */
  readonly base: number;
  /** History: the first commit sequence in the segment; 0 for the WAL. */
  readonly baseCommit: number;
  /** Bytes the file was preallocated to; frames never pass it. */
  readonly capacity: number;
  /** The feed it was written for (`feedTagOf`); 0 when it was written before feeds had tags. */
  readonly feedTag?: number;
}

export function encodeSegmentHeader(kernels: Kernels, header: SegmentHeader): Uint8Array {
  const writer = new ByteWriter(segmentHeaderBytes)
    .raw(magic)
    .u32(header.kind)
    .u32(segmentFormatVersion)
    .u64(header.base)
    .u64(header.baseCommit)
    .u64(header.capacity)
    .u32(header.feedTag ?? 0);
  const bytes = writer.finish();
  const out = new Uint8Array(segmentHeaderBytes);
  out.set(bytes);
  new DataView(out.buffer).setUint32(segmentHeaderBytes - 4, kernels.crc32(bytes), true);
  return out;
}

export function decodeSegmentHeader(kernels: Kernels, bytes: Uint8Array, file: string): SegmentHeader {
  const corrupt = (reason: string) =>
    new StreamStackError('CORRUPT', `segment header of ${file} is corrupt at offset 0: ${reason}`, {
      details: { file, offset: 0 },
    });
  if (bytes.length < segmentHeaderBytes) throw corrupt('the file is shorter than a header');
  const reader = new ByteReader(bytes, 0, segmentHeaderBytes, `segment header of ${file}`);
  const stored = new DataView(bytes.buffer, bytes.byteOffset).getUint32(segmentHeaderBytes - 4, true);
  if (kernels.crc32(bytes.subarray(0, segmentHeaderBytes - 4)) !== stored) throw corrupt('CRC mismatch');
  if (!reader.raw(magic.length).every((byte, index) => byte === magic[index])) throw corrupt('bad magic');
  const kind = reader.u32();
  const version = reader.u32();
  if (version !== segmentFormatVersion) throw corrupt(`unknown format version ${version}`);
  return { kind, base: reader.u64(), baseCommit: reader.u64(), capacity: reader.u64(), feedTag: reader.u32() };
}

/** Makes a directory entry (a created or deleted file) durable: fsync the directory itself. */
export async function syncDirectory(directory: string): Promise<void> {
  const handle = await fsp.open(directory, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * Writes a small text file (a feed's `feed.json`, the store's marker) whole: under a temporary
 * name, fdatasync'd, then renamed over `file`, so a crash leaves none or all of it. The caller
 * syncs the directory, which makes the rename durable.
 */
export function writeSmallFileSync(file: string, text: string): void {
  const temporary = `${file}${temporarySuffix}`;
  const fd = fs.openSync(temporary, 'w');
  try {
    fs.writeSync(fd, text);
    fs.fdatasyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(temporary, file);
}

/**
 * Writes a whole file durably, for derived files (index files, key dictionaries, summaries): a
 * temporary name, fdatasync, rename, directory fsync. A crash leaves the old file or the new
 * one, never a mix; a temporary file left behind is overwritten by the next write.
 */
export async function writeFileDurably(kernels: Kernels, file: string, bytes: Uint8Array): Promise<void> {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}${temporarySuffix}`;
  const handle = await fsp.open(temporary, 'w');
  try {
    // Written by the thread pool from the caller's bytes, then synced through the kernels: a
    // durable write copies its bytes first, and a dictionary of tens of megabytes copied on
    // the event loop held it a seventh of a second.
    let written = 0;
    while (written < bytes.length)
      written += (await handle.write(bytes, written, bytes.length - written, written)).bytesWritten;
    await kernels.writeDurable(handle.fd, 0, []);
  } catch (error) {
    throw ioError(error, `cannot write ${temporary}`);
  } finally {
    await handle.close();
  }
  fs.renameSync(temporary, file);
  await syncDirectory(path.dirname(file));
}

/**
 * Reads `length` bytes at `offset` of a derived file straight away (a lookup needs a few bytes
 * of a file of megabytes). A missing file throws as the file system does; one shorter than that
 * is `CORRUPT` (its details name the file; a caller that knows whose fault it is says so).
 */
export function readFileRangeSync(file: string, offset: number, length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  const fd = fs.openSync(file, 'r');
  try {
    if (fs.readSync(fd, bytes, 0, length, offset) !== length) {
      throw new StreamStackError('CORRUPT', `the file is shorter than ${offset + length} bytes`, {
        details: { file, offset },
      });
    }
  } finally {
    fs.closeSync(fd);
  }
  return bytes;
}

/** Writes zeros over `[from, to)` of `fd`, in chunks, without syncing. */
export async function writeZeros(fd: number, from: number, to: number): Promise<void> {
  const zeros = Buffer.alloc(Math.min(zeroFillChunkBytes, Math.max(0, to - from)));
  for (let at = from; at < to; ) {
    const length = Math.min(zeros.length, to - at);
    await new Promise<void>((resolve, reject) =>
      fs.write(fd, zeros, 0, length, at, (error) => (error ? reject(error) : resolve())),
    );
    at += length;
  }
}

/** An open segment file. Appends go through the durable-write kernel; reads are positional. */
/**
 * Where a synchronous read lands. Small reads (a payload an index hit or a point lookup fetches)
 * are carved out of a shared slab: a buffer of its own costs more to allocate than the read
 * itself. A slab is never written again once carved, so each view stays the caller's; it lives
 * while any view of it does. Larger reads get a buffer of their own. Every byte is overwritten by
 * the read (or the short read is refused), so nothing is zeroed.
 */
function readTarget(length: number): Uint8Array {
  if (length > readSlabPieceBytesMax) return new Uint8Array(Buffer.allocUnsafeSlow(length).buffer, 0, length);
  if (slabUsed + length > slab.length) {
    slab = new Uint8Array(Buffer.allocUnsafeSlow(readSlabBytes).buffer, 0, readSlabBytes);
    slabUsed = 0;
  }
  const piece = slab.subarray(slabUsed, slabUsed + length);
  slabUsed += length;
  return piece;
}

let slab = new Uint8Array(0);
let slabUsed = 0;

export class SegmentFile {
  /** Set once a write or fsync failed: from then on nothing written here counts as durable. */
  private failure: StreamStackError | undefined;
  /** Reads in flight: the descriptor is closed only once they are done. */
  private readsInFlight = 0;
  private closing = false;

  private constructor(
    readonly file: string,
    readonly fd: number,
    readonly header: SegmentHeader,
    /** Where the next frame goes. */
    public writeOffset: number,
  ) {
    this.durableEnd = writeOffset;
  }

  /**
   * The end of the bytes the disk has confirmed: below it nothing changes any more, so a copy
   * of those bytes may be kept. (`writeOffset` moves before a write lands.)
   */
  durableEnd: number;

  /**
   * Where the last group this file holds starts, when known: set by each append, and by recovery
   * from what it read (undefined when a cut took that group). An active checkpoint names it.
   */
  lastGroupOffset: number | undefined;

  /** Bytes still free for frames. */
  get free(): number {
    return this.header.capacity - this.writeOffset;
  }

  /**
   * Creates a new segment, atomically: zeros up to the capacity and the header are written and
   * synced under a temporary name, which is then renamed to `file` and the directory synced. So
   * a segment that has its name is always whole — its size and header are durable — and a crash
   * leaves at most a temporary file, which the next open deletes. An existing `file` is
   * replaced (an empty newest segment that a larger one must succeed under the same name).
   */
  static async create(kernels: Kernels, file: string, header: SegmentHeader): Promise<SegmentFile> {
    const temporary = `${file}${temporarySuffix}`;
    try {
      await SegmentFile.prepareSpare(kernels, temporary, header.capacity);
    } catch (error) {
      fs.rmSync(temporary, { force: true });
      throw segmentSpaceError(error, file, header.capacity);
    }
    return SegmentFile.fromSpare(kernels, temporary, file, header);
  }

  /**
   * Zero-fills a spare segment file of `capacity` bytes ahead of need (in the background, while
   * the active segment still has room), so that rolling to a new segment costs a header write
   * and a rename instead of writing the whole preallocation on the append's path.
   */
  static async prepareSpare(kernels: Kernels, file: string, capacity: number): Promise<void> {
    fs.rmSync(file, { force: true });
    const fd = fs.openSync(file, 'wx+');
    try {
      await writeZeros(fd, 0, capacity);
      await kernels.writeDurable(fd, 0, []);
    } catch (error) {
      // A half-filled spare on a full disk would hold on to the space it took.
      fs.closeSync(fd);
      fs.rmSync(file, { force: true });
      throw error;
    }
    fs.closeSync(fd);
  }

  /** Turns a prepared spare into a new segment: its header, one fdatasync, then its name. */
  static async fromSpare(kernels: Kernels, spare: string, file: string, header: SegmentHeader): Promise<SegmentFile> {
    const fd = fs.openSync(spare, 'r+');
    try {
      // The spare was written whole and synced: another size is damage from outside.
      const size = fs.fstatSync(fd).size;
      if (size !== header.capacity) {
        throw new StreamStackError('CORRUPT', `the spare ${spare} has ${size} bytes, not ${header.capacity}`, {
          details: { file: spare, offset: 0 },
        });
      }
      await kernels.writeDurable(fd, 0, [encodeSegmentHeader(kernels, header)]);
      fs.renameSync(spare, file);
      await syncDirectory(path.dirname(file));
    } catch (error) {
      fs.closeSync(fd);
      throw error;
    }
    return new SegmentFile(file, fd, header, segmentHeaderBytes);
  }

  /** Opens an existing segment and checks its header; the caller recovers its frames. */
  static open(kernels: Kernels, file: string, readOnly = false): SegmentFile {
    const fd = fs.openSync(file, readOnly ? 'r' : 'r+');
    try {
      const headerBytes = Buffer.alloc(segmentHeaderBytes);
      const read = fs.readSync(fd, headerBytes, 0, segmentHeaderBytes, 0);
      const header = decodeSegmentHeader(kernels, headerBytes.subarray(0, read), file);
      return new SegmentFile(file, fd, header, segmentHeaderBytes);
    } catch (error) {
      fs.closeSync(fd);
      throw error;
    }
  }

  /** The file's size now (a segment's is its capacity unless it was damaged). */
  size(): number {
    return fs.fstatSync(this.fd).size;
  }

  /** Reads the whole file (recovery and verification read segments whole). */
  /**
   * The file's bytes from `offset` on, at their own offsets in a buffer of the file's size: what
   * lies before `offset` is not read (zeros; the pages are never touched).
   */
  readFrom(offset: number): Uint8Array {
    const size = this.size();
    const bytes = new Uint8Array(size);
    return bytes.subarray(0, this.fill(bytes, offset, size));
  }

  /** Reads the file's bytes [from, to) into `bytes` at their own offsets; returns where the read stopped. */
  fill(bytes: Uint8Array, from: number, to: number): number {
    let at = Math.min(from, to);
    while (at < to) {
      const read = fs.readSync(this.fd, bytes, at, to - at, at);
      if (read === 0) break;
      at += read;
    }
    return at;
  }

  readAll(): Uint8Array {
    return this.readFrom(0);
  }

  /**
   * Reads `length` bytes at `offset`. A read that has started keeps the descriptor open until
   * it is done, even if the segment is closed (or deleted) meanwhile: closing it under the read
   * could hand its number to another file, and the read would return that file's bytes.
   */
  async read(offset: number, length: number): Promise<Uint8Array> {
    return this.readInto(new Uint8Array(length), offset);
  }

  /** Reads `into.length` bytes at `offset` into `into` (a buffer read into again), as `read` does. */
  async readInto(into: Uint8Array, offset: number): Promise<Uint8Array> {
    if (this.closing) throw new StreamStackError('CLOSED', `${this.file} is closed`);
    this.readsInFlight++;
    try {
      return await this.readOpen(into, offset);
    } finally {
      this.readsInFlight--;
      if (this.closing && this.readsInFlight === 0) this.closeFile();
    }
  }

  private async readOpen(bytes: Uint8Array, offset: number): Promise<Uint8Array> {
    const length = bytes.length;
    let at = 0;
    while (at < length) {
      const { bytesRead } = await new Promise<{ bytesRead: number }>((resolve, reject) =>
        fs.read(this.fd, bytes, at, length - at, offset + at, (error, bytesRead) =>
          error ? reject(error) : resolve({ bytesRead }),
        ),
      );
      if (bytesRead === 0) {
        throw new StreamStackError('CORRUPT', `${this.file} ends before offset ${offset + length}`, {
          details: { file: this.file, offset: offset + at },
        });
      }
      at += bytesRead;
    }
    return bytes;
  }

  /** Reads synchronously into `into` (a reused scratch buffer); returns the bytes read. */
  readSyncInto(into: Uint8Array, offset: number): number {
    if (this.closing) throw new StreamStackError('CLOSED', `${this.file} is closed`);
    return fs.readSync(this.fd, into, 0, into.length, offset);
  }

  /** Reads synchronously (small reads on paths that cannot await). */
  readSync(offset: number, length: number): Uint8Array {
    if (this.closing) throw new StreamStackError('CLOSED', `${this.file} is closed`);
    const bytes = readTarget(length);
    const read = fs.readSync(this.fd, bytes, 0, length, offset);
    if (read !== length) {
      throw new StreamStackError('CORRUPT', `${this.file} ends before offset ${offset + length}`, {
        details: { file: this.file, offset: offset + read },
      });
    }
    return bytes;
  }

  /**
   * Appends still in flight, in offset order: `durableEnd` moves past one only once it and every
   * one before it are confirmed (a later write's fdatasync may return first).
   */
  private readonly pending: { readonly end: number; confirmed: boolean; readonly settled: Promise<unknown> }[] = [];

  /**
   * Appends `bytes` at the write offset and returns once the disk confirmed them (fdatasync).
   * The bytes are reserved before this returns (the offset moves first), so appends may be in
   * flight together. A failure poisons the segment: every later append, and every append still
   * in flight that has not been confirmed, is refused with the first error.
   */
  append(kernels: Kernels, bytes: Uint8Array): Promise<number> {
    if (this.failure) return Promise.reject(this.failure);
    try {
      // Callers roll to a new segment before an append that would not fit: an overflow is a bug.
      assert(bytes.length <= this.free, `an append of ${bytes.length} bytes fits ${this.file} (${this.free} free)`);
    } catch (error) {
      return Promise.reject(error);
    }
    const offset = this.writeOffset;
    this.writeOffset += bytes.length;
    this.lastGroupOffset = offset;
    const written = kernels.writeDurable(this.fd, offset, [bytes]);
    const entry = { end: offset + bytes.length, confirmed: false, settled: written.catch(() => undefined) };
    this.pending.push(entry);
    return written.then(
      () => {
        entry.confirmed = true;
        while (this.pending.length > 0 && this.pending[0].confirmed)
          this.durableEnd = Math.max(this.durableEnd, this.pending.shift()!.end);
        if (this.failure) throw this.failure;
        return offset;
      },
      (error: unknown) => {
        this.failure ??=
          error instanceof StreamStackError
            ? error
            : new StreamStackError('IO', `write to ${this.file} failed`, { cause: error });
        throw this.failure;
      },
    );
  }

  /** Resolves once every append made so far has settled, confirmed or failed. */
  async appendsSettled(): Promise<void> {
    await Promise.all(this.pending.map((entry) => entry.settled));
  }

  /**
   * Makes everything written to the file so far durable. Recovery calls it before appending
   * behind what it found: bytes a crashed process wrote may still be only in the page cache,
   * and a group written now names them as confirmed.
   */
  async sync(kernels: Kernels): Promise<void> {
    await kernels.writeDurable(this.fd, 0, []);
  }

  /** Zeros `[from, to)` and syncs: how recovery cuts a torn tail, and restores preallocation. */
  async zeroRange(kernels: Kernels, from: number, to: number): Promise<void> {
    await writeZeros(this.fd, from, to);
    await kernels.writeDurable(this.fd, from, []);
  }

  /** Closes the file now, or when the last read in flight ends. */
  close(): void {
    if (this.closing) return;
    this.closing = true;
    if (this.readsInFlight === 0) this.closeFile();
  }

  /**
   * Closes a segment whose file was deleted (trimmed or replaced by a merge) off the event
   * loop: the last close of a deleted file frees its pages in the page cache, which for a
   * segment of hundreds of megabytes held the event loop a third of a second.
   */
  closeDeleted(): void {
    if (this.closing) return;
    this.closing = true;
    this.closeInBackground = true;
    if (this.readsInFlight === 0) this.closeFile();
  }

  private closeInBackground = false;

  private closeFile(): void {
    // A failed close of a read-only descriptor loses nothing: there is nothing to report.
    if (this.closeInBackground) fs.close(this.fd, () => undefined);
    else fs.closeSync(this.fd);
  }
}

/**
 * A segment that could not be preallocated: on a full disk, the error says how much a segment
 * needs and how much the disk has, so the user knows what to free (or to choose smaller
 * segments with `segmentBytes`). Other failures are typed as they are.
 */
function segmentSpaceError(error: unknown, file: string, capacity: number): StreamStackError {
  if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') return ioError(error, `cannot create ${file}`);
  let free = '';
  try {
    const stats = fs.statfsSync(path.dirname(file));
    free = `; ${stats.bavail * stats.bsize} bytes are free`;
  } catch {
    // The free space is only information for the message.
  }
  return new StreamStackError(
    'IO',
    `cannot create ${file}: a segment is preallocated to ${capacity} bytes and the disk is full${free} (ENOSPC)`,
    {
      cause: error,
      details: { errno: 'ENOSPC', path: file, bytes: capacity },
    },
  );
}
