/**
 * The data directory's lock: one process opens a data directory read-write.
 *
 * Where the native module loads, the lock is an OS lock (`flock`) on the directory itself, held
 * through an open descriptor for the life of the store and released by the kernel when the
 * process dies: there is no stale lock to detect, and deleting `LOCK` changes nothing. `LOCK`
 * then only tells people (and fallback openers) which process holds the directory.
 *
 * Without the native module, the fallback is the `LOCK` file itself, created exclusively. It
 * cannot tell a live holder from a dead one safely, so it never guesses: an existing `LOCK` is
 * refused with `LOCKED`, naming the pid it holds, until the user breaks it (`breakLock`).
 *
 * Within one process, a set of the directories it holds refuses a second opener.
 */
import fs from 'node:fs';
import path from 'node:path';
import { ioError, StreamStackError } from '../errors.js';
import { storeLockName } from './feed-layout.js';
import { loadPlatformLock } from './platform.js';

const heldHere = new Set<string>();

/** How a holder took the directory: an OS lock, or the fallback's exclusive file. */
type LockMode = 'flock' | 'file';

function readHolder(file: string): { pid: number; mode: LockMode } | undefined {
  try {
    const [pid, mode] = fs.readFileSync(file, 'utf8').trim().split(/\s+/);
    const number = Number.parseInt(pid ?? '', 10);
    return Number.isInteger(number) ? { pid: number, mode: mode === 'file' ? 'file' : 'flock' } : undefined;
  } catch {
    return undefined;
  }
}

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function locked(directory: string, holder: { pid: number } | undefined, hint = ''): StreamStackError {
  return new StreamStackError(
    'LOCKED',
    `${directory} is open read-write in ${holder ? `process ${holder.pid}` : 'another process'}${hint}`,
    { details: { directory, ...(holder ? { pid: holder.pid } : {}) } },
  );
}

export interface LockOptions {
  /** Fallback only: remove a `LOCK` left by a process that is gone, then take the directory. */
  readonly breakLock?: boolean;
}

export class DirectoryLock {
  private constructor(
    readonly directory: string,
    private readonly file: string,
    /** The descriptor holding the OS lock; undefined for the fallback. */
    private readonly fd: number | undefined,
  ) {}

  /** Takes the lock on `directory` (created if missing), or throws `LOCKED`. */
  static acquire(directory: string, options: LockOptions = {}): DirectoryLock {
    let real: string;
    try {
      fs.mkdirSync(directory, { recursive: true });
      real = fs.realpathSync(directory);
    } catch (error) {
      throw ioError(error, `cannot open the data directory ${directory}`);
    }
    const file = path.join(real, storeLockName);
    if (heldHere.has(real)) {
      throw new StreamStackError('LOCKED', `${real} is already open in this process`, { details: { directory: real } });
    }
    // `STREAMSTACK_LOCK=file` takes the fallback even where the native module loads: how its
    // tests (and anyone diagnosing a machine without the module) exercise it.
    const platform =
      process.env.STREAMSTACK_LOCK === 'file' ? { unavailable: 'STREAMSTACK_LOCK=file' } : loadPlatformLock();
    const lock =
      'unavailable' in platform
        ? DirectoryLock.takeFile(real, file, options)
        : DirectoryLock.takeFlock(real, file, platform);
    heldHere.add(real);
    return lock;
  }

  private static takeFlock(
    real: string,
    file: string,
    platform: { lockExclusive(fd: number): boolean; unlock(fd: number): void },
  ): DirectoryLock {
    let fd: number;
    try {
      fd = fs.openSync(real, 'r');
    } catch (error) {
      throw ioError(error, `cannot open the data directory ${real}`);
    }
    try {
      if (!platform.lockExclusive(fd)) throw locked(real, readHolder(file));
      const holder = readHolder(file);
      if (holder?.mode === 'file' && holder.pid !== process.pid && processIsAlive(holder.pid)) {
        // A process without the native module holds the directory through the file alone.
        throw locked(real, holder, ' (without an OS lock)');
      }
      DirectoryLock.tellHolder(file, 'flock');
    } catch (error) {
      fs.closeSync(fd);
      throw error;
    }
    return new DirectoryLock(real, file, fd);
  }

  private static takeFile(real: string, file: string, options: LockOptions): DirectoryLock {
    if (options.breakLock) fs.rmSync(file, { force: true });
    try {
      fs.writeFileSync(file, `${process.pid} file\n`, { flag: 'wx' });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw ioError(error, `cannot create ${file}`);
      throw locked(
        real,
        readHolder(file),
        ` — or was, if that process is gone: without the native module the lock cannot tell. If no process uses ${real}, open it with --break-lock (breakLock: true)`,
      );
    }
    return new DirectoryLock(real, file, undefined);
  }

  /**
   * Writes who holds the directory into `LOCK`, atomically (a temporary file renamed over it),
   * so a failure — a full disk — never leaves an empty `LOCK`. Under the OS lock the file is
   * only information, so failing to write it is not fatal.
   */
  private static tellHolder(file: string, mode: LockMode): void {
    const temporary = `${file}.${process.pid}.tmp`;
    try {
      fs.writeFileSync(temporary, `${process.pid} ${mode}\n`);
      fs.renameSync(temporary, file);
    } catch {
      fs.rmSync(temporary, { force: true });
    }
  }

  release(): void {
    heldHere.delete(this.directory);
    // `LOCK` goes first, while the directory is still held, so no opener ever sees it stale.
    try {
      fs.rmSync(this.file, { force: true });
    } catch {
      // A read-only or vanished directory: nothing to tell anyone.
    }
    if (this.fd !== undefined) fs.closeSync(this.fd);
  }
}
