/**
 * NDJSON lines, a batch of records at a time: the TypeScript twin of native/src/ndjson.rs
 * (`Kernels.ndjsonLines`). One JSON object per record and line, written as bytes straight from
 * the batch's columns: exactly what `JSON.stringify` of the same values would give. Two forms:
 * export lines have every field, in a fixed order, `null` where a record has no value, and the
 * payload under `payload` as text where it is valid UTF-8, else under `payloadBase64`, the other
 * null; read lines (`readLines`) are the record line format of `read` (`recordLine`), which
 * leaves out what a record does not have and writes the fingerprint as text or base64 too.
 */
import { isUtf8 } from 'node:buffer';
import { StreamStackError } from '../../errors.js';
import type { NdjsonColumns } from '../kernels.js';
import { base64Bytes, jsonStringBytesMax, writeAscii, writeBase64, writeInteger, writeJsonString } from './json.js';

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
const textLineEnd = ascii(',"payloadBase64":null}\n');
const payloadBase64Field = ascii('","payload":null,"payloadBase64":"');
const base64LineEnd = ascii('"}\n');
const nullValue = ascii('null');
const readPayloadText = ascii(',"payload":');
const readPayloadBase64 = ascii(',"payloadBase64":"');
const readFingerprintText = ascii(',"fingerprint":');
const readFingerprintBase64 = ascii(',"fingerprintBase64":"');
const quoteOnly = ascii('"');
const readLineEnd = ascii('}\n');
/** The most bytes of a line besides its strings and head: field names, punctuation and four integers. */
const lineFixedBytesMax = 256;

function invalid(message: string): StreamStackError {
  return new StreamStackError('INVALID_ARGUMENT', message);
}

/** Checks every column has a value for each row, and every range lies in its bytes (as the native twin does). */
function check(columns: NdjsonColumns): number {
  const rows = columns.seqs.length;
  const perRow: [string, number][] = [
    ['positions', columns.positions.length],
    ['timestamps', columns.timestamps.length],
    ['versions', columns.versions.length],
    ['flags', columns.flags.length],
    ['typeIds', columns.typeIds.length],
    ['keyStarts', columns.keyStarts.length],
    ['keyEnds', columns.keyEnds.length],
    ['fingerprintStarts', columns.fingerprintStarts.length],
    ['fingerprintEnds', columns.fingerprintEnds.length],
    ['payloadStarts', columns.payloadStarts.length],
    ['payloadEnds', columns.payloadEnds.length],
    ['tagRows', Math.max(0, columns.tagRows.length - 1)],
  ];
  for (const [name, length] of perRow)
    if (length < rows) throw invalid(`column ${name} holds ${length} values for ${rows} rows`);
  if (columns.tagStarts.length !== columns.tagEnds.length) throw invalid('tagStarts and tagEnds differ in length');
  for (const [name, value] of [
    ['keyFlag', columns.keyFlag],
    ['versionFlag', columns.versionFlag],
    ['tombstoneFlag', columns.tombstoneFlag],
    ['elsewhereFlag', columns.elsewhereFlag],
  ] as const) {
    if (!Number.isInteger(value) || value < 0 || value > 0xff)
      throw invalid(`${name} ${value} is not a flag bit of a byte`);
  }
  const range = (what: string, start: number, end: number, within: number) => {
    if (start > end || end > within)
      throw invalid(`${what} [${start}, ${end}) is reversed or runs past the ${within} bytes`);
  };
  if (columns.rowHeads.length > 0) {
    if (columns.rowHeads.length < rows)
      throw invalid(`column rowHeads holds ${columns.rowHeads.length} values for ${rows} rows`);
    let previous = 0;
    columns.headEnds.forEach((end, index) => {
      range(`head ${index}`, previous, end, columns.head.length);
      previous = end;
    });
    for (let row = 0; row < rows; row++) {
      const head = columns.rowHeads[row];
      if (head >= columns.headEnds.length)
        throw invalid(`row ${row}'s head ${head} is not one of the batch's ${columns.headEnds.length}`);
    }
  }
  let previousEnd = 0;
  columns.typeEnds.forEach((end, index) => {
    range(`type ${index}`, previousEnd, end, columns.types.length);
    previousEnd = end;
  });
  for (let row = 0; row < rows; row++) {
    range('a key', columns.keyStarts[row], columns.keyEnds[row], columns.bytes.length);
    range('a fingerprint', columns.fingerprintStarts[row], columns.fingerprintEnds[row], columns.bytes.length);
    const elsewhere = (columns.flags[row] & columns.elsewhereFlag) !== 0;
    range(
      'a payload',
      columns.payloadStarts[row],
      columns.payloadEnds[row],
      elsewhere ? columns.external.length : columns.bytes.length,
    );
    const first = columns.tagRows[row];
    const last = columns.tagRows[row + 1];
    if (first > last || last > columns.tagStarts.length)
      throw invalid(`row ${row}'s tags [${first}, ${last}) are reversed or past the ${columns.tagStarts.length} tags`);
    const typeId = columns.typeIds[row];
    if (typeId < -1 || typeId >= columns.typeEnds.length)
      throw invalid(`row ${row}'s type ${typeId} is not one of the batch's ${columns.typeEnds.length}`);
    for (const value of [columns.seqs[row], columns.positions[row], columns.timestamps[row], columns.versions[row]]) {
      if (!Number.isSafeInteger(value)) throw invalid(`row ${row} holds ${value}, not a safe integer`);
    }
  }
  for (let tag = 0; tag < columns.tagStarts.length; tag++)
    range(`tag ${tag}`, columns.tagStarts[tag], columns.tagEnds[tag], columns.bytes.length);
  return rows;
}

