/**
 * `onProgress` on the long operations — store.verify, feed.compact, feed.compactKeys, feed.trim
 * and feed.export: each call has `done` of `total` in a unit, `done` never goes back, it stays
 * short of `total` until the last call, which comes when the work ends with `done === total`;
 * and a callback that is not a function is refused with `INVALID_ARGUMENT` before any work.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type AppendRecord, type Progress, StreamStackError } from '../../packages/engine/src/index.js';
import { ProgressReporter } from '../../packages/engine/src/progress.js';
import { filledFeed, temporaryDirectory } from '../support/store.js';

/** A commit of a few keyed records, large enough that a few hundred fill many small segments. */
function commitRecords(index: number): AppendRecord[] {
  return [
    { payload: `{"n":${index},"fill":"${'p'.repeat(900)}"}`, key: `k${index % 13}`, version: index, type: 'update' },
    { payload: `event ${index} ${'e'.repeat(300)}`, type: 'event' },
  ];
}

function filled(commits = 200) {
  return filledFeed(commitRecords, commits);
}

/** A callback that keeps every call. */
function recorder<P extends Progress>() {
  const calls: P[] = [];
  return { calls, onProgress: (progress: P) => void calls.push({ ...progress }) };
}

/** The calls go forward, stay short of the total until the last, and the last is the total. */
function expectHonest(calls: readonly Progress[], unit: Progress['unit']) {
  expect(calls.length).toBeGreaterThan(1);
  for (const [at, call] of calls.entries()) {
    expect(call.unit).toBe(unit);
    expect(Number.isSafeInteger(call.done) && Number.isSafeInteger(call.total)).toBe(true);
    if (at > 0) {
      expect(call.done).toBeGreaterThanOrEqual(calls[at - 1].done);
      expect(call.total).toBeGreaterThanOrEqual(calls[at - 1].total);
    }
    if (at < calls.length - 1) expect(call.done).toBeLessThan(call.total);
  }
  const last = calls[calls.length - 1];
  expect(last.total).toBeGreaterThan(0);
  expect(last.done).toBe(last.total);
}

async function invalidArgument(work: Promise<unknown>) {
  const error = await work.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(StreamStackError);
  expect((error as StreamStackError).code).toBe('INVALID_ARGUMENT');
}

