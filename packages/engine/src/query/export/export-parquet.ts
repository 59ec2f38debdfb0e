/**
 * Parquet export files, written by `parquet-wasm`: the Rust `parquet` crate (the Apache Arrow
 * project's) compiled to WebAssembly, which takes Arrow IPC — what an export already makes — and
 * streams row groups out as they fill. It was chosen over `hyparquet-writer` (pure JavaScript,
 * which wants one JavaScript value per cell) by measurement: writing 500,000 rows of 200-byte
 * payloads with Snappy took 1.1 s with parquet-wasm against 3.1 s with hyparquet-writer, for
 * files of the same size. DuckDB's Node API would write Parquet too, but as a 60 MB native
 * database engine it is much more than a file writer needs.
 *
 * Row groups hold at most `exportRowGroupRowsMax` rows (and about `exportRowGroupBytesMax`
 * bytes) so a reader can decode one in memory; `position`, `commit` and `timestamp` carry row
 * group and page statistics, so range queries skip what they do not need.
 * Dictionary encoding is on only for the columns that repeat (feed, stream, type): on payloads
 * and keys, mostly distinct, it cost time and saved nothing.
 */
import * as arrow from 'apache-arrow';
import type { Kernels } from '../../kernels/index.js';
import { exportFilesInFlightMax, exportRowGroupBytesMax, exportRowGroupRowsMax } from '../../limits.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import { exportArrowBatch } from './export-arrow.js';
import { ColumnArena } from './export-columns.js';
import type { ExportSink } from './export-sink.js';
import { SparePool } from './spare-pool.js';

type ParquetWasm = typeof import('parquet-wasm/node');

let loaded: ParquetWasm | undefined;

/** parquet-wasm compiles a 5 MB WebAssembly module: it is loaded on the first Parquet export. */
async function parquetWasm(): Promise<ParquetWasm> {
  loaded ??= (await import('parquet-wasm/node')) as ParquetWasm;
  return loaded;
}

/** The columns with statistics, per row group and per page: what range queries on an export filter by. */
const statisticsColumns = ['position', 'commit', 'timestamp'];

function writerProperties(wasm: ParquetWasm, createdBy: string) {
  let builder = new wasm.WriterPropertiesBuilder()
    .setCreatedBy(createdBy)
    .setCompression(wasm.Compression.SNAPPY)
    .setMaxRowGroupSize(exportRowGroupRowsMax)
    .setMaxRowGroupBytes(exportRowGroupBytesMax)
    .setDictionaryEnabled(false)
    // Statistics only where a reader's range query uses them: the least and greatest key, tag,
    // payload or fingerprint of a row group skips almost nothing, and comparing every value cost
    // a fifth of the writer's time.
    .setStatisticsEnabled(wasm.EnabledStatistics.None);
  for (const column of ['feed', 'stream', 'type']) builder = builder.setColumnDictionaryEnabled(column, true);
  for (const column of statisticsColumns)
    builder = builder.setColumnStatisticsEnabled(column, wasm.EnabledStatistics.Page);
  return builder.build();
}

/**
 * What one Parquet file's groups are converted in, one group after another, each copied into
 * WebAssembly before the next is converted: buffers kept from group to group, not new ones per
 * group and column, whose pages the system would fault in and zero anew every time and whose
 * external memory made the garbage collector run a full collection every few groups (with the
 * two, a third of a Parquet export's time). One per file, as two exports writing files on one
 * thread interleave their groups; kept for the thread's next file (`groupScratches`).
 */
class GroupScratch {
  /** The group's columns. */
  readonly columns = new ColumnArena();
  /** The group's Arrow IPC stream, handed to WebAssembly, which copies it in. */
  private ipc = new Uint8Array(0);

  async ipcStream(batch: arrow.RecordBatch): Promise<Uint8Array> {
    const writer = new arrow.RecordBatchStreamWriter();
    writer.write(batch);
    writer.finish();
    // The writer's chunks are views of the batch's buffers, with the messages' headers between.
    const chunks: Uint8Array[] = [];
    let length = 0;
    for await (const chunk of writer) {
      chunks.push(chunk);
      length += chunk.length;
    }
    if (this.ipc.length < length) this.ipc = new Uint8Array(Math.ceil(length * 1.25));
    let at = 0;
    for (const chunk of chunks) {
      this.ipc.set(chunk, at);
      at += chunk.length;
    }
    return this.ipc.subarray(0, length);
  }
}

/** The scratch of files written on this thread, kept for the next file. */
export const groupScratches = new SparePool<GroupScratch>(exportFilesInFlightMax);

/**
 * Writes the groups of batches as one Parquet file to `sink`. `createdBy` names the writer in
 * the file's footer; nothing else in the file depends on when or where it was written. `kernels`
 * copy the long ranges of the columns. Says whether every payload was UTF-8 text.
 */
export async function writeParquet(
  kernels: Kernels,
  groups: readonly (readonly ColumnBatch[])[],
  sink: ExportSink,
  createdBy: string,
  signal: AbortSignal | undefined,
  /** Called as the writer takes each row group, with the rows of the groups before it, for progress. */
  onRows?: (rows: number) => void,
): Promise<boolean> {
  const wasm = await parquetWasm();
  let next = 0;
  let rowsTaken = 0;
  let textless = 0;
  const scratch = groupScratches.take(() => new GroupScratch());
  // Each group crosses into WebAssembly as an Arrow IPC stream, converted only when the writer
  // asks for it, so one group at a time is in memory on either side.
  const batches = new ReadableStream({
    async pull(controller) {
      if (signal?.aborted) {
        controller.error(signal.reason);
        return;
      }
      // The writer asks for a group once it has taken the one before: those rows are encoded.
      onRows?.(rowsTaken);
      if (next === groups.length) {
        controller.close();
        return;
      }
      for (const batch of groups[next]) rowsTaken += batch.length;
      scratch.columns.reset();
      const converted = exportArrowBatch(groups[next++], scratch.columns, kernels.copyRange);
      textless += converted.textless;
      const table = wasm.Table.fromIPCStream(await scratch.ipcStream(converted.batch));
      try {
        for (const recordBatch of table.recordBatches()) controller.enqueue(recordBatch);
      } finally {
        // The batches share the table's buffers, which live on without it. Freed only by the
        // garbage collector, tables held WebAssembly memory that grew by the file (300 MB per
        // 600,000 records, towards the 4 GB a 32-bit module can address) and was page-faulted
        // in anew: freeing each at once halved a file's time.
        table.free();
      }
    },
  });
  const output = await wasm.transformParquetStream(batches, writerProperties(wasm, createdBy));
  for await (const chunk of output as unknown as AsyncIterable<Uint8Array>) await sink.write(chunk);
  // The output ended, so the writer took every group and asks for no more: the scratch is free.
  // After a failure it is dropped instead, as the writer might still be converting into it.
  groupScratches.give(scratch);
  signal?.throwIfAborted();
  return textless === 0;
}
