/**
 * Merges and key compactions rewrite on a worker thread over a read-only snapshot of the feed
 * when the engine runs from its build (as users run it); run from its sources, as here, they
 * rewrite on the calling thread over the feed's own history. Both must leave the same bytes —
 * segments, summaries, index files and dictionaries — with either kernel set, and the same reads;
 * and the derived files a rewrite builds for its segment must be what a rebuild writes.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Store } from '../../packages/engine/src/index.js';
import { rewriteWorkload } from '../support/rewrite-workload.mjs';
import { collect, openStore, recordShapes, temporaryDirectory } from '../support/store.js';

const engine = path.resolve('packages/engine/dist/index.js');
const workload = path.resolve('test/support/rewrite-workload.mjs');

/** Every history and index file of feed `f`, by name (temporary files would be a failure too). */
function feedFiles(directory: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (const part of ['history', 'index']) {
    const partDirectory = path.join(directory, 'feeds', 'f', part);
    for (const name of fs.readdirSync(partDirectory).sort())
      files.set(`${part}/${name}`, fs.readFileSync(path.join(partDirectory, name)));
  }
  return files;
}

async function reads(directory: string) {
  const store = await openStore(directory, { readOnly: true });
  const feed = await store.feed('f');
  const out = {
    raw: recordShapes(await collect(feed.read({ after: 255 }))),
    dedup: recordShapes(await collect(feed.read({ mode: 'dedup', after: 255 }))),
    latest: recordShapes(await collect(feed.read({ mode: 'latest' }))),
    filtered: recordShapes(
      await collect(feed.read({ filter: { types: ['update'], tags: ['tier:1'] }, plan: 'index' })),
    ),
    gets: await Promise.all(
      Array.from({ length: 1500 }, async (_, key) => (await feed.get(`account-${key}`))?.position ?? null),
    ),
  };
  await store.close();
  return out;
}

describe('rewrites on the worker thread', () => {
  for (const kernels of ['native', 'ts'] as const) {
    it(`write the bytes a rewrite on the calling thread writes (${kernels} kernels)`, async () => {
      const onWorker = temporaryDirectory();
      const script = `Promise.all([import(${JSON.stringify(engine)}), import(${JSON.stringify(workload)})]).then(async ([{ Store }, { rewriteWorkload }]) => {
        console.log(JSON.stringify({ worker: (await import(${JSON.stringify(path.resolve('packages/engine/dist/coordinator/maintenance/rewrite-offthread.js'))})).rewritesOffThread(), ...(await rewriteWorkload(Store, ${JSON.stringify(onWorker)}, ${JSON.stringify(kernels)})) }));
      })`;
      const childSummary = JSON.parse(
        execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim().split('\n').pop()!,
      );
      // The child's rewrites ran on the worker, and each kind of rewrite did something.
      expect(childSummary.worker).toBe(true);
      expect(childSummary.merges).toBeGreaterThan(0);
      expect(childSummary.compacted).toBeGreaterThan(1);
      expect(childSummary.again).toBeGreaterThan(0);
      expect(childSummary.recordsAfter).toBeGreaterThan(0);
      expect(childSummary.rebuiltAfterSwitch).toBe(0);

      const here = temporaryDirectory();
      const summary = await rewriteWorkload(Store, here, kernels);
      const { worker: _, ...childCounts } = childSummary;
      expect(summary).toEqual(childCounts);

      const written = feedFiles(onWorker);
      const expected = feedFiles(here);
      expect([...written.keys()]).toEqual([...expected.keys()]);
      for (const [name, bytes] of expected) expect(written.get(name)!.equals(bytes), name).toBe(true);
      expect(await reads(onWorker)).toEqual(await reads(here));

      // And the derived files the rewrites built are byte for byte what rebuilds write.
      fs.rmSync(path.join(here, 'feeds', 'f', 'index'), { recursive: true });
      const rebuilding = await Store.open(here, { kernels });
      expect((await rebuilding.feed('f')).indexRebuilds.length).toBeGreaterThan(0);
      await rebuilding.close();
      const rebuilt = feedFiles(here);
      expect([...rebuilt.keys()]).toEqual([...expected.keys()]);
      for (const [name, bytes] of expected) expect(rebuilt.get(name)!.equals(bytes), name).toBe(true);
    }, 120_000);
  }
});
