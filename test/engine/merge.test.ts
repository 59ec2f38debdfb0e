/**
 * Merging compaction: adjacent sealed segments become one, and every read — RAW, dedup,
 * latest, filtered, by commit, by key with `asOf`, subscriptions — answers exactly as before,
 * after a reopen too; a read in progress is never broken (the switch waits, or is put off); a
 * crash between the switch and the deletion of the replaced files is finished on open.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { MergeLog } from '../../packages/engine/src/coordinator/maintenance/merge-state.js';
import { type AppendRecord, type Feed, type StoredRecord, StreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { mergeSegmentsTrigger } from '../../packages/engine/src/limits.js';
import { segmentFile } from '../../packages/engine/src/storage/feed-layout.js';
import {
  collect,
  filledFeed,
  historySegmentBases,
  openStore,
  recordShapes,
  temporaryDirectory,
} from '../support/store.js';

function commitRecords(index: number): AppendRecord[] {
  return [
    {
      payload: `{"n":${index},"fill":"${'y'.repeat(1200)}"}`,
      key: `k${index % 11}`,
      version: index % 5 === 0 ? 1 : index,
      type: 'update',
      tags: [`group:${index % 3}`],
    },
    // Payloads repeated across segments: the merged segment stores each once.
    { payload: `shared ${'z'.repeat(600)} ${index % 4}`, type: 'shared', tags: ['all'] },
    {
      payload: `event ${index}`,
      type: index % 2 === 0 ? 'even' : 'odd',
      tags: ['all', `n:${index}`],
      ...(index % 7 === 0 ? { key: `k${index % 11}`, tombstone: true } : {}),
    },
  ];
}

const shape = recordShapes;

/** Everything a reader can ask, as comparable values. */
async function everything(feed: Feed) {
  const head = (await feed.head())!.commit;
  const gets: unknown[] = [];
  for (let key = 0; key < 11; key++) {
    for (const asOf of [head, Math.floor(head / 3), Math.floor(head / 2) + 1]) {
      const found = await feed.get(`k${key}`, { asOf });
      gets.push(found ? shape([found])[0] : null);
    }
  }
  return {
    raw: shape(await collect(feed.read())),
    middle: shape(await collect(feed.read({ after: Math.floor(head / 2) }))),
    dedup: shape(await collect(feed.read({ mode: 'dedup' }))),
    latest: shape(await collect(feed.read({ mode: 'latest', after: 10 }))),
    filtered: shape(await collect(feed.read({ filter: { types: ['even', 'shared'], tags: ['all'] } }))),
    scanned: shape(await collect(feed.read({ filter: { types: ['odd'] }, plan: 'scan' }))),
    commit: shape(await feed.readCommit(Math.floor(head / 3))),
    commits: (await collect(feed.commits())).map((commit) => ({ ...commit })),
    gets,
  };
}

function filled(directory = temporaryDirectory(), commits = 240) {
  return filledFeed(commitRecords, commits, directory);
}

