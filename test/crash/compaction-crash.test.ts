/**
 * Crash safety of key compaction: a child process (test/support/compaction-child.mjs) appends
 * commits while it key-compacts the history up to moving horizons and merges segments. The
 * parent kills it with SIGKILL — a random while after it is ready, or a few milliseconds after it
 * starts a compaction (so kills land between the horizon being recorded, the rewritten segment
 * being switched in and the replaced files being deleted) — reopens the store, and checks the
 * contract against the history worked out from the head alone (every commit's records are a
 * function of its number): RAW and dedup reads after the horizon, the latest value of every key
 * from the start and through `get`, `COMPACTED` below the horizon, every acknowledged commit
 * present, and a clean `verify`. The next child carries on over the same files, with the other
 * kernel set.
 *
 * `STREAMSTACK_COMPACTION_CRASH_CYCLES` sets the number of kills (else `STREAMSTACK_CRASH_CYCLES`,
 * else 12); `STREAMSTACK_CRASH_SEED` replays a run (the seed is printed).
 */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import type { Feed, StoredRecord } from '../../packages/engine/src/index.js';
import { collect, openStore, temporaryDirectory, text } from '../support/store.js';
import { compactionChildSegmentBytes, historyOf } from '../support/compaction-records.mjs';
import { xorshift32 } from '../support/ingest.mjs';

const cycles = Number(process.env.STREAMSTACK_COMPACTION_CRASH_CYCLES ?? process.env.STREAMSTACK_CRASH_CYCLES ?? 12);
const seed = Number(process.env.STREAMSTACK_CRASH_SEED ?? Math.floor(Math.random() * 2 ** 31));
const killRandom = xorshift32(seed);
const childScript = new URL('../support/compaction-child.mjs', import.meta.url).pathname;
/** How long a child may run before it is killed, at most, when the kill is not aimed at a compaction. */
const killAfterMsMax = 400;
/** How long after a compaction starts the kill comes, at most, when it is aimed at one. */
const killInCompactionMsMax = 6;

interface ChildLine {
  readonly kind: string;
  readonly commit?: number;
}

function runAndKill(directory: string, cycle: number): Promise<ChildLine[]> {
  const aimed = killRandom() < 0.6;
  const delayMs = aimed ? killRandom() * killInCompactionMsMax : killRandom() * killAfterMsMax;
  const compactionsToWait = 1 + Math.floor(killRandom() * 4);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [childScript, directory, String(cycle), String(seed)], {
      env: { ...process.env, STREAMSTACK_KERNELS: cycle % 2 === 1 ? 'native' : 'ts' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    let errors = '';
    let ready = false;
    let started = 0;
    let killTimer: NodeJS.Timeout | undefined;
    const kill = () => {
      killTimer ??= setTimeout(() => child.kill('SIGKILL'), delayMs);
    };
    child.stdout.on('data', (chunk: Buffer) => {
      const piece = chunk.toString();
      output += piece;
      if (!ready && output.includes('"ready"')) {
        ready = true;
        if (!aimed) kill();
        else setTimeout(() => child.kill('SIGKILL'), killAfterMsMax * 5);
      }
      if (ready && aimed) {
        started += piece.split('"kind":"compact"').length - 1;
        if (started >= compactionsToWait) kill();
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`child ${cycle} exited with ${code}: ${errors}`));
      resolve(
        output
          .split('\n')
          .slice(0, -1)
          .map((line) => JSON.parse(line) as ChildLine),
      );
    });
  });
}

const view = (record: { commit: number; position: number; key?: string; version?: number; tombstone?: boolean; payload: string | Uint8Array }) => ({
  commit: record.commit,
  position: record.position,
  key: record.key,
  version: record.key === undefined ? undefined : (record.version ?? 0),
  tombstone: record.tombstone === true,
  payload: typeof record.payload === 'string' ? record.payload : text(record.payload),
});
const stored = (records: readonly StoredRecord[]) => records.map(view);

