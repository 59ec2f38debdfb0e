/**
 * Column batches as they cross to the export worker: each typed array as a reference into one
 * of a list of buffers, every buffer once. A batch's arrays are views of buffers a whole run
 * shares (its bytes as read, its decoded columns), so sending each distinct buffer once is one
 * copy of what was read, where copying batch by batch would repeat a run's bytes per batch.
 */
import { ColumnBatch } from './column-batch.js';
import type { FileJob } from './export-file.js';
import type { WrittenFile } from './export-sink.js';

/** Where a typed array lies: which buffer of the message, from which byte, how many elements. */
interface ArrayRef {
  readonly buffer: number;
  readonly byteOffset: number;
  readonly length: number;
}

const float64Columns = ['positions', 'seqs', 'timestamps', 'versions'] as const;
const uint32Columns = ['fingerprintStarts', 'fingerprintEnds', 'keyStarts', 'keyEnds', 'tagRows', 'tagStarts', 'tagEnds', 'payloadStarts', 'payloadEnds'] as const;

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
}

export interface FileMessage {
  readonly id: number;
  readonly job: FileJob;
  readonly batches: PackedBatch[];
  readonly buffers: ArrayBuffer[];
}

export type FileReply =
  | { readonly id: number; readonly written: WrittenFile; readonly error?: undefined }
  | { readonly id: number; readonly written?: undefined; readonly error: { code?: string; message: string; details?: Record<string, unknown> } };

/** The batches as references into the distinct buffers they are views of. */
export function packBatches(batches: readonly ColumnBatch[]): { batches: PackedBatch[]; buffers: ArrayBuffer[] } {
  const buffers: ArrayBuffer[] = [];
  const ids = new Map<ArrayBufferLike, number>();
  const ref = (array: Float64Array | Uint32Array | Int32Array | Uint8Array): ArrayRef => {
    let buffer = ids.get(array.buffer);
    if (buffer === undefined) {
      buffer = buffers.push(array.buffer as ArrayBuffer) - 1;
      ids.set(array.buffer, buffer);
    }
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
  }));
  return { batches: packed, buffers };
}

/** The batches again, over the buffers received. */
export function unpackBatches(packed: readonly PackedBatch[], buffers: readonly ArrayBuffer[]): ColumnBatch[] {
  const view = <T>(make: new (buffer: ArrayBuffer, byteOffset: number, length: number) => T, { buffer, byteOffset, length }: ArrayRef): T =>
    new make(buffers[buffer], byteOffset, length);
  return packed.map((batch) => {
    const columns = {
      flags: view(Uint8Array, batch.flags),
      typeIds: view(Int32Array, batch.typeIds),
      ...Object.fromEntries(float64Columns.map((column, index) => [column, view(Float64Array, batch.float64[index])])),
      ...Object.fromEntries(uint32Columns.map((column, index) => [column, view(Uint32Array, batch.uint32[index])])),
    } as ConstructorParameters<typeof ColumnBatch>[5];
    const externalBytes = batch.externalBytes ? view(Uint8Array, batch.externalBytes) : undefined;
    return new ColumnBatch(batch.feed, batch.commit, batch.stream, batch.types, view(Uint8Array, batch.bytes), columns, externalBytes);
  });
}
