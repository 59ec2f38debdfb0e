/**
 * Where sealed segments and the files derived from them (summaries, index files, key and
 * fingerprint dictionaries) live: one seam between the engine and the place that keeps them, so
 * that they can move off the local disk (object storage) without the readers changing. The WAL
 * and the active history segment are not behind it: they are appended to and fsync'd in place,
 * which only a local file does.
 *
 * Files are named as the engine names them now (a segment's name is its base, zero-padded, and
 * its extension: see `segmentFile` and `summaryFileOf`); a store holds one folder's worth of
 * them, and knows nothing of what the names mean.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { assert, ioError, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { syncDirectory, writeFileDurably } from './segment.js';

/** The operations every store offers: all asynchronous, as a store across a network needs. */
export interface SegmentStore {
  /**
   * Stores a finished file whole under `name`, replacing one of that name. It resolves only once
   * the file is durable (on a disk: fsync'd and its directory entry too), and a failure to make it
   * durable rejects: nothing is reported stored that the store did not confirm. Whole files only,
   * because that is what an object store takes, and what a crash cannot leave half-written.
   */
  put(name: string, bytes: Uint8Array): Promise<void>;

  /**
   * Stores a finished local file under `name`, consuming it: the file is gone once this resolves,
   * and it resolves once the stored copy is durable, as `put`'s does. For a file too large to
   * hold in memory whole (a sealed segment): a local store renames it in, a remote one streams it
   * up. A failure rejects and leaves the local file where it was.
   */
  putFile(name: string, localFile: string): Promise<void>;

  /**
   * Reads exactly `length` bytes at `offset` of `name`: a commit's run, a payload, a section of
   * a dictionary. Ranges rather than whole files, because sealed segments are hundreds of
   * megabytes and a read wants a few kilobytes of one. A file that ends before the range is
   * `CORRUPT`; one that is missing is `IO` with `details.errno` `ENOENT`, as a failed open is.
   */
  read(name: string, offset: number, length: number): Promise<Uint8Array>;

  /**
   * `read` into `into` (a buffer the caller reads into again and again, see `RunBufferPool`), so a
   * scan does not allocate a buffer per run; resolves to `into`.
   */
  readInto(name: string, into: Uint8Array, offset: number): Promise<Uint8Array>;

  /**
   * Reads the first `length` bytes of `name` (fewer when the file is shorter: `Infinity` reads it
   * whole) and says how long the whole file is: what opening a derived file needs, in one request
   * (an object store's ranged GET reports the object's size too). A summary or an index file is
   * read whole; a dictionary's head is read alone, and its size says whether its sections end
   * where the file does. A missing file is `IO` with `details.errno` `ENOENT`, as for `read`.
   */
  readStart(name: string, length: number): Promise<{ bytes: Uint8Array; size: number }>;

  /**
   * The names the store holds, in no particular order: what recovery and trims look through for
   * files to keep or to delete, where a local folder would be listed.
   */
  list(): Promise<string[]>;

  /**
   * Deletes `name` (nothing when it is missing) and resolves once the deletion is durable: a trim
   * or a merge removes what it replaced, and must not find it again after a crash.
   */
  delete(name: string): Promise<void>;

  /**
   * `delete` of every name, durable once at the end rather than once a name: a trim or recovery
   * removes a segment with its summary, index and dictionaries, or many segments at once.
   */
  deleteAll(names: readonly string[]): Promise<void>;

  /**
   * The local file that holds `name`, when the store keeps one; undefined when it does not (a
   * remote store). Worker threads (index builds, rewrites, exports) open segments by path: given
   * undefined, a caller must hand the worker the bytes instead.
   */
  localPath(name: string): string | undefined;

  /** The bytes `name` holds, or undefined when the store has no file of that name. */
  size(name: string): Promise<number | undefined>;
}

/**
 * Synchronous reads, which only a store with the bytes at hand (on a local disk, or warm in a
 * local cache) can offer. They exist for the few hot paths that cannot await: a point lookup's
 * payload, an index fetch's manifest entries, pack dedup's byte comparison while a seal is laid
 * out. Every other read goes through the asynchronous `read`.
 */
export interface SyncSegmentReads {
  /** `read`, synchronously; the bytes may be a view of a shared slab (see `SegmentFile.readSync`). */
  readSync(name: string, offset: number, length: number): Uint8Array;

  /**
   * Reads up to `into.length` bytes at `offset` into `into` and returns how many were read: a
   * read near the end of a file comes back short, and the caller decides what that means.
   */
  readSyncInto(name: string, into: Uint8Array, offset: number): number;

