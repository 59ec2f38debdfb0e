/**
 * Column batches as they cross to the export worker: each typed array as a reference into one
 * of a list of buffers, every buffer once. A batch's arrays are views of buffers a whole run
 * shares (its bytes as read, its decoded columns), so sending each distinct buffer once is one
 * copy of what was read, where copying batch by batch would repeat a run's bytes per batch.
 */

import type { ErrorMessage } from '../../errors.js';
import { payloadElsewhere } from '../../storage/run-columns.js';
import { type BatchCommit, ColumnBatch } from '../reading/column-batch.js';
import { gatherRanges } from './export-columns.js';
import { batchBytes, type ExportFileWritten, type FileJob } from './export-file.js';

/**
 * A run's bytes are sent whole only while the file's batches use at least this share of them
 * (a RAW export uses nearly all): batches that keep a few records of a run (dedup, latest) are
 * compacted first, so the copy is of the records, not of every run they came from.
 */
const sharedBufferUseMin = 1 / 4;
/** … except for buffers below this many bytes, which cost little to send whole. */
const sharedBufferBytesSmall = 1024 * 1024;

/** Where a typed array lies: which buffer of the message, from which byte, how many elements. */
interface ArrayRef {
  readonly buffer: number;
  readonly byteOffset: number;
  readonly length: number;
}

const float64Columns = ['positions', 'seqs', 'timestamps', 'versions'] as const;
const uint32Columns = [
  'fingerprintStarts',
  'fingerprintEnds',
  'keyStarts',
  'keyEnds',
  'tagRows',
  'tagStarts',
  'tagEnds',
  'payloadStarts',
  'payloadEnds',
] as const;

export interface PackedBatch {
  readonly feed: string;
  readonly commit: number;
  readonly stream: string;
  readonly types: readonly string[];
  readonly bytes: ArrayRef;
  readonly externalBytes: ArrayRef | undefined;
  readonly flags: ArrayRef;
  readonly typeIds: ArrayRef;
  readonly float64: ArrayRef[];
  readonly uint32: ArrayRef[];
  /** A batch that spans commits: its commits, and each row's (`ColumnBatch.rowCommits`). */
  readonly rowCommits: { readonly commits: readonly BatchCommit[]; readonly rows: ArrayRef } | undefined;
}

export interface FileMessage {
  readonly id: number;
  readonly job: FileJob;
  readonly batches: PackedBatch[];
  readonly buffers: ArrayBufferLike[];
}

export type FileReply =
  | {
      readonly id: number;
      readonly written: ExportFileWritten;
      readonly error?: undefined;
      readonly progress?: undefined;
    }
  | {
      readonly id: number;
      readonly written?: undefined;
      readonly error: ErrorMessage;
      readonly progress?: undefined;
    }
  /** Not an answer: the rows written so far, while the file is being written. */
  | { readonly id: number; readonly written?: undefined; readonly error?: undefined; readonly progress: number };

