import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { StreamStackError } from '../../packages/engine/src/errors.js';
import { branchTally, expectSame, native, ts } from './both.js';

const directory = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-durable-'));
afterAll(() => fs.rmSync(directory, { recursive: true, force: true }));

/** The most buffers one writev takes on Linux; a longer batch needs more than one system call. */
const iovMax = 1024;

/**
 * A batch of buffers: none (a sync alone), a few, a few dozen, or more than IOV_MAX small ones;
 * each buffer empty, small, or up to 128 KiB (only in short batches, to keep files small).
 */
const bufferArb = (maxBytes: number) =>
  fc.oneof(
    { weight: 1, arbitrary: fc.constant(new Uint8Array(0)) },
    { weight: 3, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 100, size: 'max' }) },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 1, max: maxBytes })
        .map((length) => new Uint8Array(length).map((_, index) => (index * 31 + length) % 251)),
    },
  );
const batchArb = fc.oneof(
  { weight: 1, arbitrary: fc.constant([] as Uint8Array[]) },
  { weight: 4, arbitrary: fc.array(bufferArb(128 * 1024), { minLength: 1, maxLength: 6, size: 'max' }) },
  { weight: 2, arbitrary: fc.array(bufferArb(2048), { minLength: 7, maxLength: 60, size: 'max' }) },
  { weight: 1, arbitrary: fc.array(bufferArb(16), { minLength: iovMax + 1, maxLength: iovMax + 200, size: 'max' }) },
);

/** Where a batch lands: at the start, at the current end, past it (a gap of 1–70,001 bytes) or inside it. */
interface Place {
  readonly where: 'start' | 'end' | 'gap' | 'inside';
  readonly by: number;
}

const placeArb: fc.Arbitrary<Place> = fc.record({
  where: fc.constantFrom('start' as const, 'end' as const, 'gap' as const, 'inside' as const),
  by: fc.nat(70_000),
});

function placeAt(place: Place, size: number): number {
  switch (place.where) {
    case 'start':
      return 0;
    case 'end':
      return size;
    case 'gap':
      return size + 1 + place.by;
    case 'inside':
      return size === 0 ? 0 : place.by % size;
  }
}

/** The file a batch writes into `model`, growing it (with zeros in any gap) as a file grows. */
function writeModel(model: Uint8Array, position: number, buffers: readonly Uint8Array[]): Uint8Array {
  const bytes = buffers.reduce((total, buffer) => total + buffer.length, 0);
  // A batch of no bytes writes nothing (and so does not extend the file): it only syncs.
  if (bytes === 0) return model;
  const grown = new Uint8Array(Math.max(model.length, position + bytes));
  grown.set(model);
  let at = position;
  for (const buffer of buffers) {
    grown.set(buffer, at);
    at += buffer.length;
  }
  return grown;
}

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

/** Each file (one per kernel set) holds exactly `model`; they are removed. */
function expectFilesHold(files: readonly { file: string }[], model: Uint8Array): void {
  for (const { file } of files) {
    const bytes = fs.readFileSync(file);
    fs.rmSync(file);
    expectSame(new Uint8Array(bytes), model);
  }
}

