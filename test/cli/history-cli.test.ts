/**
 * The history commands as scripts use them: `retention set|show`, `trim`, and the low mark in
 * `feed info`, over a feed filled through the engine with small segments (the command line
 * keeps the default segment size, so a test-sized feed would hold a single segment).
 */
import { describe, expect, it } from 'vitest';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { cli } from '../support/cli.js';
import { historySegmentBases, openStore, temporaryDirectory } from '../support/store.js';

async function filledDirectory(): Promise<string> {
  const directory = temporaryDirectory();
  const store = await openStore(directory, { kernels: tsKernels });
  const feed = await store.createFeed('f');
  for (let index = 1; index <= 200; index++)
    await feed.append([{ payload: `${index} ${'x'.repeat(1500)}`, type: 't' }]);
  await store.close();
  return directory;
}

describe('streamstack retention and trim', () => {
  it('sets and shows a policy, trims by it and by --before, and refuses bad usage', async () => {
    const directory = await filledDirectory();
    const segments = historySegmentBases(directory).length;
    expect(segments).toBeGreaterThan(3);

    const shown = cli(directory, ['retention', 'show', 'f']);
    expect(shown.status).toBe(0);
    expect(shown.lines[0]).toMatchObject({ feed: 'f', policy: {}, lowMark: 1, pinnedBy: null });

    const sub = cli(directory, ['sub', 'create', 'f', 'slow', '--after', '10']);
    expect(sub.status).toBe(0);
    const held = cli(directory, ['trim', 'f', '--before', '150']);
    expect(held.status).toBe(0);
    expect(held.lines[0]).toMatchObject({ feed: 'f', heldBy: { subscription: 'slow', cursor: 10 } });
    const forced = cli(directory, ['trim', 'f', '--before', '150', '--force']);
    expect(forced.lines[0].segmentsRemoved).toBeGreaterThan(0);
    const low = forced.lines[0].lowMark as number;
    expect(low).toBeGreaterThan(1);
    expect(low).toBeLessThanOrEqual(150);

    const info = cli(directory, ['feed', 'info', 'f']);
    expect(info.lines[0]).toMatchObject({ feed: 'f', lowMark: low });
    expect((info.lines[0].disk as { historySegments: number }).historySegments).toBe(
      historySegmentBases(directory).length,
    );
    const read = cli(directory, ['read', 'f', '--after', '0']);
    expect(read.status).toBe(1);
    expect(read.error).toMatchObject({ code: 'TRIMMED', lowMark: low });
    const fromLow = cli(directory, ['read', 'f', '--limit', '1']);
    expect(fromLow.lines[0]).toMatchObject({ commit: low });

    const set = cli(directory, ['retention', 'set', 'f', '--max-records', '40']);
    expect(set.status).toBe(0);
    expect(set.lines[0]).toMatchObject({ policy: { maxRecords: 40 } });
    cli(directory, ['sub', 'delete', 'f', 'slow']);
    const byPolicy = cli(directory, ['trim', 'f']);
    expect(byPolicy.lines[0].segmentsRemoved).toBeGreaterThan(0);
    const kept = cli(directory, ['feed', 'info', 'f']).lines[0] as { records: number; lowPosition: number };
    expect(kept.records - kept.lowPosition + 1).toBeGreaterThanOrEqual(40);
    expect(cli(directory, ['verify', 'f']).lines[0]).toMatchObject({ ok: true, lowMark: byPolicy.lines[0].lowMark });

    expect(cli(directory, ['retention', 'set', 'f']).status).toBe(2);
    expect(cli(directory, ['retention', 'set', 'f', '--keep-all', '--max-bytes', '5']).status).toBe(2);
    expect(cli(directory, ['trim', 'f', '--before', 'x']).status).toBe(2);
    const cleared = cli(directory, ['retention', 'set', 'f', '--keep-all']);
    expect(cleared.lines[0]).toMatchObject({ policy: {} });
  });

  it('key-compacts up to a horizon: feed info shows it, reads below it fail with COMPACTED', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { kernels: tsKernels });
    const feed = await store.createFeed('f');
    for (let index = 1; index <= 200; index++)
      await feed.append([{ payload: `${index} ${'x'.repeat(1500)}`, key: `k${index % 7}`, version: index, type: 't' }]);
    await store.close();

    expect(cli(directory, ['compact', 'f', '--keys']).status).toBe(2);
    expect(cli(directory, ['compact', 'f', '--horizon', '150']).status).toBe(2);
    const compacted = cli(directory, ['compact', 'f', '--keys', '--horizon', '150']);
    expect(compacted.status).toBe(0);
    expect(compacted.lines[0]).toMatchObject({ feed: 'f', horizon: 150, putOff: false });
    expect(compacted.lines[0].recordsAfter).toBeLessThan(compacted.lines[0].recordsBefore as number);
    expect(cli(directory, ['feed', 'info', 'f']).lines[0]).toMatchObject({ feed: 'f', horizon: 150 });
    const below = cli(directory, ['read', 'f', '--after', '100']);
    expect(below.status).toBe(1);
    expect(below.error).toMatchObject({ code: 'COMPACTED', horizon: 150 });
    // The latest value of every key is what it was: from the start, over the compacted history.
    const latest = cli(directory, ['read', 'f', '--mode', 'latest']);
    expect(latest.lines.map((line) => line.key).sort()).toEqual(['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6']);
    expect(latest.lines.every((line) => (line.version as number) > 193)).toBe(true);
    expect(cli(directory, ['verify', 'f']).lines[0]).toMatchObject({ ok: true });
  });
});
