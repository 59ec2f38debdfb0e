/**
 * The columns of an export, as Apache Arrow: the schema every Arrow and Parquet export file has,
 * and the conversion of a group of column batches (several commits' worth) into one Arrow record
 * batch of that schema. Several batches become one because a feed of one-record commits would
 * otherwise give one Arrow batch (and one Parquet row group) per record.
 *
 * Unlike `column-arrow.ts` (one batch, handed over without copies where layouts agree), strings
 * here are plain UTF-8 columns rather than dictionaries: an Arrow IPC file may not replace a
 * dictionary between batches, and every group has its own streams and types.
 */
import * as arrow from 'apache-arrow';
import type { ColumnBatch } from './column-batch.js';

/** The name of the column holding payloads as UTF-8 text, present where every payload is text. */
export const payloadTextColumn = 'payloadText';

const exportFields = [
  new arrow.Field('feed', new arrow.Utf8(), false),
  new arrow.Field('commit', new arrow.Int64(), false),
  new arrow.Field('stream', new arrow.Utf8(), false),
  new arrow.Field('seq', new arrow.Int64(), false),
  new arrow.Field('position', new arrow.Int64(), false),
  new arrow.Field('timestamp', new arrow.TimestampMillisecond('UTC'), false),
  new arrow.Field('key', new arrow.Utf8(), true),
  new arrow.Field('version', new arrow.Int64(), true),
  new arrow.Field('tombstone', new arrow.Bool(), false),
  new arrow.Field('type', new arrow.Utf8(), true),
  new arrow.Field('tags', new arrow.List(new arrow.Field('tag', new arrow.Utf8(), false)), false),
  new arrow.Field('fingerprint', new arrow.Binary(), false),
  new arrow.Field('payload', new arrow.Binary(), false),
];

/** The schema of export files without, and with, the text payload column. */
export const exportSchema = new arrow.Schema(exportFields);
export const exportSchemaWithText = new arrow.Schema([...exportFields, new arrow.Field(payloadTextColumn, new arrow.Utf8(), false)]);

/** The schema as the manifest describes it: names, Arrow types and nullability. */
export function describeSchema(withText: boolean): { name: string; type: string; nullable: boolean }[] {
  return (withText ? exportSchemaWithText : exportSchema).fields.map((field) => ({ name: field.name, type: String(field.type), nullable: field.nullable }));
}

const encoder = new TextEncoder();

/** Variable-length values gathered into Arrow's offsets and data. */
interface Gathered {
  readonly valueOffsets: Int32Array;
  readonly data: Uint8Array;
}

/** One batch's byte ranges of a column: `count` values, `starts[i]`…`ends[i]` of `source(i)`. */
interface Ranges {
  readonly count: number;
  readonly starts: Uint32Array;
  readonly ends: Uint32Array;
  readonly source: (index: number) => Uint8Array;
  /** Values absent here (a record without a key) are empty. */
  readonly present?: (index: number) => boolean;
}

/** Gathers a variable-length column from every batch's ranges into one buffer. */
function gather(batches: readonly ColumnBatch[], rangesOf: (batch: ColumnBatch) => Ranges): Gathered {
  const all = batches.map(rangesOf);
  let values = 0;
  let total = 0;
  for (const ranges of all) {
    values += ranges.count;
    for (let index = 0; index < ranges.count; index++) {
      if (ranges.present && !ranges.present(index)) continue;
      total += ranges.ends[index] - ranges.starts[index];
    }
  }
  const valueOffsets = new Int32Array(values + 1);
  const data = new Uint8Array(total);
  let value = 0;
  let at = 0;
  for (const ranges of all) {
    for (let index = 0; index < ranges.count; index++) {
      valueOffsets[value++] = at;
      if (ranges.present && !ranges.present(index)) continue;
      const start = ranges.starts[index];
      const end = ranges.ends[index];
      data.set(ranges.source(index).subarray(start, end), at);
      at += end - start;
    }
  }
  valueOffsets[value] = at;
  return { valueOffsets, data };
}

/** A string per row, chosen from a few per batch (its feed, its stream, its types). */
function strings(batches: readonly ColumnBatch[], choices: (batch: ColumnBatch) => readonly string[], choice: (batch: ColumnBatch, row: number) => number): Gathered {
  return gather(batches, (batch) => {
    const encoded = choices(batch).map((text) => encoder.encode(text));
    const starts = new Uint32Array(batch.length);
    const ends = new Uint32Array(batch.length);
    const picked = new Int32Array(batch.length);
    for (let row = 0; row < batch.length; row++) {
      picked[row] = choice(batch, row);
      if (picked[row] >= 0) ends[row] = encoded[picked[row]].length;
    }
    return { count: batch.length, starts, ends, source: (row) => encoded[picked[row]], present: (row) => picked[row] >= 0 };
  });
}

/** A validity bitmap (bit set: present), or undefined when every row is present. */
function validity(length: number, present: (row: number) => boolean): Uint8Array | undefined {
  const bitmap = new Uint8Array((length + 7) >> 3);
  let absent = 0;
  for (let row = 0; row < length; row++) {
    if (present(row)) bitmap[row >> 3] |= 1 << (row & 7);
    else absent++;
  }
  return absent === 0 ? undefined : bitmap;
}

