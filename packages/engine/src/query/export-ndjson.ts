/**
 * NDJSON export files: one JSON object per record and line, with the export's columns as
 * fields in a fixed order, absent values as `null` (so every line has every field, and readers
 * such as DuckDB infer one schema). JSON has no bytes, so binary columns are base64 text under a
 * `Base64` suffix: `fingerprintBase64`, and `payloadBase64` — or, in a file where every payload
 * is UTF-8 text, `payload` as that text (the text payload column of the other formats).
 *
 * Lines are written as bytes straight from the batch's columns into a buffer (`json-bytes.ts`),
 * exactly the bytes `JSON.stringify` would give: no string or object is made per record.
 */
import { isUtf8 } from 'node:buffer';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { exportNdjsonWriteBytes } from '../limits.js';
import { recordFlags } from '../storage/records.js';
import { payloadElsewhere } from '../storage/run-columns.js';
import type { ColumnBatch } from './column-batch.js';
import type { ExportSink } from './export-sink.js';
import { base64Bytes, jsonStringBytesMax, writeAscii, writeBase64, writeInteger, writeJsonString } from './json-bytes.js';

const encoder = new TextEncoder();
const ascii = (text: string) => encoder.encode(text);
const positionField = ascii(',"position":');
const timestampField = ascii(',"timestamp":');
const keyField = ascii(',"key":');
const versionField = ascii(',"version":');
const tombstoneTrue = ascii(',"tombstone":true');
const tombstoneFalse = ascii(',"tombstone":false');
const typeField = ascii(',"type":');
const tagsField = ascii(',"tags":[');
const fingerprintField = ascii('],"fingerprintBase64":"');
const payloadTextField = ascii('","payload":');
const payloadBase64Field = ascii('","payloadBase64":"');
const lineEnd = ascii('}\n');
const base64LineEnd = ascii('"}\n');
const nullValue = ascii('null');
/** The most bytes of a line besides its strings: field names, punctuation and four integers. */
const lineFixedBytesMax = 256;

/** Checks a key or tag (text with bytes above 0x7f) is UTF-8, as reading it as a string does. */
function checkText(batch: ColumnBatch, start: number, end: number, what: string): void {
  if (!isUtf8(batch.bytes.subarray(start, end))) {
    throw new StreamStackError('CORRUPT', `a record's ${what} in commit ${batch.commit} is not valid UTF-8`);
  }
}

/** Writes NDJSON lines into buffers of about `exportNdjsonWriteBytes`, each handed to the sink whole. */
class LineBuffer {
  out: Uint8Array = new Uint8Array(exportNdjsonWriteBytes);
  at = 0;

  constructor(private readonly sink: ExportSink) {}

  /** Whether `bytes` more fit. */
  fits(bytes: number): boolean {
    return this.at + bytes <= this.out.length;
  }

  /**
   * Makes room for `bytes` more: what the buffer holds goes to the sink, and another follows —
   * one the sink has written already, or a new one (it holds on to a buffer until it is written).
   */
  async makeRoom(bytes: number): Promise<void> {
    await this.flush();
    const written = this.sink.reusable();
    this.out = written && written.length >= bytes ? written : new Uint8Array(Math.max(exportNdjsonWriteBytes, bytes));
  }

  async flush(): Promise<void> {
    if (this.at > 0) await this.sink.write(this.out.subarray(0, this.at), this.out);
    this.at = 0;
  }
}

/** The most bytes row `row`'s line can take. */
function lineBytesMax(batch: ColumnBatch, row: number, withText: boolean, headBytes: number, typeBytes: number): number {
  let bytes = lineFixedBytesMax + headBytes + typeBytes + jsonStringBytesMax(batch.keyEnds[row] - batch.keyStarts[row]);
  for (let tag = batch.tagRows[row]; tag < batch.tagRows[row + 1]; tag++) bytes += jsonStringBytesMax(batch.tagEnds[tag] - batch.tagStarts[tag]) + 1;
  bytes += base64Bytes(batch.fingerprintEnds[row] - batch.fingerprintStarts[row]);
  const payload = batch.payloadEnds[row] - batch.payloadStarts[row];
  return bytes + (withText ? jsonStringBytesMax(payload) : base64Bytes(payload));
}

/**
 * The batch's payloads as JSON strings, escaped by the kernels in one call per place they lie
 * (the run's bytes, or the buffer of those stored elsewhere): a byte loop here cost most of a
 * line's time. Row `row`'s string is `texts[place[row]]` from `starts[row]` to `ends[row]`.
 */
