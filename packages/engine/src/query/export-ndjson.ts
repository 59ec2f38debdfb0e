/**
 * NDJSON export files: one JSON object per record and line, with the export's columns as
 * fields in a fixed order, absent values as `null` (so every line has every field, and readers
 * such as DuckDB infer one schema). JSON has no bytes, so binary columns are base64 text under a
 * `Base64` suffix: `fingerprintBase64`, and `payloadBase64` — or, in a file where every payload
 * is UTF-8 text, `payload` as that text (the text payload column of the other formats).
 *
 * Lines are written as bytes straight from the batch's columns, a batch per kernel call
 * (`Kernels.ndjsonLines`), exactly the bytes `JSON.stringify` would give: no string or object is
 * made per record, and the buffers written are the sink's own, filled again.
 */
import { StreamStackError } from '../errors.js';
import type { Kernels, NdjsonColumns } from '../kernels/kernels.js';
import { exportNdjsonWriteBytes } from '../limits.js';
import { utf8Concat } from '../storage/codec.js';
import { recordFlags } from '../storage/records.js';
import { payloadElsewhere } from '../storage/run-columns.js';
import type { ColumnBatch } from './column-batch.js';
import type { ExportSink } from './export-sink.js';

const encoder = new TextEncoder();
const noBytes = new Uint8Array(0);

/** The batch's columns as the kernels write lines from them. */
function columnsOf(batch: ColumnBatch, withText: boolean): NdjsonColumns {
  // What is the same for the whole batch is encoded once.
  const types = utf8Concat(batch.types.map((type) => JSON.stringify(type)));
  return {
    head: encoder.encode(`{"feed":${JSON.stringify(batch.feed)},"commit":${batch.commit},"stream":${JSON.stringify(batch.stream)},"seq":`),
    types: types.bytes,
    typeEnds: types.ends,
    bytes: batch.bytes,
    external: batch.externalBytes ?? noBytes,
    seqs: batch.seqs,
    positions: batch.positions,
    timestamps: batch.timestamps,
    versions: batch.versions,
    flags: batch.flags,
    typeIds: batch.typeIds,
    keyStarts: batch.keyStarts,
    keyEnds: batch.keyEnds,
    tagRows: batch.tagRows,
    tagStarts: batch.tagStarts,
    tagEnds: batch.tagEnds,
    fingerprintStarts: batch.fingerprintStarts,
    fingerprintEnds: batch.fingerprintEnds,
    payloadStarts: batch.payloadStarts,
    payloadEnds: batch.payloadEnds,
    keyFlag: recordFlags.hasKey,
    versionFlag: recordFlags.hasVersion,
    tombstoneFlag: recordFlags.isTombstone,
    elsewhereFlag: payloadElsewhere,
    withText,
  };
}

/**
 * Writes the batches (in order) as NDJSON lines to `sink`, a batch per write, into buffers the
 * sink has written already where it has one large enough (a fresh one costs a page fault every
 * 4 KiB). `withText`: every payload is UTF-8 text (the caller checked), written as a string.
 */
export async function writeNdjson(kernels: Kernels, batches: readonly ColumnBatch[], withText: boolean, sink: ExportSink, signal: AbortSignal | undefined): Promise<void> {
  for (const batch of batches) {
    signal?.throwIfAborted();
    const columns = columnsOf(batch, withText);
    let out = sink.reusable() ?? new Uint8Array(exportNdjsonWriteBytes);
    let written: number;
    try {
      while ((written = kernels.ndjsonLines(columns, out)) < 0) out = new Uint8Array(2 * out.length);
    } catch (error) {
      if (!(error instanceof StreamStackError) || error.code !== 'CORRUPT') throw error;
      throw new StreamStackError('CORRUPT', `${error.message} (commit ${batch.commit})`, { cause: error, details: { commit: batch.commit } });
    }
    await sink.write(out.subarray(0, written), out);
  }
}
