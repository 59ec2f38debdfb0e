/**
 * Key compaction up to a horizon H: the sealed segments wholly at or before H keep each key's
 * winner as of H (and keyless records, unless dropped), positions never move, and every read the
 * contract names — RAW and dedup after H, latest from H on and from the start, `get` with
 * `asOf ≥ H` — answers exactly as before, after a reopen and after every derived file is
 * rebuilt; cursors below H fail with `COMPACTED`; subscriptions hold H back unless forced.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MergeLog } from '../../packages/engine/src/coordinator/maintenance/merge-state.js';
import { type AppendRecord, type Feed, StreamStackError } from '../../packages/engine/src/index.js';
import { loadKernels, tsKernels } from '../../packages/engine/src/kernels/index.js';
import type { Kernels } from '../../packages/engine/src/kernels/kernels.js';
import {
  collect,
  historySegmentBases,
  ManualClock,
  openStore,
  recordShapes,
  sequentialIds,
  temporaryDirectory,
} from '../support/store.js';

const keys = 13;

/** Each commit updates a few keys (so each key is updated many times), with repeated payloads. */
function commitRecords(index: number): AppendRecord[] {
  const records: AppendRecord[] = [
    {
      payload: `{"n":${index},"fill":"${'u'.repeat(900)}"}`,
      key: `k${index % keys}`,
      version: index,
      type: 'update',
      tags: [`group:${index % 3}`],
    },
    // The same payload under many keys and commits: dedup decides on its first occurrence.
    {
      payload: `state ${index % 5} ${'s'.repeat(400)}`,
      key: `k${(index * 7) % keys}`,
      version: index,
      type: 'state',
      tags: ['all'],
    },
    { payload: `event ${index % 9}`, type: index % 2 === 0 ? 'even' : 'odd', tags: ['all', `n:${index % 4}`] },
  ];
  // A payload first written by a record compaction drops (a later version of its key wins)
  // and written again only after the horizon: dedup after H must still see it as a repeat.
  if (index <= 20)
    records.push({ payload: `rare ${index} ${'r'.repeat(80)}`, key: `once${index}`, version: 1, type: 'rare' });
  if (index > 3 && index <= 23)
    records.push({ payload: `rare winner ${index}`, key: `once${index - 3}`, version: 2, type: 'rare' });
  if (index > 400 && index <= 420) records.push({ payload: `rare ${index - 400} ${'r'.repeat(80)}`, type: 'rare' });
  // Some keys are deleted now and then, and some come back after.
  if (index % 17 === 0)
    records.push({ payload: '', key: `k${index % keys}`, version: index + 1, tombstone: true, type: 'delete' });
  // A lower version written later loses to an earlier higher one.
  if (index % 10 === 3)
    records.push({ payload: `stale ${index}`, key: `k${(index + 1) % keys}`, version: 1, type: 'update' });
  return records;
}

const shape = recordShapes;

/** Every read the contract keeps unchanged for horizon `horizon`. */
async function keptReads(feed: Feed, horizon: number) {
  const head = (await feed.head())!.commit;
  const gets: unknown[] = [];
  for (let key = 0; key < keys; key++) {
    for (const asOf of [horizon, horizon + 3, head]) {
      const found = await feed.get(`k${key}`, { asOf });
      gets.push(found ? shape([found])[0] : null);
    }
  }
  return {
    raw: shape(await collect(feed.read({ after: horizon }))),
    dedup: shape(await collect(feed.read({ after: horizon, mode: 'dedup' }))),
    latestAfter: shape(await collect(feed.read({ after: horizon, mode: 'latest' }))),
    latestAll: shape(await collect(feed.read({ mode: 'latest' }))),
    filtered: shape(await collect(feed.read({ after: horizon, filter: { types: ['even', 'state'], tags: ['all'] } }))),
    scanned: shape(await collect(feed.read({ after: horizon, filter: { types: ['odd'] }, plan: 'scan' }))),
    commit: shape(await feed.readCommit(horizon + 1)),
    commits: (await collect(feed.commits())).map((commit) => ({ ...commit })),
    gets,
  };
}

