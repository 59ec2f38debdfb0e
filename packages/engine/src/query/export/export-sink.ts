/**
 * Where an export file's bytes go: the file itself, written in order, hashed (SHA-256) as it is
 * written so the manifest's checksum is of exactly the bytes on disk, and synced before it
 * counts as written — the manifest that names it is written only after that.
 *
 * Writes are queued, not waited for one by one: `write` returns once fewer than
 * `exportWritesPendingBytesMax` bytes wait, so the next bytes are made while the last are
 * written; every `exportFlushEveryBytes` an fdatasync starts in the background, so the disk
 * takes the file as it is made. A failed write or sync fails the next `write` or `finish`.
 *
 * With the native kernels, the file is opened with `O_DIRECT` where its file system takes it:
 * the bytes, gathered into pieces of `exportDirectWriteBytes`, go from memory to the device
 * without a copy into the page cache, which cost as much CPU as making them (the kernel finds,
 * faults in and later writes back a page per 4 KiB) and pushed the store's own data out of the
 * cache. The last piece is padded to a block and the file truncated to its length before the
 * final sync. The bytes in the file are the same either way.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { assert, ioError, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import {
  directWriteAlignmentBytes,
  exportDirectWriteBytes,
  exportFlushEveryBytes,
  exportWritesPendingBytesMax,
} from '../../limits.js';

/** Written buffers kept for `reusable`: as many as the pending writes may hold, and one more. */
const reusableBuffersMax = 16;

export interface ExportSink {
  /**
   * Takes `bytes` to write after those before; the caller must not change them afterwards.
   * With `whole` (the buffer `bytes` is a view of), that buffer is handed back by `reusable`
   * once they are written.
   */
  write(bytes: Uint8Array, whole?: Uint8Array): Promise<void>;
  /**
   * A buffer given to `write` as `whole` whose bytes are written, for the caller to fill again
   * (or undefined): a fresh buffer costs a page fault per 4 KiB when first written, which cost
   * more than making the lines that fill it.
   */
  reusable(): Uint8Array | undefined;
  /**
   * Takes `bytes` before it returns (hashed, and copied into memory of the sink's or the
   * kernel's), so the caller may fill the same memory again at once; `room` then waits while
   * too much is pending. For a caller whose bytes are views of memory it reuses.
   */
  writeCopy(bytes: Uint8Array): void;
  /** Waits while too much is pending (see `write`); a failed write fails it. */
  room(): Promise<void>;
}

export interface WrittenFile {
  readonly bytes: number;
  readonly sha256: string;
}

export class FileSink implements ExportSink {
  private readonly hash = crypto.createHash('sha256');
  private written = 0;
  /** The writes queued, one after another, and how many bytes they hold. */
  private queue: Promise<void> = Promise.resolve();
  private pendingBytes = 0;
  private failure: unknown;
  /** Resolves the wait of a `write` that found too much queued. */
  private wake: (() => void) | undefined;

  /** With direct writes: the piece being gathered, how much of it is filled, and where it goes. */
  private readonly staging: Uint8Array | undefined;
  private staged = 0;
  private directPosition = 0;

  private constructor(
    private readonly file: string,
    private readonly handle: fsp.FileHandle,
    /** The kernels that write the file with `O_DIRECT`, or undefined for buffered writes. */
    private readonly direct: Kernels | undefined,
  ) {
    assert(exportDirectWriteBytes % directWriteAlignmentBytes === 0, 'a direct write gathers whole blocks');
    this.staging = direct ? new Uint8Array(exportDirectWriteBytes) : undefined;
  }

  /**
   * Creates (or truncates: a file of an export that never finished) `file`, for direct writes
   * when `kernels` can make them and the file system takes `O_DIRECT` (tmpfs before Linux 6.6,
   * and some FUSE file systems, refuse it with `EINVAL`).
   */
  static async create(file: string, kernels?: Kernels): Promise<FileSink> {
    const directFlag = fs.constants.O_DIRECT;
    if (kernels?.directWrites && directFlag !== undefined) {
      try {
        const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC | directFlag;
        return new FileSink(file, await fsp.open(file, flags, 0o666), kernels);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EINVAL') throw ioError(error, `creating export file ${file}`);
      }
    }
    try {
      return new FileSink(file, await fsp.open(file, 'w'), undefined);
    } catch (error) {
      throw ioError(error, `creating export file ${file}`);
    }
  }

