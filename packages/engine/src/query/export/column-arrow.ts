/**
 * A column batch as an Apache Arrow `RecordBatch` (for export and for tools that speak Arrow).
 * Columns whose layouts agree are handed over without a copy: type ids become a dictionary
 * column's indices, tag row offsets the tag list's offsets, and payloads lying back to back in
 * the run's bytes (one pack) a binary column over those bytes. The rest is gathered in one pass.
 *
 * This module loads `apache-arrow`, which takes a few hundred milliseconds: it is imported only
 * when a batch is first converted.
 */
import * as arrow from 'apache-arrow';
import type { ColumnBatch } from '../reading/column-batch.js';

/** The schema every converted batch has: one field per record field. */
export const recordSchema = new arrow.Schema([
  new arrow.Field('position', new arrow.Int64(), false),
  new arrow.Field('commit', new arrow.Int64(), false),
  new arrow.Field('stream', new arrow.Dictionary(new arrow.Utf8(), new arrow.Int32()), false),
  new arrow.Field('seq', new arrow.Int64(), false),
  new arrow.Field('timestamp', new arrow.TimestampMillisecond(), false),
  new arrow.Field('type', new arrow.Dictionary(new arrow.Utf8(), new arrow.Int32()), true),
  new arrow.Field('key', new arrow.Utf8(), true),
  new arrow.Field('version', new arrow.Int64(), true),
  new arrow.Field('tombstone', new arrow.Bool(), false),
  new arrow.Field('tags', new arrow.List(new arrow.Field('tag', new arrow.Utf8(), false)), false),
  new arrow.Field('fingerprint', new arrow.Binary(), false),
  new arrow.Field('payload', new arrow.Binary(), false),
]);

function int64(values: Float64Array): BigInt64Array {
  const out = new BigInt64Array(values.length);
  for (let index = 0; index < values.length; index++) out[index] = BigInt(values[index]);
  return out;
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

/**
 * Byte ranges of `bytes` as Arrow's offsets and values: the ranges themselves when they lie back
 * to back (no copy), else gathered.
 */
function binary(
  bytes: Uint8Array,
  starts: Uint32Array,
  ends: Uint32Array,
  source?: (row: number) => Uint8Array,
): { valueOffsets: Int32Array; data: Uint8Array } {
  const count = starts.length;
  const valueOffsets = new Int32Array(count + 1);
  let contiguous = source === undefined;
  for (let index = 1; index < count && contiguous; index++) contiguous = starts[index] === ends[index - 1];
  if (count > 0 && contiguous && ends[count - 1] - starts[0] <= 0x7fff_ffff) {
    const base = starts[0];
    for (let index = 0; index < count; index++) valueOffsets[index] = starts[index] - base;
    valueOffsets[count] = ends[count - 1] - base;
    return { valueOffsets, data: bytes.subarray(base, ends[count - 1]) };
  }
  let total = 0;
  for (let index = 0; index < count; index++) total += ends[index] - starts[index];
  const data = new Uint8Array(total);
  let at = 0;
  for (let index = 0; index < count; index++) {
    valueOffsets[index] = at;
    data.set((source ? source(index) : bytes).subarray(starts[index], ends[index]), at);
    at += ends[index] - starts[index];
  }
  valueOffsets[count] = at;
  return { valueOffsets, data };
}

function dictionary(values: readonly string[]): arrow.Vector<arrow.Utf8> {
  return arrow.vectorFromArray(values, new arrow.Utf8());
}

/** The batch's streams, each once, and each row's as an index into them. */
function streamsOf(batch: ColumnBatch): { names: string[]; ids: Int32Array } {
  const ids = new Int32Array(batch.length);
  if (!batch.spansCommits) return { names: [batch.stream], ids };
  const known = new Map<string, number>();
  for (let row = 0; row < batch.length; row++) {
    const stream = batch.streamOf(row);
    let id = known.get(stream);
    if (id === undefined) known.set(stream, (id = known.size));
    ids[row] = id;
  }
  return { names: [...known.keys()], ids };
}

/** The batch as an Arrow record batch with `recordSchema`. */
export function toArrowBatch(batch: ColumnBatch): arrow.RecordBatch {
  const length = batch.length;
  const field = (name: string) => recordSchema.fields.find((candidate) => candidate.name === name)!.type;
  const keys = binary(batch.bytes, batch.keyStarts, batch.keyEnds);
  const tags = binary(batch.bytes, batch.tagStarts, batch.tagEnds);
  const streams = streamsOf(batch);
  const children = [
    arrow.makeData({ type: new arrow.Int64(), length, data: int64(batch.positions) }),
    arrow.makeData({
      type: new arrow.Int64(),
      length,
      data: batch.spansCommits ? int64(batch.commits) : new BigInt64Array(length).fill(BigInt(batch.commit)),
    }),
    arrow.makeData({
      type: field('stream') as arrow.Dictionary<arrow.Utf8, arrow.Int32>,
      length,
      data: streams.ids,
      dictionary: dictionary(streams.names),
    }),
    arrow.makeData({ type: new arrow.Int64(), length, data: int64(batch.seqs) }),
    arrow.makeData({ type: new arrow.TimestampMillisecond(), length, data: int64(batch.timestamps) }),
    arrow.makeData({
      type: field('type') as arrow.Dictionary<arrow.Utf8, arrow.Int32>,
      length,
      data: batch.typeIds,
      dictionary: dictionary(batch.types),
      nullBitmap: validity(length, (row) => batch.typeIds[row] >= 0),
    }),
    arrow.makeData({
      type: new arrow.Utf8(),
      length,
      ...keys,
      nullBitmap: validity(length, (row) => batch.hasKey(row)),
    }),
    arrow.makeData({
      type: new arrow.Int64(),
      length,
      data: int64(batch.versions),
      nullBitmap: validity(length, (row) => batch.hasVersion(row)),
    }),
    arrow.makeData({ type: new arrow.Bool(), length, data: tombstoneBits(batch) }),
    arrow.makeData({
      type: field('tags') as arrow.List<arrow.Utf8>,
      length,
      // Tag row offsets are small and ascending: the same bits read as Int32.
      valueOffsets: new Int32Array(batch.tagRows.buffer, batch.tagRows.byteOffset, batch.tagRows.length),
      child: arrow.makeData({ type: new arrow.Utf8(), length: batch.tagStarts.length, ...tags }),
    }),
    arrow.makeData({
      type: new arrow.Binary(),
      length,
      ...binary(batch.bytes, batch.fingerprintStarts, batch.fingerprintEnds),
    }),
    arrow.makeData({
      type: new arrow.Binary(),
      length,
      ...binary(
        batch.bytes,
        batch.payloadStarts,
        batch.payloadEnds,
        batch.externalBytes ? (row) => batch.payloadSource(row) : undefined,
      ),
    }),
  ];
  const struct = arrow.makeData({ type: new arrow.Struct(recordSchema.fields), length, nullCount: 0, children });
  return new arrow.RecordBatch(recordSchema, struct);
}

function tombstoneBits(batch: ColumnBatch): Uint8Array {
  const bits = new Uint8Array((batch.length + 7) >> 3);
  for (let row = 0; row < batch.length; row++) if (batch.isTombstone(row)) bits[row >> 3] |= 1 << (row & 7);
  return bits;
}
