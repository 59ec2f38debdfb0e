/**
 * The query planner against an oracle: for random feeds (small segments, so several sealed index
 * segments plus the active tail) and random queries, cursors and limits, the index path, the scan
 * path and the planner's own choice return exactly the records a linear filter of the in-memory
 * history returns, in position order. The feed is reopened in the middle (sealed indexes then come
 * from their files) and at the end, and the kernel set may change at each reopen, so index files
 * written by one kernel set are read by the other.
 */
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type AppendRecord,
  type Feed,
  type Kernels,
  limits,
  loadKernels,
  type Plan,
  type QueryItem,
  type RecordFilter,
  type Store,
  type StoredRecord,
} from '../../packages/engine/src/index.js';
import { autoPlan } from '../../packages/engine/src/query/reading/planner.js';
import { branchTally } from '../support/branches.js';
import { itemMatches } from '../support/query-oracle.js';
import { ManualClock, openStore, sequentialIds, temporaryDirectory, text } from '../support/store.js';

// ---- Pools: a few types, ~30 tags with skewed frequencies ---------------------------------------

const typePool = ['order', 'order.created', 'shipment', 'Ω-тип', 'x'.repeat(200)] as const;
/** Never written: queries on them match nothing (or nothing more). */
const absentTypes = ['nope-type', 'orde'] as const;

/** Often on a record: long posting lists ('hot' past 128 entries per segment: the block form). */
const commonTags = ['a', 'ab', 'user:1', 'region:eu', 'hot'] as const;
/** Now and then. */
const middleTags = [
  'abc',
  'b',
  'user:10',
  'user:2',
  'region:us',
  'é',
  'ß-tag',
  '日本',
  'region',
  'shipment',
  'lot:7',
  'lot:77',
] as const;
/** Seldom: a few per segment. */
const rareTags = ['rare:1', 'rare:2', 'rare:3', '😀', 'z'.repeat(256), 'user:100', 'a-b'] as const;
/** Very seldom: often absent from a segment or held by one record (inlined in the FST). */
const singularTags = ['solo:1', 'solo:2', 'solo:3', 'order', '\u0000nul'] as const;
const absentTags = ['nope-tag', 'rare:0', 'abcd'] as const;

const tagArb = fc.oneof(
  { weight: 45, arbitrary: fc.constant('hot') },
  { weight: 60, arbitrary: fc.constantFrom(...commonTags) },
  { weight: 25, arbitrary: fc.constantFrom(...middleTags) },
  { weight: 6, arbitrary: fc.constantFrom(...rareTags) },
  { weight: 1, arbitrary: fc.constantFrom(...singularTags) },
);

interface RecordSpec {
  readonly type?: string;
  readonly tags: readonly string[];
  /** Bytes of filler, so segments roll at different points. */
  readonly pad: number;
  /** A payload shared with other records (stored once by the engine). */
  readonly shared: boolean;
}

const recordArb: fc.Arbitrary<RecordSpec> = fc
  .record({
    type: fc.option(fc.constantFrom(...typePool), { nil: undefined, freq: 5 }),
    tags: fc.oneof(
      { weight: 1, arbitrary: fc.constant([] as string[]) },
      { weight: 5, arbitrary: fc.uniqueArray(tagArb, { maxLength: 5, size: 'max' }) },
    ),
    pad: fc.nat(220),
    shared: fc.nat(15).map((n) => n === 0),
  })
  .map(({ type, ...rest }) => (type === undefined ? rest : { type, ...rest }));

/** Mostly small commits, sometimes one larger than a whole segment. */
const commitSizeArb = fc.oneof(
  { weight: 30, arbitrary: fc.integer({ min: 1, max: 10 }) },
  { weight: 8, arbitrary: fc.integer({ min: 11, max: 60 }) },
  { weight: 1, arbitrary: fc.integer({ min: 300, max: 450 }) },
);

/** How a commit is written: alone, in a burst of concurrent one-shots (one group), or by a stream. */
const commitHowArb = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ kind: 'oneShot' as const }) },
  { weight: 3, arbitrary: fc.integer({ min: 2, max: 4 }).map((burst) => ({ kind: 'burst' as const, burst })) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 }).map((batches) => ({ kind: 'stream' as const, batches })) },
);

