/**
 * Batches that span commits: a scan of many small commits decodes the runs of each stretch it
 * reads together, so its columnar batches hold several commits' records, each row naming its
 * own commit and stream; the object forms are made from them (one array per commit for
 * `readBatches`). Damage inside one run of a stretch is still reported at that run.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { type ColumnBatch, isStreamStackError, type StoredRecord } from '../../packages/engine/src/index.js';
import { recordLine } from '../../packages/protocol/src/record-lines.js';
import { collect, historySegmentBases, openStore, temporaryDirectory } from '../support/store.js';

const encoder = new TextEncoder();
/** One-record commits written: enough for several stretches and several sealed segments. */
const commitCount = 2000;
/** Small segments: the feed has several sealed ones, whose runs are read from disk. */
const segmentBytes = 64 * 1024;

const plain = (record: StoredRecord) => ({ ...record, payload: Buffer.from(record.payload).toString('hex') });

/** `commitCount` one-record commits, appended 16 at a time so that groups hold several. */
async function writeCommits(directory: string, kernels: 'native' | 'ts') {
  const store = await openStore(directory, { kernels, segmentBytes });
  const feed = await store.createFeed('f');
  for (let first = 0; first < commitCount; first += 16) {
    await Promise.all(
      Array.from({ length: Math.min(16, commitCount - first) }, (_, index) => {
        const n = first + index;
        return feed.append([
          {
            // Every seventh payload repeats an earlier one: stored once, read from that run.
            payload: n % 7 === 6 ? 'repeated payload' : `spanning-payload-${String(n).padStart(4, '0')}`,
            key: `key-${n % 50}`,
            type: n % 2 === 0 ? 'even' : 'odd',
            tags: [`tag-${n % 3}`],
          },
        ]);
      }),
    );
  }
  await store.close();
}

