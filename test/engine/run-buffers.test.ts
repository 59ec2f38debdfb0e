/**
 * The buffers an export's runs are read into (`RunBufferPool`): a buffer is read into again only
 * after its reader retired it and its consumer gave it back, the smallest free buffer that holds
 * a read is taken, and a view of a buffer the pool did not make is refused.
 */
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { RunBufferPool, runBufferReuses } from '../../packages/engine/src/storage/run-buffers.js';

describe('RunBufferPool', () => {
  it('reads into a buffer again only once the reader retired it and the consumer gave it back', () => {
    const pool = new RunBufferPool();
    const reusedBefore = runBufferReuses();
    const first = pool.take(1000);
    expect(first.length).toBe(1000);
    // A new buffer holds a whole stretch, so the next stretch fits in it.
    expect(first.buffer.byteLength).toBe(limits.runsReadBytesMax);
    // A run longer than a stretch gets room for a somewhat longer one.
    const big = pool.take(limits.runsReadBytesMax + 5);
    expect(big.buffer.byteLength).toBe(
      Math.ceil((limits.runsReadBytesMax + 5) * (1 + limits.runBufferHeadroomFraction)),
    );

    // Retired by the reader, but not yet given back: a read takes a new buffer.
    pool.readerDone(first);
    pool.readerDone(big);
    expect(pool.take(10).buffer).not.toBe(first.buffer);
    const retired = pool.retire();
    expect(retired.map((buffer) => buffer.buffer)).toEqual([first.buffer, big.buffer]);
    expect(pool.retire()).toEqual([]);
    expect(pool.take(10).buffer).not.toBe(first.buffer);
    expect(runBufferReuses()).toBe(reusedBefore);

    // Given back: the smallest that holds the read is taken, whole, from its start.
    pool.recycle(retired);
    const again = pool.take(2000);
    expect(again.buffer).toBe(first.buffer);
    expect(again.byteOffset).toBe(0);
    expect(again.length).toBe(2000);
    // A run a little longer than the one read before fits in its buffer.
    const longer = pool.take(limits.runsReadBytesMax + 4096);
    expect(longer.buffer).toBe(big.buffer);
    expect(runBufferReuses()).toBe(reusedBefore + 2);
  });

  it('refuses to retire bytes it did not hand out', () => {
    const pool = new RunBufferPool();
    expect(() => pool.readerDone(new Uint8Array(16))).toThrow(/one of its own/);
  });
});
