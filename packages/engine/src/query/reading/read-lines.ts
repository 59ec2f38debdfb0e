/**
 * A read as NDJSON bytes: the record lines `read` prints (`recordLine`, docs/cli.md), written by
 * the kernels straight from each batch's columns (`Kernels.ndjsonLines` with `readLines`), many
 * small batches to a chunk. This is how the CLI's `read` and the server's `GET …/records` stream
 * a feed: making a record object and a line object per record, then `JSON.stringify`, cost the
 * server some 30 µs of CPU per record and made reading over HTTP a twentieth of reading embedded.
 */

import { recordLine, type StoredRecord } from '@streamstack/protocol';
import { assert } from '../../errors.js';
import type { Kernels, NdjsonColumns } from '../../kernels/kernels.js';
import {
  readLinesChunkBytes,
  readLinesFirstChunkBytes,
  readLinesKernelRowsMin,
  runsReadBytesMax,
} from '../../limits.js';
import type { RunBufferPool } from '../../storage/run-buffers.js';
import { ndjsonColumnsOf } from '../export/export-ndjson.js';
import type { ColumnBatch } from './column-batch.js';
import { checkCursor, type ReadOptions, readEnd } from './read.js';
import type { Snapshot } from './snapshot.js';

const encoder = new TextEncoder();

/**
 * The lines of `batches`, in order, in chunks of whole lines of up to about
 * `readLinesChunkBytes` (a batch whose lines are longer comes as one chunk of its own). A chunk
 * is the caller's to keep: each is a fresh buffer. With `runBuffers` (the pool the batches were
 * read through), the run buffers are given back as soon as a batch's lines are written, for
 * nothing holds them then.
 *
 * A batch of fewer than `readLinesKernelRowsMin` rows (a tag query fetches one per commit it
 * hits) is written through `recordLine` and `JSON.stringify`, the very bytes the kernels write:
 * handing a batch's columns to the native kernel costs some 20 µs whatever it holds.
 */
export async function* readLineChunks(
  kernels: Kernels,
  batches: AsyncIterable<ColumnBatch>,
  runBuffers?: RunBufferPool,
): AsyncGenerator<Uint8Array> {
  const chunks = new LineChunks();
  for await (const batch of batches) {
    if (batch.length === 0) continue;
    const full =
      batch.length < readLinesKernelRowsMin
        ? chunks.addText(linesOfRecords(batch.length, (row) => batch.record(row)))
        : chunks.addBatch(kernels, batch);
    if (runBuffers) runBuffers.recycle(runBuffers.retire());
    if (full) yield full;
  }
  const last = chunks.take();
  if (last) yield last;
}

/**
 * The lines of batches of records, in chunks as `readLineChunks` makes them: for a filtered RAW
 * read, which fetches its records one by one from where the index found them and makes them as
 * objects directly (reading them as columns cost a query three times as long).
 */
export async function* recordLineChunks(batches: AsyncIterable<readonly StoredRecord[]>): AsyncGenerator<Uint8Array> {
  const chunks = new LineChunks();
  for await (const records of batches) {
    if (records.length === 0) continue;
    const full = chunks.addText(linesOfRecords(records.length, (row) => records[row]!));
    if (full) yield full;
  }
  const last = chunks.take();
  if (last) yield last;
}

/** The read lines of `count` records, made one at a time. */
function linesOfRecords(count: number, recordAt: (row: number) => StoredRecord): string {
  let text = '';
  for (let row = 0; row < count; row++) text += `${JSON.stringify(recordLine(recordAt(row)))}\n`;
  return text;
}

/**
 * The chunk being filled. Chunks start small and double up to `readLinesChunkBytes`: a read of
 * one small commit (a long-poll's) allocates what its lines take, a long read soon fills whole
 * chunks. Each `add` returns the chunk it completed, if any, for the caller to hand out.
 */
class LineChunks {
  private chunk = new Uint8Array(0);
  private used = 0;
  private nextChunkBytes = readLinesFirstChunkBytes;

  /** Adds lines made in JavaScript. */
  addText(text: string): Uint8Array | undefined {
    const bytes = encoder.encode(text);
    const done = this.makeRoom(bytes.length);
    this.chunk.set(bytes, this.used);
    this.used += bytes.length;
    return done ?? this.takeWhenFull();
  }

