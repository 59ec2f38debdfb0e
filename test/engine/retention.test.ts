/**
 * Retention: trims remove whole history segments (and their summaries, index files and
 * dictionaries), never past a subscription unless forced; reads at or above the low mark answer
 * as they did (dedup and `get` over the history that is kept); cursors below it fail with
 * `TRIMMED`; a trim interrupted after its floor was recorded is finished by the next open.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { RetentionLog } from '../../packages/engine/src/coordinator/maintenance/retention-state.js';
import { type AppendRecord, type Feed, type StoredRecord, StreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import type { Kernels } from '../../packages/engine/src/kernels/kernels.js';
import {
  collect,
  historySegmentBases,
  ManualClock,
  openStore,
  sequentialIds,
  temporaryDirectory,
  text,
} from '../support/store.js';

const hourMs = 3_600_000;

/** Commit `index`'s records: a keyed update, a repeated payload, and a typed, tagged event. */
function commitRecords(index: number): AppendRecord[] {
  return [
    {
      payload: `{"n":${index},"fill":"${'x'.repeat(1500)}"}`,
      key: `k${index % 7}`,
      version: index,
      type: 'update',
      tags: [`group:${index % 3}`],
    },
    // The same payload every fifth commit: dedup has first occurrences to find again after a trim.
    { payload: `repeat-${index % 5}`, fingerprint: `fp-${index % 5}`, type: 'repeat' },
    { payload: `event ${index}`, type: index % 2 === 0 ? 'even' : 'odd', tags: ['all', `n:${index}`] },
  ];
}

async function filledFeed(clock: ManualClock, commits: number, directory = temporaryDirectory()) {
  const store = await openStore(directory, { kernels: tsKernels, clock: clock.read, newId: sequentialIds() });
  const feed = await store.createFeed('f');
  for (let index = 1; index <= commits; index++) {
    await feed.append(commitRecords(index));
    clock.advance(60_000);
  }
  await feed.writer.idle();
  return { store, feed, directory };
}

/** What a reader sees, as comparable values. */
const shape = (records: readonly StoredRecord[]) =>
  records.map((record) => ({
    commit: record.commit,
    position: record.position,
    key: record.key,
    type: record.type,
    tags: record.tags,
    payload: text(record.payload),
  }));

async function expectCode(promise: Promise<unknown> | (() => unknown), code: string): Promise<StreamStackError> {
  try {
    await (typeof promise === 'function' ? promise() : promise);
  } catch (error) {
    expect(error).toBeInstanceOf(StreamStackError);
    expect((error as StreamStackError).code).toBe(code);
    return error as StreamStackError;
  }
  throw new Error(`expected ${code}`);
}