describe('durable batch write: native and ts agree', () => {
  it('write generated batches to the same bytes at the same offsets as a model of the file', async () => {
    const tally = branchTally('durable batches', [
      'a batch of no buffers (a sync alone)',
      'an empty buffer among others',
      `more than ${iovMax} buffers (several writev calls)`,
      'a buffer of 64 KiB or more',
      'a gap past the end (zeros between)',
      'an overwrite inside the file',
      'appended at the end',
      'three or more batches',
    ]);
    // Files written by 1–4 batches (see batchArb and placeArb), each by both kernels.
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(batchArb, placeArb), { minLength: 1, maxLength: 4, size: 'max' }),
        async (batches) => {
          run++;
          let model: Uint8Array = new Uint8Array(0);
          const files = [native, ts].map((kernels) => ({
            kernels,
            file: path.join(directory, `batch-${run}-${kernels.name}.bin`),
          }));
          const descriptors = files.map(({ file }) => fs.openSync(file, 'w+'));
          try {
            tally.hit('three or more batches', batches.length >= 3);
            for (const [buffers, place] of batches) {
              const position = placeAt(place, model.length);
              const bytes = buffers.reduce((total, buffer) => total + buffer.length, 0);
              tally.hit('a batch of no buffers (a sync alone)', buffers.length === 0);
              tally.hit(
                'an empty buffer among others',
                buffers.length > 1 && buffers.some((buffer) => buffer.length === 0),
              );
              tally.hit(`more than ${iovMax} buffers (several writev calls)`, buffers.length > iovMax);
              tally.hit(
                'a buffer of 64 KiB or more',
                buffers.some((buffer) => buffer.length >= 64 * 1024),
              );
              tally.hit('a gap past the end (zeros between)', bytes > 0 && position > model.length);
              tally.hit('an overwrite inside the file', bytes > 0 && position < model.length);
              tally.hit('appended at the end', bytes > 0 && model.length > 0 && position === model.length);
              await Promise.all(
                files.map(({ kernels }, index) => kernels.writeDurable(descriptors[index], position, buffers)),
              );
              model = writeModel(model, position, buffers);
            }
          } finally {
            for (const fd of descriptors) fs.closeSync(fd);
          }
          expectFilesHold(files, model);
        },
      ),
      { numRuns: 100 },
    );
    tally.expectAllReached();
  });

  it('refuse generated bad positions and descriptors with the same code', async () => {
    const tally = branchTally('bad durable writes', [
      'negative position',
      'fractional position',
      'position not finite',
      'position past 2^53',
      'descriptor never opened',
      'read-only descriptor',
    ]);
    const readOnlyFile = path.join(directory, 'bad-writes-read-only.bin');
    fs.writeFileSync(readOnlyFile, 'x');
    const readOnly = fs.openSync(readOnlyFile, 'r');
    const scratch = fs.openSync(path.join(directory, 'bad-writes-scratch.bin'), 'w+');
    // Positions that are no byte offset (refused before any I/O: INVALID_ARGUMENT), and sound
    // positions on descriptors that cannot be written (refused by the system: IO).
    const badArb = fc.oneof(
      fc.record({
        kind: fc.constant('negative position' as const),
        position: fc.integer({ min: -(2 ** 53) + 1, max: -1 }),
      }),
      fc.record({
        kind: fc.constant('fractional position' as const),
        position: fc.double({ min: 0, max: 2 ** 40, noNaN: true }).filter((position) => !Number.isInteger(position)),
      }),
      fc.record({
        kind: fc.constant('position not finite' as const),
        position: fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
      }),
      fc.record({
        kind: fc.constant('position past 2^53' as const),
        position: fc.double({ min: 2 ** 53, max: 2 ** 60, noNaN: true }),
      }),
      fc.record({
        kind: fc.constant('descriptor never opened' as const),
        position: fc.nat(1 << 20),
        fd: fc.oneof(fc.constant(-1), fc.integer({ min: 1 << 20, max: 2 ** 31 - 1 })),
      }),
      fc.record({ kind: fc.constant('read-only descriptor' as const), position: fc.nat(1 << 20) }),
    );
    try {
      await fc.assert(
        fc.asyncProperty(
          badArb,
          fc.array(fc.uint8Array({ maxLength: 64, size: 'max' }), { minLength: 1, maxLength: 3, size: 'max' }),
          async (bad, buffers) => {
            tally.hit(bad.kind);
            const fd = bad.kind === 'read-only descriptor' ? readOnly : 'fd' in bad ? bad.fd : scratch;
            const expected =
              bad.kind === 'descriptor never opened' || bad.kind === 'read-only descriptor' ? 'IO' : 'INVALID_ARGUMENT';
            // A read-only descriptor refuses only a write of some bytes; an empty batch just syncs.
            const data = bad.kind === 'read-only descriptor' ? [...buffers, Uint8Array.of(1)] : buffers;
            for (const kernels of [native, ts]) {
              const attempt = kernels.writeDurable(fd, bad.position, data);
              await expect(attempt, `${kernels.name}: ${bad.kind} ${bad.position}`).rejects.toBeInstanceOf(
                StreamStackError,
              );
              await expect(attempt, `${kernels.name}: ${bad.kind} ${bad.position}`).rejects.toMatchObject({
                code: expected,
              });
            }
          },
        ),
        { numRuns: 150 },
      );
    } finally {
      fs.closeSync(readOnly);
      fs.closeSync(scratch);
    }
    expect(fs.readFileSync(readOnlyFile, 'utf8')).toBe('x');
    tally.expectAllReached();
  });

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

/** The direct write alignment (`directWriteAlignmentBytes`): positions are multiples of it. */
const block = 4096;

/** A file opened for direct writes: with `O_DIRECT` for the native kernels, buffered for the twin. */
function openForDirect(file: string, kernels: typeof native): number {
  const direct = kernels.directWrites ? fs.constants.O_DIRECT : 0;
  return fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_TRUNC | direct);
}

