/**
 * Memory stays bounded by the active segment: once a finished segment's index, key dictionary
 * and fingerprint dictionary are written, nothing keeps that segment's in-memory tails alive.
 * Checked with weak references and a forced collection, so a reference kept by mistake (a
 * closure that captured a tail, say) fails here rather than as slow growth over millions of
 * records.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { ByteReader, ByteWriter } from '../../packages/engine/src/storage/codec.js';
import { readManifestEntry, writeManifestEntry } from '../../packages/engine/src/storage/records.js';
import { openStore, temporaryDirectory, text } from '../support/store.js';

v8.setFlagsFromString('--expose-gc');
const collectGarbage = vm.runInNewContext('gc') as () => void;
const run = promisify(execFile);
const smallCommitsChild = new URL('../support/small-commits-child.mjs', import.meta.url).pathname;

/** The writer's in-memory tails of the active segment (internal fields, read for this test only). */
interface Tails {
  index: { tail: object | undefined };
  keys: { tail: object | undefined };
  fingerprints: { tail: object | undefined };
}

describe('memory of finished segments', () => {
  it('is released once their index files are written', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 64 * 1024 });
    const feed = await store.createFeed('f');
    const writer = feed.writer as unknown as Tails & { idle(): Promise<void> };
    const record = (n: number) => ({
      payload: `record ${n} ${'.'.repeat(200)}`,
      key: `k${n}`,
      type: `t${n % 3}`,
      tags: [`tag-${n % 11}`],
    });

    await feed.append([record(0)]);
    await writer.idle();
    const firstTails = [writer.index.tail, writer.keys.tail, writer.fingerprints.tail].map((tail) => {
      expect(tail).toBeDefined();
      return new WeakRef(tail!);
    });
    // Enough records to fill several 64 KiB segments, so the first one is long finished.
    for (let n = 1; n <= 2_000; n += 50) await feed.append(Array.from({ length: 50 }, (_, at) => record(n + at)));
    await writer.idle();
    expect(writer.index.tail).not.toBe(firstTails[0].deref());

    collectGarbage();
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    expect(firstTails.map((tail) => tail.deref() === undefined)).toEqual([true, true, true]);
    // The finished segments still answer, from their files.
    expect((await feed.get('k7'))?.position).toBe(8);
    await store.close();
  });
});

describe('memory of a large seal', () => {
  it('is not kept by the group builders once the seal is written', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 64 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const lease = await feed.acquireLease({ holder: 'test' });
    const stream = await feed.openStream({ token: lease.token });
    // 24 MiB of distinct payloads: the seal's group outgrows what a builder may keep.
    const payloadBytes = 12 * 1024;
    const records = 2_048;
    for (let n = 0; n < records; n += 256) {
      await stream.append(
        Array.from({ length: 256 }, (_, at) => ({
          payload: `${n + at} `.padEnd(payloadBytes, 'x'),
          key: `k${n + at}`,
        })),
        { token: lease.token },
      );
    }
    const commit = await stream.seal({ token: lease.token });
    expect(commit.records).toBe(records);
    const builders = (
      feed as unknown as {
        view: { writer: { committer: { builders: Record<string, { writer: { capacity: number } }> } } };
      }
    ).view.writer.committer.builders;
    expect(Object.keys(builders).sort()).toEqual(['history', 'wal']);
    for (const builder of Object.values(builders))
      expect(builder.writer.capacity).toBeLessThanOrEqual(limits.writerRetainedBytesMax);
    // The handed-over group was written whole: the last record reads back, and so does one
    // written after the seal through the same builder.
    expect(text((await feed.get(`k${records - 1}`))!.payload)).toBe(`${records - 1} `.padEnd(payloadBytes, 'x'));
    await feed.append([{ payload: 'after', key: 'after' }], { token: lease.token });
    expect(text((await feed.get('after'))!.payload)).toBe('after');
    await store.close();
  });
});