describe('trim', () => {
  it('removes whole segments before a commit, keeps every read at or above the low mark, and refuses cursors below it', async () => {
    const clock = new ManualClock();
    const { store, feed, directory } = await filledFeed(clock, 300);
    const basesBefore = historySegmentBases(directory);
    expect(basesBefore.length).toBeGreaterThan(4);
    const before = 150;
    const head = (await feed.head())!.commit;
    // What readers see of the kept part, before the trim.
    const raw = shape(await collect(feed.read({ after: before - 1 })));
    const filtered = shape(await collect(feed.read({ after: before - 1, filter: { types: ['even'], tags: ['all'] } })));
    const latest = shape(await collect(feed.read({ after: before - 1, mode: 'latest' })));

    const result = await feed.trim({ before });
    expect(result.segmentsRemoved).toBeGreaterThan(0);
    expect(result.lowMark).toBeLessThanOrEqual(before);
    const low = result.lowMark;
    expect((await feed.info()).lowMark).toBe(low);
    expect(result.commitsRemoved).toBe(low - 1);
    expect(result.recordsRemoved).toBe(result.lowPosition - 1);
    // Whole segments went, the oldest ones; the rest are untouched.
    const basesAfter = historySegmentBases(directory);
    expect(basesAfter).toEqual(basesBefore.filter((base) => base >= result.lowPosition));
    expect(basesAfter[0]).toBe(result.lowPosition);
    // Nothing named for a trimmed segment is left anywhere.
    for (const part of ['history', 'index']) {
      for (const name of fs.readdirSync(path.join(directory, 'feeds', 'f', part))) {
        const base = Number(name.slice(0, 16));
        if (/^\d{16}\./.test(name)) expect(base).toBeGreaterThanOrEqual(result.lowPosition);
      }
    }

    expect(shape(await collect(feed.read({ after: before - 1 })))).toEqual(raw);
    expect(shape(await collect(feed.read({ after: before - 1, filter: { types: ['even'], tags: ['all'] } })))).toEqual(
      filtered,
    );
    expect(shape(await collect(feed.read({ after: before - 1, mode: 'latest' })))).toEqual(latest);
    // With no cursor a read starts at the low mark.
    const all = await collect(feed.read());
    expect(all[0].commit).toBe(low);
    expect(all[0].position).toBe(result.lowPosition);
    expect(all.length).toBe((await feed.info()).records - result.lowPosition + 1);
    expect((await collect(feed.commits()))[0].commit).toBe(low);
    // The commit just before the low mark is a valid cursor; below it is trimmed history.
    expect((await collect(feed.read({ after: low - 1, limit: 1 })))[0].commit).toBe(low);
    const error = await expectCode(collect(feed.read({ after: low - 2 })), 'TRIMMED');
    expect(error.details.lowMark).toBe(low);
    await expectCode(() => collect(feed.readColumns({ after: 0 })), 'TRIMMED');
    await expectCode(() => feed.commits({ after: 0 }), 'TRIMMED');
    await expectCode(() => feed.readCommit(1), 'TRIMMED');
    await expectCode(feed.get('k1', { asOf: low - 2 }), 'TRIMMED');
    await expectCode(feed.createSubscription('late', { after: 0 }), 'TRIMMED');
    await expectCode(collect(feed.follow({ after: 0, signal: AbortSignal.abort() })), 'TRIMMED');
    // A condition reaching below the low mark cannot be checked: refused, nothing written.
    await expectCode(
      feed.append([{ payload: 'x' }], { condition: { failIfMatch: { items: [{ types: ['never'] }] }, after: 0 } }),
      'TRIMMED',
    );
    expect((await feed.head())!.commit).toBe(head);
    // The feed goes on: appends, and a trim that finds nothing more to remove.
    await feed.append([{ payload: 'after the trim', type: 'even', tags: ['all'] }]);
    expect((await feed.trim({ before })).segmentsRemoved).toBe(0);
    expect((await store.verify('f'))[0]).toMatchObject({ ok: true, lowMark: low });
    await store.close();

    // Reopened, the history starts at the low mark, and reads are as they were.
    const reopened = await openStore(directory, { kernels: tsKernels });
    const again = await reopened.feed('f');
    expect((await again.info()).lowMark).toBe(low);
    expect(shape(await collect(again.read({ after: before - 1, filter: { types: ['even'], tags: ['all'] } })))).toEqual(
      [...filtered, ...shape((await collect(again.read({ after: head }))).filter((record) => record.type === 'even'))],
    );
    await expectCode(collect(again.read({ after: 0 })), 'TRIMMED');
    await reopened.close();
  });

  it('counts dedup and key winners over the history that is kept', async () => {
    const clock = new ManualClock();
    const { store, feed } = await filledFeed(clock, 240);
    const result = await feed.trim({ before: 120 });
    const low = result.lowMark;
    expect(result.segmentsRemoved).toBeGreaterThan(0);
    // The oracle: dedup over what is kept, by reading it RAW.
    const kept = await collect(feed.read());
    const seen = new Set<string>();
    const firsts = kept.filter((record) => {
      const fingerprint = Buffer.from(record.fingerprint).toString('hex');
      if (seen.has(fingerprint)) return false;
      seen.add(fingerprint);
      return true;
    });
    const dedup = await collect(feed.read({ mode: 'dedup' }));
    expect(shape(dedup)).toEqual(shape(firsts));
    // A payload repeated from before the trim counts as first at its first kept occurrence.
    expect(
      dedup
        .filter((record) => record.type === 'repeat')
        .map((record) => text(record.payload))
        .sort(),
    ).toEqual(['repeat-0', 'repeat-1', 'repeat-2', 'repeat-3', 'repeat-4']);
    // Key winners: the highest version among kept records.
    for (let key = 0; key < 7; key++) {
      const winner = kept
        .filter((record) => record.key === `k${key}`)
        .sort((a, b) => (b.version ?? 0) - (a.version ?? 0))[0];
      expect((await feed.get(`k${key}`))?.position).toBe(winner.position);
      const asOf = low + 3;
      const asOfWinner = kept
        .filter((record) => record.key === `k${key}` && record.commit <= asOf)
        .sort((a, b) => (b.version ?? 0) - (a.version ?? 0))[0];
      expect((await feed.get(`k${key}`, { asOf }))?.position).toBe(asOfWinner?.position);
    }
    // Reopened, the rebuilt dictionaries give the same answers.
    await store.close();
    const reopened = await openStore(store.path, { kernels: tsKernels });
    const again = await reopened.feed('f');
    expect(shape(await collect(again.read({ mode: 'dedup' })))).toEqual(shape(firsts));
    await reopened.close();
  });

  it('never removes what a subscription has not passed, unless forced, and says which one holds it', async () => {
    const clock = new ManualClock();
    const { store, feed } = await filledFeed(clock, 200);
    await feed.createSubscription('billing', { after: 20 });
    await feed.createSubscription('audit', { after: 120 });
    const held = await feed.trim({ before: 150 });
    expect(held.heldBy).toEqual({ subscription: 'billing', cursor: 20 });
    // Segments wholly before the subscription's cursor may go; none it has not passed.
    expect(held.lowMark).toBeLessThanOrEqual(21);
    expect((await (await feed.subscription('billing')).info()).trimmed).toBe(false);
    expect((await (await feed.subscription('billing')).poll({ max: 3 })).commits[0].commit.commit).toBe(21);
    await (await feed.subscription('billing')).advance(90);
    const moved = await feed.trim({ before: 150 });
    expect(moved.lowMark).toBeGreaterThan(held.lowMark);
    expect(moved.lowMark).toBeLessThanOrEqual(91);
    expect(moved.heldBy?.subscription).toBe('billing');

    const forced = await feed.trim({ before: 150, force: true });
    expect(forced.heldBy).toBeUndefined();
    expect(forced.lowMark).toBeGreaterThan(91);
    const billing = await feed.subscription('billing');
    expect((await billing.info()).trimmed).toBe(true);
    await expectCode(billing.poll(), 'TRIMMED');
    await billing.reset(forced.lowMark - 1);
    expect((await billing.poll({ max: 1 })).commits[0].commit.commit).toBe(forced.lowMark);
    await store.close();
  });

  it('applies a policy by age, by records and by bytes, on demand and on its own', async () => {
    const clock = new ManualClock();
    const { store, feed } = await filledFeed(clock, 200);
    const info = await feed.info();
    expect(info.retention).toMatchObject({ policy: {}, lowMark: 1, pinnedBy: null });
    expect((await feed.diskUse()).historySegments).toBe(historySegmentBases(store.path).length);

    // By records: at least the newest 300 stay, and no whole segment beyond them.
    await feed.setRetention({ maxRecords: 300 });
    const byRecords = await feed.trim();
    const afterRecords = await feed.info();
    expect(afterRecords.records - afterRecords.lowPosition + 1).toBeGreaterThanOrEqual(300);
    expect(byRecords.segmentsRemoved).toBeGreaterThan(0);
    expect((await feed.trim()).segmentsRemoved).toBe(0);

    // By age: commits are a minute apart; keep the last hour.
    await feed.setRetention({ maxAgeMs: hourMs });
    await feed.trim();
    const kept = await collect(feed.commits());
    expect(kept.length).toBeGreaterThanOrEqual(60);
    // The oldest kept segment holds a commit younger than an hour; the ones before it did not.
    expect(kept.some((commit) => commit.sealedAt >= clock.now - hourMs)).toBe(true);
    expect(kept.length).toBeLessThan(120);

    // By bytes, on its own: the trim after the next finished segment keeps at most one
    // segment more than the limit asks.
    await feed.setRetention({ maxBytes: 128 * 1024 });
    const low = (await feed.info()).lowMark;
    for (let index = 201; index <= 260; index++) await feed.append(commitRecords(index));
    await feed.writer.idle();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await feed.retention();
    expect((await feed.info()).retention.lastError).toBeNull();
    expect((await feed.info()).lowMark).toBeGreaterThan(low);
    expect((await feed.diskUse()).historySegments).toBeLessThanOrEqual(4);

    // A bad policy is refused and changes nothing.
    const policy = (await feed.info()).retention.policy;
    await expectCode(feed.setRetention({ maxAge: 5 } as never), 'INVALID_ARGUMENT');
    await expectCode(feed.setRetention({ maxRecords: 0 }), 'INVALID_ARGUMENT');
    await expectCode(feed.setRetention({ maxBytes: 1.5 }), 'INVALID_ARGUMENT');
    expect((await feed.info()).retention.policy).toEqual(policy);
    await expectCode(feed.trim({ before: -1 }), 'CURSOR_OUT_OF_RANGE');
    await expectCode(feed.trim({ before: (await feed.head())!.commit + 2 }), 'CURSOR_OUT_OF_RANGE');
    await store.close();

    // The policy is durable.
    const reopened = await openStore(store.path, { kernels: tsKernels });
    expect((await (await reopened.feed('f')).retention()).policy).toEqual({ maxBytes: 128 * 1024 });
    await expectCode(reopened.createFeed('g', { retention: { maxRecords: -1 } }), 'INVALID_ARGUMENT');
    expect(await reopened.feedNames()).toEqual(['f']);
    const created = await reopened.createFeed('g', { retention: { maxRecords: 10 } });
    expect((await created.retention()).policy).toEqual({ maxRecords: 10 });
    await reopened.close();
  });

  it('waits for the indexes to take the commits it removes, so none of their files or winners outlives the trim', async () => {
    // Writes that resolve at once (nothing is synced; this test never loses power): the trim's
    // floor is recorded before the publish indexer, which takes published commits a slice at a
    // time in later turns, has taken the last commits of the segments the trim removes.
    const directory = temporaryDirectory();
    const unsynced: Kernels = {
      ...tsKernels,
      writeDurable(fd, position, buffers) {
        let at = position;
        for (const buffer of buffers) at += fs.writeSync(fd, buffer, 0, buffer.length, at);
        return Promise.resolve();
      },
    };
    const store = await openStore(directory, { kernels: unsynced, clock: new ManualClock().read });
    const feed = await store.createFeed('f');
    for (let index = 1; index <= 60; index++) {
      await feed.append(
        Array.from({ length: 20 }, (_, at) => ({
          payload: `c${index}.${at}|${'z'.repeat(200)}`,
          key: `k${at}`,
          version: index % 7,
        })),
      );
    }
    const result = await feed.trim({ before: (await feed.head())!.commit });
    expect(result.segmentsRemoved).toBeGreaterThan(1);
    await feed.writer.idle();
    const belowFloor = () =>
      fs
        .readdirSync(path.join(directory, 'feeds', 'f', 'index'))
        .filter((name) => /^\d{16}\./.test(name) && Number(name.slice(0, 16)) < result.lowPosition);
    expect(belowFloor()).toEqual([]);
    const kept = await collect(feed.read());
    for (let at = 0; at < 20; at++) {
      const winner = kept
        .filter((record) => record.key === `k${at}`)
        .sort((a, b) => (b.version ?? 0) - (a.version ?? 0) || b.position - a.position)[0];
      expect((await feed.get(`k${at}`))?.position).toBe(winner.position);
    }
    expect((await collect(feed.read({ mode: 'dedup' }))).length).toBe(kept.length);
    await store.close();
    const reopened = await openStore(directory, { kernels: tsKernels });
    expect((await reopened.verify('f'))[0].problems).toEqual([]);
    expect(belowFloor()).toEqual([]);
    await reopened.close();
  });

  it('shows the subscription pinning the policy in info', async () => {
    const clock = new ManualClock();
    const { store, feed } = await filledFeed(clock, 150);
    await feed.createSubscription('slow', { after: 5 });
    await feed.setRetention({ maxRecords: 30 });
    await feed.trim();
    const { retention } = await feed.info();
    expect(retention.pinnedBy).toEqual({ subscription: 'slow', cursor: 5 });
    expect(retention.policyLowMark).toBeGreaterThan(retention.lowMark);
    expect(retention.lowMark).toBeLessThanOrEqual(6);
    await store.close();
  });
});

