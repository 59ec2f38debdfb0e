/**
 * Crash safety of forks: a child process (fork-child.mjs) forks feed `source` at random commits,
 * appends to the forks and deletes some, and is killed with SIGKILL — a random while after it is
 * ready, or a few milliseconds after it starts a fork (so kills land while the fork is laid out,
 * put in place, or opened). After each kill the store is opened again: no layout under way
 * outlives the open, every fork acknowledged and not deleted is there, and every fork there —
 * acknowledged or not — is whole: its records up to its fork point are the source's, those after
 * it its own, and verify finds nothing wrong in it or in the source.
 * `STREAMSTACK_FORK_CRASH_CYCLES` sets the number of kills (12 by default);
 * `STREAMSTACK_CRASH_SEED` replays a run (the seed is printed).
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runChild } from '../support/child-runs.js';
import { xorshift32 } from '../support/ingest.mjs';
import { openStore, temporaryDirectory, text } from '../support/store.js';

const cycles = Number(process.env.STREAMSTACK_FORK_CRASH_CYCLES ?? 12);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const killRandom = xorshift32(seed);
const childScript = new URL('./fork-child.mjs', import.meta.url).pathname;

interface Line {
  readonly kind: 'ready' | 'fork' | 'forked' | 'delete';
  readonly feed?: string;
  readonly at?: number;
}

describe('crash safety of forks under SIGKILL', () => {
  it(`leaves each fork whole or absent across ${cycles} kills`, async () => {
    const directory = temporaryDirectory('streamstack-fork-crash-');
    console.log(`fork crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
    const acknowledged = new Map<string, number>();
    const deleting = new Set<string>();
    let checkedForks = 0;
    for (let cycle = 1; cycle <= cycles; cycle++) {
      const aimed = killRandom() < 0.6;
      const lines = await runChild<Line>(
        childScript,
        [directory, String(cycle), String(seed + cycle)],
        {},
        {
          delayMs: aimed ? killRandom() * 8 : killRandom() * 300,
          ...(aimed ? { aimAt: { kind: 'fork', count: 1 + Math.floor(killRandom() * 4) } } : {}),
          fallbackMs: 300,
        },
      );
      for (const line of lines) {
        if (line.kind === 'forked') acknowledged.set(line.feed!, line.at!);
        if (line.kind === 'delete') deleting.add(line.feed!);
      }

      const store = await openStore(directory);
      try {
        const feeds = path.join(directory, 'feeds');
        expect(fs.readdirSync(feeds).filter((entry) => entry.startsWith('.'))).toEqual([]);
        const names = await store.feedNames();
        const source = await store.feed('source');
        for (const name of names) {
          const [verification] = await store.verify(name);
          expect(verification?.problems, name).toEqual([]);
          if (name === 'source') continue;
          const fork = await store.feed(name);
          const origin = (await fork.info()).fork;
          expect(origin?.feed, name).toBe('source');
          if (acknowledged.has(name)) expect(origin?.at).toBe(acknowledged.get(name));
          const at = origin!.at;
          for await (const record of fork.read()) {
            const expected = record.commit <= at ? `s${record.commit}.${record.seq - 1}` : `${name}.${record.commit}`;
            expect(text(record.payload).replace(/\.+$/, ''), `${name} commit ${record.commit}`).toBe(
              expected.replace(/\.+$/, ''),
            );
          }
          checkedForks++;
        }
        // Each fork acknowledged is there, unless the child began to delete it.
        for (const [name] of acknowledged) {
          if (deleting.has(name)) continue;
          expect(names, `fork ${name} was acknowledged`).toContain(name);
        }
        expect((await source.head())?.commit).toBeGreaterThanOrEqual(60);
      } finally {
        await store.close();
      }
    }
    console.log(`fork crash test: ${checkedForks} fork checks over ${cycles} kills`);
    expect(checkedForks).toBeGreaterThan(0);
  }, 600_000);
});
