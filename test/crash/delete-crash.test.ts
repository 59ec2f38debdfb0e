/**
 * Crash safety of deleting feeds: a child process creates feeds and deletes some, printing each
 * step before and after; the parent kills it with SIGKILL at a random moment and reopens the
 * data directory. Every feed whose deletion was acknowledged is gone, every feed created and
 * not being deleted is whole (all its acknowledged records, `verify` sound), a feed whose
 * deletion was under way is either whole or gone, and no tombstone outlives the open.
 * `STREAMSTACK_DELETE_CRASH_CYCLES` sets the number of kills (20 by default);
 * `STREAMSTACK_CRASH_SEED` replays a run (the seed is printed).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { xorshift32 } from '../support/ingest.mjs';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const cycles = Number(process.env.STREAMSTACK_DELETE_CRASH_CYCLES ?? 20);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** Kill delays come from this seeded generator (xorshift32), so a run can be replayed. */
const killRandom = xorshift32(seed);
const childScript = new URL('./delete-child.mjs', import.meta.url).pathname;
/** How long a child may run before it is killed, at most: a few feeds' worth. */
const killAfterMsMax = 400;

interface Line {
  kind: 'ready' | 'create' | 'created' | 'delete' | 'deleted';
  feed?: string;
  records?: number;
}

/** What the parent knows of a feed from the children's lines. */
interface Known {
  /** Records acknowledged when its creation was acknowledged; undefined while it was not. */
  records?: number;
  deleting: boolean;
  deleted: boolean;
}

function runAndKill(directory: string, cycle: number): Promise<Line[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [childScript, directory, String(cycle)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let errors = '';
    let killTimer: NodeJS.Timeout | undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (!killTimer && output.includes('"ready"'))
        killTimer = setTimeout(() => child.kill('SIGKILL'), killRandom() * killAfterMsMax);
    });
    child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`child ${cycle} exited with ${code}: ${errors}`));
      // A line cut by the kill is not an acknowledgement; only whole lines count.
      resolve(
        output
          .split('\n')
          .slice(0, -1)
          .map((line) => JSON.parse(line) as Line),
      );
    });
  });
}

describe('crash safety of deleting feeds under SIGKILL', () => {
  it(`leaves each feed whole or gone across ${cycles} kills`, async () => {
    const directory = temporaryDirectory('streamstack-delete-crash-');
    console.log(`delete crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
    const known = new Map<string, Known>();
    let killsMidDelete = 0;
    for (let cycle = 1; cycle <= cycles; cycle++) {
      const lines = await runAndKill(directory, cycle);
      for (const line of lines) {
        if (line.feed === undefined) continue;
        const feed = known.get(line.feed) ?? { deleting: false, deleted: false };
        known.set(line.feed, feed);
        if (line.kind === 'created') feed.records = line.records;
        if (line.kind === 'delete') feed.deleting = true;
        if (line.kind === 'deleted') feed.deleted = true;
      }
      const last = lines[lines.length - 1];
      if (last?.kind === 'delete') killsMidDelete++;

      const store = await openStore(directory);
      expect(
        fs.readdirSync(path.join(directory, 'feeds')).filter((name) => name.startsWith('.')),
        `cycle ${cycle}: tombstones left`,
      ).toEqual([]);
      const names = new Set(await store.feedNames());
      for (const [name, feed] of known) {
        const context = `cycle ${cycle}, feed ${name}`;
        if (feed.deleted) {
          expect(names.has(name), `${context}: its deletion was acknowledged`).toBe(false);
          continue;
        }
        if (!names.has(name)) {
          // Gone without an acknowledged deletion: only a creation or deletion under way may end so.
          expect(feed.records === undefined || feed.deleting, `${context}: a created feed vanished`).toBe(true);
          known.set(name, { ...feed, deleted: true });
          continue;
        }
        const [verification] = await store.verify(name);
        expect(verification, context).toMatchObject({ ok: true, problems: [] });
        const records = (await collect((await store.feed(name)).read())).length;
        if (feed.records !== undefined) expect(records, context).toBe(feed.records);
        // A feed found whole once its deletion was under way is an ordinary feed again.
        feed.deleting = false;
      }
      for (const name of names) expect(known.has(name), `cycle ${cycle}: feed ${name} was never created`).toBe(true);
      await store.close();
    }
    console.log(`delete crash test: ${killsMidDelete} of ${cycles} kills landed while a deletion was under way`);
    // The children got as far as acknowledged deletions (the kills did not all land at start).
    expect([...known.values()].filter((feed) => feed.deleted).length).toBeGreaterThan(0);
  }, 600_000);
});
