/**
 * The Parquet writer's WebAssembly memory: a file of many groups needs about one group's worth,
 * however many groups it has. Each group's table is freed as soon as its batches are handed to
 * the writer; left to the garbage collector, tables kept the module's memory growing with the
 * file towards the 4 GB a 32-bit module can address.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { loadKernels } from '../../packages/engine/src/kernels/index.js';
import { groupScratches, writeParquet } from '../../packages/engine/src/query/export/export-parquet.js';
import type { ExportSink } from '../../packages/engine/src/query/export/export-sink.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

/** The module the engine loads (one instance per process), resolved as the engine resolves it. */
const parquetWasm = createRequire(new URL('../../packages/engine/package.json', import.meta.url))(
  'parquet-wasm/node',
) as { wasmMemory(): { buffer: ArrayBuffer } };

/** A sink that counts bytes: the file's contents are not what this test is about. */
function countingSink(): ExportSink & { bytes: number } {
  return {
    bytes: 0,
    async write(bytes: Uint8Array) {
      this.bytes += bytes.length;
    },
    reusable: () => undefined,
    writeCopy(bytes: Uint8Array) {
      this.bytes += bytes.length;
    },
    room: async () => undefined,
  };
}

describe('Parquet export memory', () => {
  it('holds WebAssembly memory for about one group while writing a file of many', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const payload = 'p'.repeat(2000);
    for (let commit = 0; commit < 4; commit++)
      await feed.append(Array.from({ length: 1000 }, (_, n) => ({ payload: `${commit}-${n}-${payload}` })));
    const batches = await collect(feed.readColumns());
    await store.close();
    // One group is every batch: 4,000 records, 8 MB of payloads once as bytes and once as text.
    const groupBytes = 4000 * 2 * 2000;
    const groups = Array.from({ length: 40 }, () => batches);
    const kernels = loadKernels('auto');
    const first = countingSink();
    await writeParquet(kernels, groups, first, 'test', undefined);
    // The file's scratch is kept for the next file on this thread, and taken by it.
    expect(groupScratches.size).toBe(1);
    const afterFirst = parquetWasm.wasmMemory().buffer.byteLength;
    const second = countingSink();
    await writeParquet(kernels, groups, second, 'test', undefined);
    expect(groupScratches.size).toBe(1);
    const afterSecond = parquetWasm.wasmMemory().buffer.byteLength;
    expect(second.bytes).toBe(first.bytes);
    expect(first.bytes).toBeGreaterThan(0);
    // Forty groups are 640 MB of payloads. The module's memory only grows, so a second file
    // of the same size finds room in what the first left: it grows by little (17 MB here), where
    // tables left to the collector grew it by about the file (660 MB). Only the growth is
    // checked: the module may be shared with other tests of this process.
    expect(afterSecond - afterFirst).toBeLessThan(3 * groupBytes);
  });
});