describe('merging compaction', () => {
  it('joins adjacent sealed segments and keeps every read exactly as it was', async () => {
    const { store, feed, directory } = await filled();
    const before = historySegmentBases(directory);
    expect(before.length).toBeGreaterThan(5);
    const expected = await everything(feed);
    const bytesBefore = (await feed.diskUse()).bytes;

    const result = await feed.compact();
    expect(result.putOff).toBe(false);
    expect(result.merges.length).toBeGreaterThan(0);
    const after = historySegmentBases(directory);
    // The two newest segments are left; everything before them became one segment.
    expect(after).toEqual([before[0], ...before.slice(-2)]);
    expect(result.segments).toBe(after.length);
    expect(result.merges[0]).toMatchObject({ base: before[0], segments: before.length - 2 });
    // Each shared payload is stored once in the merged segment instead of once per segment.
    expect(result.merges[0].bytesAfter).toBeLessThan(result.merges[0].bytesBefore);
    expect((await feed.diskUse()).bytes).toBeLessThan(bytesBefore);
    // No file is left named for a replaced segment.
    for (const part of ['history', 'index']) {
      for (const name of fs.readdirSync(path.join(directory, 'feeds', 'f', part))) {
        if (/^\d{16}\./.test(name)) expect(after).toContain(Number(name.slice(0, 16)));
      }
    }
    expect(await everything(feed)).toEqual(expected);
    // The merged segment's index file and dictionaries were built beside it and renamed in with
    // it: nothing is rebuilt after the switch (their bytes are checked against a rebuild below).
    expect(feed.indexRebuilds).toEqual([]);

    // Writes go on, and nothing more is merged until there is something to merge.
    await feed.append(commitRecords(241));
    expect((await feed.compact()).merges).toEqual([]);
    expect((await store.verify('f'))[0].problems).toEqual([]);
    const withAppend = await everything(feed);
    expect(withAppend.raw.slice(0, expected.raw.length)).toEqual(expected.raw);
    await store.close();

    const reopened = await openStore(directory, { kernels: tsKernels });
    expect(await everything(await reopened.feed('f'))).toEqual(withAppend);
    await reopened.close();

    // What the merge built for its segment is byte for byte what a rebuild from it writes.
    const indexDirectory = path.join(directory, 'feeds', 'f', 'index');
    const derivedFiles = ['.idx', '.keys', '.fps'].map((extension) =>
      segmentFile(indexDirectory, before[0], extension),
    );
    const built = derivedFiles.map((file) => fs.readFileSync(file));
    for (const file of derivedFiles) fs.rmSync(file);
    const rebuilding = await openStore(directory, { kernels: tsKernels });
    const rebuiltFeed = await rebuilding.feed('f');
    expect(rebuiltFeed.indexRebuilds.map((rebuild) => rebuild.file).sort()).toEqual([...derivedFiles].sort());
    expect(await everything(rebuiltFeed)).toEqual(withAppend);
    await rebuilding.close();
    for (const [at, file] of derivedFiles.entries()) expect(fs.readFileSync(file).equals(built[at]), file).toBe(true);
  });

  it('never switches under a read in progress: the switch waits, or is put off', async () => {
    const { store, feed } = await filled();
    const expected = shape(await collect(feed.read()));
    // A read that holds its iteration open (a slow consumer) across a merge.
    const iterator = feed.read()[Symbol.asyncIterator]();
    const first = await iterator.next();
    const putOff = await feed.compact();
    expect(putOff).toMatchObject({ putOff: true, merges: [] });
    const rest: StoredRecord[] = [first.value as StoredRecord];
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) rest.push(next.value);
    expect(shape(rest)).toEqual(expected);
    // Once it is done, the merge goes through; a read that starts meanwhile waits for it.
    const merging = feed.compact();
    const during = collect(feed.read());
    expect((await merging).merges.length).toBeGreaterThan(0);
    expect(shape(await during)).toEqual(expected);
    await store.close();
  });

  it('finishes a switch-over a crash interrupted, and abandons one that never switched', async () => {
    const { store, feed, directory } = await filled();
    const expected = await everything(feed);
    const bases = historySegmentBases(directory);
    const feedDirectory = path.join(directory, 'feeds', 'f');
    // Keep copies of the files a merge deletes, to put them back as a crash would leave them.
    const saved = new Map<string, Buffer>();
    for (const part of ['history', 'index']) {
      for (const name of fs.readdirSync(path.join(feedDirectory, part))) {
        const base = Number(name.slice(0, 16));
        if (/^\d{16}\./.test(name) && base !== bases[0] && base < bases[bases.length - 2])
          saved.set(path.join(part, name), fs.readFileSync(path.join(feedDirectory, part, name)));
      }
    }
    expect(saved.size).toBeGreaterThan(0);
    const result = await feed.compact();
    expect(result.merges.length).toBe(1);
    await store.close();
    const log = await MergeLog.open(tsKernels, feedDirectory, false);
    const record = log.record!;
    expect(record).toMatchObject({ pending: false, replaced: bases.slice(0, -2) });
    // The switch happened, the replaced files were not deleted yet.
    for (const [name, bytes] of saved) fs.writeFileSync(path.join(feedDirectory, name), bytes);
    await log.write({ ...record, pending: true });
    log.close();

    const reopened = await openStore(directory, { kernels: tsKernels });
    const again = await reopened.feed('f');
    expect(historySegmentBases(directory)).toEqual([bases[0], ...bases.slice(-2)]);
    expect(await everything(again)).toEqual(expected);
    expect((await reopened.verify('f'))[0].problems).toEqual([]);
    await reopened.close();

    // A merge recorded but never switched (its merged file still temporary) leaves the feed as
    // it was, and the temporary file goes.
    const second = await filled(temporaryDirectory(), 120);
    const secondExpected = await everything(second.feed);
    const secondBases = historySegmentBases(second.directory);
    await second.store.close();
    const secondFeed = path.join(second.directory, 'feeds', 'f');
    const temporary = path.join(secondFeed, 'history', `${String(secondBases[0]).padStart(16, '0')}.hist.merge.tmp`);
    fs.writeFileSync(temporary, 'half a merged segment');
    const pending = await MergeLog.open(tsKernels, secondFeed, false);
    await pending.write({ replaced: secondBases.slice(0, 2), capacity: 123_456, pending: true });
    pending.close();
    const third = await openStore(second.directory, { kernels: tsKernels });
    const thirdFeed = await third.feed('f');
    expect(fs.existsSync(temporary)).toBe(false);
    expect(historySegmentBases(second.directory)).toEqual(secondBases);
    expect(await everything(thirdFeed)).toEqual(secondExpected);
    await third.close();
  });

  it('merges on its own once a feed has more than mergeSegmentsTrigger sealed segments', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { kernels: tsKernels });
    const feed = await store.createFeed('f');
    // About one commit per 64 KiB segment: four records of 14 KiB each.
    const big = (index: number, part: number) => ({
      payload: `${index}:${part}:${'w'.repeat(14 * 1024)}`,
      key: `k${index % 9}`,
    });
    let index = 0;
    while (historySegmentBases(directory).length <= mergeSegmentsTrigger + 2) {
      index++;
      await feed.append([0, 1, 2, 3].map((part) => big(index, part)));
    }
    const expected = shape(await collect(feed.read()));
    // The merge runs after the segment that crossed the threshold was finished.
    for (let wait = 0; wait < 200 && historySegmentBases(directory).length > mergeSegmentsTrigger; wait++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      await feed.writer.idle();
    }
    expect(historySegmentBases(directory).length).toBeLessThanOrEqual(mergeSegmentsTrigger);
    expect(shape(await collect(feed.read()))).toEqual(expected);
    expect((await feed.get('k3'))?.key).toBe('k3');
    await store.close();
  });

  it('refuses bad options and read-only stores', async () => {
    const { store, feed, directory } = await filled(temporaryDirectory(), 40);
    await expect(feed.compact({ keys: true } as never)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await store.close();
    const reader = await openStore(directory, { kernels: tsKernels, readOnly: true });
    await expect((await reader.feed('f')).compact()).rejects.toBeInstanceOf(StreamStackError);
    await reader.close();
  });
});