  /**
   * Keeps `name` at hand for a run of small synchronous reads until `close`: a dictionary's
   * winners, read one at a time by every lookup that reaches its segment. The local store holds a
   * descriptor open, so each read costs one pread rather than an open, a read and a close; a
   * store with a local cache would hold its cached copy. A missing file throws as `readSync` does.
   */
  hold(name: string): HeldReads;
}

/** A file a store keeps at hand for synchronous reads (see `SyncSegmentReads.hold`). */
export interface HeldReads {
  /** `SyncSegmentReads.readSyncInto`, of the held file. */
  readSyncInto(into: Uint8Array, offset: number): number;
  /** Lets the file go (a descriptor is closed); reads after it are a bug. */
  close(): void;
}

/**
 * Opens the local file `file` for reading, runs `use` on it, and closes it whatever happens: the
 * one shape of every read of a whole local file here (a store's reads, an upload's). A failed
 * open is what `openError` makes of it.
 */
export async function withReadHandle<T>(
  file: string,
  openError: (error: unknown) => Error,
  use: (handle: fsp.FileHandle) => Promise<T>,
): Promise<T> {
  let handle: fsp.FileHandle;
  try {
    handle = await fsp.open(file, 'r');
  } catch (error) {
    throw openError(error);
  }
  try {
    return await use(handle);
  } finally {
    await handle.close();
  }
}

/**
 * True when `error` is a store's report that the file it was asked for does not exist (`IO`,
 * errno `ENOENT`): a derived file not built yet, which its reader answers with undefined.
 */
export function isMissingFile(error: unknown): boolean {
  return error instanceof StreamStackError && error.code === 'IO' && error.details?.errno === 'ENOENT';
}

/**
 * A file a caller already holds open, which the local store reads `name` through instead of
 * opening it again (`SegmentFile` is one).
 */
export interface HeldFile {
  read(offset: number, length: number): Promise<Uint8Array>;
  readInto(into: Uint8Array, offset: number): Promise<Uint8Array>;
  readSync(offset: number, length: number): Uint8Array;
  readSyncInto(into: Uint8Array, offset: number): number;
}

/** The first implementation: a local folder, its files written as the engine always wrote them. */
export class LocalSegmentStore implements SegmentStore, SyncSegmentReads {
  constructor(
    private readonly kernels: Kernels,
    /** The folder the files are in (created by the first `put`). */
    readonly directory: string,
    /**
     * The open file that holds `name`, when the caller keeps one (undefined otherwise). The
     * segment set keeps every sealed segment open, having checked its header: reading through
     * that descriptor costs no open per read, and a name that a merge reused is read from the
     * file the set holds now, never a stale descriptor of the store's own.
     */
    private readonly held: (name: string) => HeldFile | undefined = () => undefined,
  ) {}

  private fileOf(name: string): string {
    // A name is one file of the folder: a path in it would reach outside the store.
    assert(name.length > 0 && path.basename(name) === name, `a segment store name is a file name (${name})`);
    return path.join(this.directory, name);
  }

  async put(name: string, bytes: Uint8Array): Promise<void> {
    // The same write every derived file always had: a temporary name, fdatasync (a failure
    // rejects), rename, directory fsync.
    await writeFileDurably(this.kernels, this.fileOf(name), bytes);
  }

  async putFile(name: string, localFile: string): Promise<void> {
    const file = this.fileOf(name);
    // The file's bytes are made durable where they are, then renamed in, and the rename made
    // durable: a crash leaves the old file of that name or the new one, as \`put\` does.
    try {
      await fsp.mkdir(this.directory, { recursive: true });
      const handle = await fsp.open(localFile, 'r+');
      try {
        await this.kernels.writeDurable(handle.fd, 0, []);
      } finally {
        await handle.close();
      }
      await fsp.rename(localFile, file);
      await syncDirectory(this.directory);
    } catch (error) {
      throw ioError(error, `cannot store ${localFile} as ${file}`);
    }
  }

  async size(name: string): Promise<number | undefined> {
    const file = this.fileOf(name);
    try {
      return (await fsp.stat(file)).size;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw ioError(error, `cannot stat ${file}`);
    }
  }

  read(name: string, offset: number, length: number): Promise<Uint8Array> {
    const held = this.held(name);
    if (held) return held.read(offset, length);
    return this.readInto(name, new Uint8Array(length), offset);
  }

  async readInto(name: string, into: Uint8Array, offset: number): Promise<Uint8Array> {
    const held = this.held(name);
    if (held) return held.readInto(into, offset);
    return this.withFile(name, (handle, file) => readFully(handle, file, into, offset));
  }

