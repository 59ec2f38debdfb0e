/**
 * The data directory's LOCK: one process opens a data directory read-write. The file holds the
 * owner's pid; a lock whose process is gone (killed, crashed) is stale and is taken over. Within
 * one process, a set of the directories it holds open refuses a second opener.
 */
import fs from 'node:fs';
import path from 'node:path';
import { StreamStackError } from '../errors.js';

const heldHere = new Set<string>();

function processIsAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class DirectoryLock {
  private constructor(
    readonly directory: string,
    private readonly file: string,
  ) {}

  /** Takes the lock on `directory` (created if missing), or throws `LOCKED`. */
  static acquire(directory: string): DirectoryLock {
    fs.mkdirSync(directory, { recursive: true });
    const real = fs.realpathSync(directory);
    const file = path.join(real, 'LOCK');
    if (heldHere.has(real)) {
      throw new StreamStackError('LOCKED', `${real} is already open in this process`, { details: { directory: real } });
    }
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        fs.writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
        heldHere.add(real);
        return new DirectoryLock(real, file);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const owner = Number.parseInt(fs.readFileSync(file, 'utf8'), 10);
      if (Number.isInteger(owner) && owner !== process.pid && processIsAlive(owner)) {
        throw new StreamStackError('LOCKED', `${real} is open in process ${owner}`, {
          details: { directory: real, pid: owner },
        });
      }
      // The owner is gone (or it was this process, which no longer holds it): a stale lock.
      fs.rmSync(file, { force: true });
    }
    throw new StreamStackError('LOCKED', `${real} is being opened by another process`, { details: { directory: real } });
  }

  release(): void {
    fs.rmSync(this.file, { force: true });
    heldHere.delete(this.directory);
  }
}
