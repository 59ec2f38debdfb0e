/**
 * What used to be bare `Error`s are typed: a frame builder used out of order is a bug in
 * StreamStack (`INTERNAL`), and a file shorter than what it must hold, or a spare of the wrong
 * size, is damage on disk (`CORRUPT`, its details naming the file).
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { isStreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { FrameBuilder } from '../../packages/engine/src/storage/framing.js';
import { readFileRangeSync, SegmentFile, type SegmentHeader } from '../../packages/engine/src/storage/segment.js';
import { checkSummaryAgainstSegment, type SummaryHead } from '../../packages/engine/src/storage/segment-summary.js';
import { temporaryDirectory } from '../support/store.js';

/** The code and details of what `run` throws or rejects with. */
async function failure(run: () => unknown): Promise<{ code: string; message: string; details?: unknown }> {
  try {
    await run();
  } catch (error) {
    if (!isStreamStackError(error)) throw error;
    return { code: error.code, message: error.message, details: error.details };
  }
  throw new Error('it did not fail');
}

describe('typed errors', () => {
  it('a frame builder used out of order reports INTERNAL', async () => {
    const builder = new FrameBuilder(1024);
    expect((await failure(() => builder.end())).code).toBe('INTERNAL');
    builder.begin(0x10, false).u8(1);
    expect((await failure(() => builder.begin(0x10, false))).code).toBe('INTERNAL');
    expect((await failure(() => builder.finish(tsKernels))).code).toBe('INTERNAL');
    expect((await failure(() => builder.finishInPlace(tsKernels))).code).toBe('INTERNAL');
    // Used in order, the same builder still finishes its frame.
    builder.end();
    expect(builder.finish(tsKernels).length).toBeGreaterThan(0);
  });

  it('a file shorter than a range read from it is CORRUPT, its details naming the file', async () => {
    const file = path.join(temporaryDirectory(), 'short');
    fs.writeFileSync(file, new Uint8Array(10));
    expect(readFileRangeSync(file, 2, 8)).toEqual(new Uint8Array(8));
    const short = await failure(() => readFileRangeSync(file, 4, 8));
    expect(short.code).toBe('CORRUPT');
    expect(short.message).toBe('the file is shorter than 12 bytes');
    expect(short.details).toEqual({ file, offset: 4 });
  });

  it("a segment shorter than its summary says is the summary's damage, as before", async () => {
    const directory = temporaryDirectory();
    const segment = path.join(directory, 'segment');
    fs.writeFileSync(segment, new Uint8Array(100));
    const summary = path.join(directory, 'summary');
    const head = {
      file: summary,
      commitCount: 1,
      lastFrameOffset: 96,
      lastFrameHeader: new Uint8Array(8),
    } as SummaryHead;
    const short = await failure(() => checkSummaryAgainstSegment(head, segment));
    expect(short.code).toBe('CORRUPT');
    expect(short.message).toBe(`summary ${summary} cannot be read: the file is shorter than 104 bytes`);
    expect(short.details).toEqual({ file: summary, offset: 0 });
  });

  it('a spare of the wrong size is CORRUPT, and is not renamed into place', async () => {
    const directory = temporaryDirectory();
    const spare = path.join(directory, 'spare');
    const file = path.join(directory, 'segment');
    fs.writeFileSync(spare, new Uint8Array(4096));
    const header = { kind: 2, base: 1, baseCommit: 1, capacity: 8192 } as SegmentHeader;
    const wrong = await failure(() => SegmentFile.fromSpare(tsKernels, spare, file, header));
    expect(wrong.code).toBe('CORRUPT');
    expect(wrong.details).toEqual({ file: spare, offset: 0 });
    expect(fs.existsSync(file)).toBe(false);
  });

  it('a segment append that would overflow it reports INTERNAL', async () => {
    const directory = temporaryDirectory();
    const file = path.join(directory, 'segment');
    const header = { kind: 2, base: 1, baseCommit: 1, capacity: 8192 } as SegmentHeader;
    const segment = await SegmentFile.create(tsKernels, file, header);
    try {
      const overflow = await failure(() => segment.append(tsKernels, new Uint8Array(segment.free + 1)));
      expect(overflow.code).toBe('INTERNAL');
    } finally {
      segment.close();
    }
  });
});
