/**
 * Crash safety of tiering: a child process (test/support/tiering-child.mjs) appends to a feed of
 * small segments with object storage while it merges and trims now and then, so uploads,
 * descriptors and retirements are under way when the parent kills it with SIGKILL, a random while
 * after it is ready. The parent reopens the store (which goes on with the uploads), waits for
 * them, and checks: every acknowledged commit is there; in object storage every live descriptor
 * names whole objects whose CRCs match, the descriptors run without a hole from the boundary,
 * no object is left without one (nothing orphaned for good), the live descriptors cover exactly
 * the sealed segments kept locally, a reader walking the descriptors (from scratch, or going on
 * from the cycle before) finds exactly those, and no ordinal ever names two different segments.
 * The child keeps a local budget of two segments, so evictions are cut by kills too: after each
 * reopen every record reads back whole (evicted ones from object storage), and every evicted
 * segment's file is cut to its header.
 *
 * `STREAMSTACK_TIERING_CRASH_CYCLES` sets the number of kills (else `STREAMSTACK_CRASH_CYCLES`,
 * else 10); `STREAMSTACK_CRASH_SEED` replays a run (the seed is printed).
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { segmentHeaderBytes } from '../../packages/engine/src/limits.js';
import { ObjectSegmentStore } from '../../packages/engine/src/storage/object-segment-store.js';
import { RemoteHistory } from '../../packages/engine/src/storage/remote-history.js';
import { feedObjectPrefix, type SegmentDescriptor } from '../../packages/engine/src/storage/segment-descriptor.js';
import { runChild } from '../support/child-runs.js';
import { xorshift32 } from '../support/ingest.mjs';
import { type Versitygw, versitygwBinary, versitygwForSuite, versitygwMissing } from '../support/object-store.js';
import { openStore, temporaryDirectory } from '../support/store.js';
import { checkFeedObjects } from '../support/tiering-check.js';

const cycles = Number(process.env.STREAMSTACK_TIERING_CRASH_CYCLES ?? process.env.STREAMSTACK_CRASH_CYCLES ?? 10);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const killRandom = xorshift32(seed);
const childScript = new URL('../support/tiering-child.mjs', import.meta.url).pathname;
/** How long a child may run before it is killed, at most. */
const killAfterMsMax = 1500;
const binary = versitygwBinary();
const bucket = 'tiering-crash';
const prefix = 'crash/';
/** Bytes of sealed history the child and the parent keep locally: two of the test's small segments. */
const localBudget = 2 * 64 * 1024;
/** The suite's object store server, once its `describe` has started it. */
let serverOf: () => Versitygw;

/** Waits for the feed's uploads, riding out a slow moment of the server. */
async function settle(feed: Feed): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await feed.tiered();
      return;
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

describe.skipIf(binary === undefined)(
  `tiering under SIGKILL${binary === undefined ? ` (skipped: ${versitygwMissing})` : ''}`,
  () => {
    serverOf = versitygwForSuite(bucket);

    it(`loses no acknowledged commit and leaves object storage whole, across ${cycles} kills`, async () => {
      const directory = temporaryDirectory('streamstack-tiering-crash-');
      const objectStore = {
        endpoint: serverOf().endpoint,
        bucket,
        prefix,
        region: serverOf().region,
        credentials: serverOf().credentials,
        localHistoryBytesMax: localBudget,
      };
      const setup = await openStore(directory, { objectStore });
      await setup.createFeed('tiered');
      await setup.close();
      const tag = JSON.parse(fs.readFileSync(path.join(directory, 'feeds', 'tiered', 'feed.json'), 'utf8')).tag;
      const objects = new ObjectSegmentStore({
        ...objectStore,
        prefix: `${prefix}${feedObjectPrefix('tiered', tag)}`,
        forcePathStyle: true,
      });
      console.log(`tiering crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
      /** Every descriptor ever seen, by ordinal: an ordinal names one segment for good. */
      const seen = new Map<number, string>();
      const follower = new RemoteHistory(objects);
      let acknowledged = 0;
      let sawRetirement = false;
      let sawEviction = false;
      try {
        for (let cycle = 1; cycle <= cycles; cycle++) {
          const lines = await runChild<{ kind: string; commit?: number }>(
            childScript,
            [directory, String(cycle), String(seed)],
            {
              STREAMSTACK_KERNELS: cycle % 2 === 1 ? 'native' : 'ts',
              TIER_ENDPOINT: serverOf().endpoint,
              TIER_BUCKET: bucket,
              TIER_PREFIX: prefix,
              TIER_LOCAL_BUDGET: String(localBudget),
              AWS_ACCESS_KEY_ID: serverOf().credentials.accessKeyId,
              AWS_SECRET_ACCESS_KEY: serverOf().credentials.secretAccessKey,
              AWS_REGION: serverOf().region,
            },
            { delayMs: 200 + killRandom() * killAfterMsMax, fallbackMs: killAfterMsMax * 5 },
          );
          for (const line of lines) if (line.kind === 'ack') acknowledged = Math.max(acknowledged, line.commit!);

          const store: Store = await openStore(directory, { objectStore });
          try {
            const feed = await store.feed('tiered');
            expect((await feed.info()).commits).toBeGreaterThanOrEqual(acknowledged);
            await settle(feed);
            const live: SegmentDescriptor[] = await checkFeedObjects(objects);
            // A reader walking the descriptors finds the same segments, whether it starts now or
            // went on from the cycle before (across trims that moved the boundary past it).
            expect((await new RemoteHistory(objects).refresh()).live).toEqual(live);
            expect((await follower.refresh()).live).toEqual(live);
            // The live descriptors are the sealed segments kept here, one for one.
            const info = await feed.info();
            expect(live.length).toBe((await feed.diskUse()).historySegments - 1);
            if (live.length > 0) expect(live[0]!.base).toBe(info.lowPosition);
            const all = await objects.within('descriptors/').list();
            for (const descriptor of live) {
              const identity = `${descriptor.base}:${descriptor.source}`;
              expect(seen.get(descriptor.ordinal) ?? identity).toBe(identity);
              seen.set(descriptor.ordinal, identity);
              if (descriptor.replaces.length > 0) sawRetirement = true;
            }
            if (info.lowMark > 1 || all.length > live.length) sawRetirement = true;
            // Every record reads back whole, evicted or not, at the positions that follow each other.
            let position = info.lowPosition;
            for await (const record of feed.read()) {
              expect(record.position).toBe(position++);
              expect(JSON.parse(new TextDecoder().decode(record.payload))).toHaveProperty('round');
            }
            expect(position - 1).toBe(info.records);
            const tiering = info.tiering!;
            if (tiering.evictedSegments > 0) sawEviction = true;
            expect(tiering.localHistoryBytes).toBeLessThanOrEqual(localBudget);
            const history = path.join(directory, 'feeds', 'tiered', 'history');
            const cut = fs
              .readdirSync(history)
              .filter(
                (name) => name.endsWith('.hist') && fs.statSync(path.join(history, name)).size === segmentHeaderBytes,
              );
            expect(cut.length).toBe(tiering.evictedSegments);
          } finally {
            await store.close();
          }
        }
      } finally {
        objects.close();
      }
      expect(acknowledged).toBeGreaterThan(0);
      expect(seen.size).toBeGreaterThan(cycles);
      // The branches the test is for were reached: rewrites or trims retired objects.
      expect(sawRetirement).toBe(true);
      expect(sawEviction).toBe(true);
    }, 600_000);
  },
);
