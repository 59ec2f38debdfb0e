/**
 * What a piece of engine work reads from disk, file by file: the spies every read path of `fs`
 * goes through, for tests that bound what an open, a query or a condition touches.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { vi } from 'vitest';

/** Counts the bytes read from each file while `action` runs, through every read path fs offers. */
export async function bytesReadDuring(action: () => Promise<void>): Promise<Map<string, number>> {
  const pathOf = new Map<number, string>();
  const bytes = new Map<string, number>();
  const add = (file: string | undefined, count: number) => {
    if (file !== undefined) bytes.set(file, (bytes.get(file) ?? 0) + count);
  };
  const openSync = fs.openSync;
  vi.spyOn(fs, 'openSync').mockImplementation(((file: fs.PathLike, ...rest: unknown[]) => {
    const fd = (openSync as (...args: unknown[]) => number)(file, ...rest);
    pathOf.set(fd, path.resolve(String(file)));
    return fd;
  }) as typeof fs.openSync);
  const readSync = fs.readSync;
  vi.spyOn(fs, 'readSync').mockImplementation(((fd: number, ...rest: unknown[]) => {
    const count = (readSync as (...args: unknown[]) => number)(fd, ...rest);
    add(pathOf.get(fd), count);
    return count;
  }) as typeof fs.readSync);
  const read = fs.read;
  vi.spyOn(fs, 'read').mockImplementation(((fd: number, ...rest: unknown[]) => {
    const callback = rest.pop() as (error: unknown, count: number, buffer: unknown) => void;
    (read as (...args: unknown[]) => void)(fd, ...rest, (error: unknown, count: number, buffer: unknown) => {
      if (!error) add(pathOf.get(fd), count);
      callback(error, count, buffer);
    });
  }) as typeof fs.read);
  const readFileSync = fs.readFileSync;
  vi.spyOn(fs, 'readFileSync').mockImplementation(((file: fs.PathOrFileDescriptor, ...rest: unknown[]) => {
    const out = (readFileSync as (...args: unknown[]) => Buffer | string)(file, ...rest);
    add(typeof file === 'number' ? pathOf.get(file) : path.resolve(String(file)), out.length);
    return out;
  }) as typeof fs.readFileSync);
  // Derived files are read through promise handles: each handle opened is counted as it reads.
  const open = fsp.open;
  vi.spyOn(fsp, 'open').mockImplementation((async (file: fs.PathLike, ...rest: unknown[]) => {
    const handle = await (open as (...args: unknown[]) => Promise<fsp.FileHandle>)(file, ...rest);
    const handleRead = handle.read.bind(handle) as (...args: unknown[]) => Promise<{ bytesRead: number }>;
    handle.read = (async (...args: unknown[]) => {
      const result = await handleRead(...args);
      add(path.resolve(String(file)), result.bytesRead);
      return result;
    }) as typeof handle.read;
    return handle;
  }) as typeof fsp.open);
  await action();
  vi.restoreAllMocks();
  return bytes;
}