/** Rows of the group as (batch, row) pairs, in order. */
function rowIndex(batches: readonly ColumnBatch[], length: number): { batchOf: Uint32Array; rowOf: Uint32Array } {
  const batchOf = new Uint32Array(length);
  const rowOf = new Uint32Array(length);
  let at = 0;
  for (const [index, batch] of batches.entries()) {
    for (let row = 0; row < batch.length; row++, at++) {
      batchOf[at] = index;
      rowOf[at] = row;
    }
  }
  return { batchOf, rowOf };
}

/**
 * The batches (in order) as one Arrow record batch of the export schema; with `withText`, the
 * payloads also as a UTF-8 column, which shares the binary column's buffers (the caller has
 * checked that every payload is valid UTF-8).
 */
export function exportArrowBatch(batches: readonly ColumnBatch[], withText: boolean): arrow.RecordBatch {
  let length = 0;
  for (const batch of batches) length += batch.length;
  const { batchOf, rowOf } = rowIndex(batches, length);
  const int64 = (value: (batch: ColumnBatch, row: number) => number) => {
    const out = new BigInt64Array(length);
    for (let at = 0; at < length; at++) out[at] = BigInt(value(batches[batchOf[at]], rowOf[at]));
    return out;
  };
  const flag = (test: (batch: ColumnBatch, row: number) => boolean) => (at: number) => test(batches[batchOf[at]], rowOf[at]);
  const tagRows = new Int32Array(length + 1);
  let tags = 0;
  for (let at = 0; at < length; at++) {
    const batch = batches[batchOf[at]];
    const row = rowOf[at];
    tagRows[at] = tags;
    tags += batch.tagRows[row + 1] - batch.tagRows[row];
  }
  tagRows[length] = tags;
  const tombstones = new Uint8Array((length + 7) >> 3);
  for (let at = 0; at < length; at++) if (batches[batchOf[at]].isTombstone(rowOf[at])) tombstones[at >> 3] |= 1 << (at & 7);
  const bytesOf = (batch: ColumnBatch) => () => batch.bytes;
  const payloads = gather(batches, (batch) => ({
    count: batch.length,
    starts: batch.payloadStarts,
    ends: batch.payloadEnds,
    source: batch.externalBytes ? (row) => batch.payloadSource(row) : bytesOf(batch),
  }));
  const children: arrow.Data[] = [
    arrow.makeData({ type: new arrow.Utf8(), length, ...strings(batches, (batch) => [batch.feed], () => 0) }),
    arrow.makeData({ type: new arrow.Int64(), length, data: int64((batch) => batch.commit) }),
    arrow.makeData({ type: new arrow.Utf8(), length, ...strings(batches, (batch) => [batch.stream], () => 0) }),
    arrow.makeData({ type: new arrow.Int64(), length, data: int64((batch, row) => batch.seqs[row]) }),
    arrow.makeData({ type: new arrow.Int64(), length, data: int64((batch, row) => batch.positions[row]) }),
    arrow.makeData({ type: new arrow.TimestampMillisecond('UTC'), length, data: int64((batch, row) => batch.timestamps[row]) }),
    arrow.makeData({
      type: new arrow.Utf8(),
      length,
      ...gather(batches, (batch) => ({ count: batch.length, starts: batch.keyStarts, ends: batch.keyEnds, source: bytesOf(batch), present: (row) => batch.hasKey(row) })),
      nullBitmap: validity(length, flag((batch, row) => batch.hasKey(row))),
    }),
    arrow.makeData({
      type: new arrow.Int64(),
      length,
      data: int64((batch, row) => (batch.hasVersion(row) ? batch.versions[row] : 0)),
      nullBitmap: validity(length, flag((batch, row) => batch.hasVersion(row))),
    }),
    arrow.makeData({ type: new arrow.Bool(), length, data: tombstones }),
    arrow.makeData({ type: new arrow.Utf8(), length, ...strings(batches, (batch) => batch.types, (batch, row) => batch.typeIds[row]), nullBitmap: validity(length, flag((batch, row) => batch.typeIds[row] >= 0)) }),
    arrow.makeData({
      type: exportSchema.fields[10].type as arrow.List<arrow.Utf8>,
      length,
      valueOffsets: tagRows,
      child: arrow.makeData({
        type: new arrow.Utf8(),
        length: tags,
        ...gather(batches, (batch) => ({ count: batch.tagStarts.length, starts: batch.tagStarts, ends: batch.tagEnds, source: bytesOf(batch) })),
      }),
    }),
    arrow.makeData({
      type: new arrow.Binary(),
      length,
      ...gather(batches, (batch) => ({ count: batch.length, starts: batch.fingerprintStarts, ends: batch.fingerprintEnds, source: bytesOf(batch) })),
    }),
    arrow.makeData({ type: new arrow.Binary(), length, ...payloads }),
  ];
  if (withText) children.push(arrow.makeData({ type: new arrow.Utf8(), length, ...payloads }));
  const schema = withText ? exportSchemaWithText : exportSchema;
  const struct = arrow.makeData({ type: new arrow.Struct(schema.fields), length, nullCount: 0, children });
  return new arrow.RecordBatch(schema, struct);
}
