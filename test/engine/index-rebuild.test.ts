/**
 * Index files are derived data: one per sealed history segment, rebuilt from the segment when it
 * is missing or fails verification (its head on open, the rest when a query first loads it). A rebuild is reported in `feed.indexRebuilds`, produces the
 * very bytes the writer produced when the segment was sealed, and reads are unchanged by it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, RecordFilter, Store } from '../../packages/engine/src/index.js';
import { ManualClock, openStore, sequentialIds, temporaryDirectory, text } from '../support/store.js';

type KernelChoice = 'native' | 'ts';

const types = ['order', 'shipment', 'Ω-тип'] as const;
const tags = ['hot', 'a', 'ab', 'abc', 'user:1', 'user:10', 'é', '日本', 'z'.repeat(256)] as const;

/** A small deterministic generator, so every test writes the same feed. */
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** A feed with several sealed history segments (64 KiB each) and an active tail. */
async function buildFeed(directory: string, kernels: KernelChoice): Promise<void> {
  const random = generator(7);
  const clock = new ManualClock();
  const store = await openStore(directory, { kernels, clock: clock.read, newId: sequentialIds() });
  const feed = await store.createFeed('f');
  let record = 0;
  for (let commit = 0; commit < 160; commit++) {
    const size = 1 + Math.floor(random() * 16);
    const batch = Array.from({ length: size }, () => {
      const n = record++;
      const recordTags: string[] = tags.filter((_, at) => random() < (at === 0 ? 0.6 : 0.12));
      // One tag per segment or so that one record alone carries (inlined in the FST).
      if (n % 331 === 17) recordTags.push(`solo:${n}`);
      const type = random() < 0.8 ? types[Math.floor(random() * types.length)] : undefined;
      return {
        payload: `r${n}|${'.'.repeat(Math.floor(random() * 200))}`,
        // Keys recur across segments, with versions that sometimes go back: key dictionaries
        // hold each key's winner over the history before them.
        key: `key-${n % 97}`,
        version: Math.floor(random() * 50),
        ...(type === undefined ? {} : { type }),
        ...(recordTags.length === 0 ? {} : { tags: recordTags }),
      };
    });
    await feed.append(batch);
  }
  await store.close();
}

const queries: RecordFilter[] = [
  { tags: ['hot'] },
  { tags: ['a', 'ab'] },
  { types: ['order'] },
  { types: ['shipment', 'Ω-тип'], tags: ['hot'] },
  { items: [{ tags: ['é'] }, { types: ['order'], tags: ['日本'] }, { tags: ['z'.repeat(256)] }] },
  { items: [{ tags: ['solo:17'] }, { tags: ['solo:348'] }, { tags: ['solo:679'] }, { tags: ['solo:1010'] }] },
  { tags: ['user:1', 'user:10', 'abc'] },
  { tags: ['absent'] },
];

/**
 * Every query through every plan, from the start, the middle and the last commit: positions and
 * payloads. `quick`: the index plan from the start only (what a damaged index would get wrong).
 */
async function readAll(feed: Feed, quick = false): Promise<string[][]> {
  const head = (await feed.info()).commits;
  const out: string[][] = [];
  for (const asOf of quick ? [head] : [head, Math.floor(head / 3), Math.floor(head / 2) + 1]) {
    const got: string[] = [];
    for (let key = 0; key < 97; key += quick ? 7 : 1) {
      const record = await feed.get(`key-${key}`, { asOf });
      got.push(`${key}@${asOf}:${record ? `${record.position}:${text(record.payload)}` : '-'}`);
    }
    out.push(got);
  }
  for (const filter of queries) {
    for (const plan of quick ? (['index'] as const) : (['index', 'scan', 'auto'] as const)) {
      for (const after of quick ? [0] : [0, Math.floor(head / 2), head - 1]) {
        const got: string[] = [];
        for await (const record of feed.read({ after, filter, plan }))
          got.push(`${record.position}:${text(record.payload)}`);
        out.push(got);
      }
    }
  }
  return out;
}

/** The index files (`.idx`, or with `all` key dictionaries too) of feed `f`, by name. */
function indexFiles(directory: string, all = false): Map<string, Buffer> {
  const indexDirectory = path.join(directory, 'feeds', 'f', 'index');
  const files = new Map<string, Buffer>();
  if (!fs.existsSync(indexDirectory)) return files;
  for (const name of fs.readdirSync(indexDirectory).sort()) {
    // A tail checkpoint is written when the feed closes, not rebuilt when it opens.
    if (name.endsWith('.tail')) continue;
    if (all || name.endsWith('.idx')) files.set(name, fs.readFileSync(path.join(indexDirectory, name)));
  }
  return files;
}

