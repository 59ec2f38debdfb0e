/**
 * Reads over commits that damage took (docs/faults.md, What damage does to a feed): every read
 * whose range touches a lost commit fails `CORRUPT`, whatever its mode, filter, plan or form —
 * the index path included, whose postings know nothing of what was lost — and every read that
 * lies wholly after the lost commits is exact.
 *
 * Three ways to lose several consecutive commits: a deleted sealed segment, an older copy of a
 * sealed segment put back in its place, and one flipped byte in a group write that held several
 * one-shot commits while the segment's summary is gone too. Each runs on both kernel sets.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type Feed,
  isStreamStackError,
  type ReadOptions,
  Store,
  type StoredRecord,
} from '../../packages/engine/src/index.js';
import { cli } from '../support/cli.js';
import { call, startServer } from '../support/server.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const commitCount = 400;
const recordsPerCommit = 10;
const kernelSets = ['native', 'ts'] as const;

interface Written {
  readonly commit: number;
  readonly position: number;
  readonly type: string;
  readonly tags: readonly string[];
  readonly key: string;
}

/** 400 commits of 10 records in 64 KiB segments; every record typed, tagged and keyed. */
async function writeFeed(
  directory: string,
  kernels: (typeof kernelSets)[number],
  options: { onCommit?: (commit: number) => void; concurrent?: number } = {},
): Promise<Written[]> {
  const store = await openStore(directory, { kernels });
  const feed = await store.createFeed('f');
  const recordsOf = (commit: number) =>
    Array.from({ length: recordsPerCommit }, (_, index) => ({
      payload: `commit ${commit} record ${index} ${'p'.repeat(40 + (index % 7) * 10)}`,
      key: `k${(commit * recordsPerCommit + index) % 37}`,
      type: `t${index % 3}`,
      tags: [`g${index % 4}`, `c${commit % 5}`],
    }));
  // Appends made together share one group write (each still its own commit).
  const concurrent = options.concurrent ?? 1;
  for (let first = 1; first <= commitCount; first += concurrent) {
    const batch = Array.from({ length: Math.min(concurrent, commitCount - first + 1) }, (_, at) =>
      recordsOf(first + at),
    );
    await Promise.all(batch.map((records) => feed.append(records)));
    options.onCommit?.(first + batch.length - 1);
  }
  // What each commit holds, read back: concurrent appends take commit numbers in any order.
  const written: Written[] = [];
  for await (const record of feed.read())
    written.push({
      commit: record.commit,
      position: record.position,
      type: record.type!,
      tags: record.tags,
      key: record.key!,
    });
  expect(written).toHaveLength(commitCount * recordsPerCommit);
  await store.close();
  return written;
}

const historyDirectory = (directory: string) => path.join(directory, 'feeds', 'f', 'history');

function sealedSegments(directory: string): string[] {
  return fs
    .readdirSync(historyDirectory(directory))
    .filter((name) => name.endsWith('.hist'))
    .sort()
    .slice(0, -1)
    .map((name) => path.join(historyDirectory(directory), name));
}

/** The read kinds a user has: every mode, filtered by type and by tag through every plan, and every form. */
function readKinds(after: number): { name: string; options: ReadOptions }[] {
  const kinds: { name: string; options: ReadOptions }[] = [
    { name: 'raw', options: { after } },
    { name: 'dedup', options: { after, mode: 'dedup' } },
    { name: 'latest', options: { after, mode: 'latest' } },
    { name: 'dedup by type', options: { after, mode: 'dedup', filter: { types: ['t1'] } } },
    { name: 'latest by tag', options: { after, mode: 'latest', filter: { tags: ['g2'] } } },
  ];
  for (const plan of ['auto', 'index', 'scan'] as const) {
    kinds.push({ name: `type t1 (${plan})`, options: { after, filter: { types: ['t1'] }, plan } });
    kinds.push({ name: `tag g2 (${plan})`, options: { after, filter: { tags: ['g2'] }, plan } });
    kinds.push({
      name: `type t0 or tags g1+c3 (${plan})`,
      options: { after, filter: { items: [{ types: ['t0'] }, { tags: ['g1', 'c3'] }] }, plan },
    });
  }
  return kinds;
}

type Outcome = { records: StoredRecord[] } | { error: unknown };

