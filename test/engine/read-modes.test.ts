/**
 * The read modes are one list in @streamstack/protocol: the engine's checks take exactly its
 * values, and refuse any other with a message that names them all as a sentence does.
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type ReadMode, readModes, readModesInWords } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

describe('read modes', () => {
  it('are raw, dedup and latest, named in that order', () => {
    expect(readModes).toEqual(['raw', 'dedup', 'latest']);
    expect(readModesInWords).toBe('raw, dedup or latest');
  });

  it('are what a read and an export take, and any other mode is refused naming them', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { kernels: tsKernels });
    const feed = await store.createFeed('f');
    await feed.append([{ payload: 'a', key: 'k' }]);
    for (const mode of readModes) {
      await expect(collect(feed.read({ mode }))).resolves.toHaveLength(1);
      const manifest = await feed.export({ format: 'ndjson', mode, to: path.join(directory, `out-${mode}`) });
      expect(manifest).toMatchObject({ mode, records: 1 });
    }
    const refusal = { code: 'INVALID_ARGUMENT', message: 'mode must be raw, dedup or latest, not "newest"' };
    await expect(collect(feed.read({ mode: 'newest' as ReadMode }))).rejects.toMatchObject(refusal);
    await expect(
      feed.export({ format: 'ndjson', mode: 'newest' as ReadMode, to: path.join(directory, 'out-newest') }),
    ).rejects.toMatchObject({ ...refusal, details: { mode: 'newest' } });
  });
});
