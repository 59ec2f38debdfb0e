/**
 * One export file written whole: its batches converted to the format and written to a new file,
 * hashed and synced. The same function runs on the export worker (`export-worker.ts`) or, where
 * no worker can run, on the calling thread: the bytes are the same either way.
 */
import { loadKernels } from '../../kernels/index.js';
import { exportRowGroupBytesMax, exportRowGroupRowsMax } from '../../limits.js';
import type { ColumnBatch } from '../reading/column-batch.js';
import type { ExportFormat } from './export-manifest.js';
import { FileSink, type WrittenFile } from './export-sink.js';

export interface FileJob {
  /** The kernel set of the feed's store: a file's bytes are the same with either. */
  readonly kernels: 'native' | 'ts';
  readonly file: string;
  readonly format: ExportFormat;
  /** The writer named in a Parquet file's footer. */
  readonly createdBy: string;
}

/** About how many bytes of record data a batch holds: what file and row group sizes count. */
export function batchBytes(batch: ColumnBatch): number {
  let bytes = 0;
  for (let row = 0; row < batch.length; row++) {
    bytes +=
      batch.payloadEnds[row] -
      batch.payloadStarts[row] +
      batch.fingerprintEnds[row] -
      batch.fingerprintStarts[row] +
      (batch.keyEnds[row] - batch.keyStarts[row]);
  }
  return bytes + (batch.tagStarts.length > 0 ? batch.tagEnds[batch.tagEnds.length - 1] - batch.tagStarts[0] : 0);
}

/** A file's batches in groups of at most `exportRowGroupRowsMax` rows (and about `exportRowGroupBytesMax` bytes). */
function groupsOf(batches: readonly ColumnBatch[]): ColumnBatch[][] {
  const groups: ColumnBatch[][] = [];
  let group: ColumnBatch[] = [];
  let rows = 0;
  let bytes = 0;
  for (const batch of batches) {
    const size = batchBytes(batch);
    if (group.length > 0 && (rows + batch.length > exportRowGroupRowsMax || bytes + size > exportRowGroupBytesMax)) {
      groups.push(group);
      group = [];
      rows = 0;
      bytes = 0;
    }
    group.push(batch);
    rows += batch.length;
    bytes += size;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/** A file written: its size and hash, and whether every payload in it is UTF-8 text (the manifest's `payloadText`). */
export interface ExportFileWritten extends WrittenFile {
  readonly payloadText: boolean;
}

/**
 * Writes `batches` as the file `job.file`; the formats' modules load on first use. Which
 * payloads are text is found here, on the export worker where there is one, as the file is
 * converted: not on the event loop's thread, which reads the next file meanwhile.
 */
export async function writeExportFile(
  job: FileJob,
  batches: readonly ColumnBatch[],
  signal?: AbortSignal,
  /** Called as rows are converted and written, with the rows so far, for progress. */
  onRows?: (rows: number) => void,
): Promise<ExportFileWritten> {
  const kernels = loadKernels(job.kernels);
  const sink = await FileSink.create(job.file, kernels);
  let payloadText: boolean;
  try {
    if (job.format === 'ndjson') {
      const { writeNdjson } = await import('./export-ndjson.js');
      payloadText = await writeNdjson(kernels, batches, sink, signal, onRows);
    } else if (job.format === 'arrow') {
      const { writeArrowIpc } = await import('./export-ipc.js');
      payloadText = await writeArrowIpc(kernels, groupsOf(batches), sink, signal, onRows);
    } else {
      const { writeParquet } = await import('./export-parquet.js');
      payloadText = await writeParquet(kernels, groupsOf(batches), sink, job.createdBy, signal, onRows);
    }
  } catch (error) {
    await sink.abandon();
    throw error;
  }
  return { ...(await sink.finish()), payloadText };
}
