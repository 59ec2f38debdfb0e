/**
 * The worker thread that writes export files: it converts a file's batches to the format,
 * hashes and writes them (`export-file.ts`) while the event loop's thread reads the next file's
 * batches, so an export uses two cores rather than one. The batches arrive as the buffers they
 * are views of (`export-offthread.ts` packs them) and are rebuilt over the copies.
 */
import { parentPort } from 'node:worker_threads';
import { errorMessageOf } from '../../errors.js';
import { progressIntervalMs } from '../../limits.js';
import { writeExportFile } from './export-file.js';
import { type FileMessage, type FileReply, unpackBatches } from './export-transfer.js';

parentPort?.on('message', (message: FileMessage) => {
  void (async () => {
    let reply: FileReply;
    try {
      // The message's buffer is shared: the reply tells that this file no longer reads it.
      // Rows written cross to the export's thread as messages, no more often than a display redraws.
      let posted = Number.NEGATIVE_INFINITY;
      const onRows = (rows: number) => {
        const now = performance.now();
        if (now - posted < progressIntervalMs) return;
        posted = now;
        parentPort!.postMessage({ id: message.id, progress: rows } satisfies FileReply);
      };
      reply = {
        id: message.id,
        written: await writeExportFile(message.job, unpackBatches(message.batches, message.buffers), undefined, onRows),
      };
    } catch (error) {
      reply = { id: message.id, error: errorMessageOf(error, 'an export file failed') };
    }
    parentPort!.postMessage(reply);
  })();
});
