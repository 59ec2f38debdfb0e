/**
 * NDJSON export files: one JSON object per record and line, with the export's columns as
 * fields in a fixed order, absent values as `null` (so every line has every field, and readers
 * such as DuckDB infer one schema). JSON has no bytes, so binary columns are base64 text under a
 * `Base64` suffix: `fingerprintBase64`, and `payloadBase64` — or, in a file where every payload
 * is UTF-8 text, `payload` as that text (the text payload column of the other formats).
 */
import { exportNdjsonWriteBytes } from '../limits.js';
import type { ColumnBatch } from './column-batch.js';
import type { ExportSink } from './export-sink.js';

// Fatal: the caller has checked the payloads are UTF-8, so a failure here is a bug, not data.
// The byte-order mark is kept: it belongs to the stored payload.
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function base64(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString('base64');
}

/** The lines of one batch, each ending in a newline. */
function batchLines(batch: ColumnBatch, withText: boolean): string {
  // Strings that are the same for the whole batch are encoded once.
  const head = `{"feed":${JSON.stringify(batch.feed)},"commit":${batch.commit},"stream":${JSON.stringify(batch.stream)},"seq":`;
  const types = batch.types.map((type) => JSON.stringify(type));
  let out = '';
  for (let row = 0; row < batch.length; row++) {
    const key = batch.key(row);
    const typeId = batch.typeIds[row];
    const tags = batch.tags(row);
    const payload = batch.payloadSource(row);
    const start = batch.payloadStarts[row];
    const end = batch.payloadEnds[row];
    out +=
      `${head}${batch.seqs[row]},"position":${batch.positions[row]},"timestamp":${batch.timestamps[row]}` +
      `,"key":${key === undefined ? 'null' : JSON.stringify(key)}` +
      `,"version":${batch.hasVersion(row) ? batch.versions[row] : 'null'}` +
      `,"tombstone":${batch.isTombstone(row)}` +
      `,"type":${typeId < 0 ? 'null' : types[typeId]}` +
      `,"tags":${tags.length === 0 ? '[]' : JSON.stringify(tags)}` +
      `,"fingerprintBase64":"${base64(batch.bytes, batch.fingerprintStarts[row], batch.fingerprintEnds[row])}"` +
      (withText
        ? `,"payload":${JSON.stringify(decoder.decode(payload.subarray(start, end)))}}\n`
        : `,"payloadBase64":"${base64(payload, start, end)}"}\n`);
  }
  return out;
}

/** Writes the batches (in order) as NDJSON lines to `sink`. */
export async function writeNdjson(batches: readonly ColumnBatch[], withText: boolean, sink: ExportSink, signal: AbortSignal | undefined): Promise<void> {
  let pending: string[] = [];
  let pendingLength = 0;
  for (const batch of batches) {
    signal?.throwIfAborted();
    const lines = batchLines(batch, withText);
    pending.push(lines);
    pendingLength += lines.length;
    if (pendingLength >= exportNdjsonWriteBytes) {
      await sink.write(Buffer.from(pending.join('')));
      pending = [];
      pendingLength = 0;
    }
  }
  if (pending.length > 0) await sink.write(Buffer.from(pending.join('')));
}
