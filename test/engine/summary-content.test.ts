/**
 * A finished segment's summary is written from the commit pages the feed already holds encoded
 * (`CommitList.heldSummaryContent`), not from its commits decoded and encoded again. These tests
 * hold that path to the one from commit records: the same bytes, byte for byte, for every summary
 * a busy feed wrote as its segments rolled, and for its active segment; the same fingerprint; and
 * a stream table every commit is found through.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadKernels } from '../../packages/engine/src/index.js';
import { segmentSource, summaryContentOf } from '../../packages/engine/src/storage/commit-pages.js';
import { SegmentFile } from '../../packages/engine/src/storage/segment.js';
import { LocalSegmentStore } from '../../packages/engine/src/storage/segment-store.js';
import {
  encodeSummary,
  readSummary,
  readSummaryHead,
  summaryStreamCandidates,
} from '../../packages/engine/src/storage/segment-summary.js';
import { openStore, temporaryDirectory } from '../support/store.js';

describe.each(['native', 'ts'] as const)('summaries from held pages (%s kernels)', (kernelName) => {
  const kernels = loadKernels(kernelName);

  it('are the bytes the commit records make, for every segment a busy feed finished', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { kernels, segmentBytes: 256 * 1024 });
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'test' });
    // One-event commits from 32 appenders (some full pages, some not), and now and then a stream
    // of a few batches with a message, so stream ids and run sizes differ.
    let issued = 0;
    const total = 6_000;
    const appender = async () => {
      while (issued < total) {
        const n = issued++;
        if (n % 500 === 0) {
          const stream = await feed.openStream({ token, message: `stream ${n}` });
          for (let batch = 0; batch < 3; batch++)
            await stream.append([{ payload: `s${n}.${batch}`, key: `k${n % 97}`, tags: ['streamed'] }], { token });
          await stream.seal({ token });
        } else {
          await feed.append([{ payload: `{"n":${n}}`, key: `k${n % 97}`, type: 'e', tags: [`t${n % 7}`] }], {
            token,
          });
        }
      }
    };
    await Promise.all(Array.from({ length: 32 }, appender));

    await feed.writer.idle();
    const list = feed.writer.published.commits;
    // Finishing segments decoded no page: their summaries came from the pages held encoded.
    expect(list.segments().filter((segment) => segment.summarized).length).toBeGreaterThan(3);
    expect(list.pagesDecoded).toBe(0);
    // The active segment: its held content encodes to what its decoded commits encode to.

    const active = list.segments().at(-1)!;
    const held = list.heldSummaryContent(active.segment)!;
    expect(held.count).toBe(active.commits);
    const activeCommits = list.commitsInSegment(active.segment);
    const place = { base: active.segment, baseCommit: active.firstCommit, capacity: 1 << 20, end: 1 << 19 };
    expect(encodeSummary(kernels, { ...place, content: held })).toEqual(
      encodeSummary(kernels, { ...place, content: summaryContentOf(kernels, activeCommits) }),
    );
    expect(list.heldSourceOf(active.segment)).toBe(segmentSource(kernels, activeCommits));
    await store.close();

    // Every finished segment's summary, written from held pages, is what its records make.
    const history = path.join(directory, 'feeds', 'f', 'history');
    const summaries = new LocalSegmentStore(kernels, history);
    const names = fs.readdirSync(history).filter((name) => name.endsWith('.sum'));
    expect(names.length).toBeGreaterThan(3);
    let commitsChecked = 0;
    for (const name of names) {
      const segment = SegmentFile.open(kernels, path.join(history, name.replace('.sum', '.hist')), true);
      const { header } = segment;
      segment.close();
      const written = new Uint8Array(fs.readFileSync(path.join(history, name)));
      const summary = (await readSummary(kernels, summaries, name, header))!;
      const head = (await readSummaryHead(kernels, summaries, name, header))!;
      const { commits } = summary;
      expect(
        encodeSummary(kernels, {
          base: header.base,
          baseCommit: header.baseCommit,
          capacity: header.capacity,
          end: summary.end,
          content: summaryContentOf(kernels, commits),
        }),
      ).toEqual(written);
      expect(head.source).toBe(segmentSource(kernels, commits));
      // The stream table is sorted: a binary search finds every commit by its stream id.
      commits.forEach((commit, index) => {
        expect(summaryStreamCandidates(kernels, summaries, head, commit.stream)).toContain(index);
      });
      commitsChecked += commits.length;
    }
    // Most commits lie in finished segments, and some of those hold streams of several batches.
    expect(commitsChecked).toBeGreaterThan(total / 2);
  });
});