describe('memory of small commits', () => {
  it('is about 200 bytes a commit in the active segment, with no commit page decoded', async () => {
    // Segments start small and double: past 14,000 commits the active one has room for about
    // 13,000, so the next 10,000 stay in it, and what they took is what a commit costs there (a
    // segment's fixed costs, like its key table's first slots, are paid before).
    const { stdout } = await run(process.execPath, ['--expose-gc', smallCommitsChild], {
      env: { ...process.env, FROM: '14000', TO: '24000' },
    });
    const measured = JSON.parse(stdout) as { bytesPerCommit: number; oneSegment: boolean; pagesRead: number };
    expect(measured.oneSegment).toBe(true);
    // Publishing looks at the newest commit's segment without decoding the page it sits in.
    expect(measured.pagesRead).toBe(0);
    // Held as objects, a commit cost over 600 bytes. As an encoded page and a stream hash it
    // costs about 70, and its record's key, fingerprint, dedup and index tails about 110 more
    // (140 to 210 bytes in all here, by where the tails' arrays double): 260 leaves room for
    // that spread, not for an object per commit.
    expect(measured.bytesPerCommit).toBeGreaterThan(0);
    expect(measured.bytesPerCommit).toBeLessThan(260);
  });

  it('lets readers that follow the head read the newest page without decoding it', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 64 * 1024 * 1024 });
    const feed = await store.createFeed('f');
    const list = feed.writer.published.commits;
    const commits = 1_000;
    const followers = new AbortController();
    const seen = [0, 0];
    let lagMax = 0;
    const following = seen.map(async (_, at) => {
      try {
        for await (const commit of feed.follow({ signal: followers.signal })) {
          seen[at] = commit.commit.commit;
          lagMax = Math.max(lagMax, list.length - commit.commit.commit);
        }
      } catch (error) {
        if (!followers.signal.aborted) throw error;
      }
    });
    for (let n = 0; n < commits; n++) await feed.append([{ payload: `event ${n}` }]);
    while (seen.some((commit) => commit < commits)) await new Promise((resolve) => setTimeout(resolve, 5));
    followers.abort();
    await Promise.all(following);
    // The followers stayed within a page of the head, so they only ever wanted the newest one.
    expect(lagMax).toBeLessThan(limits.summaryPageCommits);
    // Every page filled while the followers read, and none was decoded for them.
    expect(list.pagesRead).toBe(0);
    // Reading back from the start decodes the older pages, as before.
    const all = [];
    for await (const commit of feed.commits()) all.push(commit.commit);
    expect(all).toEqual(Array.from({ length: commits }, (_, index) => index + 1));
    expect(list.pagesRead).toBeGreaterThan(0);
    await store.close();
  });
});

describe('memory of a decoded run', () => {
  it('is let go once the entries read from it are', async () => {
    // A run buffer of a few megabytes, as a replay reads, with one manifest entry at its start.
    const writer = new ByteWriter();
    const record = { key: 'k', tombstone: false, type: 't', tags: ['a', 'b'] };
    writeManifestEntry(writer, record, 1, 1_000, new Uint8Array(16).fill(9), {
      segment: 1,
      offset: 0,
      length: 3,
      crc: 0,
    });
    const written = writer.finish();
    let run: Uint8Array | undefined = new Uint8Array(4 * 1024 * 1024);
    run.set(written);
    const buffer = new WeakRef(run.buffer);
    let entry: ReturnType<typeof readManifestEntry> | undefined = readManifestEntry(
      new ByteReader(run, 0, written.length, 'a test run'),
      1,
      0,
    );
    expect(entry).toMatchObject({ seq: 1, key: 'k', type: 't', tags: ['a', 'b'] });
    expect(entry.fingerprint).toEqual(new Uint8Array(16).fill(9));
    run = undefined;
    entry = undefined;
    collectGarbage();
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    // The decoder's scratch no longer holds the fingerprint, a view of the run's buffer.
    expect(buffer.deref()).toBeUndefined();
  });
});