function payloadTexts(kernels: Kernels, batch: ColumnBatch): { texts: Uint8Array[]; place: Uint8Array; starts: Uint32Array; ends: Uint32Array } {
  const place = new Uint8Array(batch.length);
  const counts = [0, 0];
  for (let row = 0; row < batch.length; row++) counts[(place[row] = (batch.flags[row] & payloadElsewhere) !== 0 ? 1 : 0)]++;
  const ranges = counts.map((count) => new Uint32Array(2 * count));
  const index = new Uint32Array(batch.length);
  const filled = [0, 0];
  for (let row = 0; row < batch.length; row++) {
    const at = (index[row] = filled[place[row]]++);
    ranges[place[row]][2 * at] = batch.payloadStarts[row];
    ranges[place[row]][2 * at + 1] = batch.payloadEnds[row];
  }
  const escaped = [kernels.jsonStrings(batch.bytes, ranges[0]), counts[1] > 0 ? kernels.jsonStrings(batch.externalBytes!, ranges[1]) : undefined];
  const starts = new Uint32Array(batch.length);
  const ends = new Uint32Array(batch.length);
  for (let row = 0; row < batch.length; row++) {
    const { ends: placeEnds } = escaped[place[row]]!;
    starts[row] = index[row] === 0 ? 0 : placeEnds[index[row] - 1];
    ends[row] = placeEnds[index[row]];
  }
  return { texts: escaped.map((strings) => strings?.bytes ?? new Uint8Array(0)), place, starts, ends };
}

/** Writes one batch's lines to `lines`. */
async function writeBatch(kernels: Kernels, batch: ColumnBatch, withText: boolean, lines: LineBuffer): Promise<void> {
  // What is the same for the whole batch is encoded once.
  const head = ascii(`{"feed":${JSON.stringify(batch.feed)},"commit":${batch.commit},"stream":${JSON.stringify(batch.stream)},"seq":`);
  const types = batch.types.map((type) => ascii(JSON.stringify(type)));
  const typeBytes = types.reduce((most, type) => Math.max(most, type.length), nullValue.length);
  const { bytes, flags, seqs, positions, timestamps, versions, typeIds, keyStarts, keyEnds, tagRows, tagStarts, tagEnds, fingerprintStarts, fingerprintEnds, payloadStarts, payloadEnds } = batch;
  // The caller has checked every payload is UTF-8 when it asks for text.
  const texts = withText ? payloadTexts(kernels, batch) : undefined;
  for (let row = 0; row < batch.length; row++) {
    const lineBytes = lineBytesMax(batch, row, withText, head.length, typeBytes);
    // Awaited only when the buffer is full: an await per line would cost more than the line.
    if (!lines.fits(lineBytes)) await lines.makeRoom(lineBytes);
    const out = lines.out;
    let at = writeAscii(out, lines.at, head);
    at = writeInteger(out, at, seqs[row]);
    at = writeAscii(out, at, positionField);
    at = writeInteger(out, at, positions[row]);
    at = writeAscii(out, at, timestampField);
    at = writeInteger(out, at, timestamps[row]);
    at = writeAscii(out, at, keyField);
    const flag = flags[row];
    if ((flag & recordFlags.hasKey) !== 0) {
      at = writeJsonString(out, at, bytes, keyStarts[row], keyEnds[row]);
      if (at < 0) {
        checkText(batch, keyStarts[row], keyEnds[row], 'key');
        at = -at;
      }
    } else {
      at = writeAscii(out, at, nullValue);
    }
    at = writeAscii(out, at, versionField);
    at = (flag & recordFlags.hasVersion) !== 0 ? writeInteger(out, at, versions[row]) : writeAscii(out, at, nullValue);
    at = writeAscii(out, at, (flag & recordFlags.isTombstone) !== 0 ? tombstoneTrue : tombstoneFalse);
    at = writeAscii(out, at, typeField);
    at = writeAscii(out, at, typeIds[row] < 0 ? nullValue : types[typeIds[row]]);
    at = writeAscii(out, at, tagsField);
    for (let tag = tagRows[row]; tag < tagRows[row + 1]; tag++) {
      if (tag > tagRows[row]) out[at++] = 0x2c;
      at = writeJsonString(out, at, bytes, tagStarts[tag], tagEnds[tag]);
      if (at < 0) {
        checkText(batch, tagStarts[tag], tagEnds[tag], 'tag');
        at = -at;
      }
    }
    at = writeAscii(out, at, fingerprintField);
    at = writeBase64(out, at, bytes, fingerprintStarts[row], fingerprintEnds[row]);
    if (texts) {
      at = writeAscii(out, at, payloadTextField);
      out.set(texts.texts[texts.place[row]].subarray(texts.starts[row], texts.ends[row]), at);
      at += texts.ends[row] - texts.starts[row];
      at = writeAscii(out, at, lineEnd);
    } else {
      const payload = (flag & payloadElsewhere) !== 0 ? batch.externalBytes! : bytes;
      at = writeAscii(out, at, payloadBase64Field);
      at = writeBase64(out, at, payload, payloadStarts[row], payloadEnds[row]);
      at = writeAscii(out, at, base64LineEnd);
    }
    lines.at = at;
  }
}

/** Writes the batches (in order) as NDJSON lines to `sink`. */
export async function writeNdjson(kernels: Kernels, batches: readonly ColumnBatch[], withText: boolean, sink: ExportSink, signal: AbortSignal | undefined): Promise<void> {
  const lines = new LineBuffer(sink);
  for (const batch of batches) {
    signal?.throwIfAborted();
    await writeBatch(kernels, batch, withText, lines);
  }
  await lines.flush();
}
