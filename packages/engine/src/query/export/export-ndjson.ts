/**
 * NDJSON export files: one JSON object per record and line, with the export's columns as
 * fields in a fixed order, absent values as `null` (so every line has every field, and readers
 * such as DuckDB infer one schema). JSON has no bytes, so the fingerprint is base64 text under
 * `fingerprintBase64`; each payload is written as `read` writes it, as text under `payload` where
 * it is valid UTF-8, else as base64 under `payloadBase64`, the other of the two null.
 *
 * Lines are written as bytes straight from the batch's columns, a batch per kernel call
 * (`Kernels.ndjsonLines`), exactly the bytes `JSON.stringify` would give: no string or object is
 * made per record, and the buffers written are the sink's own, filled again.
 */
import { isUtf8 } from 'node:buffer';
import { StreamStackError } from '../../errors.js';
import type { Kernels, NdjsonColumns } from '../../kernels/kernels.js';
import { exportNdjsonWriteBytes } from '../../limits.js';
import { utf8Concat } from '../../storage/codec.js';
import { recordFlags } from '../../storage/records.js';
import { payloadElsewhere } from '../../storage/run-columns.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import type { ExportSink } from './export-sink.js';

const encoder = new TextEncoder();
const noBytes = new Uint8Array(0);

/**
 * Whether every payload of the batch is UTF-8 text. Payloads lying back to back (a pack's) are
 * checked as one range: joined valid texts are valid, and a valid range splits into valid texts
 * wherever no piece starts inside a character (with a continuation byte, 0b10xxxxxx). The rest
 * are checked one by one.
 */
function allText(batch: ColumnBatch): boolean {
  const { payloadStarts: starts, payloadEnds: ends, flags } = batch;
  let row = 0;
  while (row < batch.length) {
    const source = batch.payloadSource(row);
    const elsewhere = flags[row] & payloadElsewhere;
    let last = row;
    while (
      last + 1 < batch.length &&
      starts[last + 1] === ends[last] &&
      (flags[last + 1] & payloadElsewhere) === elsewhere
    )
      last++;
    if (!isUtf8(source.subarray(starts[row], ends[last]))) return false;
    for (let piece = row + 1; piece <= last; piece++) {
      if (starts[piece] < ends[last] && (source[starts[piece]] & 0xc0) === 0x80) return false;
    }
    row = last + 1;
  }
  return true;
}

/** The batch's columns as the kernels write lines from them: export lines, or read lines. */
/** The head ends and row heads of a batch of one commit: none. */
const noEnds = new Uint32Array(0);

export function ndjsonColumnsOf(batch: ColumnBatch, readLines: boolean): NdjsonColumns {
  // What is the same for the whole batch is encoded once.
  const types = utf8Concat(batch.types.map((type) => JSON.stringify(type)));
  const headOf = (commit: number, stream: string) =>
    `{"feed":${JSON.stringify(batch.feed)},"commit":${commit},"stream":${JSON.stringify(stream)},"seq":`;
  // A batch that spans commits: a head per commit, and each row's.
  const heads = batch.spansCommits ? batch.commitList() : undefined;
  const spanning = heads && utf8Concat(heads.commits.map(({ commit, stream }) => headOf(commit, stream)));
  return {
    head: spanning ? spanning.bytes : encoder.encode(headOf(batch.commit, batch.stream)),
    headEnds: spanning ? spanning.ends : noEnds,
    rowHeads: heads ? heads.rows : noEnds,
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
    readLines,
  };
}

/**
 * Writes the batches (in order) as NDJSON lines to `sink`, a batch per write, into buffers the
 * sink has written already where it has one large enough (a fresh one costs a page fault every
 * 4 KiB). Says whether every payload was UTF-8 text.
 */
export async function writeNdjson(
  kernels: Kernels,
  batches: readonly ColumnBatch[],
  sink: ExportSink,
  signal: AbortSignal | undefined,
  /** Called after each batch with the rows written so far, for progress. */
  onRows?: (rows: number) => void,
): Promise<boolean> {
  let payloadText = true;
  let rows = 0;
  for (const batch of batches) {
    signal?.throwIfAborted();
    const columns = ndjsonColumnsOf(batch, false);
    let out = sink.reusable() ?? new Uint8Array(exportNdjsonWriteBytes);
    let written: number;
    try {
      while ((written = kernels.ndjsonLines(columns, out)) < 0) out = new Uint8Array(2 * out.length);
    } catch (error) {
      if (!(error instanceof StreamStackError) || error.code !== 'CORRUPT') throw error;
      const commits = batch.spansCommits
        ? `commits ${batch.commit} to ${batch.commitOf(batch.length - 1)}`
        : `commit ${batch.commit}`;
      throw new StreamStackError('CORRUPT', `${error.message} (${commits})`, {
        cause: error,
        details: { commit: batch.commit },
      });
    }
    await sink.write(out.subarray(0, written), out);
    // The kernels chose text or base64 per payload; whether the file holds any base64 is one
    // check more, of batches only until the first binary payload.
    payloadText &&= allText(batch);
    rows += batch.length;
    onRows?.(rows);
  }
  return payloadText;
}