  async readStart(name: string, length: number): Promise<{ bytes: Uint8Array; size: number }> {
    // Not through `held`: it holds sealed segments, which are read by range; this reads the
    // derived files, which no caller holds open.
    return this.withFile(name, async (handle, file) => {
      let size: number;
      try {
        ({ size } = await handle.stat());
      } catch (error) {
        throw ioError(error, `cannot read ${file}`);
      }
      // A file shorter than its size a moment ago was cut while it was read: `CORRUPT`.
      return { bytes: await readFully(handle, file, new Uint8Array(Math.min(length, size)), 0), size };
    });
  }

  /** Opens `name` for reading, runs `use` on it, and closes it; a failed open is `IO`. */
  private withFile<T>(name: string, use: (handle: fsp.FileHandle, file: string) => Promise<T>): Promise<T> {
    const file = this.fileOf(name);
    return withReadHandle(
      file,
      (error) => ioError(error, `cannot open ${file}`),
      (handle) => use(handle, file),
    );
  }

  readSync(name: string, offset: number, length: number): Uint8Array {
    const held = this.held(name);
    if (held) return held.readSync(offset, length);
    const bytes = new Uint8Array(length);
    const read = this.readSyncInto(name, bytes, offset);
    if (read !== length) throw shortRead(this.fileOf(name), offset, read, length);
    return bytes;
  }

  readSyncInto(name: string, into: Uint8Array, offset: number): number {
    const held = this.held(name);
    if (held) return held.readSyncInto(into, offset);
    const file = this.fileOf(name);
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch (error) {
      throw ioError(error, `cannot open ${file}`);
    }
    try {
      let at = 0;
      while (at < into.length) {
        const read = fs.readSync(fd, into, at, into.length - at, offset + at);
        if (read === 0) break;
        at += read;
      }
      return at;
    } catch (error) {
      throw ioError(error, `cannot read ${file}`);
    } finally {
      fs.closeSync(fd);
    }
  }

  hold(name: string): HeldReads {
    const held = this.held(name);
    if (held) return { readSyncInto: (into, offset) => held.readSyncInto(into, offset), close: () => undefined };
    const file = this.fileOf(name);
    let fd: number | undefined;
    try {
      fd = fs.openSync(file, 'r');
    } catch (error) {
      throw ioError(error, `cannot open ${file}`);
    }
    return {
      readSyncInto: (into, offset) => {
        assert(fd !== undefined, `${file} is read after it was let go`);
        let at = 0;
        try {
          while (at < into.length) {
            const read = fs.readSync(fd, into, at, into.length - at, offset + at);
            if (read === 0) break;
            at += read;
          }
        } catch (error) {
          throw ioError(error, `cannot read ${file}`);
        }
        return at;
      },
      close: () => {
        if (fd !== undefined) fs.closeSync(fd);
        fd = undefined;
      },
    };
  }

  async list(): Promise<string[]> {
    try {
      return (await fsp.readdir(this.directory, { withFileTypes: true }))
        .filter((entry) => entry.isFile())
        .map((entry) => entry.name);
    } catch (error) {
      // A folder not made yet holds nothing.
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw ioError(error, `cannot list ${this.directory}`);
    }
  }

  async delete(name: string): Promise<void> {
    const file = this.fileOf(name);
    // A folder not made yet holds nothing to delete (and has no entry to sync).
    if (!fs.existsSync(this.directory)) return;
    try {
      await fsp.rm(file, { force: true });
      await syncDirectory(this.directory);
    } catch (error) {
      throw ioError(error, `cannot delete ${file}`);
    }
  }

  async deleteAll(names: readonly string[]): Promise<void> {
    if (names.length === 0 || !fs.existsSync(this.directory)) return;
    const files = names.map((name) => this.fileOf(name));
    try {
      for (const file of files) await fsp.rm(file, { force: true });
      await syncDirectory(this.directory);
    } catch (error) {
      throw ioError(error, `cannot delete files of ${this.directory}`);
    }
  }

  localPath(name: string): string {
    return this.fileOf(name);
  }
}

/** Reads `into.length` bytes at `offset` of the open `handle`: a file that ends first is `CORRUPT`. */
async function readFully(handle: fsp.FileHandle, file: string, into: Uint8Array, offset: number): Promise<Uint8Array> {
  let at = 0;
  while (at < into.length) {
    let bytesRead: number;
    try {
      ({ bytesRead } = await handle.read(into, at, into.length - at, offset + at));
    } catch (error) {
      throw ioError(error, `cannot read ${file}`);
    }
    if (bytesRead === 0) throw shortRead(file, offset, at, into.length);
    at += bytesRead;
  }
  return into;
}

/** A read that the file ended before: `CORRUPT`, as `SegmentFile` reports it. */
function shortRead(file: string, offset: number, read: number, length: number): StreamStackError {
  return new StreamStackError('CORRUPT', `${file} ends before offset ${offset + length}`, {
    details: { file, offset: offset + read },
  });
}