describe('direct write: native and ts agree', () => {
  it('write generated pieces, each padded to a block and given whole or in several buffers, to the same file', async () => {
    expect(native.directWrites).toBe(true);
    expect(ts.directWrites).toBe(false);
    const tally = branchTally('direct writes', [
      'a piece of whole blocks',
      'a piece ending mid-block (padded)',
      'an empty piece',
      'a piece of a megabyte or more',
      'an overwrite of an earlier block',
      'three or more pieces',
      'a piece in several buffers',
    ]);
    // Files of 1–6 pieces (0 to 1.5 MiB each), each at a block boundary at or before the end.
    const pieceArb = fc.oneof(
      fc.constant(0),
      fc.integer({ min: 1, max: 10 }).map((blocks) => blocks * block),
      fc.integer({ min: 1, max: 3 * block }),
      fc.integer({ min: 1024 * 1024, max: 1536 * 1024 }),
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(pieceArb, fc.boolean()), { minLength: 1, maxLength: 6, size: 'max' }),
        async (pieces) => {
          run++;
          tally.hit('three or more pieces', pieces.length >= 3);
          let model = new Uint8Array(0);
          const files = [native, ts].map((kernels) => ({
            kernels,
            file: path.join(directory, `direct-${run}-${kernels.name}.bin`),
          }));
          const descriptors = files.map(({ file, kernels }) => openForDirect(file, kernels));
          try {
            for (const [index, [length, back]] of pieces.entries()) {
              // At the end of the file (rounded up to a block), or one block before it.
              const end = Math.ceil(model.length / block) * block;
              const position = back && end >= block ? end - block : end;
              const bytes = new Uint8Array(length).map((_, at) => (at * 7 + index + run) % 251);
              tally.hit('a piece of whole blocks', length > 0 && length % block === 0);
              tally.hit('a piece ending mid-block (padded)', length % block !== 0);
              tally.hit('an empty piece', length === 0);
              tally.hit('a piece of a megabyte or more', length >= 1024 * 1024);
              tally.hit('an overwrite of an earlier block', length > 0 && position < model.length);
              // Handed over whole, or split into two or three buffers written one after another.
              const cuts = [Math.floor(length / 3), Math.floor(length / 2)].slice(0, (index + run) % 3);
              const buffers = [0, ...cuts, length]
                .slice(1)
                .map((end, at, ends) => bytes.subarray(at === 0 ? 0 : ends[at - 1], end));
              tally.hit('a piece in several buffers', buffers.length > 1 && length > 0);
              const writes = files.map(({ kernels }, which) =>
                kernels.writeDirect(descriptors[which], position, buffers),
              );
              // The bytes were copied when the call returned: changing them now changes nothing.
              bytes.fill(0xee);
              await Promise.all(writes);
              const padded = Math.ceil(length / block) * block;
              const grown = new Uint8Array(Math.max(model.length, position + padded));
              grown.set(model);
              grown.set(
                new Uint8Array(padded).map((_, at) => (at < length ? (at * 7 + index + run) % 251 : 0)),
                position,
              );
              model = grown;
            }
          } finally {
            for (const fd of descriptors) fs.closeSync(fd);
          }
          expectFilesHold(files, model);
        },
      ),
      { numRuns: 60 },
    );
    tally.expectAllReached();
  });

  it('refuse a position off the block, or a descriptor that cannot be written, with the same code', async () => {
    const file = path.join(directory, 'direct-bad.bin');
    for (const kernels of [native, ts]) {
      const fd = openForDirect(file, kernels);
      try {
        for (const position of [1, block - 1, block + 512, -block, 0.5, Number.NaN]) {
          await expect(
            kernels.writeDirect(fd, position, [Uint8Array.of(1)]),
            `${kernels.name} at ${position}`,
          ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
        }
      } finally {
        fs.closeSync(fd);
      }
      // Nothing was written by the refused calls.
      expect(fs.statSync(file).size).toBe(0);
      const full = fs.openSync('/dev/full', 'w');
      try {
        const attempt = kernels.writeDirect(full, 0, [Uint8Array.of(1)]);
        await expect(attempt).rejects.toBeInstanceOf(StreamStackError);
        await expect(attempt).rejects.toMatchObject({ code: 'IO', details: { errno: 'ENOSPC' } });
      } finally {
        fs.closeSync(full);
      }
      await expect(kernels.writeDirect(-1, 0, [Uint8Array.of(1)])).rejects.toMatchObject({ code: 'IO' });
    }
  });
});