/** The checkpoint files (written at close) of feed `f` in `folder` that end with `suffix`, by name. */
function checkpointFiles(directory: string, folder: 'index' | 'history', suffix: string): Map<string, Buffer> {
  const folderPath = path.join(directory, 'feeds', 'f', folder);
  return new Map(
    fs
      .readdirSync(folderPath)
      .filter((name) => name.endsWith(suffix))
      .map((name) => [name, fs.readFileSync(path.join(folderPath, name))]),
  );
}

/** The feed's tail checkpoints, by name. */
const tailCheckpoints = (directory: string) => checkpointFiles(directory, 'index', '.tail');

/** The feed's active segment checkpoints, by name. */
const activeCheckpoints = (directory: string) => checkpointFiles(directory, 'history', '.ckpt');

const indexPath = (store: Store, name: string): string => path.join(store.path, 'feeds', 'f', 'index', name);
const baseOf = (name: string): number => Number(name.slice(0, -'.idx'.length));

/** Where the fields of an index file lie (docs: magic, version, base, count, source, section count, 5 × (length, crc, bytes)). */
function layout(bytes: Buffer): { name: string; offset: number }[] {
  const fields = [
    { name: 'magic', offset: 0 },
    { name: 'magic end', offset: 7 },
    { name: 'version', offset: 8 },
    { name: 'base', offset: 12 },
    { name: 'count', offset: 20 },
    { name: 'source', offset: 28 },
    { name: 'section count', offset: 32 },
  ];
  let at = 36;
  for (let section = 1; section <= 5; section++) {
    const length = bytes.readUInt32LE(at);
    fields.push({ name: `section ${section} length`, offset: at }, { name: `section ${section} crc`, offset: at + 4 });
    if (length > 0) {
      fields.push(
        { name: `section ${section} first byte`, offset: at + 8 },
        { name: `section ${section} middle byte`, offset: at + 8 + (length >> 1) },
        { name: `section ${section} last byte`, offset: at + 8 + length - 1 },
      );
    }
    at += 8 + length;
  }
  expect(at, 'the layout accounts for the whole file').toBe(bytes.length);
  return fields;
}

/** A feed built on native kernels, its index files, and everything it reads back. */
async function pristine() {
  const directory = temporaryDirectory();
  await buildFeed(directory, 'native');
  const original = indexFiles(directory);
  const store = await openStore(directory);
  const expected = await readAll(await store.feed('f'));
  await store.close();
  return { directory, original, expected };
}