type How =
  | { readonly kind: 'oneShot' }
  | { readonly kind: 'burst'; readonly burst: number }
  | { readonly kind: 'stream'; readonly batches: number };

// ---- Queries ------------------------------------------------------------------------------------

const queryTypeArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...typePool) },
  { weight: 1, arbitrary: fc.constantFrom(...absentTypes) },
);
const queryTagArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...commonTags) },
  { weight: 4, arbitrary: fc.constantFrom(...middleTags) },
  { weight: 3, arbitrary: fc.constantFrom(...rareTags) },
  { weight: 2, arbitrary: fc.constantFrom(...singularTags) },
  { weight: 1, arbitrary: fc.constantFrom(...absentTags) },
);

/** An item with 0–2 types and 0–3 tags; an empty list and a missing one mean the same. */
const itemArb: fc.Arbitrary<QueryItem> = fc
  .record({
    types: fc.oneof(
      { weight: 2, arbitrary: fc.constant(undefined) },
      { weight: 3, arbitrary: fc.array(queryTypeArb, { maxLength: 2, size: 'max' }) },
    ),
    tags: fc.oneof(
      { weight: 1, arbitrary: fc.constant(undefined) },
      { weight: 4, arbitrary: fc.array(queryTagArb, { maxLength: 3, size: 'max' }) },
    ),
  })
  .map(({ types, tags }) => ({ ...(types === undefined ? {} : { types }), ...(tags === undefined ? {} : { tags }) }));

interface QueryCase {
  readonly items: readonly QueryItem[];
  /** Pass a one-item query as the bare item. */
  readonly bare: boolean;
  /** Where the cursor lies, as a fraction of the head (0: the start, 1: the head). */
  readonly at: number;
  readonly limit?: number;
}

const queryCaseArb: fc.Arbitrary<QueryCase> = fc
  .record({
    items: fc.array(itemArb, { minLength: 1, maxLength: 3, size: 'max' }),
    bare: fc.boolean(),
    // fc.double leans hard towards tiny values (5e-324 and the like), which would put almost
    // every cursor at the start; millionths spread cursors over the whole feed.
    at: fc.oneof(
      { weight: 1, arbitrary: fc.constantFrom(0, 1) },
      { weight: 4, arbitrary: fc.integer({ min: 0, max: 1_000_000 }).map((n) => n / 1_000_000) },
    ),
    limit: fc.option(fc.oneof(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 6, max: 400 })), {
      nil: undefined,
      freq: 2,
    }),
  })
  .map(({ limit, ...rest }) => (limit === undefined ? rest : { ...rest, limit }));

// ---- The oracle ---------------------------------------------------------------------------------

interface Published {
  readonly position: number;
  readonly commit: number;
  readonly payload: string;
  readonly type?: string;
  readonly tags: readonly string[];
}

function queryMatches(items: readonly QueryItem[], record: { type?: string; tags: readonly string[] }): boolean {
  return items.length === 0 || items.some((item) => itemMatches(item, record));
}

interface Comparable {
  position: number;
  commit: number;
  payload: string;
  type: string | undefined;
  tags: string[];
}

const comparable = (record: Published | StoredRecord): Comparable => ({
  position: record.position,
  commit: record.commit,
  payload: typeof record.payload === 'string' ? record.payload : text(record.payload),
  type: record.type,
  tags: [...record.tags].sort(),
});

async function collect(
  feed: Feed,
  after: number,
  filter: RecordFilter,
  plan: Plan | undefined,
  limit: number | undefined,
): Promise<Comparable[]> {
  const out: Comparable[] = [];
  const options = { after, filter, ...(plan === undefined ? {} : { plan }), ...(limit === undefined ? {} : { limit }) };
  for await (const record of feed.read(options)) out.push(comparable(record));
  // The columnar form of the same read gives the same records.
  const columns: Comparable[] = [];
  for await (const batch of feed.readColumns(options)) for (const record of batch) columns.push(comparable(record));
  expect(columns).toEqual(out);
  return out;
}

