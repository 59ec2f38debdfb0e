/**
 * The segment store's local folder (`LocalSegmentStore`): what `put` stores is read back by range,
 * asynchronously and synchronously; `list` and `delete` see the folder's files; a missing file is
 * the `IO` error (errno `ENOENT`) a failed open is everywhere else, and a range past the end is
 * `CORRUPT`; `localPath` names the file workers open; and a held file is read through, not reopened.
 * `readStart` reads a file's start and tells its size, and `hold` keeps one descriptor for a run
 * of reads. The derived files (summaries, index files, dictionaries) are read through a store:
 * served from a store that keeps them in memory only, with no local file, they read the same.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { removeReplacedFiles } from '../../packages/engine/src/coordinator/maintenance/merge-state.js';
import { loadKernels, StreamStackError } from '../../packages/engine/src/index.js';
import { removeDictionaryFiles } from '../../packages/engine/src/query/indexes/key-index.js';
import { readIndexFile, readIndexHead } from '../../packages/engine/src/storage/index-segment.js';
import {
  loadKeyFileHead,
  readKeySection,
  readKeySectionAsync,
  WinnerReader,
  winnerAt,
} from '../../packages/engine/src/storage/key-file.js';
import { SegmentFile } from '../../packages/engine/src/storage/segment.js';
import { removeSegmentFilesBelow } from '../../packages/engine/src/storage/segment-set.js';
import {
  type HeldFile,
  type HeldReads,
  LocalSegmentStore,
  type SegmentStore,
  type SyncSegmentReads,
} from '../../packages/engine/src/storage/segment-store.js';
import {
  readSummary,
  readSummaryHead,
  readSummaryPage,
  summaryStreamCandidates,
} from '../../packages/engine/src/storage/segment-summary.js';
import { failure } from '../support/failure.js';
import { filledFeed, temporaryDirectory } from '../support/store.js';

const kernels = loadKernels();
const bytes = Uint8Array.from({ length: 300 }, (_, index) => index % 251);

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

describe('LocalSegmentStore, for the derived files', () => {
  it("reads a file's start and tells its whole size; Infinity reads it whole", async () => {
    const directory = temporaryDirectory();
    const store = new LocalSegmentStore(kernels, directory);
    await store.put('0000000000000001.keys', bytes);
    expect(await store.readStart('0000000000000001.keys', 10)).toEqual({ bytes: bytes.subarray(0, 10), size: 300 });
    expect(await store.readStart('0000000000000001.keys', Number.POSITIVE_INFINITY)).toEqual({ bytes, size: 300 });
    const missing = await failure(() => store.readStart('0000000000000002.keys', 10));
    expect(missing.code).toBe('IO');
    expect(missing.details).toMatchObject({ errno: 'ENOENT' });
  });

  it('holds one descriptor for a run of reads, until it is let go', async () => {
    const directory = temporaryDirectory();
    const store = new LocalSegmentStore(kernels, directory);
    await store.put('0000000000000001.keys', bytes);
    const held = store.hold('0000000000000001.keys');
    const into = new Uint8Array(4);
    expect(held.readSyncInto(into, 20)).toBe(4);
    expect(into).toEqual(bytes.subarray(20, 24));
    // Gone from the folder, the file is still read through the descriptor held: nothing reopens it.
    fs.rmSync(path.join(directory, '0000000000000001.keys'));
    expect(held.readSyncInto(into, 296)).toBe(4);
    expect(into).toEqual(bytes.subarray(296, 300));
    expect(held.readSyncInto(into, 298)).toBe(2);
    held.close();
    expect((await failure(() => held.readSyncInto(into, 0))).code).toBe('INTERNAL');
    expect((await failure(() => store.hold('0000000000000001.keys'))).details).toMatchObject({ errno: 'ENOENT' });
  });
});

/**
 * A store that keeps its files in memory and no local file of them (as a remote store keeps
 * none), recording every read: what reads a derived file through a store reads it from here.
 */
class MemoryStore implements SegmentStore, SyncSegmentReads {
  readonly files = new Map<string, Uint8Array>();
  readonly reads: string[] = [];

  private bytesOf(name: string): Uint8Array {
    const held = this.files.get(name);
    if (!held) throw new StreamStackError('IO', `${name} is missing`, { details: { errno: 'ENOENT' } });
    return held;
  }

  private range(name: string, offset: number, length: number): Uint8Array {
    const held = this.bytesOf(name);
    if (offset + length > held.length)
      throw new StreamStackError('CORRUPT', `${name} ends early`, { details: { file: name, offset: held.length } });
    return held.slice(offset, offset + length);
  }

  async put(name: string, bytes: Uint8Array): Promise<void> {
    this.files.set(name, bytes.slice());
  }