  /** Whether the file is written with `O_DIRECT`. */
  get writesDirectly(): boolean {
    return this.direct !== undefined;
  }

  async write(bytes: Uint8Array, whole?: Uint8Array): Promise<void> {
    if (this.accept(bytes)) {
      if (this.direct) {
        // The kernel copies what it writes before the call returns: the buffer is free at once.
        this.gatherDirect(bytes);
        if (whole && this.writtenBuffers.length < reusableBuffersMax) this.writtenBuffers.push(whole);
      } else {
        this.writeBuffered(bytes, whole);
      }
    }
    await this.room();
  }

  writeCopy(bytes: Uint8Array): void {
    if (!this.accept(bytes)) return;
    // Direct writes copy as they gather; a buffered write holds its bytes until it runs.
    if (this.direct) this.gatherDirect(bytes);
    else this.writeBuffered(bytes.slice(), undefined);
  }

  async room(): Promise<void> {
    // Waits only while too much is queued: each write that ends lets the next be made.
    while (this.tooMuchPending() && this.failure === undefined) await this.nextWrite();
    this.check();
  }

  /** Hashes and counts `bytes`, after the check that no write failed; false when they are none. */
  private accept(bytes: Uint8Array): boolean {
    this.check();
    if (bytes.length === 0) return false;
    this.hash.update(bytes);
    this.written += bytes.length;
    return true;
  }

  /**
   * Whether the caller should wait before making more bytes: `exportWritesPendingBytesMax` or
   * more wait to be written — and, with direct writes, in more than one write. An Arrow
   * column's buffer (13 MB for a group's payloads) is one write larger than the bound: waiting
   * for it alone would leave the disk idle while the next is made.
   */
  private tooMuchPending(): boolean {
    return (
      this.pendingBytes >= exportWritesPendingBytesMax && (this.direct === undefined || this.directWrites.size > 1)
    );
  }

  /** Queues a buffered write after those before: a file through the page cache is written in order. */
  private writeBuffered(bytes: Uint8Array, whole: Uint8Array | undefined): void {
    this.pendingBytes += bytes.length;
    this.queue = this.queue.then(async () => {
      await this.writeAll(bytes);
      if (whole && this.writtenBuffers.length < reusableBuffersMax) this.writtenBuffers.push(whole);
    });
  }

  /** Buffers handed in as `whole` whose bytes are written: a few, filled again by the caller. */
  private readonly writtenBuffers: Uint8Array[] = [];

  reusable(): Uint8Array | undefined {
    return this.writtenBuffers.pop();
  }

  private nextWrite(): Promise<void> {
    return new Promise((resolve) => (this.wake = resolve));
  }

  private async writeAll(bytes: Uint8Array): Promise<void> {
    if (this.failure !== undefined) return;
    try {
      // A write may take fewer bytes than asked; the rest follows until all are written.
      for (let at = 0; at < bytes.length; ) {
        const { bytesWritten } = await this.handle.write(bytes, at, bytes.length - at);
        at += bytesWritten;
      }
    } catch (error) {
      this.failure = ioError(error, `writing export file ${this.file}`);
    }
    this.unflushedBytes += bytes.length;
    if (this.unflushedBytes >= exportFlushEveryBytes && this.flushing === undefined) this.flushInBackground();
    this.ended(bytes.length);
  }

  /**
   * Direct writes of `bytes`: once the bytes gathered and `bytes` make a piece
   * (`exportDirectWriteBytes` or more), their whole blocks go in one write — the gathered bytes
   * and `bytes` handed to the kernels together, which copy them once into aligned memory — and
   * the rest, less than a block, is gathered for the next write. Smaller writes are gathered.
   * Gathering every byte before writing it copied each twice: a tenth of an NDJSON export's CPU.
   */
  private gatherDirect(bytes: Uint8Array): void {
    const staging = this.staging!;
    const total = this.staged + bytes.length;
    if (total < staging.length) {
      staging.set(bytes, this.staged);
      this.staged = total;
      return;
    }
    // The staging piece is whole blocks, and holds less than itself: the blocks written take
    // all of it, and some of `bytes`.
    const whole = Math.floor(total / directWriteAlignmentBytes) * directWriteAlignmentBytes;
    const taken = whole - this.staged;
    assert(
      taken >= 0 && bytes.length - taken < directWriteAlignmentBytes,
      'a direct write takes every whole block gathered and given',
    );
    this.startDirect([staging.subarray(0, this.staged), bytes.subarray(0, taken)], whole);
    // The kernels copied the bytes before returning: the staging piece is free again.
    staging.set(bytes.subarray(taken), 0);
    this.staged = bytes.length - taken;
  }

