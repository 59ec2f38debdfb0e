/**
 * The segment store's local folder (`LocalSegmentStore`): what `put` stores is read back by range,
 * asynchronously and synchronously; `list` and `delete` see the folder's files; a missing file is
 * the `IO` error (errno `ENOENT`) a failed open is everywhere else, and a range past the end is
 * `CORRUPT`; `localPath` names the file workers open; and a held file is read through, not reopened.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadKernels, StreamStackError } from '../../packages/engine/src/index.js';
import { type HeldFile, LocalSegmentStore } from '../../packages/engine/src/storage/segment-store.js';
import { temporaryDirectory } from '../support/store.js';

const kernels = loadKernels();
const bytes = Uint8Array.from({ length: 300 }, (_, index) => index % 251);

/** The error a promise rejects with, or a function throws. */
async function failure(run: () => unknown): Promise<StreamStackError> {
  try {
    await run();
  } catch (error) {
    expect(error).toBeInstanceOf(StreamStackError);
    return error as StreamStackError;
  }
  throw new Error('expected a failure');
}

describe('LocalSegmentStore', () => {
  it('reads back byte ranges of what it stored, asynchronously and synchronously', async () => {
    const directory = path.join(temporaryDirectory(), 'history');
    const store = new LocalSegmentStore(kernels, directory);
    await store.put('0000000000000001.sum', bytes);
    expect(fs.readFileSync(path.join(directory, '0000000000000001.sum'))).toEqual(Buffer.from(bytes));
    expect(fs.existsSync(path.join(directory, '0000000000000001.sum.tmp'))).toBe(false);

    expect(await store.read('0000000000000001.sum', 10, 20)).toEqual(bytes.subarray(10, 30));
    expect(await store.read('0000000000000001.sum', 0, 300)).toEqual(bytes);
    expect(await store.read('0000000000000001.sum', 300, 0)).toEqual(new Uint8Array(0));
    const into = new Uint8Array(5);
    expect(await store.readInto('0000000000000001.sum', into, 295)).toBe(into);
    expect(into).toEqual(bytes.subarray(295));

    expect(store.readSync('0000000000000001.sum', 100, 50)).toEqual(bytes.subarray(100, 150));
    // A read running past the end comes back short, synchronously, and says how much it read.
    const tail = new Uint8Array(20);
    expect(store.readSyncInto('0000000000000001.sum', tail, 290)).toBe(10);
    expect(tail.subarray(0, 10)).toEqual(bytes.subarray(290));

    // A second put replaces the file whole.
    await store.put('0000000000000001.sum', bytes.subarray(0, 7));
    expect(await store.read('0000000000000001.sum', 0, 7)).toEqual(bytes.subarray(0, 7));
  });

  it('lists and deletes its files; an empty or missing folder lists nothing', async () => {
    const directory = path.join(temporaryDirectory(), 'index');
    const store = new LocalSegmentStore(kernels, directory);
    expect(await store.list()).toEqual([]);
    await store.delete('0000000000000001.idx');
    await store.put('0000000000000001.idx', bytes);
    await store.put('0000000000000001.keys', bytes);
    await store.put('0000000000000100.idx', bytes);
    expect((await store.list()).sort()).toEqual([
      '0000000000000001.idx',
      '0000000000000001.keys',
      '0000000000000100.idx',
    ]);
    await store.delete('0000000000000001.idx');
    // Deleting what is not there is not a failure: a trim interrupted after its delete runs again.
    await store.delete('0000000000000001.idx');
    expect((await store.list()).sort()).toEqual(['0000000000000001.keys', '0000000000000100.idx']);
    expect(fs.existsSync(path.join(directory, '0000000000000001.idx'))).toBe(false);
  });

  it('reports a missing file as IO with errno ENOENT, and a range past the end as CORRUPT', async () => {
    const directory = temporaryDirectory();
    const store = new LocalSegmentStore(kernels, directory);
    for (const missing of [
      await failure(() => store.read('0000000000000009.hist', 0, 8)),
      await failure(() => store.readSync('0000000000000009.hist', 0, 8)),
      await failure(() => store.readSyncInto('0000000000000009.hist', new Uint8Array(8), 0)),
    ]) {
      expect(missing.code).toBe('IO');
      expect(missing.details).toMatchObject({ errno: 'ENOENT' });
    }
    await store.put('0000000000000001.fps', bytes);
    const file = path.join(directory, '0000000000000001.fps');
    for (const short of [
      await failure(() => store.read('0000000000000001.fps', 290, 20)),
      await failure(() => store.readSync('0000000000000001.fps', 290, 20)),
    ]) {
      expect(short.code).toBe('CORRUPT');
      expect(short.details).toMatchObject({ file, offset: 300 });
    }
  });

  it('names the local file of a name, and refuses a name that is a path', async () => {
    const directory = temporaryDirectory();
    const store = new LocalSegmentStore(kernels, directory);
    expect(store.localPath('0000000000000001.hist')).toBe(path.join(directory, '0000000000000001.hist'));
    expect((await failure(() => store.localPath('../0000000000000001.hist'))).code).toBe('INTERNAL');
  });

  it('reads a name through the file its caller holds open, and opens the rest itself', async () => {
    const directory = temporaryDirectory();
    const calls: string[] = [];
    const held: HeldFile = {
      read: async (offset, length) => (calls.push(`read ${offset} ${length}`), new Uint8Array(length).fill(7)),
      readInto: async (into, offset) => (calls.push(`readInto ${offset}`), into.fill(7)),
      readSync: (offset, length) => (calls.push(`readSync ${offset} ${length}`), new Uint8Array(length).fill(7)),
      readSyncInto: (into, offset) => (calls.push(`readSyncInto ${offset}`), into.fill(7).length),
    };
    const store = new LocalSegmentStore(kernels, directory, (name) =>
      name === '0000000000000001.hist' ? held : undefined,
    );
    await store.put('0000000000000002.hist', bytes);
    expect(await store.read('0000000000000001.hist', 4, 2)).toEqual(new Uint8Array([7, 7]));
    await store.readInto('0000000000000001.hist', new Uint8Array(3), 5);
    store.readSync('0000000000000001.hist', 6, 1);
    store.readSyncInto('0000000000000001.hist', new Uint8Array(1), 8);
    expect(calls).toEqual(['read 4 2', 'readInto 5', 'readSync 6 1', 'readSyncInto 8']);
    expect(await store.read('0000000000000002.hist', 1, 2)).toEqual(bytes.subarray(1, 3));
    expect(calls).toHaveLength(4);
  });
});