/** Writes `bytes[start, end)`, a key or tag, as a JSON string, checked to be UTF-8. */
function writeText(out: Uint8Array, at: number, bytes: Uint8Array, start: number, end: number, what: string): number {
  const after = writeJsonString(out, at, bytes, start, end);
  if (after >= 0) return after;
  if (!isUtf8(bytes.subarray(start, end)))
    throw new StreamStackError('CORRUPT', `a record's ${what} is not valid UTF-8`);
  return -after;
}

/** The most bytes row `row`'s line can take. */
function lineBytesMax(columns: NdjsonColumns, row: number, typeBytes: number): number {
  let bytes =
    lineFixedBytesMax +
    headLength(columns, row) +
    typeBytes +
    jsonStringBytesMax(columns.keyEnds[row] - columns.keyStarts[row]);
  for (let tag = columns.tagRows[row]; tag < columns.tagRows[row + 1]; tag++)
    bytes += jsonStringBytesMax(columns.tagEnds[tag] - columns.tagStarts[tag]) + 1;
  // As text or as base64, whichever each is written as: text can take more.
  const fingerprint = columns.fingerprintEnds[row] - columns.fingerprintStarts[row];
  bytes += Math.max(jsonStringBytesMax(fingerprint), base64Bytes(fingerprint));
  const payload = columns.payloadEnds[row] - columns.payloadStarts[row];
  return bytes + Math.max(jsonStringBytesMax(payload), base64Bytes(payload));
}

/** Where row `row`'s head starts in `columns.head`: 0 unless the batch spans commits. */
function headStart(columns: NdjsonColumns, row: number): number {
  if (columns.rowHeads.length === 0) return 0;
  const index = columns.rowHeads[row];
  return index === 0 ? 0 : columns.headEnds[index - 1];
}

function headLength(columns: NdjsonColumns, row: number): number {
  if (columns.rowHeads.length === 0) return columns.head.length;
  return columns.headEnds[columns.rowHeads[row]] - headStart(columns, row);
}

/** Writes what every line starts with, in both forms: the row's head, the seq, position and timestamp. */
function writeLineStart(out: Uint8Array, at: number, columns: NdjsonColumns, row: number): number {
  if (columns.rowHeads.length === 0) at = writeAscii(out, at, columns.head);
  else {
    const start = headStart(columns, row);
    at = writeAscii(out, at, columns.head.subarray(start, start + headLength(columns, row)));
  }
  at = writeInteger(out, at, columns.seqs[row]);
  at = writeAscii(out, at, positionField);
  at = writeInteger(out, at, columns.positions[row]);
  at = writeAscii(out, at, timestampField);
  return writeInteger(out, at, columns.timestamps[row]);
}

/** Writes row `row`'s export line at `at` (room is made): every field, `null` where absent. */
function writeExportLine(out: Uint8Array, at: number, columns: NdjsonColumns, row: number): number {
  const { types, typeEnds, bytes, flags, keyFlag, versionFlag, tombstoneFlag, elsewhereFlag } = columns;
  const flag = flags[row];
  at = writeLineStart(out, at, columns, row);
  at = writeAscii(out, at, keyField);
  at =
    (flag & keyFlag) !== 0
      ? writeText(out, at, bytes, columns.keyStarts[row], columns.keyEnds[row], 'key')
      : writeAscii(out, at, nullValue);
  at = writeAscii(out, at, versionField);
  at = (flag & versionFlag) !== 0 ? writeInteger(out, at, columns.versions[row]) : writeAscii(out, at, nullValue);
  at = writeAscii(out, at, (flag & tombstoneFlag) !== 0 ? tombstoneTrue : tombstoneFalse);
  at = writeAscii(out, at, typeField);
  const typeId = columns.typeIds[row];
  at =
    typeId < 0
      ? writeAscii(out, at, nullValue)
      : writeAscii(out, at, types.subarray(typeId === 0 ? 0 : typeEnds[typeId - 1], typeEnds[typeId]));
  at = writeAscii(out, at, tagsField);
  for (let tag = columns.tagRows[row]; tag < columns.tagRows[row + 1]; tag++) {
    if (tag > columns.tagRows[row]) out[at++] = 0x2c;
    at = writeText(out, at, bytes, columns.tagStarts[tag], columns.tagEnds[tag], 'tag');
  }
  at = writeAscii(out, at, fingerprintField);
  at = writeBase64(out, at, bytes, columns.fingerprintStarts[row], columns.fingerprintEnds[row]);
  const payload = (flag & elsewhereFlag) !== 0 ? columns.external : bytes;
  const payloadStart = columns.payloadStarts[row];
  const payloadEnd = columns.payloadEnds[row];
  // Written as text first; only a payload with bytes above 0x7f needs checking, and one that is
  // not UTF-8 is written again, over it, as base64.
  const textAt = writeAscii(out, at, payloadTextField);
  const afterText = writeJsonString(out, textAt, payload, payloadStart, payloadEnd);
  if (afterText >= 0 || isUtf8(payload.subarray(payloadStart, payloadEnd))) {
    at = writeAscii(out, Math.abs(afterText), textLineEnd);
  } else {
    at = writeAscii(out, at, payloadBase64Field);
    at = writeBase64(out, at, payload, payloadStart, payloadEnd);
    at = writeAscii(out, at, base64LineEnd);
  }
  return at;
}