describe('an interrupted trim', () => {
  it('is finished by the next open: the floor recorded, the files below it deleted, the dictionaries rebuilt', async () => {
    const clock = new ManualClock();
    const { store, feed, directory } = await filledFeed(clock, 240);
    const bases = historySegmentBases(directory);
    const floorBase = bases[2];
    const firstKept = (await collect(feed.commits())).find((commit) => commit.firstPosition === floorBase)!;
    const dedupKept = shape(await collect(feed.read({ after: firstKept.commit - 1 })));
    await store.close();

    // The state a crash leaves right after the floor was recorded: every file still there.
    const log = await RetentionLog.open(tsKernels, path.join(directory, 'feeds', 'f'), false);
    await log.write({ policy: {}, floor: { commit: firstKept.commit, position: floorBase }, pending: true });
    log.close();

    const reopened = await openStore(directory, { kernels: tsKernels });
    const again = await reopened.feed('f');
    expect((await again.info()).lowMark).toBe(firstKept.commit);
    expect(historySegmentBases(directory)[0]).toBe(floorBase);
    for (const name of fs.readdirSync(path.join(directory, 'feeds', 'f', 'index'))) {
      if (/^\d{16}\./.test(name)) expect(Number(name.slice(0, 16))).toBeGreaterThanOrEqual(floorBase);
    }
    expect(shape(await collect(again.read()))).toEqual(dedupKept);
    const kept = await collect(again.read());
    const seen = new Set<string>();
    const firsts = kept.filter((record) => {
      const fingerprint = Buffer.from(record.fingerprint).toString('hex');
      return seen.has(fingerprint) ? false : (seen.add(fingerprint), true);
    });
    expect(shape(await collect(again.read({ mode: 'dedup' })))).toEqual(shape(firsts));
    expect(again.indexRebuilds.map((rebuild) => rebuild.reason)).toContain('missing');
    const verification = (await reopened.verify('f'))[0];
    expect(verification.problems).toEqual([]);
    expect(verification).toMatchObject({ ok: true, lowMark: firstKept.commit });
    await reopened.close();
    // The trim is recorded as done: the next open deletes and rebuilds nothing.
    const third = await openStore(directory, { kernels: tsKernels });
    expect((await third.feed('f')).indexRebuilds).toEqual([]);
    await third.close();
  });

  it('a read-only open of a feed with a pending trim reads from the floor and changes nothing', async () => {
    const clock = new ManualClock();
    const { store, feed, directory } = await filledFeed(clock, 200);
    const bases = historySegmentBases(directory);
    const firstKept = (await collect(feed.commits())).find((commit) => commit.firstPosition === bases[1])!;
    await store.close();
    const log = await RetentionLog.open(tsKernels, path.join(directory, 'feeds', 'f'), false);
    await log.write({ policy: {}, floor: { commit: firstKept.commit, position: bases[1] }, pending: true });
    log.close();
    const files = fs.readdirSync(path.join(directory, 'feeds', 'f', 'history')).sort();
    const reader = await openStore(directory, { kernels: tsKernels, readOnly: true });
    const readFeed = await reader.feed('f');
    expect((await readFeed.info()).lowMark).toBe(firstKept.commit);
    const records = await collect(readFeed.read({ mode: 'dedup' }));
    expect(records[0].commit).toBe(firstKept.commit);
    await reader.close();
    expect(fs.readdirSync(path.join(directory, 'feeds', 'f', 'history')).sort()).toEqual(files);
  });
});

/** Exercised by the type checker: the feed type has the retention methods. */
// biome-ignore lint/suspicious/noExportsInTest: exported only so the type checker keeps it as used.
export type RetentionSurface = Pick<Feed, 'trim' | 'setRetention' | 'retention'>;
