/**
 * Arrow IPC export files: the Arrow file format (Feather v2: a footer indexes the record
 * batches, so readers such as pyarrow map it and jump to any batch), one record batch per group
 * of at most `exportRowGroupRowsMax` rows.
 */
import * as arrow from 'apache-arrow';
import { exportArrowBatch, exportSchema, exportSchemaWithText } from './export-arrow.js';
import type { ColumnBatch } from './column-batch.js';
import type { ExportSink } from './export-sink.js';

/** Writes the groups of batches (one Arrow record batch each) as one Arrow IPC file to `sink`. */
export async function writeArrowIpc(groups: readonly (readonly ColumnBatch[])[], withText: boolean, sink: ExportSink, signal: AbortSignal | undefined): Promise<void> {
  const writer = new arrow.RecordBatchFileWriter();
  // The writer queues its output; it is taken and written while batches are still converted.
  const draining = (async () => {
    for await (const chunk of writer) await sink.write(chunk);
  })();
  try {
    writer.reset(undefined, withText ? exportSchemaWithText : exportSchema);
    for (const group of groups) {
      signal?.throwIfAborted();
      writer.write(exportArrowBatch(group, withText));
      // Lets the drain keep up, so at most about one batch's bytes wait in the queue.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  } finally {
    writer.finish();
    await draining;
  }
}
