/**
 * The power-loss file system itself (tools/powerloss-fs): what survives a simulated power loss
 * is exactly what was fsync'd — data by a file fsync, names by a directory fsync — and a failed
 * fsync loses that file's unsynced data, as Linux does.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadPlatformLock } from '../../packages/engine/src/storage/platform.js';
import { startPowerlossFs } from '../support/powerloss.js';

const pageSize = 4096;

function syncDirectory(directory: string): void {
  const fd = fs.openSync(directory, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Creates `file` with `content` and fdatasyncs it; its name is not made durable. */
function writeSynced(file: string, content: string | Buffer): void {
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeFileSync(fd, content);
    fs.fdatasyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

const listing = (directory: string): string[] => fs.readdirSync(directory).sort();

describe('powerloss-fs', () => {
  it('keeps what was synced through a power loss and drops what was not', async () => {
    const pfs = await startPowerlossFs();
    const log = path.join(pfs.mount, 'log');
    const fd = fs.openSync(log, 'w');
    syncDirectory(pfs.mount);
    fs.writeSync(fd, 'synced;');
    fs.fdatasyncSync(fd);
    fs.writeSync(fd, 'unsynced;');
    // Reads see the unsynced state, as from a page cache; the backing holds the synced one.
    expect(fs.readFileSync(log, 'utf8')).toBe('synced;unsynced;');
    expect(fs.readFileSync(path.join(pfs.backing, 'log'), 'utf8')).toBe('synced;');
    // A durable name whose data was never synced comes back empty.
    fs.writeFileSync(path.join(pfs.mount, 'empty'), 'never synced');
    syncDirectory(pfs.mount);
    expect((await pfs.stats()).dirty_files).toBe(2);

    const loss = await pfs.losePower();
    expect(loss).toMatchObject({ torn: false, torn_pages_written: 0, dropped_pages: 2 });
    // The writer still has the file open: the dead mount fails its calls rather than hanging.
    expect(() => fs.writeSync(fd, 'after')).toThrow();
    try {
      fs.closeSync(fd);
    } catch {
      // ENOTCONN from the flush on a dead mount
    }
    expect(listing(pfs.backing)).toEqual(['empty', 'log']);
    expect(fs.readFileSync(path.join(pfs.backing, 'log'), 'utf8')).toBe('synced;');
    expect(fs.statSync(path.join(pfs.backing, 'empty')).size).toBe(0);
    expect(listing(pfs.mount)).toEqual([]); // detached: the bare mount point
  });

  it('a file synced in a directory that was not fsync’d loses its name; mounting again shows what survived', async () => {
    const pfs = await startPowerlossFs();
    writeSynced(path.join(pfs.mount, 'named'), 'kept');
    syncDirectory(pfs.mount);
    writeSynced(path.join(pfs.mount, 'orphan'), 'synced data, unsynced name');
    fs.mkdirSync(path.join(pfs.mount, 'new-directory'));
    expect(listing(pfs.mount)).toEqual(['named', 'new-directory', 'orphan']);
    expect(listing(pfs.backing)).toEqual(['named']);
    await pfs.losePower();
    expect(listing(pfs.backing)).toEqual(['named']);

    const again = await startPowerlossFs({ backing: pfs.backing });
    expect(listing(again.mount)).toEqual(['named']);
    expect(fs.readFileSync(path.join(again.mount, 'named'), 'utf8')).toBe('kept');
  });

  it('an unsynced rename is lost, a synced one survives whole', async () => {
    const pfs = await startPowerlossFs();
    for (const name of ['a', 'b', 'c']) writeSynced(path.join(pfs.mount, name), `content of ${name}`);
    fs.mkdirSync(path.join(pfs.mount, 'sub'));
    syncDirectory(pfs.mount);
    expect(listing(pfs.backing)).toEqual(['a', 'b', 'c', 'sub']);

    fs.renameSync(path.join(pfs.mount, 'a'), path.join(pfs.mount, 'a2')); // not synced
    fs.renameSync(path.join(pfs.mount, 'b'), path.join(pfs.mount, 'b2'));
    // Replacing a file by a synced temporary, the usual atomic update.
    writeSynced(path.join(pfs.mount, 'c.tmp'), 'new content of c');
    fs.renameSync(path.join(pfs.mount, 'c.tmp'), path.join(pfs.mount, 'c'));
    syncDirectory(pfs.mount); // makes b2 and the new c durable; a2 was renamed before, so it is too
    fs.renameSync(path.join(pfs.mount, 'a2'), path.join(pfs.mount, 'a3')); // not synced
    // Across directories, fsyncing only the target makes the whole rename durable.
    fs.renameSync(path.join(pfs.mount, 'b2'), path.join(pfs.mount, 'sub', 'b3'));
    syncDirectory(path.join(pfs.mount, 'sub'));
    expect(listing(pfs.mount)).toEqual(['a3', 'c', 'sub']);

    await pfs.losePower();
    expect(listing(pfs.backing)).toEqual(['a2', 'c', 'sub']);
    expect(listing(path.join(pfs.backing, 'sub'))).toEqual(['b3']);
    expect(fs.readFileSync(path.join(pfs.backing, 'a2'), 'utf8')).toBe('content of a');
    expect(fs.readFileSync(path.join(pfs.backing, 'sub', 'b3'), 'utf8')).toBe('content of b');
    expect(fs.readFileSync(path.join(pfs.backing, 'c'), 'utf8')).toBe('new content of c');
  });

  it('an unsynced rename leaves the old name in place', async () => {
    const pfs = await startPowerlossFs();
    writeSynced(path.join(pfs.mount, 'old'), 'data');
    syncDirectory(pfs.mount);
    fs.renameSync(path.join(pfs.mount, 'old'), path.join(pfs.mount, 'new'));
    fs.unlinkSync(path.join(pfs.mount, 'new'));
    expect(listing(pfs.mount)).toEqual([]);
    await pfs.losePower();
    expect(listing(pfs.backing)).toEqual(['old']);
    expect(fs.readFileSync(path.join(pfs.backing, 'old'), 'utf8')).toBe('data');
  });

  /** Writes `pages` pages of 'A' (synced) then of 'B' (not), and a synced file of 'C'; loses power torn. */
  async function tornRun(seed: number): Promise<{ torn: boolean[]; written: number; intact: boolean }> {
    const pages = 64;
    const pfs = await startPowerlossFs({ seed });
    const file = path.join(pfs.mount, 'torn');
    writeSynced(file, Buffer.alloc(pages * pageSize, 'A'));
    writeSynced(path.join(pfs.mount, 'intact'), Buffer.alloc(8 * pageSize, 'C'));
    syncDirectory(pfs.mount);
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.alloc(pages * pageSize, 'B'), 0, pages * pageSize, 0);
    expect(fs.readFileSync(file).every((byte) => byte === 0x42)).toBe(true);
    const loss = await pfs.losePower(true);
    try {
      fs.closeSync(fd);
    } catch {
      // the mount is gone
    }
    const after = fs.readFileSync(path.join(pfs.backing, 'torn'));
    expect(after.length).toBe(pages * pageSize);
    const torn: boolean[] = [];
    for (let page = 0; page < pages; page++) {
      const bytes = after.subarray(page * pageSize, (page + 1) * pageSize);
      const value = bytes[0]!;
      expect([0x41, 0x42]).toContain(value);
      expect(bytes.every((byte) => byte === value)).toBe(true); // whole pages only
      torn.push(value === 0x42);
    }
    expect(loss.torn_pages_written).toBe(torn.filter(Boolean).length);
    expect(loss.torn_pages_written + loss.dropped_pages).toBe(pages);
    const intact = fs.readFileSync(path.join(pfs.backing, 'intact')).equals(Buffer.alloc(8 * pageSize, 'C'));
    return { torn, written: loss.torn_pages_written, intact };
  }

  it('a torn power loss lets some unsynced pages through, chosen by the seed, and leaves synced data intact', async () => {
    const first = await tornRun(7);
    expect(first.intact).toBe(true);
    expect(first.written).toBeGreaterThan(0);
    expect(first.written).toBeLessThan(64);
    const again = await tornRun(7);
    expect(again.torn).toEqual(first.torn);
    const other = await tornRun(8);
    expect(other.torn).not.toEqual(first.torn);
  });

  it('fail-fsync N fails the Nth fsync with EIO and drops that file’s unsynced data', async () => {
    const pfs = await startPowerlossFs();
    const file = path.join(pfs.mount, 'f');
    const fd = fs.openSync(file, 'w');
    syncDirectory(pfs.mount);
    await pfs.failFsync(2);
    fs.writeSync(fd, 'one;');
    fs.fdatasyncSync(fd); // the first: fine
    fs.writeSync(fd, 'two;');
    let failure: unknown;
    try {
      fs.fdatasyncSync(fd); // the second: EIO
    } catch (error) {
      failure = error;
    }
    expect(failure).toMatchObject({ code: 'EIO' });
    expect(fs.readFileSync(file, 'utf8')).toBe('one;'); // 'two;' is gone, not just unsynced
    fs.writeSync(fd, 'three;', 4);
    fs.fsyncSync(fd); // only the Nth one fails
    fs.closeSync(fd);
    expect(await pfs.stats()).toMatchObject({ fsyncs: 3, failed_fsyncs: 1, fail_fsync_armed: 0 });
    await pfs.losePower();
    expect(fs.readFileSync(path.join(pfs.backing, 'f'), 'utf8')).toBe('one;three;');
  });

  it('truncation, holes and nested directories read back as written, and a clean unmount writes everything out', async () => {
    const pfs = await startPowerlossFs();
    const nested = path.join(pfs.mount, 'a', 'b');
    fs.mkdirSync(nested, { recursive: true });
    const file = path.join(nested, 'f');
    const fd = fs.openSync(file, 'w+');
    fs.writeSync(fd, Buffer.alloc(3 * pageSize, 'x'));
    fs.fdatasyncSync(fd);
    fs.ftruncateSync(fd, pageSize + 10);
    fs.writeSync(fd, 'end', 5 * pageSize); // leaves a hole
    const expected = Buffer.concat([
      Buffer.alloc(pageSize + 10, 'x'),
      Buffer.alloc(4 * pageSize - 10),
      Buffer.from('end'),
    ]);
    expect(fs.readFileSync(file).equals(expected)).toBe(true);
    fs.closeSync(fd);
    expect(fs.existsSync(path.join(pfs.backing, 'a'))).toBe(false);
    await pfs.stop();
    expect(fs.readFileSync(path.join(pfs.backing, 'a', 'b', 'f')).equals(expected)).toBe(true);
  });

  it('the data directory’s flock works on the mount (the kernel keeps it locally)', async () => {
    const platform = loadPlatformLock();
    if ('unavailable' in platform) throw new Error(`the native lock is unavailable: ${platform.unavailable}`);
    const pfs = await startPowerlossFs();
    const directory = path.join(pfs.mount, 'data');
    fs.mkdirSync(directory);
    const first = fs.openSync(directory, 'r');
    const second = fs.openSync(directory, 'r');
    try {
      expect(platform.lockExclusive(first)).toBe(true);
      expect(platform.lockExclusive(second)).toBe(false);
      platform.unlock(first);
      expect(platform.lockExclusive(second)).toBe(true);
    } finally {
      fs.closeSync(first);
      fs.closeSync(second);
    }
  });
});