describe('index files', () => {
  it('are written for every sealed segment, and a clean reopen rebuilds none', async () => {
    const directory = temporaryDirectory();
    await buildFeed(directory, 'native');
    const history = fs
      .readdirSync(path.join(directory, 'feeds', 'f', 'history'))
      .filter((name) => name.endsWith('.hist'));
    const files = indexFiles(directory);
    expect(history.length).toBeGreaterThanOrEqual(4);
    // One per history segment but the last (the active one), named by the same base.
    expect([...files.keys()]).toEqual(history.slice(0, -1).map((name) => name.replace(/\.hist$/, '.idx')));
    const store = await openStore(directory);
    const feed = await store.feed('f');
    expect(feed.indexRebuilds).toEqual([]);
    await store.close();
    expect(indexFiles(directory)).toEqual(files);
  });

  it('rebuilds a deleted index file byte for byte, reports it, and reads the same', async () => {
    const { directory, original, expected } = await pristine();
    let store: Store;
    const names = [...original.keys()];
    for (const name of [names[0], names[names.length >> 1], names[names.length - 1]]) {
      fs.rmSync(path.join(directory, 'feeds', 'f', 'index', name));
      store = await openStore(directory);
      const feed = await store.feed('f');
      expect(feed.indexRebuilds).toEqual([
        { segment: baseOf(name), file: indexPath(store, name), reason: expect.stringMatching(/missing/) },
      ]);
      expect(indexFiles(directory)).toEqual(original);
      expect(await readAll(feed)).toEqual(expected);
      await store.close();
    }

    // Once rebuilt, the file is simply loaded.
    store = await openStore(directory);
    expect((await store.feed('f')).indexRebuilds).toEqual([]);
    await store.close();
  });

  it('rebuilds an index file with any byte flipped: header, section lengths, CRCs and data', async () => {
    const directory = temporaryDirectory();
    await buildFeed(directory, 'native');
    const original = indexFiles(directory);
    let store = await openStore(directory);
    const expected = await readAll(await store.feed('f'), true);
    await store.close();

    const [, name] = [...original.keys()];
    const file = path.join(directory, 'feeds', 'f', 'index', name);
    const bytes = original.get(name)!;
    for (const field of layout(bytes)) {
      for (const mask of [0x01, 0x80]) {
        const damaged = Buffer.from(bytes);
        damaged[field.offset] ^= mask;
        fs.writeFileSync(file, damaged);
        store = await openStore(directory);
        const feed = await store.feed('f');
        const what = `${field.name} (offset ${field.offset}) ^ ${mask}`;
        // Damage to the header or the type names is found on open; the rest when a query
        // first loads the file. Either way the file is rebuilt before anything reads it.
        const got = await readAll(feed, true);
        expect(feed.indexRebuilds, what).toEqual([
          { segment: baseOf(name), file: indexPath(store, name), reason: expect.any(String) },
        ]);
        expect(feed.indexRebuilds[0].reason, what).not.toBe('');
        expect(feed.indexRebuilds[0].reason, what).not.toMatch(/missing/);
        expect(fs.readFileSync(file).equals(bytes), `${what}: the rebuilt file is byte-identical`).toBe(true);
        expect(got, what).toEqual(expected);
        await store.close();
      }
    }
    expect(indexFiles(directory)).toEqual(original);
  });

  it('rebuilds a truncated or extended index file', async () => {
    const { directory, original, expected } = await pristine();
    let store: Store;
    const names = [...original.keys()];
    const name = names[names.length - 1];
    const file = path.join(directory, 'feeds', 'f', 'index', name);
    const bytes = original.get(name)!;
    const variants: [string, Buffer][] = [
      ['empty', Buffer.alloc(0)],
      ['one byte', bytes.subarray(0, 1)],
      ['the header only', bytes.subarray(0, 32)],
      ['half', bytes.subarray(0, bytes.length >> 1)],
      ['all but the last byte', bytes.subarray(0, bytes.length - 1)],
      ['a trailing zero byte', Buffer.concat([bytes, Buffer.alloc(1)])],
      ['a second copy appended', Buffer.concat([bytes, bytes])],
    ];
    for (const [what, damaged] of variants) {
      fs.writeFileSync(file, damaged);
      store = await openStore(directory);
      const feed = await store.feed('f');
      const got = await readAll(feed);
      expect(feed.indexRebuilds, what).toEqual([
        { segment: baseOf(name), file: indexPath(store, name), reason: expect.any(String) },
      ]);
      expect(fs.readFileSync(file).equals(bytes), `${what}: the rebuilt file is byte-identical`).toBe(true);
      expect(got, what).toEqual(expected);
      await store.close();
    }
  });

  it('rebuilds a valid index file of another segment put in the wrong place, and several at once', async () => {
    const { directory, original, expected } = await pristine();
    let store: Store;
    const names = [...original.keys()];
    const indexDirectory = path.join(directory, 'feeds', 'f', 'index');
    // Another segment's file: every CRC checks, but it covers the wrong records.
    fs.writeFileSync(path.join(indexDirectory, names[1]), original.get(names[0])!);
    store = await openStore(directory);
    let feed = await store.feed('f');
    expect(feed.indexRebuilds).toEqual([
      { segment: baseOf(names[1]), file: indexPath(store, names[1]), reason: expect.stringMatching(/covers/) },
    ]);
    expect(indexFiles(directory)).toEqual(original);
    expect(await readAll(feed)).toEqual(expected);
    await store.close();

    // One missing, one damaged, one swapped: each reported, in segment order.
    fs.rmSync(path.join(indexDirectory, names[0]));
    const damaged = Buffer.from(original.get(names[1])!);
    damaged[damaged.length - 1] ^= 0xff;
    fs.writeFileSync(path.join(indexDirectory, names[1]), damaged);
    fs.writeFileSync(path.join(indexDirectory, names[2]), original.get(names[0])!);
    store = await openStore(directory);
    feed = await store.feed('f');
    const got = await readAll(feed);
    // The missing and the swapped file are found on open, the damaged one on first use.
    const rebuilds = [...feed.indexRebuilds].sort((a, b) => a.segment - b.segment);
    expect(rebuilds.map((rebuild) => rebuild.segment)).toEqual([baseOf(names[0]), baseOf(names[1]), baseOf(names[2])]);
    expect(rebuilds[0].reason).toMatch(/missing/);
    expect(rebuilds[1].reason).toMatch(/CRC/);
    expect(rebuilds[2].reason).toMatch(/covers/);
    expect(indexFiles(directory)).toEqual(original);
    expect(got).toEqual(expected);
    await store.close();

    // The whole index directory gone.
    fs.rmSync(indexDirectory, { recursive: true });
    store = await openStore(directory);
    feed = await store.feed('f');
    // Every index file and every key dictionary, each once.
    const rebuiltIndexes = feed.indexRebuilds.filter((rebuild) => rebuild.file.endsWith('.idx'));
    expect(rebuiltIndexes.map((rebuild) => rebuild.segment)).toEqual(names.map(baseOf));
    expect(
      feed.indexRebuilds.filter((rebuild) => rebuild.file.endsWith('.keys')).map((rebuild) => rebuild.segment),
    ).toEqual(names.map(baseOf));
    expect(indexFiles(directory)).toEqual(original);
    expect(await readAll(feed)).toEqual(expected);
    await store.close();
  });

  it('rebuilds the same bytes with either kernel set, whichever wrote the originals', async () => {
    for (const [writer, rebuilder] of [
      ['native', 'ts'],
      ['ts', 'native'],
    ] as const) {
      const directory = temporaryDirectory();
      await buildFeed(directory, writer);
      // Index files and key dictionaries alike.
      const original = indexFiles(directory, true);
      const checkpoints = tailCheckpoints(directory);
      expect(checkpoints.size).toBe(1);
      let store = await openStore(directory, { kernels: writer });
      const expected = await readAll(await store.feed('f'));
      await store.close();

      // The other kernel set loads the files as they are…
      store = await openStore(directory, { kernels: rebuilder });
      let feed = await store.feed('f');
      expect(feed.indexRebuilds, `${writer} files loaded by ${rebuilder}`).toEqual([]);
      expect(await readAll(feed)).toEqual(expected);
      await store.close();

      // …and rebuilds every one of them byte for byte.
      fs.rmSync(path.join(directory, 'feeds', 'f', 'index'), { recursive: true });
      store = await openStore(directory, { kernels: rebuilder });
      feed = await store.feed('f');
      expect(feed.indexRebuilds.length).toBe(original.size);
      const rebuilt = indexFiles(directory, true);
      expect([...rebuilt.keys()]).toEqual([...original.keys()]);
      for (const [name, bytes] of original) {
        expect(rebuilt.get(name)?.equals(bytes), `${name}: written by ${writer}, rebuilt by ${rebuilder}`).toBe(true);
      }
      expect(await readAll(feed)).toEqual(expected);
      await store.close();
      // The other kernel set, closing, writes the tail checkpoint byte for byte too.
      expect(tailCheckpoints(directory)).toEqual(checkpoints);
      // And the active segment's checkpoint, once the segment is read whole again.
      const active = activeCheckpoints(directory);
      expect(active.size).toBe(1);
      for (const name of active.keys()) fs.rmSync(path.join(directory, 'feeds', 'f', 'history', name));
      store = await openStore(directory, { kernels: rebuilder });
      expect(await readAll(await store.feed('f'))).toEqual(expected);
      await store.close();
      expect(activeCheckpoints(directory)).toEqual(active);
    }
  });

  it('keeps indexing after a rebuild: new segments seal and their files load', async () => {
    const directory = temporaryDirectory();
    await buildFeed(directory, 'native');
    const names = [...indexFiles(directory).keys()];
    fs.rmSync(path.join(directory, 'feeds', 'f', 'index', names[0]));
    let store = await openStore(directory);
    let feed = await store.feed('f');
    expect(feed.indexRebuilds.length).toBe(1);
    const head = (await feed.info()).records;
    const added: number[] = [];
    for (let commit = 0; commit < 40; commit++) {
      const batch = Array.from({ length: 10 }, (_, at) => ({
        payload: `more-${commit}-${at}|${'+'.repeat(300)}`,
        type: 'late',
        tags: ['late', at === 0 ? 'late:first' : 'late:rest'],
      }));
      const written = await feed.append(batch);
      added.push(written.firstPosition);
    }
    const readPositions = async (filter: RecordFilter, plan: 'index' | 'scan') => {
      const out: number[] = [];
      for await (const record of feed.read({ filter, plan })) out.push(record.position);
      return out;
    };
    for (const plan of ['index', 'scan'] as const)
      expect(await readPositions({ tags: ['late:first'] }, plan)).toEqual(added);
    await store.close();
    expect(indexFiles(directory).size).toBeGreaterThan(names.length);

    store = await openStore(directory);
    feed = await store.feed('f');
    expect(feed.indexRebuilds).toEqual([]);
    for (const plan of ['index', 'scan'] as const) {
      expect(await readPositions({ tags: ['late:first'] }, plan)).toEqual(added);
      expect((await readPositions({ types: ['late'] }, plan)).length).toBe(400);
      expect((await readPositions({ types: ['late'] }, plan))[0]).toBe(head + 1);
    }
    await store.close();
  });
});