// ---- The feed -----------------------------------------------------------------------------------

type KernelChoice = 'native' | 'ts';

/**
 * The branches of the posting-list kernels the planner's index path and the index segments take,
 * counted by a wrapper around the kernel set the stores open with: the form each posting list is
 * written and read in (its first byte), and whether each intersection galloped (one list at
 * least `limits.intersectGallopRatio` times longer) or merged, and found anything.
 */
const kernelTally = branchTally('planner kernels', [
  'posting list written in the plain form',
  'posting list written in the block form',
  'block form read from an index file',
  'intersection merged',
  'intersection galloped',
  'merged intersection non-empty',
  'galloped intersection non-empty',
  'union of two non-empty lists',
]);

/** What the queries asked and found, against the oracle. */
const queryTally = branchTally('planner queries', [
  'records found',
  'nothing found',
  'cut by the limit',
  'an item with two or more tags (intersection)',
  'two or more items (union)',
  'a cursor past the start',
  'a cursor past the middle',
]);

function tallyingKernels(choice: KernelChoice): Kernels {
  const base = loadKernels(choice);
  const blockForm = 1;
  return {
    ...base,
    postingsEncode(positions) {
      const encoded = base.postingsEncode(positions);
      kernelTally.hit(
        encoded[0] === blockForm ? 'posting list written in the block form' : 'posting list written in the plain form',
      );
      return encoded;
    },
    postingsDecode(encoded) {
      kernelTally.hit('block form read from an index file', encoded[0] === blockForm);
      return base.postingsDecode(encoded);
    },
    intersect(a, b) {
      const found = base.intersect(a, b);
      const galloped = Math.min(a.length, b.length) * limits.intersectGallopRatio <= Math.max(a.length, b.length);
      kernelTally.hit(galloped ? 'intersection galloped' : 'intersection merged');
      kernelTally.hit(galloped ? 'galloped intersection non-empty' : 'merged intersection non-empty', found.length > 0);
      return found;
    },
    union(a, b) {
      kernelTally.hit('union of two non-empty lists', a.length > 0 && b.length > 0);
      return base.union(a, b);
    },
  };
}

interface Harness {
  store: Store;
  feed: Feed;
  token: string;
  readonly directory: string;
  readonly clock: ManualClock;
  readonly ids: () => string;
  readonly published: Published[];
  /** lastPosition of commit c at index c − 1. */
  readonly lastPositions: number[];
  nextPayload: number;
}

const payloadOf = (harness: Harness, spec: RecordSpec): string =>
  spec.shared ? `shared-${spec.pad % 3}` : `p${harness.nextPayload++}|${'.'.repeat(spec.pad)}`;

function toAppend(spec: RecordSpec, payload: string): AppendRecord {
  return {
    payload,
    ...(spec.type === undefined ? {} : { type: spec.type }),
    ...(spec.tags.length === 0 ? {} : { tags: spec.tags }),
  };
}

function notePublished(
  harness: Harness,
  commit: { commit: number; firstPosition: number; lastPosition: number },
  specs: readonly RecordSpec[],
  payloads: readonly string[],
): void {
  expect(commit.commit).toBe(harness.lastPositions.length + 1);
  expect(commit.firstPosition).toBe(harness.published.length + 1);
  expect(commit.lastPosition).toBe(harness.published.length + specs.length);
  for (const [index, spec] of specs.entries()) {
    harness.published.push({
      position: commit.firstPosition + index,
      commit: commit.commit,
      payload: payloads[index],
      ...(spec.type === undefined ? {} : { type: spec.type }),
      tags: spec.tags,
    });
  }
  harness.lastPositions.push(commit.lastPosition);
}

