/**
 * One writer and three follower processes over 10^5 records, against a real S3-compatible
 * server (versitygw): the writer appends, seals segments, trims and compacts keys, and is closed
 * and reopened now and then; each follower (`follower-child.mjs`, on the built engine) is killed
 * with SIGKILL at random — between steps or in the middle of one — and started again over its
 * directory. At every step each follower's reads up to its head (RAW, latest and dedup lines, `get`
 * of eleven keys) hash the same as the writer's up to that head, its head is never past the writer's,
 * its low mark is the writer's, and its own subscription delivers every commit in order: a poll
 * starts where the last durable advance left it, and no commit is ever skipped.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import readline from 'node:readline';
import { describe, expect, it } from 'vitest';
import type { Feed, Store } from '../../packages/engine/src/index.js';
import { seededRandom } from '../support/ingest.mjs';
import { objectStoreSuite } from '../support/object-store.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const objects = objectStoreSuite('followers');
const childScript = new URL('../support/follower-child.mjs', import.meta.url).pathname;

/** Rounds of writes; each appends five commits of 1,000 records (10^5 in all). */
const rounds = 20;
const recordsPerCommit = 1000;

type Line =
  | { kind: 'ready'; cursor: number }
  | { kind: 'poll'; from: number; commits: number[]; head: number }
  | { kind: 'advanced'; cursor: number }
  | { kind: 'reads'; head: number; lowMark: number; digest: string };

/** The digest `follower-child.mjs` makes, over the writer's reads up to `head`. */
async function digestUpTo(feed: Feed, head: number): Promise<string> {
  const hash = crypto.createHash('sha256');
  if (head > 0) {
    for (const mode of ['raw', 'latest', 'dedup'] as const)
      for await (const chunk of feed.readLines({ upTo: head, mode })) hash.update(chunk);
    for (const key of [...Array.from({ length: 10 }, (_, key) => `k${key}`), 'early-3'])
      hash.update(JSON.stringify((await feed.get(key, { asOf: head }))?.position ?? null));
  }
  return hash.digest('hex');
}

/** One follower process and what the test knows of its subscription. */
class FollowerProcess {
  private child: ChildProcess | undefined;
  private lines: Line[] = [];
  private waiters: (() => void)[] = [];
  /** The last advance the follower reported durable, and the end of the last poll it printed. */
  advanced = 0;
  polledTo = 0;
  /** The highest commit any poll delivered: a poll never starts past it (nothing skipped). */
  delivered = 0;
  kills = 0;

