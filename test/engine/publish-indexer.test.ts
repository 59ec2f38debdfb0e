/**
 * The publish indexer's bound: records queued for the derived indexes never run past the backlog
 * bound by more than one write, because writers wait for room (`roomInBacklog`) first, in the
 * order they asked; a fold that fails lets every waiting writer go rather than hang it.
 */
import { describe, expect, it } from 'vitest';
import { type PublishedRun, PublishIndexer } from '../../packages/engine/src/coordinator/writing/publish-indexer.js';
import { eventLoopCheckRecords, eventLoopSliceMs, publishIndexSliceRecords } from '../../packages/engine/src/limits.js';
import type { CommitRecord } from '../../packages/engine/src/storage/commit-record.js';

function run(records: number): PublishedRun<number> {
  return {
    commit: {} as CommitRecord,
    records: Array.from({ length: records }, (_, index) => index),
    runStart: 0,
    entryOffsets: [],
    fingerprints: [],
  };
}

describe('PublishIndexer backlog', () => {
  it('makes writers wait while more than the bound is queued, and lets them go in order once it is folded in', async () => {
    let folded = 0;
    const indexer = new PublishIndexer<number>(() => folded++, 5_000);
    expect(indexer.roomInBacklog()).toBeUndefined();
    // A writer that ignored the bound would queue all of these at once.
    for (let write = 0; write < 4; write++) indexer.push(run(3_000));
    const released: number[] = [];
    const foldedWhenReleased: number[] = [];
    const waits = [0, 1, 2].map((writer) => {
      const room = indexer.roomInBacklog();
      expect(room, `writer ${writer} waits`).toBeInstanceOf(Promise);
      return room!.then(() => {
        released.push(writer);
        foldedWhenReleased.push(folded);
      });
    });
    await Promise.all(waits);
    expect(released).toEqual([0, 1, 2]);
    // They went once the backlog was back within the bound: not before, and not only at the end.
    for (const at of foldedWhenReleased) {
      expect(12_000 - at).toBeLessThanOrEqual(5_000);
      expect(at).toBeLessThan(12_000);
    }
    await indexer.caughtUp();
    expect(folded).toBe(12_000);
    expect(indexer.roomInBacklog()).toBeUndefined();
  });

  it('lets waiting writers go when a fold fails, and does not make later ones wait on a queue nothing drains', async () => {
    const indexer = new PublishIndexer<number>((_, index) => {
      if (index === 4_000) throw new Error('the index broke');
    }, 1_000);
    indexer.push(run(6_000));
    const failed = indexer.caughtUp().catch((error: unknown) => error);
    const room = indexer.roomInBacklog();
    expect(room).toBeInstanceOf(Promise);
    await room;
    expect(await failed).toMatchObject({ message: 'the index broke' });
    expect(indexer.roomInBacklog()).toBeUndefined();
  });

  it('ends a slice once it has run its time, before its record bound, when records cost more than usual', async () => {
    // Each record costs a tenth of a slice's time spread over a look at the clock's worth of
    // records: a slice counted alone would fold `publishIndexSliceRecords` of them in one turn.
    const recordMs = (eventLoopSliceMs * 2) / eventLoopCheckRecords;
    let folded = 0;
    const indexer = new PublishIndexer<number>(() => {
      const until = performance.now() + recordMs;
      while (performance.now() < until);
      folded++;
    }, 1_000_000);
    const total = 2 * publishIndexSliceRecords;
    indexer.push(run(total));
    // A sampler that runs once a turn sees how many records each turn folded.
    const perTurn: number[] = [];
    let seen = 0;
    let sampling = true;
    const sample = () => {
      if (folded > seen) perTurn.push(folded - seen);
      seen = folded;
      if (sampling) setImmediate(sample);
    };
    setImmediate(sample);
    await indexer.caughtUp();
    sampling = false;
    expect(folded).toBe(total);
    expect(perTurn.length).toBeGreaterThan(total / publishIndexSliceRecords);
    expect(Math.max(...perTurn)).toBeLessThanOrEqual(eventLoopCheckRecords);
  });
});
