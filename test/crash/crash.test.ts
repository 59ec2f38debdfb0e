/**
 * Crash safety: a child process ingests and reports every acknowledged batch; the parent kills
 * it with SIGKILL at a random moment, reopens the data directory (recovery), checks that every
 * acknowledged batch is there exactly once and that no batch is half there, and runs `verify`.
 * Then the next child carries on where the last one died, with the other kernel set (children
 * alternate native and TypeScript kernels, so each recovers what the other wrote).
 * `STREAMSTACK_CRASH_CYCLES` sets the number of kill cycles (200 by default; `pnpm soak` runs
 * many more); `STREAMSTACK_CRASH_SEED` replays a run (the seed is printed).
 */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { overlappingAtEnd, unacknowledged, xorshift32 } from '../support/ingest.mjs';
import { openStore, temporaryDirectory, text } from '../support/store.js';

const cycles = Number(process.env.STREAMSTACK_CRASH_CYCLES ?? 200);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
/** Kill delays come from this seeded generator (xorshift32), so a run can be replayed. */
const killRandom = xorshift32(seed);
const childScript = new URL('./ingest-child.mjs', import.meta.url).pathname;
/** How long a child may ingest before it is killed, at most. */
const killAfterMsMax = 60;

interface Line {
  kind: string;
  batch?: string;
  size?: number;
  token?: string;
  stream?: string;
  firstSeq?: number;
}

/** Runs one child until it is ready, lets it ingest a random while, kills it, returns its lines. */
function runAndKill(directory: string, cycle: number, token: string | undefined): Promise<Line[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [childScript, directory, String(cycle), String(seed)], {
      env: {
        ...process.env,
        STREAMSTACK_KERNELS: cycle % 2 === 1 ? 'native' : 'ts',
        ...(token ? { CRASH_TOKEN: token } : {}),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let errors = '';
    let killTimer: NodeJS.Timeout | undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (!killTimer && output.includes('"ready"')) {
        killTimer = setTimeout(() => child.kill('SIGKILL'), killRandom() * killAfterMsMax);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`child ${cycle} exited with ${code}: ${errors}`));
      // A line cut by the kill is not an acknowledgement; only whole lines count.
      const lines = output
        .split('\n')
        .slice(0, -1)
        .map((line) => JSON.parse(line) as Line);
      resolve(lines);
    });
  });
}

describe('crash safety under SIGKILL', () => {
  it(
    `keeps every acknowledged batch exactly once across ${cycles} kills`,
    async () => {
      const directory = temporaryDirectory('streamstack-crash-');
      const setup = await openStore(directory);
      await setup.createFeed('crash');
      await setup.close();

      console.log(`crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
      const acknowledged = new Map<string, number>();
      let token: string | undefined;
      let batchesChecked = 0;
      /** Kills that landed while a write was in flight: its attempt printed, its ack not. */
      let killsMidWrite = 0;
      /** Kills that landed while two group writes to one file were in flight (pipelined). */
      let killsTwoInFlight = 0;
      for (let cycle = 1; cycle <= cycles; cycle++) {
        const lines = await runAndKill(directory, cycle, token);
        if (unacknowledged(lines) > 0) killsMidWrite++;
        if (overlappingAtEnd(lines)) killsTwoInFlight++;
        for (const line of lines) {
          if (line.kind === 'lease') token = line.token;
          if (line.kind === 'oneshot' || line.kind === 'batch') acknowledged.set(line.batch!, line.size!);
        }

        // Reopen: recovery runs, then everything the feed holds is read back.
        const store = await openStore(directory);
        const feed = await store.feed('crash');
        const found = new Map<string, { indexes: number[]; size: number; seqs: number[] }>();
        const take = (payload: Uint8Array, seq: number) => {
          const [batch, index, size] = text(payload).split('|')[0].split(':');
          const entry = found.get(batch) ?? { indexes: [], size: Number(size), seqs: [] };
          entry.indexes.push(Number(index));
          entry.seqs.push(seq);
          found.set(batch, entry);
        };
        for await (const commit of feed.commits()) {
          for (const record of await feed.readCommit(commit.commit)) take(record.payload, record.seq);
        }
        const open = await feed.activeStream();
        if (open) for (const record of await open.read()) take(record.payload, record.seq);

        for (const [batch, size] of acknowledged) {
          expect(found.get(batch)?.indexes.length, `acknowledged batch ${batch} after kill ${cycle}`).toBe(size);
        }
        for (const [batch, entry] of found) {
          // Whole or absent: every record of the batch, once each, at consecutive seqs.
          expect(entry.indexes, `batch ${batch} after kill ${cycle}`).toEqual(
            Array.from({ length: entry.size }, (_, index) => index),
          );
          expect(entry.seqs.every((seq, index) => index === 0 || seq === entry.seqs[index - 1] + 1)).toBe(true);
        }
        batchesChecked = found.size;
        // Recovery left sound logs: verify finds nothing to report (a torn tail was cut on open).
        const [verification] = await store.verify('crash');
        expect(verification.problems, `verify after kill ${cycle} (seed ${seed})`).toEqual([]);
        await store.close();
      }
      console.log(
        `crash test: ${killsMidWrite} of ${cycles} kills landed while a write was in flight, ${killsTwoInFlight} while two were`,
      );
      expect(killsMidWrite, 'kills that landed mid-write').toBeGreaterThan(cycles / 10);
      expect(killsTwoInFlight, 'kills that landed while two group writes were in flight').toBeGreaterThan(0);
      expect(acknowledged.size).toBeGreaterThan(cycles);
      expect(batchesChecked).toBeGreaterThanOrEqual(acknowledged.size);
    },
    Math.max(900_000, cycles * 4_000),
  );
});
