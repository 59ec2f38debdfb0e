/**
 * Power loss during export: a child (test/support/export-child.mjs) exports a feed into new
 * directories on a powerloss-fs mount (tools/powerloss-fs), one after another, and the test cuts
 * the power a few hundred milliseconds into one of them — dropping everything not yet fsync'd
 * (or, on torn cuts, letting a random subset of the unsynced pages through). Every file is
 * synced before the manifest is written, and the manifest is written under a temporary name,
 * synced and renamed, so whatever survives: an export the child saw finish is whole, any
 * directory holding a manifest holds every file it names with its size and SHA-256, and a
 * directory an export left unfinished takes a new export that is whole.
 *
 * Children alternate the native kernels (export files opened with `O_DIRECT` where the file
 * system takes it) and the TypeScript ones (through the page cache); cuts alternate plain and
 * torn. `STREAMSTACK_EXPORT_POWERLOSS_CYCLES` sets the number of cuts (else
 * `STREAMSTACK_POWERLOSS_CYCLES`, else 8); `STREAMSTACK_POWERLOSS_SEED` replays a run.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Store, verifyExport } from '../../packages/engine/src/index.js';
import { runChild } from '../support/child-runs.js';
import { exportStoreOptions, fillExportFeed } from '../support/export-workload.mjs';
import { xorshift32 } from '../support/ingest.mjs';
import { startPowerlossFs } from '../support/powerloss.js';
import { temporaryDirectory } from '../support/store.js';

const cycles = Number(process.env.STREAMSTACK_EXPORT_POWERLOSS_CYCLES ?? process.env.STREAMSTACK_POWERLOSS_CYCLES ?? 8);
/** Cuts made at most while none has yet dropped unsynced data (about a quarter of cuts do). */
const cyclesMax = cycles * 4;
const seed = Number(process.env.STREAMSTACK_POWERLOSS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const random = xorshift32(seed);
const childScript = new URL('../support/export-child.mjs', import.meta.url).pathname;
/** How long after the aimed-at export starts the cut comes, at most: about one export's time. */
const cutInExportMsMax = 300;
/** The feed's size: about 12 MB of records, one file per export. */
const feedBytes = 8 * 1024 * 1024;

interface ChildLine {
  readonly kind: string;
  readonly directory?: string;
  readonly format?: 'ndjson' | 'arrow' | 'parquet';
  readonly records?: number;
  readonly direct?: boolean;
}

describe('power loss during export', () => {
  it(
    `never leaves a manifest naming a file that is not whole, across ${cycles} cuts, plain and torn`,
    async () => {
      console.log(
        `export power-loss test: ${cycles} cuts, seed ${seed} (STREAMSTACK_POWERLOSS_SEED=${seed} replays it)`,
      );
      const source = temporaryDirectory();
      const store = await Store.open(source, exportStoreOptions());
      const records = await fillExportFeed(store, feedBytes);
      await store.close();
      let backing: string | undefined;
      let finished = 0;
      let droppedPages = 0;
      let directMounts = 0;
      /** Directories an export was cut short in, with the export's format. */
      const unfinished = new Map<string, 'ndjson' | 'arrow' | 'parquet'>();
      // A cut inside an export often comes while the file is still being made, with nothing
      // written yet: after the planned cuts, more are made (up to `cyclesMax`) until one comes
      // after a file's bytes were written and before they were synced, which this test is for.
      let cycle = 0;
      for (; cycle < cycles || (droppedPages === 0 && cycle < cyclesMax); cycle++) {
        const pfs = await startPowerlossFs({ seed: seed + cycle, ...(backing ? { backing } : {}) });
        backing = pfs.backing;
        const torn = cycle % 2 === 1;
        let loss = { dropped_pages: 0 };
        const lines = await runChild<ChildLine>(
          childScript,
          [source, pfs.mount, String(cycle)],
          { STREAMSTACK_KERNELS: cycle % 2 === 0 ? 'native' : 'ts' },
          {
            delayMs: random() * cutInExportMsMax,
            fallbackMs: cutInExportMsMax * 10,
            cut: async () => (loss = await pfs.losePower(torn)),
            aimAt: { kind: 'export', count: 1 + Math.floor(random() * 3) },
          },
        );
        await pfs.stop();
        droppedPages += loss.dropped_pages;
        if (lines.some((line) => line.kind === 'ready' && line.direct)) directMounts++;
        const where = `after cut ${cycle} (${torn ? 'torn' : 'plain'}, seed ${seed})`;
        const acknowledged = new Set(lines.filter((line) => line.kind === 'exported').map((line) => line.directory!));
        for (const line of lines.filter((candidate) => candidate.kind === 'export')) {
          const directory = path.join(backing, line.directory!);
          const hasManifest = fs.existsSync(path.join(directory, 'manifest.json'));
          // An export the child saw return survived whole.
          if (acknowledged.has(line.directory!)) expect(hasManifest, `${where}: ${line.directory} finished`).toBe(true);
          if (hasManifest) {
            const { manifest, problems } = await verifyExport(directory);
            expect(problems, `${where}: ${line.directory}`).toEqual([]);
            expect(manifest.records, `${where}: ${line.directory}`).toBe(records);
            finished++;
          } else {
            unfinished.set(directory, line.format!);
          }
        }
      }
      // An unfinished export's directory (whatever it was left holding) takes a new export.
      const reopened = await Store.open(source, { ...exportStoreOptions(), breakLock: true });
      try {
        const feed = await reopened.feed('f');
        for (const [directory, format] of unfinished) {
          const manifest = await feed.export({ format, to: directory });
          expect(manifest.records).toBe(records);
          expect((await verifyExport(directory)).problems, directory).toEqual([]);
        }
      } finally {
        await reopened.close();
      }
      console.log(
        `export power-loss test: ${cycle} cuts, ${finished} exports survived whole, ${unfinished.size} cut short, ${droppedPages} unsynced pages dropped; ` +
          `the mount took O_DIRECT in ${directMounts} of ${cycle} cycles`,
      );
      expect(finished, 'exports that finished before a cut').toBeGreaterThan(0);
      expect(unfinished.size, 'cuts that came inside an export').toBeGreaterThan(0);
      expect(droppedPages, 'cuts that dropped unsynced data').toBeGreaterThan(0);
    },
    Math.max(600_000, cycles * 30_000),
  );
});