  async read(name: string, offset: number, length: number): Promise<Uint8Array> {
    this.reads.push(`read ${name}`);
    return this.range(name, offset, length);
  }

  async readInto(name: string, into: Uint8Array, offset: number): Promise<Uint8Array> {
    this.reads.push(`readInto ${name}`);
    into.set(this.range(name, offset, into.length));
    return into;
  }

  async readStart(name: string, length: number): Promise<{ bytes: Uint8Array; size: number }> {
    this.reads.push(`readStart ${name}`);
    const held = this.bytesOf(name);
    return { bytes: held.slice(0, Math.min(length, held.length)), size: held.length };
  }

  async putFile(name: string, localFile: string): Promise<void> {
    this.files.set(name, new Uint8Array(fs.readFileSync(localFile)));
    fs.rmSync(localFile);
  }

  async deleteAll(names: readonly string[]): Promise<void> {
    this.reads.push(`deleteAll ${names.length}`);
    for (const name of names) this.files.delete(name);
  }

  async size(name: string): Promise<number | undefined> {
    return this.files.get(name)?.length;
  }

  async list(): Promise<string[]> {
    return [...this.files.keys()];
  }

  async delete(name: string): Promise<void> {
    this.reads.push(`delete ${name}`);
    this.files.delete(name);
  }

  localPath(): undefined {
    return undefined;
  }

  readSync(name: string, offset: number, length: number): Uint8Array {
    this.reads.push(`readSync ${name}`);
    return this.range(name, offset, length);
  }

  readSyncInto(name: string, into: Uint8Array, offset: number): number {
    this.reads.push(`readSyncInto ${name}`);
    const part = this.bytesOf(name).subarray(offset, offset + into.length);
    into.set(part);
    return part.length;
  }

  hold(name: string): HeldReads {
    this.bytesOf(name);
    this.reads.push(`hold ${name}`);
    return { readSyncInto: (into, offset) => this.readSyncInto(name, into, offset), close: () => undefined };
  }
}

describe('derived files, read through a store', () => {
  it('read from a store with no local file: summaries, index files and dictionaries', async () => {
    const { store, directory } = await filledFeed(
      (commit) =>
        Array.from({ length: 20 }, (_, at) => ({
          payload: `record ${commit}.${at} ${'.'.repeat(200)}`,
          key: `k${(commit * 20 + at) % 37}`,
          tags: [`t${at % 3}`],
        })),
      60,
    );
    await store.close();
    const feedDirectory = path.join(directory, 'feeds', 'f');
    // Every derived file moves into memory; the segments' headers are read before their files go.
    const memory = new MemoryStore();
    const headers = new Map<string, SegmentFile['header']>();
    for (const folder of ['history', 'index']) {
      for (const name of fs.readdirSync(path.join(feedDirectory, folder))) {
        const file = path.join(feedDirectory, folder, name);
        if (name.endsWith('.hist')) {
          const segment = SegmentFile.open(kernels, file, true);
          headers.set(name.replace('.hist', '.sum'), segment.header);
          segment.close();
        } else if (/\.(sum|idx|keys)$/.test(name)) memory.files.set(name, new Uint8Array(fs.readFileSync(file)));
      }
    }
    fs.rmSync(directory, { recursive: true });
    const names = [...memory.files.keys()];
    const summaries = names.filter((name) => name.endsWith('.sum'));
    const indexes = names.filter((name) => name.endsWith('.idx'));
    const dictionaries = names.filter((name) => name.endsWith('.keys'));
    expect(summaries.length).toBeGreaterThan(1);
    expect(indexes.length).toBeGreaterThan(1);
    expect(dictionaries.length).toBeGreaterThan(1);

    for (const name of summaries) {
      const header = headers.get(name)!;
      const head = (await readSummaryHead(kernels, memory, name, header))!;
      expect(head.base).toBe(header.base);
      const { commits } = (await readSummary(kernels, memory, name, header))!;
      expect(commits).toHaveLength(head.commitCount);
      expect(readSummaryPage(kernels, memory, head, 0)).toEqual(commits.slice(0, head.pageCommits));
      expect(summaryStreamCandidates(kernels, memory, head, commits[0].stream)).toContain(0);
      expect(memory.reads).toContain(`readStart ${name}`);
      expect(memory.reads).toContain(`readSync ${name}`);
    }
    for (const name of indexes) {
      const head = (await readIndexHead(kernels, memory, name))!;
      const data = (await readIndexFile(kernels, memory, name))!;
      expect(data).toMatchObject({ base: head.base, count: head.count, source: head.source });
      expect(data.typeNames).toEqual(head.typeNames);
      expect(data.count).toBeGreaterThan(0);
    }
    for (const name of dictionaries) {
      const source = { store: memory, name };
      const head = (await loadKeyFileHead(source))!;
      expect(head.keys).toBeGreaterThan(0);
      const winners = await readKeySectionAsync(kernels, source, head, 2);
      expect(readKeySection(kernels, source, head, 2)).toEqual(winners);
      const reader = new WinnerReader(kernels, source, head, Number.POSITIVE_INFINITY);
      const held = memory.reads.length;
      expect(reader.at(0)).toEqual(winnerAt(winners, 0));
      expect(reader.at(head.keys - 1)).toEqual(winnerAt(winners, head.keys - 1));
      reader.close();
      // One hold for the reader's life, then one read of each winner through it.
      expect(memory.reads.slice(held)).toEqual([`hold ${name}`, `readSyncInto ${name}`, `readSyncInto ${name}`]);
    }
  });

  it('a missing file reads as not there yet, one that ends early as CORRUPT', async () => {
    const memory = new MemoryStore();
    const header = { kind: 1, base: 1, baseCommit: 1, capacity: 65536 } as SegmentFile['header'];
    expect(await readSummaryHead(kernels, memory, '0000000000000001.sum', header)).toBeUndefined();
    expect(await readIndexHead(kernels, memory, '0000000000000001.idx')).toBeUndefined();
    expect(await readIndexFile(kernels, memory, '0000000000000001.idx')).toBeUndefined();
    expect(await loadKeyFileHead({ store: memory, name: '0000000000000001.keys' })).toBeUndefined();
    memory.files.set('0000000000000001.sum', new Uint8Array(200));
    memory.files.set('0000000000000001.idx', new Uint8Array(20));
    memory.files.set('0000000000000001.keys', new Uint8Array(20));
    for (const damaged of [
      await failure(() => readSummaryHead(kernels, memory, '0000000000000001.sum', header)),
      await failure(() => readIndexHead(kernels, memory, '0000000000000001.idx')),
      await failure(() => readIndexFile(kernels, memory, '0000000000000001.idx')),
      await failure(() => loadKeyFileHead({ store: memory, name: '0000000000000001.keys' })),
    ])
      expect(damaged.code).toBe('CORRUPT');
  });
});

