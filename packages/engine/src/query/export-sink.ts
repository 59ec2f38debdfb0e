/**
 * Where an export file's bytes go: the file itself, written in order, hashed (SHA-256) as it is
 * written so the manifest's checksum is of exactly the bytes on disk, and synced before it
 * counts as written — the manifest that names it is written only after that.
 */
import crypto from 'node:crypto';
import fsp from 'node:fs/promises';
import { ioError } from '../errors.js';

export interface ExportSink {
  write(bytes: Uint8Array): Promise<void>;
}

export interface WrittenFile {
  readonly bytes: number;
  readonly sha256: string;
}

export class FileSink implements ExportSink {
  private readonly hash = crypto.createHash('sha256');
  private written = 0;

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

  async write(bytes: Uint8Array): Promise<void> {
    if (bytes.length === 0) return;
    this.hash.update(bytes);
    try {
      // A write may take fewer bytes than asked; the rest follows until all are written.
      for (let at = 0; at < bytes.length; ) {
        const { bytesWritten } = await this.handle.write(bytes, at, bytes.length - at);
        at += bytesWritten;
      }
    } catch (error) {
      throw ioError(error, `writing export file ${this.file}`);
    }
    this.written += bytes.length;
  }

  /** Syncs and closes the file; what it holds is then on disk. */
  async finish(): Promise<WrittenFile> {
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
    await this.handle.close().catch(() => undefined);
  }
}
