import type { ColumnBatch } from '../../packages/engine/src/index.js';

/**
 * The batches cut at their commits' edges, one commit's rows each: what a test that builds
 * groups of commits of different kinds needs from a read whose batches span small commits.
 */
export function oneCommitEach(batches: readonly ColumnBatch[]): ColumnBatch[] {
  return batches.flatMap((batch) => {
    const out: ColumnBatch[] = [];
    for (let first = 0; first < batch.length; ) {
      let end = first + 1;
      while (end < batch.length && batch.commitOf(end) === batch.commitOf(first)) end++;
      out.push(batch.take(Uint32Array.from({ length: end - first }, (_, index) => first + index)));
      first = end;
    }
    return out;
  });
}