/** Checks the reopened feed against the history worked out from its head. */
async function checkFeed(feed: Feed, acknowledged: number, where: string): Promise<{ horizon: number }> {
  const info = await feed.info();
  const head = info.commits;
  expect(head, `${where}: every acknowledged commit is there`).toBeGreaterThanOrEqual(acknowledged);
  const history = historyOf(head).map(view);
  const { horizon } = info;
  const after = history.filter((record) => record.commit > horizon);
  expect(stored(await collect(feed.read({ after: horizon }))), `${where}: RAW after the horizon ${horizon}`).toEqual(after);
  const seen = new Set<string>();
  const firsts = history.filter((record) => {
    const first = !seen.has(record.payload);
    seen.add(record.payload);
    return first;
  });
  expect(stored(await collect(feed.read({ after: horizon, mode: 'dedup' }))), `${where}: dedup after the horizon`).toEqual(firsts.filter((record) => record.commit > horizon));
  const winners = new Map<string, (typeof history)[number]>();
  for (const record of history) {
    if (record.key === undefined) continue;
    const held = winners.get(record.key);
    if (!held || record.version! > held.version! || (record.version === held.version && record.position > held.position)) winners.set(record.key, record);
  }
  const latest = [...winners.values()].filter((record) => !record.tombstone).sort((a, b) => a.position - b.position);
  expect(stored(await collect(feed.read({ mode: 'latest' }))), `${where}: latest from the start`).toEqual(latest);
  for (const [key, winner] of winners) {
    const found = await feed.get(key);
    expect(found ? view(found) : undefined, `${where}: get(${key})`).toEqual(winner.tombstone ? undefined : winner);
  }
  if (horizon >= 2) await expect(collect(feed.read({ after: horizon - 1 }))).rejects.toMatchObject({ code: 'COMPACTED' });
  return { horizon };
}

describe('key compaction under SIGKILL', () => {
  it(`keeps every read after the horizon and every key's latest value, across ${cycles} kills`, async () => {
    const directory = temporaryDirectory('streamstack-compaction-crash-');
    const setup = await openStore(directory, { segmentBytes: compactionChildSegmentBytes });
    await setup.createFeed('keys');
    await setup.close();
    console.log(`compaction crash test: ${cycles} kills, seed ${seed} (STREAMSTACK_CRASH_SEED=${seed} replays it)`);
    let acknowledged = 0;
    let compactionsStarted = 0;
    let compactionsDone = 0;
    let killedInCompaction = 0;
    let horizon = 0;
    for (let cycle = 1; cycle <= cycles; cycle++) {
      const lines = await runAndKill(directory, cycle);
      for (const line of lines) if (line.kind === 'appended') acknowledged = Math.max(acknowledged, line.commit!);
      const started = lines.filter((line) => line.kind === 'compact').length;
      const done = lines.filter((line) => line.kind === 'compacted').length;
      compactionsStarted += started;
      compactionsDone += done;
      if (started > done) killedInCompaction++;
      const store = await openStore(directory, { segmentBytes: compactionChildSegmentBytes });
      const feed = await store.feed('keys');
      ({ horizon } = await checkFeed(feed, acknowledged, `after kill ${cycle} (seed ${seed})`));
      expect((await store.verify('keys'))[0].problems, `after kill ${cycle}: verify`).toEqual([]);
      await store.close();
    }
    console.log(
      `compaction crash test: ${acknowledged} acknowledged commits, ${compactionsDone} of ${compactionsStarted} compactions finished, ` +
        `${killedInCompaction} of ${cycles} kills inside one; final horizon ${horizon}`,
    );
    expect(killedInCompaction, 'kills that landed inside a compaction').toBeGreaterThan(0);
    expect(horizon, 'the history was key-compacted').toBeGreaterThan(1);
  }, Math.max(600_000, cycles * 8_000));
});