/** Writes `records` in commits of the given sizes and manners, cycling through both lists. */
async function write(
  harness: Harness,
  records: readonly RecordSpec[],
  sizes: readonly number[],
  hows: readonly How[],
  start: { size: number; how: number },
): Promise<void> {
  let at = 0;
  const nextChunk = (): RecordSpec[] => {
    const size = sizes[start.size++ % sizes.length];
    const chunk = records.slice(at, at + size);
    at += chunk.length;
    return chunk;
  };
  while (at < records.length) {
    const how = hows[start.how++ % hows.length];
    if (how.kind === 'stream') {
      const stream = await harness.feed.openStream({ token: harness.token });
      const specs: RecordSpec[] = [];
      const payloads: string[] = [];
      for (let batch = 0; batch < how.batches && at < records.length; batch++) {
        const chunk = nextChunk();
        const chunkPayloads = chunk.map((spec) => payloadOf(harness, spec));
        await stream.append(
          chunk.map((spec, index) => toAppend(spec, chunkPayloads[index])),
          { token: harness.token },
        );
        specs.push(...chunk);
        payloads.push(...chunkPayloads);
      }
      notePublished(harness, await stream.seal({ token: harness.token }), specs, payloads);
      continue;
    }
    const chunks: { specs: RecordSpec[]; payloads: string[] }[] = [];
    for (let n = 0; n < (how.kind === 'burst' ? how.burst : 1) && at < records.length; n++) {
      const specs = nextChunk();
      chunks.push({ specs, payloads: specs.map((spec) => payloadOf(harness, spec)) });
    }
    // Submitted together, a burst lands in one group commit, in submission order.
    const commits = await Promise.all(
      chunks.map(({ specs, payloads }) =>
        harness.feed.append(
          specs.map((spec, index) => toAppend(spec, payloads[index])),
          { token: harness.token },
        ),
      ),
    );
    commits.forEach((commit, index) => {
      notePublished(harness, commit, chunks[index].specs, chunks[index].payloads);
    });
  }
}

async function reopen(harness: Harness, kernels: KernelChoice): Promise<void> {
  await harness.store.close();
  harness.store = await openStore(harness.directory, {
    kernels: tallyingKernels(kernels),
    clock: harness.clock.read,
    newId: harness.ids,
  });
  harness.feed = await harness.store.feed('f');
}

function segmentFiles(harness: Harness): { history: string[]; index: string[] } {
  const feedDirectory = path.join(harness.directory, 'feeds', 'f');
  const list = (name: string) => {
    const directory = path.join(feedDirectory, name);
    return fs.existsSync(directory) ? fs.readdirSync(directory).sort() : [];
  };
  return {
    history: list('history').filter((name) => name.endsWith('.hist')),
    index: list('index').filter((name) => name.endsWith('.idx')),
  };
}

/** Every query case, through every plan, against the oracle. */
async function checkQueries(harness: Harness, cases: readonly QueryCase[], stage: string): Promise<void> {
  const head = harness.lastPositions.length;
  expect((await harness.feed.info()).commits, stage).toBe(head);
  for (const [number, queryCase] of cases.entries()) {
    const cursor = Math.min(head, Math.floor(queryCase.at * (head + 1)));
    const afterPosition = cursor === 0 ? 0 : harness.lastPositions[cursor - 1];
    let expected = harness.published
      .filter((record) => record.position > afterPosition && queryMatches(queryCase.items, record))
      .map(comparable);
    queryTally.hit('cut by the limit', queryCase.limit !== undefined && expected.length > queryCase.limit);
    if (queryCase.limit !== undefined) expected = expected.slice(0, queryCase.limit);
    queryTally.hit(expected.length > 0 ? 'records found' : 'nothing found');
    queryTally.hit(
      'an item with two or more tags (intersection)',
      queryCase.items.some((item) => new Set(item.tags ?? []).size >= 2),
    );
    queryTally.hit('two or more items (union)', queryCase.items.length >= 2);
    queryTally.hit('a cursor past the start', cursor > 0);
    queryTally.hit('a cursor past the middle', cursor > head / 2);
    const filter: RecordFilter =
      queryCase.bare && queryCase.items.length === 1 ? queryCase.items[0] : { items: queryCase.items };
    const label = `${stage}, query ${number}: ${JSON.stringify({ filter, after: cursor, limit: queryCase.limit })}`;
    for (const plan of [undefined, 'auto', 'index', 'scan'] as const) {
      const got = await collect(harness.feed, cursor, filter, plan, queryCase.limit);
      if (got.length !== expected.length || got.some((record, index) => record.position !== expected[index].position)) {
        // Positions first: a short message that says what went wrong before the full diff.
        expect(
          got.map((record) => record.position),
          `${label}, plan ${plan ?? 'default'}: positions`,
        ).toEqual(expected.map((record) => record.position));
      }
      expect(got, `${label}, plan ${plan ?? 'default'}`).toEqual(expected);
    }
  }
}

