/**
 * A subscription group shared by eight worker processes over HTTP, ordered by key, while workers
 * are killed (SIGKILL) and replaced at random and give work back at random: in the end every
 * commit is settled, acknowledged by exactly one successful ack, redeliveries are counted, and
 * each key's commits were handed out only after the one before was acknowledged.
 *
 * Size: STREAMSTACK_GROUP_COMMITS one-record commits (default 100,000) over 64 keys.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { startServer } from '../support/server.js';
import { temporaryDirectory } from '../support/store.js';

const commitCount = Number(process.env.STREAMSTACK_GROUP_COMMITS ?? '100000');
const keyCount = 64;
const workerCount = 8;
const workerScript = path.resolve('test/support/group-worker.mjs');

interface LogLine {
  kind: 'claim' | 'nack' | 'send' | 'acked' | 'lost';
  commit: number;
  delivery?: number;
  keys?: string[];
  time?: number;
}

describe('a subscription group shared by worker processes', () => {
  it('settles every commit exactly once, in key order, through kills and nacks', async () => {
    const { url, store } = await startServer({ storeOptions: { segmentBytes: 64 * 1024 * 1024 } });
    const feed = await store.createFeed('jobs');
    // Many appends in flight at once share their group commits.
    for (let start = 0; start < commitCount; start += 512) {
      await Promise.all(
        Array.from({ length: Math.min(512, commitCount - start) }, (_, offset) =>
          feed.append([{ payload: `job ${start + offset}`, key: `k${(start + offset) % keyCount}` }]),
        ),
      );
    }
    const keyOf = new Map<number, string>();
    for await (const record of feed.read()) keyOf.set(record.commit, record.key!);
    expect(keyOf.size).toBe(commitCount);
    const group = await feed.subscriptionGroup('workers', {
      orderedBy: 'key',
      ackTimeoutMs: 1_500,
      maxDeliveries: 1000,
    });

    const logs = temporaryDirectory();
    const running = new Map<string, ChildProcess>();
    const killed = new Set<string>();
    let generation = 0;
    const startWorker = () => {
      const name = `w${generation++}`;
      const child = spawn(
        process.execPath,
        [workerScript, url, 'jobs', 'workers', name, path.join(logs, `${name}.log`)],
        {
          env: { ...process.env, NACK_RATE: '0.02' },
          stdio: ['ignore', 'ignore', 'pipe'],
        },
      );
      let stderr = '';
      child.stderr!.on('data', (chunk) => {
        stderr += chunk;
      });
      child.once('exit', (code, signal) => {
        running.delete(name);
        if (signal !== 'SIGKILL') failures.push(`worker ${name} exited ${code}: ${stderr}`);
      });
      running.set(name, child);
    };
    const failures: string[] = [];
    for (let index = 0; index < workerCount; index++) startWorker();
    let kills = 0;
    try {
      const deadline = Date.now() + 600_000;
      while ((await group.info()).cursor < commitCount) {
        expect(failures).toEqual([]);
        expect(Date.now()).toBeLessThan(deadline);
        await new Promise((resolve) => setTimeout(resolve, 250 + Math.random() * 1_000));
        const names = [...running.keys()];
        const victim = names[Math.floor(Math.random() * names.length)];
        if (victim !== undefined && Math.random() < 0.5) {
          killed.add(victim);
          running.get(victim)!.kill('SIGKILL');
          kills++;
          startWorker();
        }
      }
    } finally {
      for (const [name, child] of running) {
        killed.add(name);
        child.kill('SIGKILL');
      }
    }
    expect(failures).toEqual([]);

    const lines: (LogLine & { worker: string })[] = [];
    for (const file of fs.readdirSync(logs)) {
      const worker = file.replace(/\.log$/, '');
      for (const line of fs.readFileSync(path.join(logs, file), 'utf8').split('\n')) {
        // A SIGKILL may cut the line being written: only the last line of a log, and only then.
        if (line === '') continue;
        try {
          lines.push({ ...(JSON.parse(line) as LogLine), worker });
        } catch {
          expect(killed.has(worker)).toBe(true);
        }
      }
    }
    const info = await group.info();
    expect(info).toMatchObject({ cursor: commitCount, acked: commitCount, parked: 0 });

    // Exactly once: no commit acknowledged twice; one with no ack logged was sent by a worker killed
    // before it could log the answer.
    const ackedBy = new Map<number, string>();
    for (const line of lines.filter((entry) => entry.kind === 'acked')) {
      expect(ackedBy.has(line.commit), `commit ${line.commit} acknowledged twice`).toBe(false);
      ackedBy.set(line.commit, line.worker);
    }
    const sentBy = new Map<number, { worker: string; time: number }[]>();
    for (const line of lines.filter((entry) => entry.kind === 'send')) {
      sentBy.set(line.commit, [...(sentBy.get(line.commit) ?? []), { worker: line.worker, time: line.time! }]);
    }
    let unlogged = 0;
    for (let commit = 1; commit <= commitCount; commit++) {
      if (ackedBy.has(commit)) continue;
      unlogged++;
      expect(
        sentBy.get(commit)?.some((send) => killed.has(send.worker)),
        `commit ${commit} settled by no worker`,
      ).toBe(true);
    }
    expect(unlogged).toBeLessThanOrEqual(kills + workerCount);

    // Redeliveries are counted: every nack and every killed claim came back.
    const claims = lines.filter((entry) => entry.kind === 'claim');
    const nacks = lines.filter((entry) => entry.kind === 'nack').length;
    expect(nacks).toBeGreaterThan(0);
    expect(info.redelivered).toBeGreaterThanOrEqual(nacks);
    expect(claims.length).toBeLessThanOrEqual(commitCount + info.redelivered);
    expect(claims.filter((claim) => claim.delivery! > 1).length).toBeGreaterThan(0);

    // Key order: no commit of a key was handed out before the ack that settled the one before it was sent.
    const settledAt = new Map<number, number>();
    for (let commit = 1; commit <= commitCount; commit++) {
      const sends = sentBy.get(commit) ?? [];
      const settler = ackedBy.get(commit);
      const times = sends.filter((send) => settler === undefined || send.worker === settler).map((send) => send.time);
      settledAt.set(commit, Math.min(...times));
    }
    const previousOfKey = new Map<string, number>();
    const previous = new Map<number, number>();
    for (let commit = 1; commit <= commitCount; commit++) {
      const key = keyOf.get(commit)!;
      const before = previousOfKey.get(key);
      if (before !== undefined) previous.set(commit, before);
      previousOfKey.set(key, commit);
    }
    for (const claim of claims) {
      const before = previous.get(claim.commit);
      if (before === undefined) continue;
      expect(
        claim.time!,
        `commit ${claim.commit} handed out before commit ${before} was acknowledged`,
      ).toBeGreaterThanOrEqual(settledAt.get(before)!);
    }
    console.log(
      `group workers: ${commitCount} commits, ${kills} kills, ${nacks} nacks, ${info.redelivered} redeliveries, ${claims.length} claims logged`,
    );
  }, 900_000);
});