/**
 * Writes row `row`'s read line at `at` (room is made): the fields of `recordLine`, in its order,
 * each only where the record has it; payload and fingerprint as text where they are UTF-8.
 */
function writeReadLine(out: Uint8Array, at: number, columns: NdjsonColumns, row: number): number {
  const { bytes, flags, typeEnds } = columns;
  const flag = flags[row];
  at = writeLineStart(out, at, columns, row);
  const payload = (flag & columns.elsewhereFlag) !== 0 ? columns.external : bytes;
  at = writeBytesField(
    out,
    at,
    payload,
    columns.payloadStarts[row],
    columns.payloadEnds[row],
    readPayloadText,
    readPayloadBase64,
  );
  if ((flag & columns.keyFlag) !== 0) {
    at = writeAscii(out, at, keyField);
    at = writeText(out, at, bytes, columns.keyStarts[row], columns.keyEnds[row], 'key');
  }
  if ((flag & columns.versionFlag) !== 0) {
    at = writeAscii(out, at, versionField);
    at = writeInteger(out, at, columns.versions[row]);
  }
  if ((flag & columns.tombstoneFlag) !== 0) at = writeAscii(out, at, tombstoneTrue);
  const typeId = columns.typeIds[row];
  if (typeId >= 0) {
    at = writeAscii(out, at, typeField);
    at = writeAscii(out, at, columns.types.subarray(typeId === 0 ? 0 : typeEnds[typeId - 1], typeEnds[typeId]));
  }
  const firstTag = columns.tagRows[row];
  const endTag = columns.tagRows[row + 1];
  if (endTag > firstTag) {
    at = writeAscii(out, at, tagsField);
    for (let tag = firstTag; tag < endTag; tag++) {
      if (tag > firstTag) out[at++] = 0x2c;
      at = writeText(out, at, bytes, columns.tagStarts[tag], columns.tagEnds[tag], 'tag');
    }
    out[at++] = 0x5d;
  }
  at = writeBytesField(
    out,
    at,
    bytes,
    columns.fingerprintStarts[row],
    columns.fingerprintEnds[row],
    readFingerprintText,
    readFingerprintBase64,
  );
  return writeAscii(out, at, readLineEnd);
}

/**
 * Writes `source[start, end)` as `bytesField` does: under `textField` as a JSON string when it is
 * UTF-8, else as base64 under `base64Field` (which opens the string). Written as text first; only
 * bytes above 0x7f need checking, and bytes that are not UTF-8 are written again, over it.
 */
function writeBytesField(
  out: Uint8Array,
  at: number,
  source: Uint8Array,
  start: number,
  end: number,
  textField: Uint8Array,
  base64Field: Uint8Array,
): number {
  const afterText = writeJsonString(out, writeAscii(out, at, textField), source, start, end);
  if (afterText >= 0 || isUtf8(source.subarray(start, end))) return Math.abs(afterText);
  at = writeAscii(out, at, base64Field);
  at = writeBase64(out, at, source, start, end);
  return writeAscii(out, at, quoteOnly);
}

/**
 * Writes the batch's lines into `out` and returns the bytes written, or -1 when they do not
 * fit (see `Kernels.ndjsonLines`).
 */
export function ndjsonLines(columns: NdjsonColumns, into: Uint8Array): number {
  const rows = check(columns);
  const { typeEnds, readLines } = columns;
  let typeBytes = nullValue.length;
  typeEnds.forEach((end, index) => {
    typeBytes = Math.max(typeBytes, end - (index === 0 ? 0 : typeEnds[index - 1]));
  });
  // Written into scratch room for whatever each line's strings hold, then copied when it fits:
  // whether lines fit is decided by their bytes, as the native twin decides it, and every row is
  // checked either way.
  let at = 0;
  let lines = scratch;
  for (let row = 0; row < rows; row++) {
    const most = at + lineBytesMax(columns, row, typeBytes);
    if (most > lines.length) {
      const grown = new Uint8Array(Math.max(2 * lines.length, most));
      grown.set(lines.subarray(0, at));
      lines = scratch = grown;
    }
    at = (readLines ? writeReadLine : writeExportLine)(lines, at, columns, row);
  }
  if (at > into.length) return -1;
  into.set(lines.subarray(0, at));
  return at;
}

/** Room the lines are written in before they are copied out, kept between calls. */
let scratch = new Uint8Array(64 * 1024);
