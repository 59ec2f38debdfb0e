/**
 * What the tiering tests check in object storage: the descriptors a feed has there, read back,
 * and that each one still live (not replaced by a later one, not below the trim boundary) names
 * objects whose sizes and block CRCs are its own, with nothing else left under the feed's
 * segments folder; descriptors run without a hole from the boundary's ordinal up.
 */
import { expect } from 'vitest';
import type { Feed } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import type { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import {
  blocksOf,
  decodeBoundary,
  decodeDescriptor,
  ordinalName,
  type SegmentDescriptor,
  segmentObjectName,
  type TrimBoundary,
} from '../../packages/engine/src/storage/segment-descriptor.js';
import { isMissingFile } from '../../packages/engine/src/storage/segment-store.js';
import { collect, recordShapes } from './store.js';

/** Every descriptor of the feed whose objects are under `objects`, by ordinal. */
export async function descriptors(objects: ObjectSegmentStore): Promise<SegmentDescriptor[]> {
  const store = objects.within('descriptors/');
  const names = (await store.list()).sort();
  const found: SegmentDescriptor[] = [];
  for (const name of names)
    found.push(decodeDescriptor((await store.readStart(name, Number.POSITIVE_INFINITY)).bytes, name));
  return found;
}

/** The feed's trim boundary, or undefined before its first trim. */
export async function boundaryOf(objects: ObjectSegmentStore): Promise<TrimBoundary | undefined> {
  try {
    return decodeBoundary((await objects.readStart('boundary', Number.POSITIVE_INFINITY)).bytes, 'boundary');
  } catch (error) {
    if (isMissingFile(error)) return undefined;
    throw error;
  }
}

/**
 * Checks the feed's objects as a whole and returns its live descriptors by base: the segments a
 * reader starting at the boundary would use.
 */
export async function checkFeedObjects(objects: ObjectSegmentStore): Promise<SegmentDescriptor[]> {
  const found = await descriptors(objects);
  const boundary = await boundaryOf(objects);
  const lowOrdinal = boundary?.lowOrdinal ?? 1;
  const lowPosition = boundary?.lowPosition ?? 1;
  const ordinals = found.map((descriptor) => descriptor.ordinal);
  if (ordinals.length > 0) {
    expect(ordinals[0]).toBe(lowOrdinal);
    expect(ordinals).toEqual(Array.from({ length: ordinals.length }, (_, at) => lowOrdinal + at));
  }
  const replaced = new Set(found.flatMap((descriptor) => descriptor.replaces));
  const live = found
    .filter(
      (descriptor) =>
        !descriptor.retired && !replaced.has(descriptor.ordinal) && descriptor.lastPosition >= lowPosition,
    )
    .sort((a, b) => a.base - b.base);
  // Live segments follow each other without overlap.
  for (let at = 1; at < live.length; at++) expect(live[at]!.base).toBe(live[at - 1]!.lastPosition + 1);
  const segments = objects.within('segments/');
  const names = new Set(await segments.list());
  const expected = new Set<string>();
  for (const descriptor of live) {
    for (const file of descriptor.files) {
      const name = segmentObjectName(descriptor.ordinal, file.name);
      expected.add(name);
      const { bytes, size } = await segments.readStart(name, Number.POSITIVE_INFINITY);
      expect(size).toBe(file.bytes);
      expect(file.blockCrcs).toHaveLength(blocksOf(size, descriptor.blockBytes));
      file.blockCrcs.forEach((crc, block) => {
        const piece = bytes.subarray(block * descriptor.blockBytes, (block + 1) * descriptor.blockBytes);
        expect(tsKernels.crc32(piece), `${name} block ${block}`).toBe(crc);
      });
    }
  }
  // Nothing is left that no live descriptor names: no orphan of a cut upload or a retirement.
  expect([...names].filter((name) => !expected.has(name))).toEqual([]);
  expect(found.every((descriptor) => ordinalName(descriptor.ordinal).length === 16)).toBe(true);
  return live;
}

/** The shape of the records `appendShaped` writes. */
export interface RecordShape {
  /** Distinct keys, types and tags the records cycle through. */
  readonly keys: number;
  readonly tags: number;
  /** Every `longEvery`-th record has a long payload; every `tombstoneEvery`-th is a tombstone (0: none). */
  readonly longEvery: number;
  readonly tombstoneEvery: number;
}

/**
 * Appends `commits` one-shot commits of 200 records, numbered on from `from`, with repeated keys,
 * three types, a tag each and long payloads now and then: what the tiered tests read back.
 */
export async function appendShaped(feed: Feed, commits: number, from: number, shape: RecordShape): Promise<void> {
  for (let commit = 0; commit < commits; commit++) {
    await feed.append(
      Array.from({ length: 200 }, (_, index) => {
        const n = from + commit * 200 + index;
        return {
          payload: `{"n":${n},"pad":"${'x'.repeat(n % shape.longEvery === 0 ? 300 : 40)}"}`,
          key: `k${n % shape.keys}`,
          type: `t${n % 3}`,
          tags: [`a${n % shape.tags}`],
          ...(shape.tombstoneEvery > 0 && n % shape.tombstoneEvery === 0 ? { tombstone: true } : {}),
        };
      }),
    );
  }
}

/**
 * Every kind of read a user makes up to commit `upTo` — commits, RAW, latest and dedup scans, a
 * tag and a type query by index, and `get` of each of `keys` — as comparable values: what a
 * follower's reads are compared with its writer's by.
 */
export async function readsUpTo(feed: Feed, upTo: number, keys: readonly string[]) {
  return {
    commits: (await collect(feed.commits())).filter((commit) => commit.commit <= upTo).map((c) => c.commit),
    raw: recordShapes(await collect(feed.read({ upTo }))),
    latest: recordShapes(await collect(feed.read({ upTo, mode: 'latest' }))),
    dedup: recordShapes(await collect(feed.read({ upTo, mode: 'dedup' }))),
    tagged: recordShapes(await collect(feed.read({ upTo, filter: { tags: ['a3'] }, plan: 'index' }))),
    typed: recordShapes(await collect(feed.read({ upTo, filter: { types: ['t1'] }, plan: 'index' }))),
    gets: await Promise.all(
      keys.map(async (key) => recordShapes([(await feed.get(key, { asOf: upTo }))!].filter(Boolean))),
    ),
  };
}
