/**
 * The export file sink: what it writes is exactly the bytes given, in order, with their SHA-256,
 * whether it writes with `O_DIRECT` (the native kernels, gathering pieces and padding the last
 * block, then truncating) or through the page cache (the TypeScript kernels, or a file system
 * that refuses `O_DIRECT`); and a full disk fails the file with a typed `IO` error.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { loadKernels } from '../../packages/engine/src/kernels/index.js';
import { directWriteAlignmentBytes, exportDirectWriteBytes } from '../../packages/engine/src/limits.js';
import { FileSink } from '../../packages/engine/src/query/export/export-sink.js';
import { branchTally } from '../support/branches.js';

const native = loadKernels('native');
const ts = loadKernels('ts');
const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-sink-'));
const mounted: string[] = [];
afterAll(() => {
  for (const mount of mounted.splice(0)) spawnSync('umount', ['-l', mount]);
  fs.rmSync(directory, { recursive: true, force: true });
});
afterEach(() => vi.restoreAllMocks());

/**
 * Writes `pieces` through a sink made with `kernels` and finishes it: some as reusable wholes,
 * and every third handed over by `writeCopy` from a buffer overwritten as soon as it returns.
 */
async function writeThrough(file: string, kernels: typeof native | undefined, pieces: readonly Uint8Array[]) {
  const sink = await FileSink.create(file, kernels);
  for (const [index, piece] of pieces.entries()) {
    if (index % 3 === 2) {
      const reused = piece.slice();
      sink.writeCopy(reused);
      reused.fill(0xee);
      await sink.room();
    } else {
      await sink.write(piece, index % 2 === 0 ? piece : undefined);
    }
  }
  return { direct: sink.writesDirectly, written: await sink.finish() };
}

function concat(pieces: readonly Uint8Array[]): Buffer {
  return Buffer.concat(pieces.map((piece) => Buffer.from(piece.buffer, piece.byteOffset, piece.length)));
}

