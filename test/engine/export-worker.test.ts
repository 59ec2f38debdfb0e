/**
 * Export files are written on export workers, two at once, when the engine runs from its build
 * (as users run it): the batches are copied into a buffer shared with the worker, reused by a
 * later file and dropped a while after the last. Run from its sources, as here, files are
 * written on the calling thread.
 * Both must write the same bytes in every format, also when the buffers are reused by a second
 * export in the same process, and the same manifests (in which each file's `payloadText` comes
 * from the thread that wrote it).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Store } from '../../packages/engine/src/index.js';
import * as limits from '../../packages/engine/src/limits.js';
import { exportStoreOptions, fillExportFeed } from '../support/export-workload.mjs';
import { temporaryDirectory } from '../support/store.js';

const engine = path.resolve('packages/engine/dist/index.js');
const workload = path.resolve('test/support/export-workload.mjs');
const formats = ['ndjson', 'arrow', 'parquet'] as const;

/** The files of every export under `directory` (its manifest too), by export and name. */
function exportedFiles(directory: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (const format of formats) {
    for (const name of fs.readdirSync(path.join(directory, format)).sort())
      files.set(`${format}/${name}`, fs.readFileSync(path.join(directory, format, name)));
  }
  return files;
}

describe('export files on the export workers', () => {
  it('are the files an export on the calling thread writes, in every format, twice in one process', async () => {
    // The child writes the feed, exports it once to warm the workers' buffers, then again.
    const onWorkers = temporaryDirectory();
    const script = `Promise.all([import(${JSON.stringify(engine)}), import(${JSON.stringify(workload)})]).then(async ([{ Store }, { fillExportFeed, exportStoreOptions }]) => {
      const store = await Store.open(${JSON.stringify(path.join(onWorkers, 'data'))}, exportStoreOptions());
      await fillExportFeed(store, ${limits.exportFileBytesTarget});
      const feed = await store.feed('f');
      const counts = [];
      for (const round of ['warm', 'out']) {
        for (const format of ${JSON.stringify(formats)}) {
          const to = ${JSON.stringify(onWorkers)} + '/' + round + '/' + format;
          counts.push((await feed.export({ format, to })).files.length);
        }
      }
      await store.close();
      const offthread = await import(${JSON.stringify(path.resolve('packages/engine/dist/query/export/export-offthread.js'))});
      const { runBufferReuses } = await import(${JSON.stringify(path.resolve('packages/engine/dist/storage/run-buffers.js'))});
      // The buffers shared with the workers are kept a while for a next export, then dropped.
      const sparesAfter = offthread.spareExportBuffers();
      await new Promise((resolve) => setTimeout(resolve, ${limits.exportSpareBuffersKeepMs} + 500));
      console.log(JSON.stringify({ offThread: offthread.exportFilesInFlight(), counts, sparesAfter, sparesLater: offthread.spareExportBuffers(), runBufferReuses: runBufferReuses() }));
    })`;
    const child = JSON.parse(
      execFileSync(process.execPath, ['-e', script], { encoding: 'utf8', maxBuffer: 1 << 20 })
        .trim()
        .split('\n')
        .pop()!,
    );
    expect(child.offThread).toBeGreaterThanOrEqual(1);
    expect(child.sparesAfter).toBeGreaterThanOrEqual(1);
    expect(child.sparesLater).toBe(0);
    // Every export was split into at least two files, written at once where there are two cores.
    for (const count of child.counts) expect(count).toBeGreaterThanOrEqual(2);
    // Later files' runs were read into buffers of earlier ones, released once packed for a worker.
    expect(child.runBufferReuses).toBeGreaterThan(0);

    const here = temporaryDirectory();
    const store = await Store.open(path.join(here, 'data'), exportStoreOptions());
    try {
      await fillExportFeed(store, limits.exportFileBytesTarget);
      const feed = await store.feed('f');
      // On the calling thread a file's run buffers are released only once it is written: the
      // next file, read meanwhile, must not read into them (the files would differ below).
      for (const format of formats) {
        const manifest = await feed.export({ format, to: path.join(here, 'out', format) });
        // The workload's first file holds text payloads only, a later one some binary ones.
        expect(manifest.files.map((file) => file.payloadText)).toEqual(manifest.files.map((_, index) => index === 0));
      }
    } finally {
      await store.close();
    }
    const expected = exportedFiles(path.join(here, 'out'));
    for (const round of ['warm', 'out']) {
      const written = exportedFiles(path.join(onWorkers, round));
      expect([...written.keys()]).toEqual([...expected.keys()]);
      for (const [name, bytes] of expected) expect(written.get(name)!.equals(bytes), `${round}/${name}`).toBe(true);
    }
  }, 240_000);
});