async function filled(directory = temporaryDirectory(), commits = 420, kernels: Kernels = tsKernels) {
  const clock = new ManualClock();
  const store = await openStore(directory, { kernels, clock: clock.read, newId: sequentialIds() });
  const feed = await store.createFeed('f');
  for (let index = 1; index <= commits; index++) {
    await feed.append(commitRecords(index));
    clock.advance(1000);
  }
  await feed.writer.idle();
  return { store, feed, directory, clock };
}

/** What a RAW read from the start keeps: below `boundary`, only winners as of H (and keyless). */
function compactedView(
  all: ReturnType<typeof shape>,
  horizonPosition: number,
  boundary: number,
  keyless: 'keep' | 'drop',
) {
  const winners = new Map<string, (typeof all)[number]>();
  for (const record of all) {
    if (record.position > horizonPosition || record.key === undefined) continue;
    const held = winners.get(record.key);
    const version = record.version ?? 0;
    if (!held || version > (held.version ?? 0) || (version === (held.version ?? 0) && record.position > held.position))
      winners.set(record.key, record);
  }
  return all.filter((record) => {
    if (record.position >= boundary) return true;
    if (record.key === undefined) return keyless === 'keep';
    const winner = winners.get(record.key)!;
    return winner.position === record.position && !winner.tombstone;
  });
}

async function expectCode(call: () => Promise<unknown>, code: string) {
  const error = await call().then(
    () => undefined,
    (failure: unknown) => failure,
  );
  expect(error).toBeInstanceOf(StreamStackError);
  expect((error as StreamStackError).code).toBe(code);
  return error as StreamStackError;
}

