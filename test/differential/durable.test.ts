import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/errors.js';
import { native, ts } from './both.js';

const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-durable-'));
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }));

async function writeWith(kernels: typeof native, name: string): Promise<Buffer> {
  const file = path.join(directory, name);
  const fd = fs.openSync(file, 'w+');
  try {
    await kernels.writeDurable(fd, 0, [Buffer.from('head:'), new Uint8Array(0), Buffer.from('tail')]);
    // A second batch lands at its offset, leaving a gap of zeros, as a preallocated segment would.
    const big = new Uint8Array(3 * 1024 * 1024).map((_, index) => index % 251);
    await kernels.writeDurable(fd, 16, [big, Buffer.from('!')]);
    return fs.readFileSync(file);
  } finally {
    fs.closeSync(fd);
  }
}

describe('durable batch write: native and ts agree', () => {
  it('write the same bytes at the same offsets', async () => {
    const fromNative = await writeWith(native, 'native.bin');
    const fromTs = await writeWith(ts, 'ts.bin');
    expect(fromNative.equals(fromTs)).toBe(true);
    expect(fromNative.subarray(0, 9).toString()).toBe('head:tail');
    expect(fromNative.length).toBe(16 + 3 * 1024 * 1024 + 1);
  });

  it('reject with IO when the disk refuses the write, and never resolve', async () => {
    // /dev/full refuses every write with ENOSPC: the promise must reject, not report durability.
    const fd = fs.openSync('/dev/full', 'w');
    try {
      for (const kernels of [native, ts]) {
        const attempt = kernels.writeDurable(fd, 0, [Buffer.from('never durable')]);
        await expect(attempt).rejects.toBeInstanceOf(StreamStackError);
        await expect(attempt).rejects.toMatchObject({ code: 'IO' });
      }
    } finally {
      fs.closeSync(fd);
    }
  });

  it('reject with IO on an invalid descriptor', async () => {
    for (const kernels of [native, ts]) {
      await expect(kernels.writeDurable(-1, 0, [Buffer.from('y')])).rejects.toMatchObject({ code: 'IO' });
    }
  });

  it('reject with IO on a read-only descriptor', async () => {
    const file = path.join(directory, 'read-only.bin');
    fs.writeFileSync(file, 'x');
    const fd = fs.openSync(file, 'r');
    try {
      for (const kernels of [native, ts]) {
        await expect(kernels.writeDurable(fd, 0, [Buffer.from('y')])).rejects.toMatchObject({
          code: 'IO',
        });
      }
    } finally {
      fs.closeSync(fd);
    }
    expect(fs.readFileSync(file, 'utf8')).toBe('x');
  });
});