describe('export file sink', () => {
  it('writes generated pieces exactly, directly with the native kernels and through the page cache without', async () => {
    const tally = branchTally('sink pieces', [
      'a piece gathered with others',
      `a piece of ${exportDirectWriteBytes} bytes or more written straight`,
      'a file ending mid-block (padded, then truncated)',
      'a file of whole blocks',
      'an empty piece',
      'a piece handed over by writeCopy',
      'a large piece written in one write with a partial block gathered before it',
    ]);
    // Files of 1–12 pieces: empty, a few bytes, a few blocks (some whole), or 1–2.5 MiB each.
    const pieceArb = fc.oneof(
      fc.constant(0),
      fc.integer({ min: 1, max: 300 }),
      fc.integer({ min: 1, max: 8 }).map((blocks) => blocks * directWriteAlignmentBytes),
      fc.integer({ min: 1, max: 5 * directWriteAlignmentBytes }),
      fc.integer({ min: exportDirectWriteBytes, max: 2.5 * exportDirectWriteBytes }),
    );
    let run = 0;
    await fc.assert(
      // In a third of the files every piece is rounded up to whole blocks, so the file is too.
      fc.asyncProperty(
        fc.array(pieceArb, { minLength: 1, maxLength: 12, size: 'max' }),
        fc.nat(2),
        async (generated, wholeBlocks) => {
          run++;
          const lengths =
            wholeBlocks === 0
              ? generated.map((length) => Math.ceil(length / directWriteAlignmentBytes) * directWriteAlignmentBytes)
              : generated;
          const pieces = lengths.map((length, index) =>
            new Uint8Array(length).map((_, at) => (at * 13 + index * 7 + run) % 256),
          );
          const total = lengths.reduce((sum, length) => sum + length, 0);
          tally.hit(
            'a piece gathered with others',
            lengths.some((length) => length > 0 && length < exportDirectWriteBytes),
          );
          tally.hit(
            `a piece of ${exportDirectWriteBytes} bytes or more written straight`,
            lengths.some((length) => length >= exportDirectWriteBytes),
          );
          tally.hit('a file ending mid-block (padded, then truncated)', total % directWriteAlignmentBytes !== 0);
          tally.hit('a file of whole blocks', total > 0 && total % directWriteAlignmentBytes === 0);
          tally.hit('an empty piece', lengths.includes(0));
          tally.hit('a piece handed over by writeCopy', lengths.length >= 3 && lengths[2] > 0);
          // The bytes gathered when a piece arrives are what came before it past the last whole
          // block, whatever was written meanwhile: every direct write but the last is whole blocks.
          let before = 0;
          for (const length of lengths) {
            tally.hit(
              'a large piece written in one write with a partial block gathered before it',
              length >= exportDirectWriteBytes && before % directWriteAlignmentBytes !== 0,
            );
            before += length;
          }
          const expected = concat(pieces);
          const sha256 = crypto.createHash('sha256').update(expected).digest('hex');
          for (const kernels of [native, ts]) {
            const file = path.join(directory, `sink-${run}-${kernels.name}.bin`);
            const { direct, written } = await writeThrough(file, kernels, pieces);
            expect(direct).toBe(kernels.directWrites);
            expect(written).toEqual({ bytes: total, sha256 });
            const onDisk = fs.readFileSync(file);
            expect(onDisk.length).toBe(total);
            expect(onDisk.equals(expected)).toBe(true);
            fs.rmSync(file);
          }
        },
      ),
      { numRuns: 40 },
    );
    tally.expectAllReached();
  });

  it('writes through the page cache where the file system refuses O_DIRECT, with the same bytes', async () => {
    const open = fsp.open.bind(fsp);
    const opened: (string | number | undefined)[] = [];
    vi.spyOn(fsp, 'open').mockImplementation(async (file, flags, mode) => {
      opened.push(flags as string | number | undefined);
      if (typeof flags === 'number' && (flags & fs.constants.O_DIRECT) !== 0) {
        throw Object.assign(new Error('EINVAL: invalid argument, open'), { code: 'EINVAL' });
      }
      return open(file, flags, mode);
    });
    const pieces = [new Uint8Array(5000).fill(1), new Uint8Array(exportDirectWriteBytes + 3).fill(2)];
    const file = path.join(directory, 'refused-direct.bin');
    const { direct, written } = await writeThrough(file, native, pieces);
    expect(opened).toHaveLength(2);
    expect(direct).toBe(false);
    expect(written.bytes).toBe(5000 + exportDirectWriteBytes + 3);
    expect(fs.readFileSync(file).equals(concat(pieces))).toBe(true);
  });

  it('fails a file on a full disk with IO and the errno, written directly or not', async () => {
    const mount = fs.mkdtempSync(path.join(directory, 'full-'));
    const result = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mount]);
    expect(result.status, `mount tmpfs: ${result.stderr}`).toBe(0);
    mounted.push(mount);
    // Both ways of handing bytes over: `write`, and `writeCopy` then `room` (as Arrow files do).
    for (const kernels of [native, ts]) {
      for (const copying of [false, true]) {
        const name = `full-${kernels.name}-${copying ? 'copy' : 'write'}.bin`;
        const sink = await FileSink.create(path.join(mount, name), kernels);
        let failure: unknown;
        try {
          for (let piece = 0; piece < 8; piece++) {
            const bytes = new Uint8Array(exportDirectWriteBytes / 2).fill(piece);
            if (copying) {
              sink.writeCopy(bytes);
              await sink.room();
            } else {
              await sink.write(bytes);
            }
          }
          await sink.finish();
        } catch (error) {
          failure = error;
        }
        expect(failure, name).toMatchObject({ code: 'IO', details: { errno: 'ENOSPC' } });
        expect((failure as Error).message).toContain(name);
        await sink.abandon();
        fs.rmSync(path.join(mount, name));
      }
    }
    spawnSync('umount', ['-l', mounted.pop()!]);
  });
});