describe('the planner’s choice', () => {
  it('takes the type column for type queries, and the scan only where posting lists outweigh the range', () => {
    const counts: Record<string, number> = { rare: 3, common: limits.scanEntryCostPostings * 1_000 };
    const tagCount = (tag: string) => counts[tag] ?? 0;
    // The type column is one in-memory pass over the range: never more work than a scan of it.
    for (const width of [1, 100, 1_000_000])
      expect(autoPlan({ items: [{ types: ['t'] }] }, tagCount, width)).toBe('index');
    expect(autoPlan({ items: [{ tags: ['rare'] }] }, tagCount, 10)).toBe('index');
    // A long posting list over a narrow range (a cursor near the segment's end): the scan.
    expect(autoPlan({ items: [{ tags: ['common'] }] }, tagCount, 100)).toBe('scan');
    expect(autoPlan({ items: [{ tags: ['common'] }] }, tagCount, 1_000_000)).toBe('index');
    // Every list an intersection reads counts, and every item of a union.
    // At the edge the two costs are equal, and the index is taken.
    const edge = 1_000;
    expect(autoPlan({ items: [{ tags: ['common'] }] }, tagCount, edge)).toBe('index');
    expect(autoPlan({ items: [{ tags: ['common', 'rare'] }] }, tagCount, edge)).toBe('scan');
    expect(autoPlan({ items: [{ tags: ['rare'] }, { tags: ['common'] }] }, tagCount, edge)).toBe('scan');
  });
});

describe('the query planner', () => {
  it('returns the oracle’s records by index, by scan and by its own choice, before and after reopening', async () => {
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        // 1,400–1,900 records over 64 KiB segments: several sealed index segments, and the 'hot'
        // tag past 128 entries in each, so its posting lists take the block form.
        fc.array(recordArb, { minLength: 1400, maxLength: 1900, size: 'max' }),
        fc.array(commitSizeArb, { minLength: 40, maxLength: 40, size: 'max' }),
        fc.array(commitHowArb, { minLength: 20, maxLength: 20, size: 'max' }),
        fc.double({ min: 0.3, max: 0.7, noNaN: true }),
        fc.tuple(
          fc.constantFrom<KernelChoice>('native', 'ts'),
          fc.constantFrom<KernelChoice>('native', 'ts'),
          fc.constantFrom<KernelChoice>('native', 'ts'),
        ),
        fc.array(queryCaseArb, { minLength: 18, maxLength: 18, size: 'max' }),
        async (records, sizes, hows, split, [firstKernels, middleKernels, lastKernels], cases) => {
          runs++;
          const directory = temporaryDirectory();
          const clock = new ManualClock();
          const ids = sequentialIds();
          const store = await openStore(directory, {
            kernels: tallyingKernels(firstKernels),
            clock: clock.read,
            newId: ids,
          });
          const feed = await store.createFeed('f');
          const { token } = await feed.acquireLease({ holder: 'planner-test', ttlMs: 24 * 60 * 60 * 1000 });
          const harness: Harness = {
            store,
            feed,
            token,
            directory,
            clock,
            ids,
            published: [],
            lastPositions: [],
            nextPayload: 0,
          };
          try {
            const cut = Math.max(1, Math.floor(records.length * split));
            const cursor = { size: 0, how: 0 };
            await write(harness, records.slice(0, cut), sizes, hows, cursor);
            // Sealed indexes built in memory as the segments rolled, plus the tail.
            await checkQueries(harness, cases, `${firstKernels}, live after ${cut} records`);

            await reopen(harness, middleKernels);
            expect(harness.feed.indexRebuilds, 'a clean close leaves every index file in place').toEqual([]);
            // Sealed indexes from their files; the tail rebuilt from the active segment.
            await checkQueries(harness, cases, `${middleKernels}, reopened after ${cut} records`);

            await write(harness, records.slice(cut), sizes, hows, cursor);
            await checkQueries(harness, cases, `${middleKernels}, live after ${records.length} records`);

            await reopen(harness, lastKernels);
            expect(harness.feed.indexRebuilds, 'a clean close leaves every index file in place').toEqual([]);
            await checkQueries(harness, cases, `${lastKernels}, reopened after ${records.length} records`);

            const files = segmentFiles(harness);
            // One index file per sealed (non-active) history segment, named by its base.
            expect(files.index).toEqual(files.history.slice(0, -1).map((name) => name.replace(/\.hist$/, '.idx')));
            expect(files.history.length - 1, 'the data spans several sealed segments').toBeGreaterThanOrEqual(3);
          } finally {
            await harness.store.close();
            fs.rmSync(directory, { recursive: true, force: true });
          }
        },
      ),
      { numRuns: 8, endOnFailure: true },
    );
    expect(runs).toBe(8);
    kernelTally.expectAllReached();
    queryTally.expectAllReached();
  });
});

