/**
 * Arrow IPC export files: written group by group from columns carved out of one reused arena,
 * through a sink that copies each piece as the writer hands it over, a file is byte for byte
 * the file Apache Arrow's writer makes of the same groups converted into new arrays — written
 * directly or through the page cache.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import * as arrow from 'apache-arrow';
import { describe, expect, it } from 'vitest';
import { loadKernels } from '../../packages/engine/src/kernels/index.js';
import { exportArrowBatch } from '../../packages/engine/src/query/export/export-arrow.js';
import { ipcArenas, writeArrowIpc } from '../../packages/engine/src/query/export/export-ipc.js';
import { FileSink } from '../../packages/engine/src/query/export/export-sink.js';
import { packBatches, unpackBatches } from '../../packages/engine/src/query/export/export-transfer.js';
import type { ColumnBatch } from '../../packages/engine/src/query/reading/column-batch.js';
import { oneCommitEach } from '../support/batches.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

/** The file Apache Arrow's own writer makes of the groups, each converted into new arrays. */
function expectedFile(groups: readonly (readonly ColumnBatch[])[]): Uint8Array {
  return arrow.RecordBatchFileWriter.writeAll(groups.map((group) => exportArrowBatch(group).batch)).toUint8Array(true);
}

describe('Arrow IPC export files', () => {
  it('are the bytes Apache Arrow writes of new arrays, though each group and file reuses the last one’s memory', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    // The first commit is the largest, so the arena's buffer holds every later group and each
    // is carved over the one before: a sink that kept the writer's pieces without copying them
    // would write the later group's values in the earlier one's place. Commits alternate between
    // records with every optional field and records with none.
    for (let commit = 0; commit < 9; commit++) {
      const full = commit % 2 === 0;
      await feed.append(
        Array.from({ length: commit === 0 ? 500 : 60 + commit }, (_, n) =>
          full
            ? {
                payload: `full ${commit}-${n} ${'x'.repeat(n % 50)}`,
                key: `key-${n % 7}`,
                version: commit,
                tombstone: n % 4 === 1,
                type: `t${n % 3}`,
                tags: [`a${n}`, `b${commit}`],
              }
            : { payload: commit === 5 && n === 3 ? new Uint8Array([0xff, 0xfe, n]) : `bare ${commit}-${n}` },
        ),
      );
    }
    // One batch per commit, so that groups alternate between the two kinds of commits.
    const read = oneCommitEach(await collect(feed.readColumns()));
    expect(read.length).toBeGreaterThan(6);
    // As an export worker has them: views of one shared buffer, which V8 copies from byte by
    // byte where the kernel's copy does not (the first commit's payloads, back to back, are
    // longer than copyRangeKernelBytesMin, so they take the kernel).
    const packed = packBatches(read, (bytes) => new SharedArrayBuffer(bytes));
    const batches = unpackBatches(packed.batches, packed.buffers);
    expect(batches[0].bytes.buffer).toBeInstanceOf(SharedArrayBuffer);
    const groups = [batches.slice(0, 1), ...batches.slice(1).map((batch) => [batch]), batches.slice(2, 5)];
    // A file whose payloads are all text, and one where one of them is not (its group's text
    // column is a copy of its own, with a null).
    const cases = [
      { allText: true, groups: groups.filter((group) => group.every((batch) => batch.commit !== 6)) },
      { allText: false, groups },
    ];
    for (const { allText, groups: fileGroups } of cases) {
      const expected = expectedFile(fileGroups);
      for (const [loaded, direct] of [
        [loadKernels('native'), true],
        [loadKernels('native'), false],
        [loadKernels('ts'), false],
      ] as const) {
        let longCopies = 0;
        const kernels = {
          ...loaded,
          copyRange: (...args: Parameters<typeof loaded.copyRange>) => (longCopies++, loaded.copyRange(...args)),
        };
        const file = path.join(directory, `part-${allText}-${kernels.name}-${direct}.arrow`);
        const sink = await FileSink.create(file, direct ? kernels : undefined);
        // Both ways of reaching the disk are taken: the sink's copies differ between them.
        expect(sink.writesDirectly).toBe(direct);
        expect(await writeArrowIpc(kernels, fileGroups, sink, undefined)).toBe(allText);
        // The arena is kept for the next file, which converts its groups over this one's.
        expect(ipcArenas.size).toBe(1);
        expect(longCopies).toBeGreaterThan(0);
        const written = await sink.finish();
        const bytes = fs.readFileSync(file);
        expect(Buffer.compare(bytes, Buffer.from(expected))).toBe(0);
        expect(written).toEqual({
          bytes: expected.length,
          sha256: crypto.createHash('sha256').update(bytes).digest('hex'),
        });
        const table = arrow.tableFromIPC(bytes);
        expect(table.batches.length).toBe(fileGroups.length);
        expect(table.numRows).toBe(fileGroups.flat().reduce((rows, batch) => rows + batch.length, 0));
      }
    }
    await store.close();
  });
});