describe('onProgress', () => {
  it('follows store.verify in bytes of history read, feed by feed', async () => {
    const { store, directory } = await filled(120);
    const second = await store.createFeed('g');
    for (let index = 1; index <= 40; index++) await second.append(commitRecords(index));
    const { calls, onProgress } = recorder<Progress & { feed: string }>();
    const results = await store.verify(undefined, { onProgress });
    expect(results.every((result) => result.ok)).toBe(true);
    expectHonest(calls, 'bytes');
    expect(new Set(calls.map((call) => call.feed))).toEqual(new Set(['f', 'g']));
    // Each history segment is read twice: the total is twice their size.
    const bytes = ['f', 'g']
      .map((name) => path.join(directory, 'feeds', name, 'history'))
      .flatMap((history) =>
        fs
          .readdirSync(history)
          .filter((file) => file.endsWith('.hist'))
          .map((file) => path.join(history, file)),
      )
      .reduce((sum, file) => sum + fs.statSync(file).size, 0);
    expect(calls[calls.length - 1].total).toBe(2 * bytes);
    await invalidArgument(store.verify('f', { onProgress: 'fast' as never }));
    await store.close();
  });

  it('follows feed.compact in records merged, and counts the merges', async () => {
    const { store, feed } = await filled();
    const { calls, onProgress } = recorder<Progress & { merges: number }>();
    const result = await feed.compact({ onProgress });
    expect(result.merges.length).toBeGreaterThan(0);
    expectHonest(calls, 'records');
    const last = calls[calls.length - 1];
    expect(last.total).toBe(result.merges.reduce((sum, merge) => sum + merge.records, 0));
    expect(last.merges).toBe(result.merges.length);
    await invalidArgument(feed.compact({ onProgress: 5 as never }));
    await store.close();
  });

  it('ends feed.compact at what was done when a read in progress puts the switch off', async () => {
    const { store, feed } = await filled();
    // A read that holds its iteration open across the merge keeps the switch out.
    const iterator = feed.read()[Symbol.asyncIterator]();
    await iterator.next();
    const { calls, onProgress } = recorder<Progress & { merges: number }>();
    const result = await feed.compact({ onProgress });
    expect(result).toMatchObject({ putOff: true, merges: [] });
    // The last call ends at what was done (the rewrite put off), short of the total planned.
    const last = calls[calls.length - 1];
    expect(last.merges).toBe(0);
    expect(last.done).toBe(last.total);
    expect(last.total).toBeLessThan(calls[0].total);
    expect(calls.every((call, at) => at === 0 || call.done >= calls[at - 1].done)).toBe(true);
    await iterator.return?.(undefined);
    await store.close();
  });

  it('follows feed.compactKeys in records of the segments rewritten', async () => {
    const { store, feed } = await filled();
    const { calls, onProgress } = recorder<Progress & { segmentsCompacted: number }>();
    await invalidArgument(feed.compactKeys({ horizon: 150, onProgress: {} as never }));
    const result = await feed.compactKeys({ horizon: 150, onProgress });
    expect(result.segmentsCompacted).toBeGreaterThan(0);
    expectHonest(calls, 'records');
    const last = calls[calls.length - 1];
    expect(last.total).toBe(result.recordsBefore);
    expect(last.segmentsCompacted).toBe(result.segmentsCompacted);
    await store.close();
  });

  it('follows feed.trim in records removed', async () => {
    const { store, feed } = await filled();
    await invalidArgument(feed.trim({ before: 100, onProgress: null as never }));
    const { calls, onProgress } = recorder();
    const result = await feed.trim({ before: 100, onProgress });
    expect(result.segmentsRemoved).toBeGreaterThan(0);
    expectHonest(calls, 'records');
    expect(calls[calls.length - 1].total).toBe(result.recordsRemoved);
    await store.close();
  });

  it('goes on when the callback throws, and calls it no more', async () => {
    const { store, feed } = await filled();
    let calls = 0;
    const result = await feed.trim({
      before: 100,
      onProgress: () => {
        calls++;
        throw new Error('the display broke');
      },
    });
    expect(calls).toBe(1);
    expect(result.segmentsRemoved).toBeGreaterThan(0);
    expect((await feed.info()).lowMark).toBe(result.lowMark);
    await store.close();
  });

  for (const format of ['ndjson', 'parquet'] as const) {
    it(`follows feed.export (${format}) until its manifest is written`, async () => {
      const { store, feed, directory } = await filled(150);
      const to = path.join(directory, `out-${format}`);
      await invalidArgument(feed.export({ format, to, onProgress: 'x' as never }));
      const manifestSeen: boolean[] = [];
      const { calls, onProgress } = recorder<Progress & { commit: number; records: number }>();
      const manifest = await feed.export({
        format,
        to,
        after: 20,
        onProgress: (progress) => {
          manifestSeen.push(fs.existsSync(path.join(to, 'manifest.json')));
          onProgress(progress);
        },
      });
      expectHonest(calls, 'records');
      // The range's positions: 130 commits of two records.
      expect(calls[calls.length - 1].total).toBe(260);
      expect(calls[calls.length - 1].records).toBe(manifest.records);
      // Only the last call comes once the manifest is there.
      expect(manifestSeen.slice(0, -1).every((seen) => !seen)).toBe(true);
      // The range is one file, read whole before it is written: calls past half way, short of
      // the end, are the file's rows being written (NDJSON reports them per batch; this small
      // Parquet file is one row group, reported whole).
      if (format === 'ndjson')
        expect(calls.some((call) => call.done > call.total / 2 && call.done < call.total - 1)).toBe(true);
      expect(manifestSeen[manifestSeen.length - 1]).toBe(true);
      await store.close();
    });
  }

  it('comes back from the rewrite and export workers when the engine runs from its build', () => {
    const directory = temporaryDirectory();
    const engine = path.resolve('packages/engine/dist/index.js');
    const offthread = path.resolve('packages/engine/dist/coordinator/maintenance/rewrite-offthread.js');
    const script = `Promise.all([import(${JSON.stringify(engine)}), import(${JSON.stringify(offthread)})]).then(async ([{ Store }, { rewritesOffThread }]) => {
      const store = await Store.open(${JSON.stringify(directory)}, { segmentBytes: 64 * 1024 });
      const feed = await store.createFeed('f');
      for (let index = 1; index <= 200; index++) await feed.append([{ payload: 'x'.repeat(900) + index, key: 'k' + (index % 13), version: index }, { payload: 'event ' + index }]);
      const calls = [];
      const result = await feed.compact({ onProgress: (progress) => calls.push(progress) });
      const exportCalls = [];
      await feed.export({ format: 'ndjson', to: ${JSON.stringify(path.join(directory, 'export'))}, onProgress: (progress) => exportCalls.push(progress) });
      await store.close();
      console.log(JSON.stringify({ worker: rewritesOffThread(), merges: result.merges.length, calls, exportCalls }));
    })`;
    const out = JSON.parse(
      execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }).trim().split('\n').pop()!,
    );
    expect(out.worker).toBe(true);
    expect(out.merges).toBeGreaterThan(0);
    expectHonest(out.calls, 'records');
    // Before the first merge was switched in, only the worker's messages can have moved the count.
    expect(out.calls.some((call: Progress & { merges: number }) => call.merges === 0 && call.done > 0)).toBe(true);
    // The export's one file is written on an export worker, whose messages move the second half.
    expectHonest(out.exportCalls, 'records');
    expect(out.exportCalls.some((call: Progress) => call.done > call.total / 2 && call.done < call.total - 1)).toBe(
      true,
    );
  });
});

describe('ProgressReporter', () => {
  it('throttles its calls, but always makes the first, the first with work done and the last', () => {
    const calls: Progress[] = [];
    // An interval no test outlasts: every call below that is made, is made whatever the clock.
    const reporter = new ProgressReporter((progress) => calls.push(progress), 'records', 100, {}, 3_600_000);
    reporter.advance(0, undefined, true);
    reporter.advance(0);
    reporter.advance(5);
    reporter.advance(40);
    reporter.advance(30);
    reporter.finish();
    expect(calls.map((call) => call.done)).toEqual([0, 5, 100]);
    expect(calls.every((call) => call.total === 100 && call.unit === 'records')).toBe(true);
  });
});