describe('listings and deletes, through a store', () => {
  /** A store of the files of segments at `bases`, each with its derived files, and none local. */
  function filesOf(bases: number[], suffixes: string[]): MemoryStore {
    const memory = new MemoryStore();
    for (const base of bases)
      for (const suffix of suffixes) memory.files.set(`${String(base).padStart(16, '0')}${suffix}`, new Uint8Array(1));
    return memory;
  }
  const names = (store: MemoryStore) => [...store.files.keys()].sort();

  it('a trim deletes every file named below its floor, in one durable batch', async () => {
    const history = filesOf([1, 100, 200], ['.hist', '.sum']);
    expect(await removeSegmentFilesBelow(history, 200)).toBe(4);
    expect(names(history)).toEqual(['0000000000000200.hist', '0000000000000200.sum']);
    expect(history.reads).toEqual(['deleteAll 4']);
  });

  it("a merge's leftovers go from both stores, the first segment's files kept as asked", async () => {
    const stores = {
      history: filesOf([1, 100, 200], ['.hist', '.sum']),
      index: filesOf([1, 100, 200], ['.idx', '.keys', '.fps']),
    };
    await removeReplacedFiles(stores, [1, 100], false, false);
    // The first one's segment and summary are the merged segment's; the key index deletes the
    // dictionaries itself while it holds them.
    expect(names(stores.history)).toEqual([
      '0000000000000001.hist',
      '0000000000000001.sum',
      '0000000000000200.hist',
      '0000000000000200.sum',
    ]);
    expect(names(stores.index)).toEqual([
      '0000000000000001.fps',
      '0000000000000001.idx',
      '0000000000000001.keys',
      '0000000000000100.fps',
      '0000000000000100.keys',
      '0000000000000200.fps',
      '0000000000000200.idx',
      '0000000000000200.keys',
    ]);
    // Recovery of a switched-over merge: the first one's derived files go too.
    await removeReplacedFiles(stores, [1, 100], true);
    expect(names(stores.index)).toEqual(['0000000000000200.fps', '0000000000000200.idx', '0000000000000200.keys']);
  });

  it('an unfinished trim leaves no dictionary behind, and every index file is kept', async () => {
    const index = filesOf([1, 100], ['.idx', '.keys', '.fps']);
    await removeDictionaryFiles(index);
    expect(names(index)).toEqual(['0000000000000001.idx', '0000000000000100.idx']);
  });
});
