/**
 * A read as NDJSON bytes: the record lines `read` prints (`recordLine`, docs/cli.md), written by
 * the kernels straight from each batch's columns (`Kernels.ndjsonLines` with `readLines`), many
 * small batches to a chunk. This is how the CLI's `read` and the server's `GET …/records` stream
 * a feed: making a record object and a line object per record, then `JSON.stringify`, cost the
 * server some 30 µs of CPU per record and made reading over HTTP a twentieth of reading embedded.
 */
import type { Kernels } from '../kernels/kernels.js';
import { readLinesChunkBytes } from '../limits.js';
import type { RunBufferPool } from '../storage/run-buffers.js';
import type { ColumnBatch } from './column-batch.js';
import { ndjsonColumnsOf } from './export-ndjson.js';

/**
 * The lines of `batches`, in order, in chunks of whole lines of about `readLinesChunkBytes` (a
 * batch whose lines are longer comes as one chunk of its own). A chunk is the caller's to keep:
 * each is a fresh buffer. With `runBuffers` (the pool the batches were read through), the run
 * buffers are given back as soon as a batch's lines are written, for nothing holds them then.
 */
export async function* readLineChunks(kernels: Kernels, batches: AsyncIterable<ColumnBatch>, runBuffers?: RunBufferPool): AsyncGenerator<Uint8Array> {
  let chunk = new Uint8Array(readLinesChunkBytes);
  let used = 0;
  for await (const batch of batches) {
    if (batch.length === 0) continue;
    const columns = ndjsonColumnsOf(batch, true);
    // Room is made for the batch's lines before they are written, for a call that finds them
    // too long has done the whole batch's work for nothing.
    const needed = lineBytesEstimate(batch, columns.head.length);
    if (used > 0 && used + needed > chunk.length) {
      // The batch's lines go whole into the next chunk: a chunk ends at the end of a line.
      yield chunk.subarray(0, used);
      chunk = new Uint8Array(Math.max(readLinesChunkBytes, needed));
      used = 0;
    } else if (used === 0 && needed > chunk.length) {
      chunk = new Uint8Array(needed);
    }
    let written = kernels.ndjsonLines(columns, chunk.subarray(used));
    if (written < 0 && used > 0) {
      yield chunk.subarray(0, used);
      chunk = new Uint8Array(Math.max(readLinesChunkBytes, needed));
      used = 0;
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
      chunk = new Uint8Array(readLinesChunkBytes);
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
