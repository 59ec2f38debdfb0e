/**
 * Column batches as they cross to the export worker: packed as references into the distinct
 * buffers they view and unpacked over copies of them, and sparse batches (a few rows of a run,
 * as dedup and latest keep) compacted first, every batch reads back record for record the same.
 */
import { describe, expect, it } from 'vitest';
import { compactBatch, packBatches, unpackBatches } from '../../packages/engine/src/query/export-transfer.js';
import type { ColumnBatch } from '../../packages/engine/src/query/column-batch.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

/** What the worker receives: the buffers copied, as postMessage copies them. */
function across(batches: readonly ColumnBatch[]): ColumnBatch[] {
  const { batches: packed, buffers } = packBatches(batches);
  return unpackBatches(structuredClone(packed), buffers.map((buffer) => buffer.slice(0)));
}

describe('export transfer', () => {
  it('packs and unpacks batches, whole and sparse, dedup and latest, to the same records', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    for (let commit = 0; commit < 12; commit++) {
      await feed.append(
        Array.from({ length: 40 }, (_, n) => ({
          // Repeated payloads: later runs refer to the earlier ones' (external payloads).
          payload: n % 5 === 0 ? `same ${n}` : n % 7 === 3 ? new Uint8Array([0xff, n, commit]) : `payload ${commit}-${n} ${'.'.repeat(n)}`,
          ...(n % 3 === 0 ? {} : { key: `key-${n % 9}`, version: commit }),
          ...(n % 4 === 1 ? { type: 'typé' } : {}),
          tags: Array.from({ length: n % 3 }, (_, t) => `tag ${t} "${n}"`),
        })),
      );
    }
    for (const mode of ['raw', 'dedup', 'latest'] as const) {
      const batches = await collect(feed.readColumns({ mode }));
      // Repeated payloads lie in other runs: some batches carry them apart.
      if (mode === 'raw') expect(batches.some((batch) => batch.externalBytes !== undefined)).toBe(true);
      const sparse = batches.map((batch) => batch.take(Uint32Array.from({ length: Math.ceil(batch.length / 7) }, (_, index) => index * 7).filter((row) => row < batch.length)));
      for (const group of [batches, sparse]) {
        const expected = group.map((batch) => batch.records());
        expect(across(group).map((batch) => batch.records())).toEqual(expected);
        expect(group.map((batch) => compactBatch(batch).records())).toEqual(expected);
      }
    }
    await store.close();
  });
});
