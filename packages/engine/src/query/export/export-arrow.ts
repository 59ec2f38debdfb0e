/**
 * The columns of an export, as Apache Arrow: the schema every Arrow and Parquet export file has
 * (and the fields of every NDJSON line, described alike for the manifest), and the conversion of
 * a group of column batches (several commits' worth) into one Arrow record batch of that schema.
 * Several batches become one because a feed of one-record commits would otherwise give one Arrow
 * batch (and one Parquet row group) per record.
 *
 * The schema is the same whatever the payloads: `payload` holds every payload's bytes, and
 * `payloadText` the same payload as text where it is valid UTF-8, null where it is not. A file's
 * columns once depended on whether all its payloads were text, so one binary payload in a file
 * dropped the text column and a query naming it failed on that file alone.
 *
 * Unlike `column-arrow.ts` (one batch, handed over without copies where layouts agree), strings
 * here are plain UTF-8 columns rather than dictionaries: an Arrow IPC file may not replace a
 * dictionary between batches, and every group has its own streams and types.
 */
import * as arrow from 'apache-arrow';
import { recordFlags } from '../../storage/records.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import {
  type ColumnAllocator,
  commitColumn,
  gatherRanges,
  int64Column,
  newArrays,
  type RangeCopy,
  repeatedStrings,
  rowCount,
  streamStrings,
  tagListOffsets,
  textValues,
  tombstoneBits,
  typeStrings,
  typeValidity,
  utf8Validity,
  validityOfFlag,
} from './export-columns.js';
import type { ExportFormat } from './export-manifest.js';

/** The name of the column holding payloads as UTF-8 text (null where a payload is not). */
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
  new arrow.Field(payloadTextColumn, new arrow.Utf8(), true),
];

/** The schema of every Arrow and Parquet export file. */
export const exportSchema = new arrow.Schema(exportFields);

/**
 * The fields of every NDJSON export line, as the Arrow types of their JSON values: the binary
 * columns as base64 text (`fingerprintBase64`), the timestamp as the integer it is written as,
 * and the payload as `read` writes it, as text (`payload`) where it is valid UTF-8 and as base64
 * (`payloadBase64`) where it is not, the other null.
 */
export const ndjsonSchema = new arrow.Schema([
  ...exportFields.slice(0, 5),
  new arrow.Field('timestamp', new arrow.Int64(), false),
  ...exportFields.slice(6, 11),
  new arrow.Field('fingerprintBase64', new arrow.Utf8(), false),
  new arrow.Field('payload', new arrow.Utf8(), true),
  new arrow.Field('payloadBase64', new arrow.Utf8(), true),
]);

/** The schema of a format's files as the manifest describes it: names, Arrow types and nullability. */
export function describeSchema(format: ExportFormat): { name: string; type: string; nullable: boolean }[] {
  return (format === 'ndjson' ? ndjsonSchema : exportSchema).fields.map((field) => ({
    name: field.name,
    type: String(field.type),
    nullable: field.nullable,
  }));
}

/** The key column: a record without a key has an empty range, its value empty and null by the bitmap. */
function keyData(batches: readonly ColumnBatch[], length: number, alloc: ColumnAllocator, copyLong?: RangeCopy) {
  return arrow.makeData({
    type: new arrow.Utf8(),
    length,
    ...gatherRanges(
      batches,
      (batch) => ({ starts: batch.keyStarts, ends: batch.keyEnds, bytes: batch.bytes }),
      alloc,
      copyLong,
    ),
    nullBitmap: validityOfFlag(batches, length, recordFlags.hasKey, alloc),
  });
}