async function attempt(read: () => AsyncIterable<StoredRecord> | AsyncIterable<StoredRecord[]>): Promise<Outcome> {
  try {
    const items = await collect(read() as AsyncIterable<StoredRecord | StoredRecord[]>);
    return { records: items.flat() };
  } catch (error) {
    return { error };
  }
}

/** Every form a read takes: objects, one-commit batches, columns. */
function forms(
  feed: Feed,
  options: ReadOptions,
): { form: string; read: () => AsyncIterable<StoredRecord> | AsyncIterable<StoredRecord[]> }[] {
  return [
    { form: 'read', read: () => feed.read(options) },
    { form: 'readBatches', read: () => feed.readBatches(options) },
    {
      form: 'readColumns',
      read: async function* () {
        for await (const batch of feed.readColumns(options)) yield batch.records();
      },
    },
  ];
}

/**
 * Checks every read kind from cursors before, inside and after the lost commits `lost`: a read
 * whose range holds a lost commit fails CORRUPT; a read after them returns what was written.
 */
async function checkReads(
  feed: Feed,
  written: readonly Written[],
  lost: { from: number; to: number },
): Promise<{ refused: number; exact: number }> {
  const cursors = [
    0,
    lost.from - 2,
    lost.from - 1,
    lost.from,
    lost.from + 1,
    Math.floor((lost.from + lost.to) / 2),
    lost.to - 1,
    lost.to,
    lost.to + 1,
    commitCount - 3,
  ];
  let refused = 0;
  let exact = 0;
  const failures: string[] = [];
  for (const after of cursors) {
    for (const { name, options } of readKinds(after)) {
      for (const { form, read } of forms(feed, options)) {
        const what = `${form} ${name} after ${after}`;
        const outcome = await attempt(read);
        if (after < lost.to) {
          if ('records' in outcome)
            failures.push(
              `${what}: returned ${outcome.records.length} records over lost commits ${lost.from}–${lost.to}`,
            );
          else if (!isStreamStackError(outcome.error, 'CORRUPT'))
            failures.push(`${what}: threw ${String(outcome.error)}, not CORRUPT`);
          else refused++;
          continue;
        }
        if ('error' in outcome) {
          failures.push(`${what}: threw ${String(outcome.error)} although every commit after ${after} is sound`);
          continue;
        }
        // Records after the lost commits: RAW filters are checked against what was written.
        if (options.mode === undefined) {
          const filter = options.filter as
            | { types?: string[]; tags?: string[]; items?: { types?: string[]; tags?: string[] }[] }
            | undefined;
          const items = filter ? (filter.items ?? [filter]) : undefined;
          const expected = written
            .filter((record) => record.commit > after)
            .filter(
              (record) =>
                !items ||
                items.some(
                  (item) =>
                    (!item.types || item.types.includes(record.type)) &&
                    (!item.tags || item.tags.every((tag) => record.tags.includes(tag))),
                ),
            )
            .map((record) => record.position);
          const got = outcome.records.map((record) => record.position);
          if (JSON.stringify(got) !== JSON.stringify(expected))
            failures.push(`${what}: returned ${got.length} positions, expected ${expected.length}`);
        } else if (outcome.records.some((record) => record.commit <= after)) {
          failures.push(`${what}: returned a record at or before its cursor`);
        }
        exact++;
      }
    }
  }
  // A read that stops before the lost commits does not touch them: it is exact.
  for (const { name, options } of readKinds(0).filter((kind) => kind.options.filter && !kind.options.mode)) {
    const upTo = lost.from - 1;
    const outcome = await attempt(() => feed.read({ ...options, upTo }));
    if ('error' in outcome)
      failures.push(
        `read ${name} up to ${upTo}: threw ${String(outcome.error)} although it ends before the lost commits`,
      );
    else if (outcome.records.some((record) => record.commit > upTo) || outcome.records.length === 0)
      failures.push(`read ${name} up to ${upTo}: returned records past its end, or none`);
    else exact++;
  }
  expect(failures).toEqual([]);
  return { refused, exact };
}

