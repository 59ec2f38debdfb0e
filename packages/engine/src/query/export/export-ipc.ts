/**
 * Arrow IPC export files: the Arrow file format (Feather v2: a footer indexes the record
 * batches, so readers such as pyarrow map it and jump to any batch), one record batch per group
 * of at most `exportRowGroupRowsMax` rows.
 */
import * as arrow from 'apache-arrow';
import type { Kernels } from '../../kernels/index.js';
import { exportFilesInFlightMax } from '../../limits.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import { exportArrowBatch, exportSchema } from './export-arrow.js';
import { ColumnArena } from './export-columns.js';
import type { ExportSink } from './export-sink.js';
import { SparePool } from './spare-pool.js';

/**
 * The arenas of files written on this thread, kept for the next file. Within a file, every
 * group's columns are carved from one arena's buffer: a new array per column and group made the
 * system fault in and zero a group's size of pages each time, and the garbage collector run a
 * full collection every few groups for the external memory. Across files, the same held for
 * each file's new arena.
 */
export const ipcArenas = new SparePool<ColumnArena>(exportFilesInFlightMax);

/**
 * The writer's output queue, handing each piece to the sink as it is written: the sink takes a
 * copy before `write` returns, so once the writer has written a record batch, none of the
 * batch's arrays is still read and the arena may hand them out again for the next group.
 * (The writer takes an `AsyncByteQueue` of the caller's as where it writes.)
 */
class SinkQueue extends arrow.AsyncByteQueue {
  constructor(private readonly sink: ExportSink) {
    super();
  }

  override write(value: Parameters<arrow.AsyncByteQueue['write']>[0]): void {
    // The writer writes typed arrays only (its pieces, its padding, the columns' buffers).
    const view = value as ArrayBufferView;
    this.sink.writeCopy(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
  }
}

/**
 * Writes the groups of batches (one Arrow record batch each) as one Arrow IPC file to `sink`;
 * `kernels` copy the long ranges of the columns. Says whether every payload was UTF-8 text.
 */
export async function writeArrowIpc(
  kernels: Kernels,
  groups: readonly (readonly ColumnBatch[])[],
  sink: ExportSink,
  signal: AbortSignal | undefined,
  /** Called after each row group with the rows written so far, for progress. */
  onRows?: (rows: number) => void,
): Promise<boolean> {
  const writer = new arrow.RecordBatchFileWriter();
  let rows = 0;
  const columns = ipcArenas.take(() => new ColumnArena());
  let textless = 0;
  try {
    writer.reset(new SinkQueue(sink), exportSchema);
    for (const group of groups) {
      signal?.throwIfAborted();
      columns.reset();
      const converted = exportArrowBatch(group, columns, kernels.copyRange);
      textless += converted.textless;
      writer.write(converted.batch);
      // The group's bytes are the sink's now; the next is made once the disk has room for it.
      await sink.room();
      rows += converted.batch.numRows;
      onRows?.(rows);
    }
    // The footer, written as the writer closes.
    writer.finish();
    await sink.room();
    return textless === 0;
  } finally {
    // The sink copied every piece as it was handed over: nothing reads the arena's arrays now.
    ipcArenas.give(columns);
  }
}