/** The batch with its variable-length values gathered into bytes of its own: for a sparse batch. */
export function compactBatch(batch: ColumnBatch): ColumnBatch {
  const first = batch.tagRows[0];
  const last = batch.tagRows[batch.length];
  const parts = [
    gatherRanges([batch], () => ({ starts: batch.fingerprintStarts, ends: batch.fingerprintEnds, bytes: batch.bytes })),
    gatherRanges([batch], () => ({ starts: batch.keyStarts, ends: batch.keyEnds, bytes: batch.bytes })),
    gatherRanges([batch], () => ({
      starts: batch.tagStarts.subarray(first, last),
      ends: batch.tagEnds.subarray(first, last),
      bytes: batch.bytes,
    })),
    gatherRanges([batch], () => ({
      starts: batch.payloadStarts,
      ends: batch.payloadEnds,
      bytes: batch.bytes,
      external: batch.externalBytes,
    })),
  ];
  const bytes = new Uint8Array(parts.reduce((total, part) => total + part.data.length, 0));
  let base = 0;
  const ranges = parts.map(({ valueOffsets, data }) => {
    bytes.set(data, base);
    const count = valueOffsets.length - 1;
    const starts = new Uint32Array(count);
    const ends = new Uint32Array(count);
    for (let index = 0; index < count; index++) {
      starts[index] = base + valueOffsets[index];
      ends[index] = base + valueOffsets[index + 1];
    }
    base += data.length;
    return { starts, ends };
  });
  const [fingerprints, keys, tags, payloads] = ranges;
  const tagRows = new Uint32Array(batch.length + 1);
  for (let row = 0; row <= batch.length; row++) tagRows[row] = batch.tagRows[row] - first;
  // Every payload now lies in the batch's own bytes.
  const flags = batch.flags.map((flag) => flag & ~payloadElsewhere);
  return new ColumnBatch(
    batch.feed,
    batch.commit,
    batch.stream,
    batch.types,
    bytes,
    {
      positions: batch.positions,
      seqs: batch.seqs,
      timestamps: batch.timestamps,
      versions: batch.versions,
      flags,
      typeIds: batch.typeIds,
      fingerprintStarts: fingerprints.starts,
      fingerprintEnds: fingerprints.ends,
      keyStarts: keys.starts,
      keyEnds: keys.ends,
      tagRows,
      tagStarts: tags.starts,
      tagEnds: tags.ends,
      payloadStarts: payloads.starts,
      payloadEnds: payloads.ends,
    },
    undefined,
    batch.rowCommits,
  );
}

/** The batches, those that use little of the bytes they view compacted (`sharedBufferUseMin`). */
function compactSparse(batches: readonly ColumnBatch[]): ColumnBatch[] {
  const used = new Map<ArrayBufferLike, number>();
  const sizes = batches.map(batchBytes);
  for (const [index, batch] of batches.entries())
    used.set(batch.bytes.buffer, (used.get(batch.bytes.buffer) ?? 0) + sizes[index]);
  return batches.map((batch) => {
    const buffer = batch.bytes.buffer;
    const sparse =
      buffer.byteLength > sharedBufferBytesSmall && used.get(buffer)! < buffer.byteLength * sharedBufferUseMin;
    return sparse ? compactBatch(batch) : batch;
  });
}

/**
 * The batches as references into one buffer holding a copy of every distinct buffer they are
 * views of, laid end to end (each at a multiple of 8 bytes, for the float columns). The copy is
 * one native copy per buffer here, and the buffer is then shared with the worker, not copied
 * again: cloning the buffers into the message and out of it again on the other side cost the
 * reading thread a fifth of an export's time. `take` gives the buffer: one an earlier file used
 * (a `SharedArrayBuffer`, for the worker), so its pages are not faulted in anew for every file.
 */
export function packBatches(
  batches: readonly ColumnBatch[],
  take: (bytes: number) => ArrayBufferLike = (bytes) => new ArrayBuffer(bytes),
): { batches: PackedBatch[]; buffers: ArrayBufferLike[] } {
  const packed = referBatches(batches);
  // Each buffer's viewed span lands at a multiple of 8 bytes, from a multiple of 8 in its
  // buffer, so float columns stay aligned.
  const starts: number[] = [];
  let total = 0;
  for (const { low, high } of packed.spans) {
    starts.push(total);
    total += Math.ceil((high - low) / 8) * 8;
  }
  // `take` may hand back a buffer an earlier file used: only the ranges copied here are read.
  const combined = new Uint8Array(take(total), 0, total);
  packed.buffers.forEach((buffer, index) => {
    const { low, high } = packed.spans[index];
    combined.set(new Uint8Array(buffer, low, high - low), starts[index]);
  });
  const rebase = (ref: ArrayRef): ArrayRef => ({
    buffer: 0,
    byteOffset: starts[ref.buffer] + ref.byteOffset - packed.spans[ref.buffer].low,
    length: ref.length,
  });
  return {
    batches: packed.batches.map((batch) => ({
      ...batch,
      bytes: rebase(batch.bytes),
      externalBytes: batch.externalBytes ? rebase(batch.externalBytes) : undefined,
      flags: rebase(batch.flags),
      typeIds: rebase(batch.typeIds),
      float64: batch.float64.map(rebase),
      uint32: batch.uint32.map(rebase),
      rowCommits: batch.rowCommits && { commits: batch.rowCommits.commits, rows: rebase(batch.rowCommits.rows) },
    })),
    buffers: [combined.buffer],
  };
}

