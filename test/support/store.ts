/**
 * Test helpers: temporary data directories, a store with an injected clock and ids, and a way
 * to read back everything a feed holds (through the engine's public API where it has one).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach } from 'vitest';
import { type AppendRecord, Store, type StoredRecord, type StoreOptions } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';

const made: string[] = [];
afterEach(() => {
  for (const directory of made.splice(0)) fs.rmSync(directory, { recursive: true, force: true });
});

/** A fresh directory, removed after the test. */
export function temporaryDirectory(prefix = 'streamstack-test-'): string {
  const directory = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(directory);
  return directory;
}

/** A clock the test moves by hand. */
export class ManualClock {
  constructor(public now = 1_700_000_000_000) {}
  readonly read = (): number => this.now;
  advance(ms: number): void {
    this.now += ms;
  }
}

/** Ids `id-1`, `id-2`, … so that runs are repeatable. */
export function sequentialIds(prefix = 'id'): () => string {
  let next = 0;
  return () => `${prefix}-${++next}`;
}

/** Small segments roll often, which is what most tests want to exercise. */
export const smallSegmentBytes = 64 * 1024;

export async function openStore(directory: string, options: StoreOptions = {}): Promise<Store> {
  return Store.open(directory, { segmentBytes: smallSegmentBytes, ...options });
}

const decoder = new TextDecoder();
export const text = (bytes: Uint8Array): string => decoder.decode(bytes);

/** A digest of every file under `directory`: equal digests mean nothing on disk changed. */
export function digestTree(directory: string): string {
  const hash = crypto.createHash('sha256');
  const walk = (at: string) => {
    for (const name of fs.readdirSync(at).sort()) {
      const file = path.join(at, name);
      if (fs.statSync(file).isDirectory()) walk(file);
      else hash.update(`${path.relative(directory, file)}\0`).update(fs.readFileSync(file));
    }
  };
  walk(directory);
  return hash.digest('hex');
}

/** The saved cursor of subscription `name`, as `subscription.info()` gives it (embedded or remote). */
export async function cursorOf(
  feed: { subscription(name: string): Promise<{ info(): Promise<{ cursor: number }> }> },
  name: string,
): Promise<number> {
  return (await (await feed.subscription(name)).info()).cursor;
}

/**
 * A store in `directory` (ts kernels, a manual clock, sequential ids) with feed `f` of `commits`
 * one-shot commits, the records of commit n from `recordsOf(n)` a second apart, every write and
 * its maintenance settled: the history that merge, compaction and progress tests work on.
 */
export async function filledFeed(
  recordsOf: (commit: number) => AppendRecord[],
  commits: number,
  directory = temporaryDirectory(),
) {
  const clock = new ManualClock();
  const store = await openStore(directory, { kernels: tsKernels, clock: clock.read, newId: sequentialIds() });
  const feed = await store.createFeed('f');
  for (let index = 1; index <= commits; index++) {
    await feed.append(recordsOf(index));
    clock.advance(1000);
  }
  await feed.writer.idle();
  return { store, feed, directory, clock };
}

/** Every item of an async iterable, in order (Node 20 has no `Array.fromAsync`). */
export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

/** The bases (first positions) of feed `feed`'s history segments in `directory`, ascending. */
export function historySegmentBases(directory: string, feed = 'f'): number[] {
  return fs
    .readdirSync(path.join(directory, 'feeds', feed, 'history'))
    .filter((name) => name.endsWith('.hist'))
    .map((name) => Number(name.slice(0, -'.hist'.length)))
    .sort((a, b) => a - b);
}

/** Every field of stored records as comparable values (bytes as hex and text): reads compared before and after. */
export function recordShapes(records: readonly StoredRecord[]) {
  return records.map((record) => ({
    commit: record.commit,
    position: record.position,
    seq: record.seq,
    key: record.key,
    version: record.version,
    tombstone: record.tombstone,
    type: record.type,
    tags: record.tags,
    timestamp: record.timestamp,
    fingerprint: Buffer.from(record.fingerprint).toString('hex'),
    payload: text(record.payload),
  }));
}

/**
 * A feed's records as comparable lines (commit, position, key, payload), read with `options`
 * (RAW up to the head by default): what fork tests compare a fork's history with its source's by.
 */
export async function recordLines(
  feed: { read(options?: never): AsyncIterable<StoredRecord> },
  options: { upTo?: number; filter?: object; plan?: 'index'; mode?: 'dedup' } = {},
): Promise<string[]> {
  const lines: string[] = [];
  for await (const record of feed.read(options as never)) {
    lines.push(`${record.commit}/${record.position}/${record.key ?? ''}/${text(record.payload)}`);
  }
  return lines;
}
