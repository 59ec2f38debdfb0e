/**
 * Where an export file's bytes go: the file itself, written in order, hashed (SHA-256) as it is
 * written so the manifest's checksum is of exactly the bytes on disk, and synced before it
 * counts as written — the manifest that names it is written only after that.
 *
 * Writes are queued, not waited for one by one: `write` returns once fewer than
 * `exportWritesPendingBytesMax` bytes wait, so the next bytes are made while the last are
 * written; every `exportFlushEveryBytes` an fdatasync starts in the background, so the disk
 * takes the file as it is made. A failed write or sync fails the next `write` or `finish`.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import { ioError } from '../errors.js';
import { exportFlushEveryBytes, exportWritesPendingBytesMax } from '../limits.js';

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

  private constructor(
    private readonly file: string,
    private readonly handle: fsp.FileHandle,
  ) {}

  /** Creates (or truncates: a file of an export that never finished) `file`. */
  static async create(file: string): Promise<FileSink> {
    try {
      return new FileSink(file, await fsp.open(file, 'w'));
    } catch (error) {
      throw ioError(error, `creating export file ${file}`);
    }
  }

  async write(bytes: Uint8Array, whole?: Uint8Array): Promise<void> {
    this.check();
    if (bytes.length === 0) return;
    this.hash.update(bytes);
    this.written += bytes.length;
    this.pendingBytes += bytes.length;
    this.queue = this.queue.then(async () => {
      await this.writeAll(bytes);
      if (whole && this.writtenBuffers.length < reusableBuffersMax) this.writtenBuffers.push(whole);
    });
    // Waits only while too much is queued: each write that ends lets the next be made.
    while (this.pendingBytes >= exportWritesPendingBytesMax && this.failure === undefined) await this.nextWrite();
    this.check();
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
    this.pendingBytes -= bytes.length;
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
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

  /** Closes the file after a failure (the export stops; no manifest will name it). */
  async abandon(): Promise<void> {
    await this.queue;
    await this.flushing;
    await this.handle.close().catch(() => undefined);
  }
}
