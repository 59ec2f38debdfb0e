/**
 * Column batches as they cross to the export worker: packed as references into the distinct
 * buffers they view and unpacked over copies of them, and sparse batches (a few rows of a run,
 * as dedup and latest keep) compacted first, every batch reads back record for record the same.
 */
import * as arrow from 'apache-arrow';
import { describe, expect, it } from 'vitest';
import { exportArrowBatch } from '../../packages/engine/src/query/export/export-arrow.js';
import { ColumnArena } from '../../packages/engine/src/query/export/export-columns.js';
import { compactBatch, packBatches, unpackBatches } from '../../packages/engine/src/query/export/export-transfer.js';
import { ColumnBatch } from '../../packages/engine/src/query/reading/column-batch.js';
import { oneCommitEach } from '../support/batches.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

/** A cell of an Arrow row as JSON can hold it: 64-bit integers as text, bytes as hex, a list (an Arrow vector) as an array. */
function plainCell(_: string, value: unknown): unknown {
  if (typeof value === 'bigint') return `${value}n`;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
  if (value instanceof arrow.Vector) return [...(value as Iterable<unknown>)];
  return value;
}

/** What the worker receives: the buffers copied, as postMessage copies them. */
function across(batches: readonly ColumnBatch[]): ColumnBatch[] {
  const { batches: packed, buffers } = packBatches(batches);
  return unpackBatches(
    structuredClone(packed),
    buffers.map((buffer) => buffer.slice(0)),
  );
}

describe('export transfer', () => {
  it('packs and unpacks batches, whole and sparse, dedup and latest, to the same records', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    for (let commit = 0; commit < 12; commit++) {
      await feed.append(
        Array.from({ length: 40 }, (_, n) => ({
          // Repeated payloads: later runs refer to the earlier ones' (external payloads).
          payload:
            n % 5 === 0
              ? `same ${n}`
              : n % 7 === 3
                ? new Uint8Array([0xff, n, commit])
                : `payload ${commit}-${n} ${'.'.repeat(n)}`,
          ...(n % 3 === 0 ? {} : { key: `key-${n % 9}`, version: commit }),
          ...(n % 4 === 1 ? { type: 'typé' } : {}),
          tags: Array.from({ length: n % 3 }, (_, t) => `tag ${t} "${n}"`),
        })),
      );
    }
    for (const mode of ['raw', 'dedup', 'latest'] as const) {
      const batches = await collect(feed.readColumns({ mode }));
      // Repeated payloads lie in other runs: some batches carry them apart. Small commits are
      // read side by side: batches span them, each row naming its own commit.
      if (mode === 'raw') {
        expect(batches.some((batch) => batch.externalBytes !== undefined)).toBe(true);
        expect(batches.some((batch) => batch.spansCommits)).toBe(true);
      }
      const sparse = batches.map((batch) =>
        batch.take(
          Uint32Array.from({ length: Math.ceil(batch.length / 7) }, (_, index) => index * 7).filter(
            (row) => row < batch.length,
          ),
        ),
      );
      for (const group of [batches, sparse]) {
        const expected = group.map((batch) => batch.records());
        expect(across(group).map((batch) => batch.records())).toEqual(expected);
        expect(group.map((batch) => compactBatch(batch).records())).toEqual(expected);
      }
    }
    await store.close();
  });

  it('copies of each buffer only the span the batches view', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    await feed.append(
      Array.from({ length: 50 }, (_, n) => ({ payload: `payload ${n}`, key: `k${n}`, tags: [`t${n % 3}`] })),
    );
    const [batch] = await collect(feed.readColumns());
    await store.close();
    // The batch's bytes part-way into a larger buffer, as a file's first batch lies in a long
    // run read into a pooled buffer with room to spare (at an odd offset, as bytes may be).
    const room = 512 * 1024;
    const roomy = new Uint8Array(room);
    const offset = 200 * 1024 + 3;
    roomy.set(batch.bytes, offset);
    const inRoomyBuffer = new ColumnBatch(
      batch.feed,
      batch.commit,
      batch.stream,
      batch.types,
      roomy.subarray(offset, offset + batch.bytes.length),
      batch,
      batch.externalBytes,
    );
    let taken = 0;
    const { batches: packed, buffers } = packBatches([inRoomyBuffer], (bytes) => new ArrayBuffer((taken = bytes)));
    expect(taken).toBeGreaterThan(batch.bytes.length);
    expect(taken).toBeLessThan(room / 4);
    expect(unpackBatches(packed, buffers).map((unpacked) => unpacked.records())).toEqual([batch.records()]);
  });

  it('converts groups in a reused arena exactly as in new arrays, whatever the group before left there', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    // The first commit is large, so the arena's buffer holds every later group. Then commits
    // alternate between records with every optional field and records with none, payloads of one
    // length: a group converted after the other kind finds that kind's values and bitmaps where
    // its own go. Every third bare record's payload is not UTF-8, so those groups' text columns
    // are copies of their own, with nulls, where the others share the binary column's buffers.
    for (let commit = 0; commit < 9; commit++) {
      const full = commit % 2 === 0;
      await feed.append(
        Array.from({ length: commit === 0 ? 300 : 40 }, (_, n) =>
          full
            ? {
                payload: `full ${String(n).padStart(3, '0')}`,
                key: `key-${n % 7}`,
                version: commit,
                tombstone: n % 4 === 1,
                type: `t${n % 3}`,
                tags: [`a${n}`, `b${commit}`],
              }
            : { payload: n % 3 === 0 ? Uint8Array.of(0xff, n) : `bare ${String(n).padStart(3, '0')}` },
        ),
      );
    }
    // One batch per commit, so that groups alternate between the two kinds of commits.
    const batches = oneCommitEach(await collect(feed.readColumns()));
    expect(batches.length).toBeGreaterThan(4);
    // Every cell as plain data: values, not the buffers and offsets Arrow's objects hold them in.
    const rows = (group: ColumnBatch[], arena?: ColumnArena) =>
      exportArrowBatch(group, arena)
        .batch.toArray()
        .map((row) => JSON.stringify(row.toJSON(), plainCell));
    const arena = new ColumnArena();
    const groups = [
      batches.slice(0, 1),
      ...batches.slice(1).map((batch) => [batch]),
      batches.slice(3, 5),
      batches.slice(4, 6),
    ];
    for (const group of groups) {
      arena.reset();
      const reused = rows(group, arena);
      expect(reused).toEqual(rows(group));
      expect(
        reused.some((row) => row.includes('"tombstone":true')) || reused.every((row) => row.includes('"key":null')),
      ).toBe(true);
      expect(
        reused.some((row) => row.includes('"payloadText":null')) ||
          reused.every((row) => row.includes('"payloadText":"full')),
      ).toBe(true);
    }
    await store.close();
  });
});