  /** Direct writes in flight; each has its own place in the file, so several run at once. */
  private readonly directWrites = new Set<Promise<void>>();

  /**
   * Starts a direct write at the end of what is written (the last one, only, may end
   * mid-block). It is not waited for: the disk takes it while the next bytes are made, and
   * writes to their own offsets need no order, where one write at a time left the disk idle
   * whenever the thread was busy making the next.
   */
  private startDirect(pieces: readonly Uint8Array[], length: number): void {
    this.pendingBytes += length;
    // The kernel copies the bytes before returning: the pieces (the staging piece among them)
    // are free again. It never rejects: a failure is kept, and fails the next `write` or `finish`.
    const write: Promise<void> = this.direct!.writeDirect(this.handle.fd, this.directPosition, pieces)
      .then(
        () => undefined,
        (error: unknown) => {
          this.failure ??= this.writeFailure(error);
        },
      )
      .finally(() => {
        this.directWrites.delete(write);
        this.ended(length);
      });
    this.directWrites.add(write);
    this.directPosition += length;
  }

  /** A write of `length` bytes ended: the one waiting for room may go on. */
  private ended(length: number): void {
    this.pendingBytes -= length;
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  /** The error of a failed write, naming the file. */
  private writeFailure(error: unknown): StreamStackError {
    if (!(error instanceof StreamStackError)) return ioError(error, `writing export file ${this.file}`);
    return new StreamStackError(error.code, `writing export file ${this.file}: ${error.message}`, {
      cause: error,
      details: error.details,
    });
  }

  /** Bytes written since the last background flush started. */
  private unflushedBytes = 0;
  /** A background flush in flight (one at a time). */
  private flushing: Promise<void> | undefined;

  /**
   * Starts an fdatasync of what is written so far, not waited for: the disk takes the file's
   * bytes while the next are made (see `exportFlushEveryBytes`). Its failure fails the file, as
   * the final sync's would: the fsync error is never taken for data on disk.
   */
  private flushInBackground(): void {
    this.unflushedBytes = 0;
    this.flushing = this.handle.datasync().then(
      () => {
        this.flushing = undefined;
      },
      (error: unknown) => {
        this.flushing = undefined;
        this.failure ??= ioError(error, `syncing export file ${this.file}`);
      },
    );
  }

  private check(): void {
    if (this.failure !== undefined) throw this.failure;
  }

  /** Syncs and closes the file; what it holds is then on disk. */
  async finish(): Promise<WrittenFile> {
    await this.queue;
    await this.flushing;
    if (this.direct) await this.finishDirect();
    if (this.failure !== undefined) {
      await this.handle.close().catch(() => undefined);
      throw this.failure;
    }
    try {
      await this.handle.sync();
    } catch (error) {
      await this.handle.close().catch(() => undefined);
      throw ioError(error, `syncing export file ${this.file}`);
    }
    await this.handle.close();
    return { bytes: this.written, sha256: this.hash.digest('hex') };
  }

  /**
   * Writes the last gathered bytes, padded to a block, waits for every direct write, and cuts
   * the file to its length. It never throws: a failure is kept for `finish`.
   */
  private async finishDirect(): Promise<void> {
    if (this.staged > 0 && this.failure === undefined) {
      this.startDirect([this.staging!.subarray(0, this.staged)], this.staged);
      this.staged = 0;
    }
    await Promise.all(this.directWrites);
    // The last write's padding lies past the file's length.
    if (this.failure !== undefined || this.written % directWriteAlignmentBytes === 0) return;
    try {
      await this.handle.truncate(this.written);
    } catch (error) {
      this.failure = ioError(error, `truncating export file ${this.file} to its length`);
    }
  }

  /** Closes the file after a failure (the export stops; no manifest will name it). */
  async abandon(): Promise<void> {
    await this.queue;
    await this.flushing;
    // No write may still be running when its descriptor is closed (and perhaps reused).
    await Promise.all(this.directWrites);
    await this.handle.close().catch(() => undefined);
  }
}
