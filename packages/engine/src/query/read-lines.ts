/**
 * A read as NDJSON bytes: the record lines `read` prints (`recordLine`, docs/cli.md), written by
 * the kernels straight from each batch's columns (`Kernels.ndjsonLines` with `readLines`), many
 * small batches to a chunk. This is how the CLI's `read` and the server's `GET …/records` stream
 * a feed: making a record object and a line object per record, then `JSON.stringify`, cost the
 * server some 30 µs of CPU per record and made reading over HTTP a twentieth of reading embedded.
 */
import type { Kernels } from '../kernels/kernels.js';
import { readLinesChunkBytes, readLinesFirstChunkBytes, runsReadBytesMax } from '../limits.js';
import type { RunBufferPool } from '../storage/run-buffers.js';
import type { ColumnBatch } from './column-batch.js';
import { ndjsonColumnsOf } from './export-ndjson.js';
import { checkCursor, readEnd, type ReadOptions } from './read.js';
import type { Snapshot } from './snapshot.js';

/**
 * The lines of `batches`, in order, in chunks of whole lines of about `readLinesChunkBytes` (a
 * batch whose lines are longer comes as one chunk of its own). A chunk is the caller's to keep:
 * each is a fresh buffer. With `runBuffers` (the pool the batches were read through), the run
 * buffers are given back as soon as a batch's lines are written, for nothing holds them then.
 */
export async function* readLineChunks(kernels: Kernels, batches: AsyncIterable<ColumnBatch>, runBuffers?: RunBufferPool): AsyncGenerator<Uint8Array> {
  // Chunks start small and double up to `readLinesChunkBytes`: a read of one small commit (a
  // long-poll's) allocates what its lines take, a long read soon writes whole chunks.
  let chunk = new Uint8Array(0);
  let nextChunkBytes = readLinesFirstChunkBytes;
  let used = 0;
  const freshChunk = (needed: number) => {
    chunk = new Uint8Array(Math.max(nextChunkBytes, needed));
    nextChunkBytes = Math.min(readLinesChunkBytes, 2 * nextChunkBytes);
    used = 0;
  };
  for await (const batch of batches) {
    if (batch.length === 0) continue;
    const columns = ndjsonColumnsOf(batch, true);
    // Room is made for the batch's lines before they are written, for a call that finds them
    // too long has done the whole batch's work for nothing.
    const needed = lineBytesEstimate(batch, columns.head.length);
    if (used + needed > chunk.length) {
      // The batch's lines go whole into the next chunk: a chunk ends at the end of a line.
      if (used > 0) yield chunk.subarray(0, used);
      freshChunk(needed);
    }
    let written = kernels.ndjsonLines(columns, chunk.subarray(used));
    if (written < 0 && used > 0) {
      yield chunk.subarray(0, used);
      freshChunk(needed);
      written = kernels.ndjsonLines(columns, chunk);
    }
    // Text full of characters JSON escapes can outgrow the estimate.
    while (written < 0) {
      chunk = new Uint8Array(2 * chunk.length);
      written = kernels.ndjsonLines(columns, chunk);
    }
    used += written;
    if (runBuffers) runBuffers.recycle(runBuffers.retire());
    if (used >= readLinesChunkBytes) {
      yield chunk.subarray(0, used);
      chunk = new Uint8Array(0);
      used = 0;
    }
  }
  if (used > 0) yield chunk.subarray(0, used);
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
    variable += batch.payloadEnds[row] - batch.payloadStarts[row] + batch.fingerprintEnds[row] - batch.fingerprintStarts[row] + batch.keyEnds[row] - batch.keyStarts[row];
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
  for (let commit = after + 1; commit <= end && bytes < runsReadBytesMax; commit++) bytes += snapshot.commits.at(commit).runBytes;
  return bytes >= runsReadBytesMax;
}