// ---- The type limit -----------------------------------------------------------------------------

describe('the type limit', () => {
  const max = limits.typesPerFeedMax;
  /** A feed holding `count` distinct types, one record each (positions 1 … count). */
  async function feedWithTypes(count: number) {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { segmentBytes: 8 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'types-test', ttlMs: 24 * 60 * 60 * 1000 });
    await feed.append(
      Array.from({ length: count }, (_, n) => ({ payload: `p${n}`, type: `type-${n}` })),
      { token },
    );
    return { directory, store, feed, token };
  }

  async function positionsOfType(feed: Feed, type: string, plan: Plan): Promise<number[]> {
    const out: number[] = [];
    for await (const record of feed.read({ filter: { types: [type] }, plan })) out.push(record.position);
    return out;
  }

  it(`holds ${max} distinct types and refuses one more with TYPE_LIMIT, before and after a reopen`, async () => {
    const { directory, store, feed, token } = await feedWithTypes(max - 1);
    await expect(feed.append([{ payload: 'last', type: 'the-last-type' }], { token })).resolves.toMatchObject({
      firstPosition: max,
    });
    await expect(feed.append([{ payload: 'one more', type: 'one-too-many' }], { token })).rejects.toMatchObject({
      code: 'TYPE_LIMIT',
      details: { type: 'one-too-many', limit: max },
    });
    // Known types and untyped records are still welcome; two new ones in one batch are not.
    await expect(
      feed.append([{ payload: 'known', type: 'type-7' }, { payload: 'untyped' }], { token }),
    ).resolves.toMatchObject({ records: 2 });
    await expect(
      feed.append(
        [
          { payload: 'x', type: 'type-8' },
          { payload: 'y', type: 'new-a' },
        ],
        { token },
      ),
    ).rejects.toMatchObject({ code: 'TYPE_LIMIT' });
    expect((await feed.info()).records).toBe(max + 2);
    await store.close();

    const again = await openStore(directory, { segmentBytes: 8 * 1024 * 1024 });
    const reopened = await again.feed('f');
    await expect(reopened.append([{ payload: 'one more', type: 'one-too-many' }], { token })).rejects.toMatchObject({
      code: 'TYPE_LIMIT',
    });
    for (const plan of ['index', 'scan'] as const) {
      expect(await positionsOfType(reopened, 'type-7', plan)).toEqual([8, max + 1]);
      expect(await positionsOfType(reopened, 'the-last-type', plan)).toEqual([max]);
      expect(await positionsOfType(reopened, 'type-0', plan)).toEqual([1]);
    }
    await again.close();
  });

  it('counts the types of an open stream’s batches toward the limit (a stream cannot carry the feed past it)', async () => {
    // One slot left: the stream's first batch takes it, so its later batches' new types are too many.
    const { store, feed, token } = await feedWithTypes(max - 1);
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'a', type: 'stream-type-a' }], { token });
    const outcome = (promise: Promise<unknown>) =>
      promise.then(
        () => 'accepted',
        (error: { code?: string }) => error.code ?? String(error),
      );
    const second = await outcome(stream.append([{ payload: 'b', type: 'stream-type-b' }], { token }));
    const third = await outcome(stream.append([{ payload: 'c', type: 'stream-type-c' }], { token }));
    const sealed = await outcome(stream.seal({ token }));
    // Refused at an append or at the seal: either way the feed may not exceed the limit.
    expect
      .soft({ second, third, sealed }, 'the second and third batches each bring a type past the limit')
      .not.toEqual({
        second: 'accepted',
        third: 'accepted',
        sealed: 'accepted',
      });
    const distinct = new Set<string>();
    for await (const record of feed.read()) if (record.type !== undefined) distinct.add(record.type);
    expect.soft(distinct.size, 'distinct types published').toBeLessThanOrEqual(max);
    // And whatever was published reads the same by index as by scan.
    for (const type of ['stream-type-a', 'stream-type-b', 'stream-type-c', 'type-0', 'type-1']) {
      expect
        .soft(await positionsOfType(feed, type, 'index'), `${type}: index plan vs scan`)
        .toEqual(await positionsOfType(feed, type, 'scan'));
    }
    await store.close();
  });

  it('counts an open stream’s types toward the limit across a restart too', async () => {
    const { directory, store, feed, token } = await feedWithTypes(max - 1);
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'a', type: 'stream-type-a' }], { token });
    await store.close();
    // Reopened, the stream's acknowledged batch (and its type, which takes the last slot) is recovered from the WAL.
    const again = await openStore(directory, { segmentBytes: 8 * 1024 * 1024 });
    const reopened = await again.feed('f');
    const recovered = await reopened.stream(stream.id);
    const outcome = (promise: Promise<unknown>) =>
      promise.then(
        () => 'accepted',
        (error: { code?: string }) => error.code ?? String(error),
      );
    const second = await outcome(recovered.append([{ payload: 'b', type: 'stream-type-b' }], { token }));
    const third = await outcome(recovered.append([{ payload: 'c', type: 'stream-type-c' }], { token }));
    const oneShot = await outcome(reopened.append([{ payload: 'd', type: 'one-shot-type' }], { token }));
    const sealed = await outcome(recovered.seal({ token }));
    expect.soft({ second, third, oneShot, sealed }, 'after the restart, each new type is one past the limit').toEqual({
      second: 'TYPE_LIMIT',
      third: 'TYPE_LIMIT',
      oneShot: 'TYPE_LIMIT',
      sealed: 'accepted',
    });
    const distinct = new Set<string>();
    for await (const record of reopened.read()) if (record.type !== undefined) distinct.add(record.type);
    expect.soft(distinct.size, 'distinct types published').toBeLessThanOrEqual(max);
    for (const type of ['stream-type-a', 'stream-type-b', 'stream-type-c', 'one-shot-type', 'type-0', 'type-1']) {
      expect
        .soft(await positionsOfType(reopened, type, 'index'), `${type}: index plan vs scan`)
        .toEqual(await positionsOfType(reopened, type, 'scan'));
    }
    await again.close();
  });

  it('does not count the types of a request refused in the same group commit', async () => {
    // One slot left. In one group: a request with a new type, refused by its condition, then
    // another request with a different new type, which must get the slot.
    const { store, feed, token } = await feedWithTypes(max - 1);
    const outcome = (promise: Promise<unknown>) =>
      promise.then(
        () => 'accepted',
        (error: { code?: string }) => error.code ?? String(error),
      );
    const [, refused, next] = await Promise.all([
      outcome(feed.append([{ payload: 'warm-up' }], { token })),
      outcome(
        feed.append([{ payload: 'x', type: 'refused-type' }], {
          token,
          condition: { failIfMatch: { types: ['type-0'] }, after: 0 },
        }),
      ),
      outcome(feed.append([{ payload: 'y', type: 'admitted-type' }], { token })),
    ]);
    expect(refused).toBe('CONDITION_FAILED');
    expect(next, 'the refused request published nothing, so its type takes no slot').toBe('accepted');
    await store.close();
  });
});
