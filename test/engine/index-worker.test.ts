/**
 * Sealed segments' index data and key dictionaries are built on a worker thread when the engine
 * runs from its build (as users run it) — and rebuilt there from the segment files themselves —;
 * run from its sources, as here, it builds them on the calling thread. All must write the same
 * bytes, with either kernel set, and a feed whose builds were killed mid-way must open and read
 * the same.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { openStore, temporaryDirectory, text } from '../support/store.js';

const engine = path.resolve('packages/engine/dist/index.js');
/** The built key index module: the same instance the built engine uses. */
const keyIndexModule = path.resolve('packages/engine/dist/query/indexes/key-index.js');

/** A child process (the built engine: builds on the worker) that writes a feed of many segments. */
function writerScript(directory: string, kernels: string, commits: number): string {
  return `import(${JSON.stringify(engine)}).then(async ({ Store }) => {
    const store = await Store.open(${JSON.stringify(directory)}, { segmentBytes: 64 * 1024, kernels: ${JSON.stringify(kernels)} });
    const feed = (await store.feedNames()).includes('f') ? await store.feed('f') : await store.createFeed('f');
    for (let commit = 0; commit < ${commits}; commit++) {
      await feed.append(Array.from({ length: 30 }, (_, index) => {
        const n = commit * 30 + index;
        return { payload: 'record ' + n + ' ' + '.'.repeat(n % 120), key: 'k' + (n % 211), version: n % 17, type: 't' + (n % 5), tags: ['tag-' + (n % 97), 'user-' + (n % 13)] };
      }));
      console.log('commit ' + commit);
    }
    await store.close();
    const { dictionariesBuiltFromHeldKeys } = await import(${JSON.stringify(keyIndexModule)});
    console.log('built from held keys ' + dictionariesBuiltFromHeldKeys());
  })`;
}

function derivedFiles(directory: string): Map<string, Buffer> {
  const index = path.join(directory, 'feeds', 'f', 'index');
  return new Map(
    fs
      .readdirSync(index)
      .filter((name) => !name.endsWith('.tmp'))
      .sort()
      .map((name) => [name, fs.readFileSync(path.join(index, name))]),
  );
}

async function readEverything(directory: string): Promise<string[]> {
  const store = await openStore(directory);
  const feed = await store.feed('f');
  const out: string[] = [];
  for await (const record of feed.read({ filter: { tags: ['tag-5'] }, plan: 'index' }))
    out.push(`${record.position}:${text(record.payload)}`);
  for (let key = 0; key < 211; key += 7) out.push(`k${key}:${(await feed.get(`k${key}`))?.position}`);
  await store.close();
  return out;
}

describe('index builds on the worker thread', () => {
  for (const kernels of ['native', 'ts'] as const) {
    it(`write the bytes a build on the calling thread writes (${kernels} kernels)`, async () => {
      const directory = temporaryDirectory();
      const output = execFileSync(process.execPath, ['-e', writerScript(directory, kernels, 120)], {
        encoding: 'utf8',
      });
      // Each sealed segment's dictionaries were read from its file on the worker: building them
      // from the keys the event loop's thread held left it garbage that stalled it.
      expect(output).toContain('built from held keys 0\n');
      const built = derivedFiles(directory);
      expect([...built.keys()].filter((name) => name.endsWith('.idx')).length).toBeGreaterThanOrEqual(4);
      for (const extension of ['.keys', '.fps']) {
        expect([...built.keys()].filter((name) => name.endsWith(extension)).length, extension).toBe(
          [...built.keys()].filter((name) => name.endsWith('.idx')).length,
        );
      }
      const expected = await readEverything(directory);

      // Rebuilt by the built engine from the segments themselves, read on the worker.
      fs.rmSync(path.join(directory, 'feeds', 'f', 'index'), { recursive: true });
      const reopen = `import(${JSON.stringify(engine)}).then(async ({ Store }) => {
        const store = await Store.open(${JSON.stringify(directory)}, { segmentBytes: 64 * 1024, kernels: ${JSON.stringify(kernels)} });
        const feed = await store.feed('f');
        console.log(JSON.stringify(feed.indexRebuilds.length));
        await store.close();
      })`;
      expect(
        Number(execFileSync(process.execPath, ['-e', reopen], { encoding: 'utf8' }).trim()),
      ).toBeGreaterThanOrEqual(3 * 4);
      const rebuiltOnWorker = derivedFiles(directory);
      expect([...rebuiltOnWorker.keys()]).toEqual([...built.keys()]);
      for (const [name, bytes] of built)
        expect(rebuiltOnWorker.get(name)!.equals(bytes), `rebuilt on the worker: ${name}`).toBe(true);

      // Rebuilt here, from the sources: on this thread.
      fs.rmSync(path.join(directory, 'feeds', 'f', 'index'), { recursive: true });
      const store = await openStore(directory, { kernels });
      await store.feed('f');
      await store.close();
      const rebuilt = derivedFiles(directory);
      expect([...rebuilt.keys()]).toEqual([...built.keys()]);
      for (const [name, bytes] of built) expect(rebuilt.get(name)!.equals(bytes), name).toBe(true);
      expect(await readEverything(directory)).toEqual(expected);
    }, 60_000);
  }

  it('leaves a feed that opens and reads the same when the process is killed during builds', async () => {
    const directory = temporaryDirectory();
    // Killed at a few points while it rolls segments, so builds are often in flight.
    for (const after of [15, 40, 70]) {
      const child = spawn(process.execPath, ['-e', writerScript(directory, 'native', 80)], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      await new Promise<void>((resolve) => {
        let seen = 0;
        child.stdout.on('data', (chunk: Buffer) => {
          seen += chunk
            .toString()
            .split('\n')
            .filter((line) => line.startsWith('commit')).length;
          if (seen >= after) child.kill('SIGKILL');
        });
        child.on('exit', () => resolve());
      });
    }
    const store = await openStore(directory);
    const feed = await store.feed('f');
    const records: string[] = [];
    for await (const record of feed.read()) records.push(text(record.payload));
    expect(records.length).toBeGreaterThan(0);
    expect((await store.verify('f'))[0].problems).toEqual([]);
    await store.close();
    // What the rebuilt derived files answer equals what a scan of the records says.
    const answers = await readEverything(directory);
    const scanned = await openStore(directory);
    const scan = await scanned.feed('f');
    const byTag: string[] = [];
    for await (const record of scan.read({ filter: { tags: ['tag-5'] }, plan: 'scan' }))
      byTag.push(`${record.position}:${text(record.payload)}`);
    await scanned.close();
    expect(answers.slice(0, byTag.length)).toEqual(byTag);
  }, 60_000);
});