/** The tags column: a list of strings per record, every batch's tag ranges gathered into one child. */
function tagListData(batches: readonly ColumnBatch[], length: number, alloc: ColumnAllocator, copyLong?: RangeCopy) {
  const { valueOffsets, tags } = tagListOffsets(batches, length, alloc);
  return arrow.makeData({
    type: exportSchema.fields[10].type as arrow.List<arrow.Utf8>,
    length,
    valueOffsets,
    child: arrow.makeData({
      type: new arrow.Utf8(),
      length: tags,
      ...gatherRanges(
        batches,
        (batch) => {
          const first = batch.tagRows[0];
          const last = batch.tagRows[batch.length];
          return {
            starts: batch.tagStarts.subarray(first, last),
            ends: batch.tagEnds.subarray(first, last),
            bytes: batch.bytes,
          };
        },
        alloc,
        copyLong,
      ),
    }),
  });
}

/**
 * The batches (in order) as one Arrow record batch of the export schema, the text payload
 * column null in the rows whose payload is not UTF-8; `textless` is how many those are. Its
 * arrays come from `alloc`: an arena's are handed out again by the next conversion, so the
 * batch must be done with by then. Long ranges (a pack's payloads lie end to end) are copied by
 * `copyLong`, a kernel set's `copyRange`, when given.
 */
export function exportArrowBatch(
  batches: readonly ColumnBatch[],
  alloc: ColumnAllocator = newArrays,
  copyLong?: RangeCopy,
): { batch: arrow.RecordBatch; textless: number } {
  const length = rowCount(batches);
  const payloads = gatherRanges(
    batches,
    (batch) => ({
      starts: batch.payloadStarts,
      ends: batch.payloadEnds,
      bytes: batch.bytes,
      external: batch.externalBytes,
    }),
    alloc,
    copyLong,
  );
  const text = utf8Validity(payloads, alloc);
  const children: arrow.Data[] = [
    arrow.makeData({
      type: new arrow.Utf8(),
      length,
      ...repeatedStrings(batches, length, (batch) => batch.feed, alloc),
    }),
    arrow.makeData({ type: new arrow.Int64(), length, data: commitColumn(batches, length, alloc) }),
    arrow.makeData({
      type: new arrow.Utf8(),
      length,
      ...streamStrings(batches, length, alloc),
    }),
    arrow.makeData({
      type: new arrow.Int64(),
      length,
      data: int64Column(batches, length, (batch) => batch.seqs, alloc),
    }),
    arrow.makeData({
      type: new arrow.Int64(),
      length,
      data: int64Column(batches, length, (batch) => batch.positions, alloc),
    }),
    arrow.makeData({
      type: new arrow.TimestampMillisecond('UTC'),
      length,
      data: int64Column(batches, length, (batch) => batch.timestamps, alloc),
    }),
    keyData(batches, length, alloc, copyLong),
    arrow.makeData({
      type: new arrow.Int64(),
      length,
      // A record without a version holds 0 there (`RunColumns.versions`).
      data: int64Column(batches, length, (batch) => batch.versions, alloc),
      nullBitmap: validityOfFlag(batches, length, recordFlags.hasVersion, alloc),
    }),
    arrow.makeData({ type: new arrow.Bool(), length, data: tombstoneBits(batches, length, alloc) }),
    arrow.makeData({
      type: new arrow.Utf8(),
      length,
      ...typeStrings(batches, length, alloc),
      nullBitmap: typeValidity(batches, length, alloc),
    }),
    tagListData(batches, length, alloc, copyLong),
    arrow.makeData({
      type: new arrow.Binary(),
      length,
      ...gatherRanges(
        batches,
        (batch) => ({ starts: batch.fingerprintStarts, ends: batch.fingerprintEnds, bytes: batch.bytes }),
        alloc,
        copyLong,
      ),
    }),
    arrow.makeData({ type: new arrow.Binary(), length, ...payloads }),
    // Where every payload is text, the text column is the same bytes and offsets as the binary
    // one: the same buffers, not a copy.
    arrow.makeData({
      type: new arrow.Utf8(),
      length,
      ...textValues(payloads, text.bits, alloc, copyLong),
      nullBitmap: text.bits,
      nullCount: text.invalid,
    }),
  ];
  const struct = arrow.makeData({ type: new arrow.Struct(exportSchema.fields), length, nullCount: 0, children });
  return { batch: new arrow.RecordBatch(exportSchema, struct), textless: text.invalid };
}
