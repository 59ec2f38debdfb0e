/**
 * One export file written whole: its batches converted to the format and written to a new file,
 * hashed and synced. The same function runs on the export worker (`export-worker.ts`) or, where
 * no worker can run, on the calling thread: the bytes are the same either way.
 */
import { loadKernels } from '../kernels/index.js';
import { exportRowGroupBytesMax, exportRowGroupRowsMax } from '../limits.js';
import type { ColumnBatch } from './column-batch.js';
import type { ExportFormat } from './export-manifest.js';
import { FileSink, type WrittenFile } from './export-sink.js';

export interface FileJob {
  /** The kernel set of the feed's store: a file's bytes are the same with either. */
  readonly kernels: 'native' | 'ts';
  readonly file: string;
  readonly format: ExportFormat;
  /** Whether every payload of the file is UTF-8 text: it then has the text payload column. */
  readonly withText: boolean;
  /** The writer named in a Parquet file's footer. */
  readonly createdBy: string;
}

/** About how many bytes of record data a batch holds: what file and row group sizes count. */
export function batchBytes(batch: ColumnBatch): number {
  let bytes = 0;
  for (let row = 0; row < batch.length; row++) {
    bytes += batch.payloadEnds[row] - batch.payloadStarts[row] + batch.fingerprintEnds[row] - batch.fingerprintStarts[row] + (batch.keyEnds[row] - batch.keyStarts[row]);
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

/** Writes `batches` as the file `job.file`; the formats' modules load on first use. */
export async function writeExportFile(job: FileJob, batches: readonly ColumnBatch[], signal?: AbortSignal): Promise<WrittenFile> {
  const kernels = loadKernels(job.kernels);
  const sink = await FileSink.create(job.file, kernels);
  try {
    if (job.format === 'ndjson') {
      const { writeNdjson } = await import('./export-ndjson.js');
      await writeNdjson(kernels, batches, job.withText, sink, signal);
    } else if (job.format === 'arrow') {
      const { writeArrowIpc } = await import('./export-ipc.js');
      await writeArrowIpc(kernels, groupsOf(batches), job.withText, sink, signal);
    } else {
      const { writeParquet } = await import('./export-parquet.js');
      await writeParquet(kernels, groupsOf(batches), job.withText, sink, job.createdBy, signal);
    }
  } catch (error) {
    await sink.abandon();
    throw error;
  }
  return sink.finish();
}