describe('reads over lost commits', () => {
  for (const kernels of kernelSets) {
    it(`a deleted sealed segment: every read whose range holds its commits fails CORRUPT, filtered ones included (${kernels})`, async () => {
      const directory = temporaryDirectory();
      const written = await writeFeed(directory, kernels);
      const segments = sealedSegments(directory);
      expect(segments.length).toBeGreaterThan(6);
      const victim = segments[Math.floor(segments.length / 2)];
      const base = Number(path.basename(victim, '.hist'));
      const next = Number(path.basename(segments[segments.indexOf(victim) + 1], '.hist'));
      const lost = {
        from: written.find((record) => record.position === base)!.commit,
        to: written.find((record) => record.position === next)!.commit - 1,
      };
      expect(lost.to - lost.from).toBeGreaterThan(3);
      fs.rmSync(victim);

      const store = await Store.open(directory, { readOnly: true, kernels });
      try {
        const feed = await store.feed('f');
        const { refused, exact } = await checkReads(feed, written, lost);
        expect(refused).toBeGreaterThan(0);
        expect(exact).toBeGreaterThan(0);
        // Each lost commit fails on its own, and the commits on either side read whole.
        for (const commit of [lost.from, lost.from + 1, lost.to])
          await expect(feed.readCommit(commit)).rejects.toMatchObject({ code: 'CORRUPT' });
        expect(await feed.readCommit(lost.from - 1)).toHaveLength(recordsPerCommit);
        expect(await feed.readCommit(lost.to + 1)).toHaveLength(recordsPerCommit);
        // The segment's summary survived it: each lost commit keeps its own positions.
        const listed = await collect(feed.commits({ after: lost.from - 1, limit: lost.to - lost.from + 1 }));
        expect(
          listed.map((commit) => [commit.commit, commit.stream, commit.firstPosition, commit.lastPosition]),
        ).toEqual(
          listed.map((commit) => {
            const first = written.find((record) => record.commit === commit.commit)!.position;
            return [commit.commit, '', first, first + recordsPerCommit - 1];
          }),
        );
      } finally {
        await store.close();
      }
      // Without the summary, the first lost commit stands for all their positions, the others for none.
      fs.rmSync(victim.replace(/\.hist$/, '.sum'));
      const bare = await Store.open(directory, { readOnly: true, kernels });
      try {
        const feed = await bare.feed('f');
        await checkReads(feed, written, lost);
        const listed = await collect(feed.commits({ after: lost.from - 1, limit: lost.to - lost.from + 1 }));
        expect(listed[0]).toMatchObject({ commit: lost.from, firstPosition: base, lastPosition: next - 1 });
        expect(listed.slice(1).every((commit) => commit.records === 0)).toBe(true);
      } finally {
        await bare.close();
      }
    }, 120_000);

    it(`an older copy of a sealed segment put back: reads over the commits it lacks fail CORRUPT (${kernels})`, async () => {
      const directory = temporaryDirectory();
      // Copies of the history segments as they were after each commit: the middle one is put
      // back as it was while it held only part of its commits.
      const copies = new Map<string, Buffer>();
      const written = await writeFeed(directory, kernels, {
        onCommit: (commit) => {
          if (commit % 10 !== 0) return;
          const newest = fs
            .readdirSync(historyDirectory(directory))
            .filter((file) => file.endsWith('.hist'))
            .sort()
            .at(-1)!;
          copies.set(`${newest}@${commit}`, fs.readFileSync(path.join(historyDirectory(directory), newest)));
        },
      });
      const segments = sealedSegments(directory);
      const victim = segments[Math.floor(segments.length / 2)];
      const name = path.basename(victim);
      const base = Number(path.basename(victim, '.hist'));
      const next = Number(path.basename(segments[segments.indexOf(victim) + 1], '.hist'));
      const firstCommit = written.find((record) => record.position === base)!.commit;
      const lastCommit = written.find((record) => record.position === next)!.commit - 1;
      // The copy taken at the first multiple of ten after the segment's first commit.
      const at = Math.ceil((firstCommit + 1) / 10) * 10;
      expect(at).toBeLessThan(lastCommit);
      const older = copies.get(`${name}@${at}`)!;
      expect(older).toBeDefined();
      fs.writeFileSync(victim, older);
      // With the summary kept, opening trusts it and the reads find the damage; with it gone,
      // the segment is read whole on open and its missing commits are lost.
      for (const summary of ['kept', 'deleted']) {
        if (summary === 'deleted') fs.rmSync(victim.replace(/\.hist$/, '.sum'));
        const store = await Store.open(directory, { readOnly: true, kernels });
        try {
          const feed = await store.feed('f');
          await checkReads(feed, written, { from: at + 1, to: lastCommit });
          expect(await feed.readCommit(at)).toHaveLength(recordsPerCommit);
        } finally {
          await store.close();
        }
      }
    }, 120_000);

    it(`one flipped byte in a group write of several commits, its summary gone: reads over the group fail CORRUPT (${kernels})`, async () => {
      const directory = temporaryDirectory();
      const written = await writeFeed(directory, kernels, { concurrent: 8 });
      const segments = sealedSegments(directory);
      const victim = segments[Math.floor(segments.length / 2)];
      fs.rmSync(victim.replace(/\.hist$/, '.sum'));
      const bytes = fs.readFileSync(victim);
      bytes[Math.floor(bytes.length / 2)] ^= 0x5a;
      fs.writeFileSync(victim, bytes);

      const store = await Store.open(directory, { readOnly: true, kernels });
      try {
        const feed = await store.feed('f');
        // The commits the flip took: the group's, found by reading each commit on its own.
        const lostCommits: number[] = [];
        for (let commit = 1; commit <= commitCount; commit++) {
          try {
            await feed.readCommit(commit);
          } catch (error) {
            expect(isStreamStackError(error, 'CORRUPT'), String(error)).toBe(true);
            lostCommits.push(commit);
          }
        }
        expect(lostCommits.length).toBeGreaterThan(1);
        const lost = { from: lostCommits[0], to: lostCommits.at(-1)! };
        expect(lostCommits).toEqual(Array.from({ length: lost.to - lost.from + 1 }, (_, at) => lost.from + at));
        await checkReads(feed, written, lost);
      } finally {
        await store.close();
      }
    }, 120_000);
  }

  for (const kernels of kernelSets) {
    it(`through the command line and HTTP: a filtered read from a cursor inside the lost commits fails CORRUPT with every plan (${kernels})`, async () => {
      const directory = temporaryDirectory();
      const written = await writeFeed(directory, kernels);
      const segments = sealedSegments(directory);
      const victim = segments[Math.floor(segments.length / 2)];
      const base = Number(path.basename(victim, '.hist'));
      const next = Number(path.basename(segments[segments.indexOf(victim) + 1], '.hist'));
      const lost = {
        from: written.find((record) => record.position === base)!.commit,
        to: written.find((record) => record.position === next)!.commit - 1,
      };
      fs.rmSync(victim);
      const inside = String(lost.from + 2);
      const after = String(lost.to);
      const env = { STREAMSTACK_KERNELS: kernels };
      for (const plan of ['auto', 'index', 'scan']) {
        for (const filter of [
          ['--type', 't1'],
          ['--tag', 'g2'],
        ]) {
          const refused = cli(directory, ['read', 'f', '--after', inside, ...filter, '--plan', plan], '', env);
          expect(refused.status, `read --after ${inside} ${filter.join(' ')} --plan ${plan}`).toBe(1);
          expect(refused.error).toMatchObject({ code: 'CORRUPT' });
          expect(refused.lines).toEqual([]);
          const sound = cli(directory, ['read', 'f', '--after', after, ...filter, '--plan', plan], '', env);
          expect(sound.status).toBe(0);
          expect(sound.lines.length).toBeGreaterThan(0);
          expect(sound.lines.every((line) => (line.commit as number) > lost.to)).toBe(true);
        }
      }

      const { url } = await startServer({ directory, storeOptions: { kernels } });
      for (const query of ['type=t1', 'tag=g2', 'type=t1&mode=latest', 'tag=g2&mode=dedup']) {
        const refused = await call(url, 'GET', `/v1/feeds/f/records?after=${inside}&${query}`);
        expect(refused.status, query).toBe(500);
        expect(refused.json?.error ?? JSON.parse(refused.text.trim().split('\n').at(-1)!).error).toMatchObject({
          code: 'CORRUPT',
        });
        const sound = await call(url, 'GET', `/v1/feeds/f/records?after=${after}&${query}`);
        expect(sound.status, query).toBe(200);
        expect(sound.lines.length).toBeGreaterThan(0);
      }
    }, 120_000);
  }
});