describe('batches that span commits', () => {
  for (const kernels of ['native', 'ts'] as const) {
    it(`read one-record commits in batches of many, each row with its own commit (${kernels})`, async () => {
      const directory = temporaryDirectory();
      await writeCommits(directory, kernels);
      expect(historySegmentBases(directory).length).toBeGreaterThan(2);
      const store = await openStore(directory, { kernels, segmentBytes });
      try {
        const feed = await store.feed('f');
        const arrays = await collect(feed.readBatches());
        // The batch form keeps one array per commit.
        expect(arrays.map((records) => records.length)).toEqual(new Array(commitCount).fill(1));
        const records = arrays.flat();
        expect(records.map((record) => record.commit)).toEqual(Array.from({ length: commitCount }, (_, at) => at + 1));

        const batches: ColumnBatch[] = await collect(feed.readColumns());
        // Far fewer batches than commits, most of them spanning several.
        expect(batches.length).toBeLessThan(commitCount / 20);
        expect(batches.filter((batch) => batch.spansCommits).length).toBeGreaterThan(0);
        const rows = batches.flatMap((batch) => batch.records());
        expect(rows.map(plain)).toEqual(records.map(plain));
        for (const batch of batches) {
          for (let row = 0; row < batch.length; row++) {
            expect(batch.commitOf(row)).toBe(batch.commits[row]);
            expect(batch.streamOf(row)).toBe(batch.record(row).stream);
          }
          // A batch's rows never cross a segment: a stretch is read from one.
          const segments = historySegmentBases(directory);
          const segmentOf = (position: number) => segments.filter((base) => base <= position).at(-1);
          expect(segmentOf(batch.positions[0])).toBe(segmentOf(batch.positions[batch.length - 1]));
        }
        // The object form flattens the same rows.
        expect((await collect(feed.read())).map(plain)).toEqual(records.map(plain));
        // NDJSON lines (the CLI's read, GET …/records) start each line with its own commit's head.
        const lines = Buffer.concat(await collect(feed.readLines())).toString();
        expect(lines).toBe(records.map((record) => `${JSON.stringify(recordLine(record))}\n`).join(''));

        // A window and a limit take exactly their rows, spanning or not.
        const window = (await collect(feed.readColumns({ after: 100, upTo: 250 }))).flatMap((batch) =>
          Array.from(batch.commits),
        );
        expect(window).toEqual(Array.from({ length: 150 }, (_, at) => 101 + at));
        const limited = await collect(feed.readColumns({ after: 10, limit: 7 }));
        expect(limited.flatMap((batch) => Array.from(batch.commits))).toEqual([11, 12, 13, 14, 15, 16, 17]);

        // Dedup keeps the first of the repeated payloads' records, filters keep what they match.
        const dedup = (await collect(feed.readColumns({ mode: 'dedup' }))).flatMap((batch) => batch.records());
        expect(dedup.map(plain)).toEqual((await collect(feed.readBatches({ mode: 'dedup' }))).flat().map(plain));
        expect(dedup.length).toBeLessThan(commitCount);
        const odd = (await collect(feed.readColumns({ filter: { types: ['odd'] }, plan: 'scan' }))).flatMap((batch) =>
          batch.records(),
        );
        expect(odd.map((record) => record.commit)).toEqual(
          records.filter((record) => record.type === 'odd').map((record) => record.commit),
        );
        const arrow = await batches.find((batch) => batch.spansCommits)!.toArrow();
        const spanning = batches.find((batch) => batch.spansCommits)!;
        expect(Array.from({ length: arrow.numRows }, (_, row) => Number(arrow.getChild('commit')!.get(row)))).toEqual(
          Array.from(spanning.commits),
        );
        expect(Array.from({ length: arrow.numRows }, (_, row) => arrow.getChild('stream')!.get(row))).toEqual(
          Array.from({ length: spanning.length }, (_, row) => spanning.streamOf(row)),
        );
      } finally {
        await store.close();
      }
    });

    it(`report damage inside one run of a stretch at that run, and read up to it (${kernels})`, async () => {
      const directory = temporaryDirectory();
      await writeCommits(directory, kernels);
      // A payload of a sealed segment, found by its bytes: the flip lands inside one run's pack.
      const bases = historySegmentBases(directory);
      const historyDirectory = path.join(directory, 'feeds', 'f', 'history');
      const victim = fs
        .readdirSync(historyDirectory)
        .filter((name) => name.endsWith('.hist'))
        .map((name) => path.join(historyDirectory, name))
        .find((file) => Number(path.basename(file, '.hist')) === bases[1])!;
      const bytes = fs.readFileSync(victim);
      const needle = encoder.encode('spanning-payload-');
      const occurrences: number[] = [];
      for (let at = Buffer.from(bytes).indexOf(Buffer.from(needle)); at >= 0; )
        occurrences.push(at), (at = Buffer.from(bytes).indexOf(Buffer.from(needle), at + 1));
      expect(occurrences.length).toBeGreaterThan(10);
      const found = occurrences[Math.floor(occurrences.length / 2)];
      const damaged = Number(Buffer.from(bytes.subarray(found + needle.length, found + needle.length + 4)).toString());
      const flipAt = found + needle.length + 2;
      bytes[flipAt] ^= 0x5a;
      fs.writeFileSync(victim, bytes);

      const store = await openStore(directory, { kernels, segmentBytes, readOnly: true });
      try {
        const feed = await store.feed('f');
        // The damaged record's commit is n + 1; every read that reaches it fails, at its run.
        const commit = damaged + 1;
        await expect(feed.readCommit(commit)).rejects.toMatchObject({ code: 'CORRUPT' });
        try {
          await collect(feed.readColumns());
          expect.unreachable('a scan over the damaged run fails');
        } catch (error) {
          expect(isStreamStackError(error, 'CORRUPT'), String(error)).toBe(true);
          const { file, offset } = (error as { details: { file: string; offset: number } }).details;
          expect(path.basename(file)).toBe(path.basename(victim));
          // The first frame that fails its CRC: the pack that holds the flipped byte.
          expect(offset).toBeLessThanOrEqual(flipAt);
          expect(flipAt - offset).toBeLessThan(256);
        }
        const before = (await collect(feed.readColumns({ upTo: commit - 1 }))).flatMap((batch) =>
          Array.from(batch.commits),
        );
        expect(before).toEqual(Array.from({ length: commit - 1 }, (_, at) => at + 1));
      } finally {
        await store.close();
      }
    });
  }
});