  constructor(
    readonly directory: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  async start(): Promise<void> {
    const child = spawn(process.execPath, [childScript, this.directory], {
      env: { ...process.env, ...this.env },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.child = child;
    this.lines = [];
    // A kill timed for one step may land before the next writes its command: the write then
    // finds the pipe closed (EPIPE), and the step sees the process ended instead.
    child.stdin!.on('error', () => undefined);
    readline.createInterface({ input: child.stdout! }).on('line', (text) => {
      this.lines.push(JSON.parse(text) as Line);
      for (const wake of this.waiters.splice(0)) wake();
    });
    child.on('exit', () => {
      for (const wake of this.waiters.splice(0)) wake();
    });
    const ready = await this.next('ready');
    if (!ready) throw new Error(`the follower over ${this.directory} exited before it was ready`);
    // It resumes from its last durable advance: at least the last one it reported, at most
    // what it had polled (an advance made durable just before the kill, not yet reported).
    expect(ready.cursor).toBeGreaterThanOrEqual(this.advanced);
    expect(ready.cursor).toBeLessThanOrEqual(Math.max(this.advanced, this.polledTo));
    this.advanced = ready.cursor;
  }

  /** The next line of `kind` (others before it are taken in too); undefined if the process ended. */
  private async next<K extends Line['kind']>(kind: K): Promise<Extract<Line, { kind: K }> | undefined> {
    for (;;) {
      const at = this.lines.findIndex((line) => line.kind === kind);
      if (at >= 0) {
        const [line] = this.lines.splice(0, at + 1).slice(-1);
        return line as Extract<Line, { kind: K }>;
      }
      if (this.child?.exitCode !== null || this.child.signalCode !== null) return undefined;
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** One step; `killAfterMs` kills it that long after the step begins. Returns its reads, if it got that far. */
  async step(killAfterMs?: number): Promise<Extract<Line, { kind: 'reads' }> | undefined> {
    this.child!.stdin!.write('step\n');
    if (killAfterMs !== undefined) setTimeout(() => this.kill(), killAfterMs);
    const poll = await this.next('poll');
    if (!poll) return undefined;
    // Each commit once and in order, from where its durable cursor is.
    expect(poll.from).toBe(this.advanced);
    expect(poll.from).toBeLessThanOrEqual(this.delivered);
    expect(poll.commits).toEqual(Array.from({ length: poll.head - poll.from }, (_, index) => poll.from + 1 + index));
    this.polledTo = poll.head;
    this.delivered = Math.max(this.delivered, poll.head);
    const advanced = await this.next('advanced');
    if (!advanced) return undefined;
    this.advanced = advanced.cursor;
    return this.next('reads');
  }

  kill(): void {
    if (this.child && this.child.exitCode === null && this.child.signalCode === null) {
      this.kills++;
      this.child.kill('SIGKILL');
    }
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.on('exit', resolve));
    child.stdin!.end();
    await exited;
  }

  async restartIfKilled(): Promise<void> {
    if (this.child && (this.child.exitCode !== null || this.child.signalCode !== null)) await this.start();
  }
}

describe.skipIf(objects.missing)(objects.title('Follower processes beside a writer'), () => {
  objects.start();

  it('agree with the writer at every step while everyone restarts at random', async () => {
    const seed = Number(process.env.FOLLOWER_SEED ?? Date.now() % 1_000_000);
    const random = seededRandom(1, seed);
    console.log(`follower processes: seed ${seed} (FOLLOWER_SEED=${seed} runs it again)`);
    const settings = objects.settings();
    const writerDirectory = temporaryDirectory();
    const options = { objectStore: settings, segmentBytes: 512 * 1024 };
    let writerStore: Store = await openStore(writerDirectory, options);
    let writer = await writerStore.createFeed('events');
    const env = { ...objects.environment(settings.prefix!), FOLLOW_FEED: 'events' };
    // The feed must be tiered once before a follower can find it.
    // Keys and a payload written only here, before the trim: their winners and first
    // occurrences move when it cuts them (to nothing, and to the payload's next occurrence).
    await writer.append(
      Array.from({ length: 10 }, (_, index) => ({
        payload: index === 0 ? 'echo' : `early ${index}`,
        key: `early-${index}`,
      })),
    );
    await writerStore.close();
    writerStore = await openStore(writerDirectory, options);
    writer = await writerStore.feed('events');
    await writer.tiered();
    const followers = [0, 1, 2].map(() => new FollowerProcess(temporaryDirectory(), env));
    for (const follower of followers) await follower.start();
    const reached = { trim: false, compaction: false, writerRestarts: 0, midStepKills: 0, checks: 0 };
    try {
      for (let round = 0; round < rounds; round++) {
        if (round === 10) await writer.append([{ payload: 'echo', key: 'echo-late' }]);
        for (let commit = 0; commit < 5; commit++) {
          await writer.append(
            Array.from({ length: recordsPerCommit }, (_, index) => {
              const n = (round * 5 + commit) * recordsPerCommit + index;
              return {
                payload: `{"n":${n},"note":"${'abcdefgh'.repeat(1 + (n % 5))}"}`,
                key: `k${n % 2000}`,
                type: `t${n % 3}`,
                tags: [`g${n % 7}`],
              };
            }),
          );
        }
        // Trims and a key compaction stay behind every follower's subscription, as an operator's
        // would stay behind their consumers.
        const behind = Math.min(...followers.map((follower) => follower.advanced));
        if (round === 8 && behind > 10) {
          await writer.trim({ before: behind - 5 });
          reached.trim = true;
        }
        if (round === 13 && behind > 20) {
          const compacted = await writer.compactKeys({ horizon: behind - 2 });
          reached.compaction = compacted.segmentsCompacted > 0;
        }
        if (random() < 0.15) {
          await writerStore.close();
          writerStore = await openStore(writerDirectory, options);
          writer = await writerStore.feed('events');
          reached.writerRestarts++;
        }
        await writer.tiered();
        for (const follower of followers) {
          const dice = random();
          if (dice < 0.15) {
            follower.kill();
            await follower.restartIfKilled();
          }
          const killMidStep = dice > 0.9;
          if (killMidStep) reached.midStepKills++;
          const reads = await follower.step(killMidStep ? Math.floor(random() * 60) : undefined);
          await follower.restartIfKilled();
          if (!reads) continue;
          const writerHead = (await writer.head())?.commit ?? 0;
          expect(reads.head).toBeLessThanOrEqual(writerHead);
          expect(reads.lowMark).toBe((await writer.info()).lowMark);
          expect(reads.digest).toBe(await digestUpTo(writer, reads.head));
          reached.checks++;
        }
      }
      // At the end every follower has read everything tiered, and its subscription is there.
      await writer.tiered();
      const head = (await writer.head())!.commit;
      for (const follower of followers) {
        const reads = await follower.step();
        expect(reads!.digest).toBe(await digestUpTo(writer, reads!.head));
        expect(follower.advanced).toBe(reads!.head);
        expect(reads!.head).toBeGreaterThan(head - 10);
      }
    } finally {
      for (const follower of followers) await follower.stop();
      await writerStore.close();
    }
    const kills = followers.reduce((sum, follower) => sum + follower.kills, 0);
    console.log(`follower processes: ${reached.checks} checks, ${kills} kills, ${JSON.stringify(reached)}`);
    expect(reached.trim).toBe(true);
    expect(reached.compaction).toBe(true);
    expect(kills).toBeGreaterThan(0);
    expect(reached.checks).toBeGreaterThan(rounds);
  }, 240_000);
});