  /** Adds a batch's lines, written by the kernels straight into the chunk. */
  addBatch(kernels: Kernels, batch: ColumnBatch): Uint8Array | undefined {
    const columns = ndjsonColumnsOf(batch, true);
    // Room is made for the batch's lines before they are written, for a call that finds them
    // too long has done the whole batch's work for nothing.
    const needed = lineBytesEstimate(batch, longestHead(columns));
    let done = this.makeRoom(needed);
    let written = kernels.ndjsonLines(columns, this.chunk.subarray(this.used));
    if (written < 0 && this.used > 0) {
      assert(done === undefined, 'a chunk is handed out once');
      done = this.take();
      this.fresh(needed);
      written = kernels.ndjsonLines(columns, this.chunk);
    }
    // Text full of characters JSON escapes can outgrow the estimate.
    while (written < 0) {
      this.chunk = new Uint8Array(2 * this.chunk.length);
      written = kernels.ndjsonLines(columns, this.chunk);
    }
    this.used += written;
    return done ?? this.takeWhenFull();
  }

  /** The lines so far, if any, as a chunk of their own; the next ones go to a fresh chunk. */
  take(): Uint8Array | undefined {
    const taken = this.used > 0 ? this.chunk.subarray(0, this.used) : undefined;
    this.chunk = new Uint8Array(0);
    this.used = 0;
    return taken;
  }

  /** Makes room for `bytes` more: the lines so far go out whole when they do not fit with them. */
  private makeRoom(bytes: number): Uint8Array | undefined {
    if (this.used + bytes <= this.chunk.length) return undefined;
    const done = this.take();
    this.fresh(bytes);
    return done;
  }

  private fresh(bytes: number): void {
    this.chunk = new Uint8Array(Math.max(this.nextChunkBytes, bytes));
    this.nextChunkBytes = Math.min(readLinesChunkBytes, 2 * this.nextChunkBytes);
    this.used = 0;
  }

  private takeWhenFull(): Uint8Array | undefined {
    return this.used >= readLinesChunkBytes ? this.take() : undefined;
  }
}

/** Bytes of the longest of the batch's heads (one per commit, when it spans several). */
function longestHead(columns: NdjsonColumns): number {
  let longest = columns.headEnds.length === 0 ? columns.head.length : 0;
  for (let index = 0; index < columns.headEnds.length; index++)
    longest = Math.max(longest, columns.headEnds[index] - (index === 0 ? 0 : columns.headEnds[index - 1]));
  return longest;
}

/** Bytes of a read line besides its head and its variable fields: names, punctuation, integers. */
const lineFixedBytes = 160;

/**
 * About the most bytes the batch's lines take: each line's head and fixed part, and its
 * variable fields at base64's 4/3 (text without escapes takes less). Text with many escapes can
 * take more; the caller grows its buffer then.
 */
function lineBytesEstimate(batch: ColumnBatch, headBytes: number): number {
  let variable = 0;
  for (let row = 0; row < batch.length; row++) {
    variable +=
      batch.payloadEnds[row] -
      batch.payloadStarts[row] +
      batch.fingerprintEnds[row] -
      batch.fingerprintStarts[row] +
      batch.keyEnds[row] -
      batch.keyStarts[row];
  }
  for (let tag = 0; tag < batch.tagStarts.length; tag++) variable += batch.tagEnds[tag] - batch.tagStarts[tag] + 3;
  return batch.length * (headBytes + lineFixedBytes) + Math.ceil((variable * 4) / 3) + 64;
}

/**
 * Whether a read's runs are worth reading through a `RunBufferPool`: whether the commits it
 * covers hold at least `runsReadBytesMax` bytes, the size of the pool's first buffer. A read of
 * a few small commits (a long-poll's next one) reads into buffers of their own size instead,
 * for allocating a pool's buffer made such a read ten times as costly. Bad cursors say no: the
 * read itself refuses them.
 */
export function readsThroughPool(snapshot: Snapshot, options: ReadOptions): boolean {
  let after: number;
  let end: number;
  try {
    after = checkCursor(snapshot, options.after);
    end = readEnd(snapshot, { after, ...(options.upTo === undefined ? {} : { upTo: options.upTo }) });
  } catch {
    return false;
  }
  let bytes = 0;
  for (let commit = after + 1; commit <= end && bytes < runsReadBytesMax; commit++)
    bytes += snapshot.commits.at(commit).runBytes;
  return bytes >= runsReadBytesMax;
}