describe('key compaction', () => {
  it('keeps each key’s winner below the horizon and every read the contract names unchanged', async () => {
    const { store, feed, directory } = await filled();
    const bases = historySegmentBases(directory);
    expect(bases.length).toBeGreaterThan(6);
    const horizon = Math.floor((await feed.head())!.commit * 0.7);
    const allBefore = shape(await collect(feed.read()));
    const expected = await keptReads(feed, horizon);
    const historyBytes = () =>
      historySegmentBases(directory).reduce(
        (sum, base) =>
          sum +
          fs.statSync(path.join(directory, 'feeds', 'f', 'history', `${String(base).padStart(16, '0')}.hist`)).size,
        0,
      );
    const diskBefore = historyBytes();

    const result = await feed.compactKeys({ horizon });
    expect(result.putOff).toBe(false);
    expect(result.horizon).toBe(horizon);
    expect(result.segmentsCompacted).toBeGreaterThan(2);
    expect(result.recordsAfter).toBeLessThan(result.recordsBefore / 2);
    expect(result.bytesAfter).toBeLessThan(result.bytesBefore / 2);
    expect(historyBytes()).toBeLessThan(diskBefore * 0.75);
    expect((await feed.info()).horizon).toBe(horizon);

    expect(await keptReads(feed, horizon)).toEqual(expected);
    // A read from the start reads what is kept: the winners, keyless records, then everything.
    const boundary = bases[result.segmentsCompacted];
    const horizonPosition = (await feed.readCommit(horizon + 1))[0].position - 1;
    const view = compactedView(allBefore, horizonPosition, boundary, 'keep');
    expect(view.length).toBeLessThan(allBefore.length);
    expect(shape(await collect(feed.read()))).toEqual(view);
    // Filtered reads from the start go through the rebuilt index over the sparse positions.
    expect(shape(await collect(feed.read({ filter: { types: ['state'] } })))).toEqual(
      view.filter((record) => record.type === 'state'),
    );

    // Below the horizon: reads, `asOf`, one commit, conditions.
    const below = await expectCode(() => collect(feed.read({ after: horizon - 1 })), 'COMPACTED');
    expect(below.details).toMatchObject({ horizon });
    await expectCode(() => feed.get('k1', { asOf: horizon - 1 }), 'COMPACTED');
    await expectCode(() => feed.readCommit(horizon - 5), 'COMPACTED');
    await expectCode(
      () => feed.append([{ payload: 'x' }], { condition: { after: 1, failIfMatch: { types: ['update'] } } }),
      'COMPACTED',
    );
    await expectCode(() => feed.createSubscription('late', { after: horizon - 1 }), 'COMPACTED');

    // After a reopen, and after every derived file is rebuilt from the compacted segments.
    await store.close();
    for (const run of ['reopen', 'rebuild']) {
      if (run === 'rebuild') {
        const index = path.join(directory, 'feeds', 'f', 'index');
        for (const name of fs.readdirSync(index)) fs.rmSync(path.join(index, name));
      }
      const again = await openStore(directory, { kernels: tsKernels });
      const reopened = await again.feed('f');
      expect((await reopened.info()).horizon).toBe(horizon);
      expect(await keptReads(reopened, horizon)).toEqual(expected);
      expect(shape(await collect(reopened.read()))).toEqual(view);
      expect((await again.verify('f'))[0].problems).toEqual([]);
      await again.close();
    }
  });

  it('compacts again at a later horizon, keeping what the first one retired', async () => {
    const { store, feed } = await filled(undefined, 200);
    await feed.compactKeys({ horizon: 60 });
    for (let index = 201; index <= 330; index++) await feed.append(commitRecords(index));
    await feed.writer.idle();
    const horizon = 250;
    const expected = await keptReads(feed, horizon);
    const keylessEarly = async () =>
      (await collect(feed.read())).filter((record) => record.commit <= 60 && record.key === undefined).length;
    // The first compaction kept the keyless records.
    expect(await keylessEarly()).toBeGreaterThan(20);
    const second = await feed.compactKeys({ horizon, keyless: 'drop' });
    expect(second.segmentsCompacted).toBeGreaterThan(0);
    expect(await keptReads(feed, horizon)).toEqual(expected);
    // Keyless records went from the compacted segments.
    expect(await keylessEarly()).toBe(0);
    await store.close();
  });

  it('stops at a subscription that has not reached the horizon, unless forced', async () => {
    const { store, feed } = await filled(undefined, 200);
    await feed.createSubscription('slow', { after: 40 });
    // One at the start reads the compacted history from its beginning: it does not hold H back.
    await feed.createSubscription('fresh');
    const held = await feed.compactKeys({ horizon: 150 });
    expect(held.heldBy).toEqual({ subscription: 'slow', cursor: 40 });
    expect(held.horizon).toBeLessThanOrEqual(40);
    const slow = await feed.subscription('slow');
    expect((await slow.poll()).commits.length).toBeGreaterThan(0);

    const forced = await feed.compactKeys({ horizon: 150, force: true });
    expect(forced.horizon).toBe(150);
    expect(forced.heldBy).toBeUndefined();
    await expectCode(async () => (await feed.subscription('slow')).poll(), 'COMPACTED');
    // Left behind, it holds a later compaction back no more.
    expect((await feed.compactKeys({ horizon: 160 })).heldBy).toBeUndefined();
    await (await feed.subscription('slow')).reset(160);
    expect((await (await feed.subscription('slow')).poll()).commits[0].commit.commit).toBe(161);
    expect((await (await feed.subscription('fresh')).poll()).commits[0].commit.commit).toBe(1);
    await store.close();
  });

  it('finishes a one-segment rewrite a crash interrupted, and a read-only open does not trust its stale index files', async () => {
    const { store, feed, directory } = await filled(undefined, 300);
    const bases = historySegmentBases(directory);
    // The horizon at the last commit of the first segment: exactly one segment is rewritten,
    // covering the same positions, so its stale index files have the right size.
    const horizon = (await collect(feed.read())).find((record) => record.position >= bases[1])!.commit - 1;
    const expected = await keptReads(feed, horizon);
    const index = path.join(directory, 'feeds', 'f', 'index');
    const first = String(bases[0]).padStart(16, '0');
    const saved = new Map(
      fs
        .readdirSync(index)
        .filter((name) => name.startsWith(first))
        .map((name) => [name, fs.readFileSync(path.join(index, name))]),
    );
    expect([...saved.keys()].sort()).toEqual([`${first}.fps`, `${first}.idx`, `${first}.keys`]);
    const result = await feed.compactKeys({ horizon });
    expect(result).toMatchObject({ segmentsCompacted: 1, segmentsAfter: 1 });
    const fromStart = shape(await collect(feed.read()));
    await store.close();
    // As a crash after the switch leaves it: the rewritten segment, the old derived files, the record pending.
    for (const [name, bytes] of saved) fs.writeFileSync(path.join(index, name), bytes);
    const log = await MergeLog.open(tsKernels, path.join(directory, 'feeds', 'f'), false);
    await log.write({ ...log.record!, pending: true });
    log.close();

    const readOnly = await openStore(directory, { kernels: tsKernels, readOnly: true });
    const seen = await readOnly.feed('f');
    expect(await keptReads(seen, horizon)).toEqual(expected);
    expect(shape(await collect(seen.read()))).toEqual(fromStart);
    expect(shape(await collect(seen.read({ filter: { types: ['rare'] } })))).toEqual(
      fromStart.filter((record) => record.type === 'rare'),
    );
    await readOnly.close();

    const reopened = await openStore(directory, { kernels: tsKernels });
    const again = await reopened.feed('f');
    expect(await keptReads(again, horizon)).toEqual(expected);
    expect(shape(await collect(again.read({ filter: { types: ['rare'] } })))).toEqual(
      fromStart.filter((record) => record.type === 'rare'),
    );
    await again.writer.idle();
    await reopened.close();
    for (const [name, bytes] of saved) expect(fs.readFileSync(path.join(index, name)).equals(bytes), name).toBe(false);
  });

  it('reports a flipped byte in a compacted segment as CORRUPT, and reads elsewhere go on', async () => {
    const { store, feed, directory } = await filled(undefined, 300);
    const horizon = 250;
    const after = recordShapes(await collect(feed.read({ after: horizon })));
    const result = await feed.compactKeys({ horizon });
    expect(result.segmentsCompacted).toBeGreaterThan(0);
    await store.close();
    // A byte in the middle of the first (compacted) segment's data: a manifest, a pack or a
    // retired-fingerprint frame, all covered by their frames' CRCs.
    const file = path.join(
      directory,
      'feeds',
      'f',
      'history',
      `${String(historySegmentBases(directory)[0]).padStart(16, '0')}.hist`,
    );
    const bytes = fs.readFileSync(file);
    // A rewritten segment is sized to its data, so its middle is data.
    const at = 48 + Math.floor((bytes.length - 48) / 2);
    bytes[at] ^= 0x40;
    fs.writeFileSync(file, bytes);
    const again = await openStore(directory, { kernels: tsKernels });
    const reopened = await again.feed('f');
    await expect(collect(reopened.read())).rejects.toMatchObject({ code: 'CORRUPT' });
    expect(recordShapes(await collect(reopened.read({ after: horizon })))).toEqual(after);
    const [verification] = await again.verify('f');
    expect(verification.ok).toBe(false);
    expect(verification.problems.length).toBeGreaterThan(0);
    await again.close();
  });

  it('refuses bad requests and changes nothing', async () => {
    const { store, feed, directory } = await filled(undefined, 60);
    const before = historySegmentBases(directory);
    const head = (await feed.head())!.commit;
    await expectCode(() => feed.compactKeys({ horizon: head + 1 }), 'CURSOR_OUT_OF_RANGE');
    await expectCode(() => feed.compactKeys({ horizon: 0 }), 'CURSOR_OUT_OF_RANGE');
    await expectCode(() => feed.compactKeys({ horizon: 10, keyless: 'lose' as never }), 'INVALID_ARGUMENT');
    await expectCode(() => feed.compactKeys({ horizon: 10, horizn: 3 } as never), 'INVALID_ARGUMENT');
    expect(historySegmentBases(directory)).toEqual(before);
    expect((await feed.info()).horizon).toBe(0);
    expect(await collect(feed.read({ after: 5 }))).not.toHaveLength(0);
    await store.close();
  });

  it('writes the same bytes with the native and the TypeScript kernels', async () => {
    const native = loadKernels('native');
    const digests: string[] = [];
    for (const kernels of [tsKernels, native]) {
      const { store, feed, directory } = await filled(undefined, 150, kernels);
      await feed.compactKeys({ horizon: 120 });
      await store.close();
      const history = path.join(directory, 'feeds', 'f', 'history');
      digests.push(
        fs
          .readdirSync(history)
          .sort()
          .map((name) => `${name}:${fs.readFileSync(path.join(history, name)).toString('base64')}`)
          .join('\n'),
      );
    }
    expect(digests[1]).toBe(digests[0]);
  });
});