/**
 * The batches as references into the distinct buffers they are views of, and the span of each
 * buffer they view (from a multiple of 8 bytes): only that is copied. A buffer runs were read
 * into has room past them (a stretch's 8 MiB, or room for a longer run), and a file whose
 * batches start or end part-way into a long run views only part of it: copied whole, a file's
 * buffer held half as much again as its batches.
 */
function referBatches(batches: readonly ColumnBatch[]): {
  batches: PackedBatch[];
  buffers: ArrayBuffer[];
  spans: { low: number; high: number }[];
} {
  batches = compactSparse(batches);
  const buffers: ArrayBuffer[] = [];
  const spans: { low: number; high: number }[] = [];
  const ids = new Map<ArrayBufferLike, number>();
  const ref = (array: Float64Array | Uint32Array | Int32Array | Uint8Array): ArrayRef => {
    let buffer = ids.get(array.buffer);
    if (buffer === undefined) {
      buffer = buffers.push(array.buffer as ArrayBuffer) - 1;
      spans.push({ low: Number.POSITIVE_INFINITY, high: 0 });
      ids.set(array.buffer, buffer);
    }
    const span = spans[buffer];
    span.low = Math.min(span.low, Math.floor(array.byteOffset / 8) * 8);
    span.high = Math.max(span.high, array.byteOffset + array.byteLength);
    return { buffer, byteOffset: array.byteOffset, length: array.length };
  };
  const packed = batches.map((batch) => ({
    feed: batch.feed,
    commit: batch.commit,
    stream: batch.stream,
    types: batch.types,
    bytes: ref(batch.bytes),
    externalBytes: batch.externalBytes ? ref(batch.externalBytes) : undefined,
    flags: ref(batch.flags),
    typeIds: ref(batch.typeIds),
    float64: float64Columns.map((column) => ref(batch[column])),
    uint32: uint32Columns.map((column) => ref(batch[column])),
    rowCommits: batch.rowCommits && { commits: batch.rowCommits.commits, rows: ref(batch.rowCommits.rows) },
  }));
  return { batches: packed, buffers, spans };
}

/** The batches again, over the buffers received. */
export function unpackBatches(packed: readonly PackedBatch[], buffers: readonly ArrayBufferLike[]): ColumnBatch[] {
  const view = <T>(
    make: new (buffer: ArrayBufferLike, byteOffset: number, length: number) => T,
    { buffer, byteOffset, length }: ArrayRef,
  ): T => new make(buffers[buffer], byteOffset, length);
  return packed.map((batch) => {
    const columns = {
      flags: view(Uint8Array, batch.flags),
      typeIds: view(Int32Array, batch.typeIds),
      ...Object.fromEntries(float64Columns.map((column, index) => [column, view(Float64Array, batch.float64[index])])),
      ...Object.fromEntries(uint32Columns.map((column, index) => [column, view(Uint32Array, batch.uint32[index])])),
    } as ConstructorParameters<typeof ColumnBatch>[5];
    const externalBytes = batch.externalBytes ? view(Uint8Array, batch.externalBytes) : undefined;
    return new ColumnBatch(
      batch.feed,
      batch.commit,
      batch.stream,
      batch.types,
      view(Uint8Array, batch.bytes),
      columns,
      externalBytes,
      batch.rowCommits && { commits: batch.rowCommits.commits, rows: view(Uint32Array, batch.rowCommits.rows) },
    );
  });
}
