/**
 * Reading a tiered file back from object storage (versitygw on 127.0.0.1) through
 * `RemoteSegmentFile`: any range equals the bytes stored, a scan in small reads costs one request
 * per block (the next block fetched ahead), two readers of one block share one request, the
 * cache stays within its bound, and a block that fails its descriptor's CRC is `CORRUPT` naming
 * the object and the block, every time it is asked for, never an answer.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import { BlockCache, RemoteSegmentFile } from '../../packages/engine/src/storage/remote-segment-file.js';
import {
  blocksOf,
  type SegmentDescriptor,
  segmentObjectName,
} from '../../packages/engine/src/storage/segment-descriptor.js';
import { failure } from '../support/failure.js';
import { type Versitygw, versitygwBinary, versitygwForSuite, versitygwMissing } from '../support/object-store.js';

const binary = versitygwBinary();
const bucket = 'remote-reads';
const blockBytes = 1024 * 1024;
/** Ten blocks and a short one. */
const fileBytes = 10 * blockBytes + 12_345;
const name = '0000000000000001.hist';
/** The suite's object store server, once its `describe` has started it. */
let serverOf: () => Versitygw;
let prefixes = 0;
const stores: ObjectSegmentStore[] = [];

function patterned(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let state = seed;
  for (let at = 0; at < length; at++) {
    state = (state * 1103515245 + 12345) >>> 0;
    bytes[at] = state >>> 24;
  }
  return bytes;
}

/** A file stored under ordinal 1 of a fresh prefix, and the descriptor that vouches for it. */
async function storedFile(): Promise<{
  segments: ObjectSegmentStore;
  descriptor: SegmentDescriptor;
  bytes: Uint8Array;
}> {
  const segments = new ObjectSegmentStore({
    endpoint: serverOf().endpoint,
    bucket,
    prefix: `run-${++prefixes}/segments/`,
    region: serverOf().region,
    credentials: serverOf().credentials,
    forcePathStyle: true,
  });
  stores.push(segments);
  const bytes = patterned(fileBytes, prefixes);
  await segments.put(segmentObjectName(1, name), bytes);
  const blockCrcs = Array.from({ length: blocksOf(fileBytes, blockBytes) }, (_, block) =>
    tsKernels.crc32(bytes.subarray(block * blockBytes, (block + 1) * blockBytes)),
  );
  const descriptor: SegmentDescriptor = {
    format: 1,
    feed: 'f',
    feedTag: 1,
    ordinal: 1,
    base: 1,
    lastPosition: 100,
    firstCommit: 1,
    lastCommit: 1,
    source: 7,
    replaces: [],
    epoch: 0,
    writer: 'w',
    blockBytes,
    files: [{ name, bytes: fileBytes, blockCrcs }],
    createdAt: 0,
  };
  return { segments, descriptor, bytes };
}

const same = (actual: Uint8Array, expected: Uint8Array) =>
  actual.length === expected.length && Buffer.compare(actual, expected) === 0;

describe.skipIf(binary === undefined)(
  `RemoteSegmentFile${binary === undefined ? ` (skipped: ${versitygwMissing})` : ''}`,
  () => {
    // Clients close before the server stops (hooks after run in reverse order).
    serverOf = versitygwForSuite(bucket);
    afterAll(() => {
      for (const store of stores.splice(0)) store.close();
    });

    it('reads any range as stored, and refuses one past the end', async () => {
      const { segments, descriptor, bytes } = await storedFile();
      const file = new RemoteSegmentFile(tsKernels, segments, descriptor, name, new BlockCache(64 * blockBytes));
      expect(file.size).toBe(fileBytes);
      for (const [offset, length] of [
        [0, 1],
        [blockBytes - 3, 6],
        [3 * blockBytes + 17, 2 * blockBytes + 5],
        [fileBytes - 10, 10],
        [0, fileBytes],
        [5, 0],
      ] as const)
        expect(same(await file.read(offset, length), bytes.subarray(offset, offset + length))).toBe(true);
      const past = await failure(() => file.read(fileBytes - 1, 2));
      expect(past.code).toBe('CORRUPT');
      expect(past.message).toContain(segmentObjectName(1, name));
    });

    it('scans in small reads at one request per block, fetching ahead, within the cache bound', async () => {
      const { segments, descriptor, bytes } = await storedFile();
      const cache = new BlockCache(3 * blockBytes);
      const file = new RemoteSegmentFile(tsKernels, segments, descriptor, name, cache);
      const readBytes = 64 * 1024;
      for (let offset = 0; offset < fileBytes; offset += readBytes) {
        const length = Math.min(readBytes, fileBytes - offset);
        expect(same(await file.read(offset, length), bytes.subarray(offset, offset + length))).toBe(true);
        expect(cache.size).toBeLessThanOrEqual(3 * blockBytes);
      }
      const blocks = blocksOf(fileBytes, blockBytes);
      expect(cache.counters.requests).toBe(blocks);
      expect(cache.counters.bytesFetched).toBe(fileBytes);
      // Every block after the first was on its way before the scan reached it.
      expect(cache.counters.readAhead).toBe(blocks - 1);
      // The first block left the cache long ago: reading it again costs a request.
      await file.read(0, 10);
      expect(cache.counters.requests).toBe(blocks + 1);
    });

    it('makes one request for readers of one block, and serves reads of cached blocks synchronously', async () => {
      const { segments, descriptor, bytes } = await storedFile();
      const cache = new BlockCache(64 * blockBytes);
      const file = new RemoteSegmentFile(tsKernels, segments, descriptor, name, cache);
      expect(file.readCached(2 * blockBytes + 5, 100)).toBeUndefined();
      const reads = await Promise.all(Array.from({ length: 8 }, (_, at) => file.read(2 * blockBytes + at * 1000, 100)));
      reads.forEach((read, at) => {
        const offset = 2 * blockBytes + at * 1000;
        expect(same(read, bytes.subarray(offset, offset + 100))).toBe(true);
      });
      // One request for block 2 (readers after the first go on in order, so block 3 comes ahead).
      expect(cache.counters.requests - cache.counters.readAhead).toBe(1);
      const cached = file.readCached(2 * blockBytes + 5, 100);
      expect(cached && same(cached, bytes.subarray(2 * blockBytes + 5, 2 * blockBytes + 105))).toBe(true);
    });

    it('reports a block that fails its CRC as CORRUPT, naming object and block, each time it is asked for', async () => {
      const { segments, descriptor, bytes } = await storedFile();
      const damaged = bytes.slice();
      damaged[2 * blockBytes + 77]! ^= 0x01;
      await segments.put(segmentObjectName(1, name), damaged);
      const cache = new BlockCache(64 * blockBytes);
      const file = new RemoteSegmentFile(tsKernels, segments, descriptor, name, cache);
      // The sound blocks read as before.
      expect(same(await file.read(0, 100), bytes.subarray(0, 100))).toBe(true);
      for (let attempt = 0; attempt < 2; attempt++) {
        const error = await failure(() => file.read(2 * blockBytes + 70, 20));
        expect(error.code).toBe('CORRUPT');
        expect(error.details).toMatchObject({ object: segments.prefix + segmentObjectName(1, name), block: 2 });
      }
      expect(file.readCached(2 * blockBytes + 70, 20)).toBeUndefined();
    });
  },
);
