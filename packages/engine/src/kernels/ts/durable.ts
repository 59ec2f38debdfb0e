/**
 * Durable batch write, the TypeScript twin of the native kernel: positional writes of every
 * buffer, then one fdatasync, both on libuv's thread pool so the event loop never blocks on the
 * disk. The promise resolves only after the fdatasync returned success. And the twin of the
 * native direct write: the same bytes at the same place, written through the page cache, since
 * JavaScript cannot give `O_DIRECT` the aligned memory it asks for.
 */
import fs from 'node:fs';
import { StreamStackError } from '../../errors.js';
import { directWriteAlignmentBytes } from '../../limits.js';

function ioError(operation: string, fd: number, cause: NodeJS.ErrnoException): StreamStackError {
  return new StreamStackError(
    'IO',
    `${operation} failed on file descriptor ${fd}: ${cause.code ?? ''} ${cause.message}`.trim(),
    { cause, details: { errno: cause.code } },
  );
}

function writeAll(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void> {
  return new Promise((resolve, reject) => {
    let pending = buffers.filter((buffer) => buffer.length > 0);
    const step = (at: number): void => {
      if (pending.length === 0) {
        resolve();
        return;
      }
      const done = (error: NodeJS.ErrnoException | null, written: number): void => {
        if (error) {
          reject(ioError('write', fd, error));
          return;
        }
        // A short write leaves the rest of the batch to write from where it stopped.
        let skipped = written;
        const rest: Uint8Array[] = [];
        for (const buffer of pending) {
          if (skipped >= buffer.length) skipped -= buffer.length;
          else {
            rest.push(skipped === 0 ? buffer : buffer.subarray(skipped));
            skipped = 0;
          }
        }
        pending = rest;
        step(at + written);
      };
      try {
        fs.writev(fd, pending, at, done);
      } catch (error) {
        // Node checks some arguments (a negative descriptor, say) before any system call and
        // throws; that is as much a failed write as an errno is.
        reject(ioError('write', fd, error as NodeJS.ErrnoException));
      }
    };
    step(position);
  });
}

export async function writeDurable(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void> {
  if (!Number.isSafeInteger(position) || position < 0) {
    throw new StreamStackError('INVALID_ARGUMENT', `position ${position} is not a byte offset`);
  }
  await writeAll(fd, position, buffers);
  await new Promise<void>((resolve, reject) => {
    try {
      fs.fdatasync(fd, (error) => (error ? reject(ioError('fdatasync', fd, error)) : resolve()));
    } catch (error) {
      reject(ioError('fdatasync', fd, error as NodeJS.ErrnoException));
    }
  });
}

/** `buffers` one after another at `position`, the last block padded with zeros to the direct write alignment; no sync. */
export async function writeDirect(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void> {
  if (!Number.isSafeInteger(position) || position < 0) {
    throw new StreamStackError('INVALID_ARGUMENT', `position ${position} is not a byte offset`);
  }
  if (position % directWriteAlignmentBytes !== 0) {
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `a direct write's position ${position} is not a multiple of ${directWriteAlignmentBytes} bytes`,
    );
  }
  const length = buffers.reduce((sum, buffer) => sum + buffer.length, 0);
  const padding = (directWriteAlignmentBytes - (length % directWriteAlignmentBytes)) % directWriteAlignmentBytes;
  // The caller may reuse the buffers once this returns, before the write is done: they are copied.
  const padded = new Uint8Array(length + padding);
  let at = 0;
  for (const buffer of buffers) {
    padded.set(buffer, at);
    at += buffer.length;
  }
  await writeAll(fd, position, [padded]);
}
