/**
 * The data directory's lock under contention between processes: only one opener may hold a data
 * directory at a time, whatever state its LOCK file was left in. Each round prepares a fresh data
 * directory whose LOCK is stale (the pid of a process that has exited), absent, or held by a live
 * process, then lets two or three child processes (lock-child.mjs, on the built engine) race to
 * open it; the ones that get in make five one-shot appends each and report every acknowledged
 * commit. Two openers holding the directory at once show up as overlapping holding windows, as two
 * children acknowledging the same commit number, or as an acknowledged record that is missing,
 * doubled or under another commit when the test reads the feed back.
 *
 * Every round is checked, and the test fails listing every round that went wrong, so that one
 * run says how often the race is lost rather than only that it was lost once.
 *
 * The children and the CLI run the built packages, as users' processes do, so the engine and the
 * CLI must be built first (`pnpm build`; `pnpm test` builds them).
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { openStore, temporaryDirectory, text } from '../support/store.js';

const childScript = new URL('./lock-child.mjs', import.meta.url).pathname;
const cliBinary = new URL('../../packages/cli/bin/streamstack.js', import.meta.url).pathname;

/** Rounds over stale, absent and held LOCKs; the stale state, where the race lies, gets most. */
const raceRounds = 100;
const deletedLockRounds = 5;
const cliRounds = 30;
const appendsPerChild = 5;
/** A time later than any process.hrtime reading, for a holding window that never closed. */
const never = 2n ** 64n;
/** Rounds run side by side (see runRounds); more gains little on a machine with two cores. */
const roundsAtOnce = 2;
/** A child that takes longer than this is stuck (waiting on a lock, say), and is killed. */
const childDeadlineMs = 20_000;

type LockState = 'stale' | 'absent' | 'held';

interface Line {
  kind: string;
  payload?: string;
  commit?: number;
  at?: string;
  message?: string;
}

interface Acknowledgement {
  payload: string;
  commit: number;
}

/** One child process and everything it has said so far. */
class Child {
  readonly lines: Line[] = [];
  stderr = '';
  readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly process: ChildProcessWithoutNullStreams;
  private readonly listeners: Array<() => void> = [];
  private exited = false;

  constructor(
    readonly name: string,
    directory: string,
    mode: 'contend' | 'hold',
  ) {
    this.process = spawn(process.execPath, [childScript, directory, name, mode], { stdio: ['pipe', 'pipe', 'pipe'] });
    let partial = '';
    this.process.stdout.on('data', (chunk: Buffer) => {
      partial += chunk.toString();
      const whole = partial.split('\n');
      partial = whole.pop()!;
      for (const line of whole) this.lines.push(parseLine(line));
      // A listener that is satisfied removes itself, so the loop walks a copy.
      for (const listener of [...this.listeners]) listener();
    });
    this.process.stderr.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    // A parent that writes to a child which has already exited gets EPIPE; what the child did is
    // judged from its output and exit code, not from whether it read every line.
    this.process.stdin.on('error', () => undefined);
    const deadline = setTimeout(() => this.process.kill('SIGKILL'), childDeadlineMs);
    this.exit = new Promise((resolve, reject) => {
      this.process.on('error', reject);
      this.process.on('close', (code, signal) => {
        clearTimeout(deadline);
        this.exited = true;
        for (const listener of [...this.listeners]) listener();
        resolve({ code, signal });
      });
    });
  }

  /** Resolves once the child has printed a line of `kind`, or has exited without one. */
  until(kind: string): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (this.exited || this.lines.some((line) => line.kind === kind)) {
          this.listeners.splice(this.listeners.indexOf(check), 1);
          resolve();
        }
      };
      this.listeners.push(check);
      check();
    });
  }

  send(line: string): void {
    if (!this.exited) this.process.stdin.write(`${line}\n`);
  }

  said(kind: string): Line | undefined {
    return this.lines.find((line) => line.kind === kind);
  }

  get acknowledgements(): Acknowledgement[] {
    return this.lines
      .filter((line) => line.kind === 'ack')
      .map((line) => ({ payload: line.payload!, commit: line.commit! }));
  }
}

/** A line of a child's output; anything that is not JSON is kept as text, to be reported. */
function parseLine(line: string): Line {
  try {
    return JSON.parse(line) as Line;
  } catch {
    return { kind: 'text', message: line };
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let deadPid: number | undefined;

/** The pid of a process that has exited, checked again on every use in case it was reused. */
function exitedPid(): number {
  while (deadPid === undefined || isAlive(deadPid)) {
    deadPid = spawnSync(process.execPath, ['-e', '']).pid;
  }
  return deadPid;
}

/**
 * A fresh data directory holding the feed `f`, with its LOCK stale or absent. The feed holds one
 * record already, written with the tests' small segments: an opener keeps an active segment that
 * holds records, whereas it would replace an empty one with one of its own size, which for the
 * CLI is 64 MiB for every round to write and for the read-back to scan.
 */
async function prepare(state: 'stale' | 'absent'): Promise<string> {
  const directory = temporaryDirectory('streamstack-lock-race-');
  const store = await openStore(directory);
  const feed = await store.createFeed('f');
  await feed.append([{ payload: 'setup' }]);
  await store.close();
  const lock = path.join(directory, 'LOCK');
  if (state === 'stale') fs.writeFileSync(lock, `${exitedPid()}\n`);
  else fs.rmSync(lock, { force: true });
  return directory;
}

/**
 * What went wrong with the acknowledgements of one round: the same commit acknowledged twice, or
 * an acknowledged record that the feed does not hold exactly once under the commit it was
 * acknowledged with. The feed is read back by opening the store here, after every child is gone.
 */
async function checkAcknowledgements(directory: string, acknowledged: Acknowledgement[]): Promise<string[]> {
  const problems: string[] = [];
  const byCommit = new Map<number, string[]>();
  for (const { payload, commit } of acknowledged) byCommit.set(commit, [...(byCommit.get(commit) ?? []), payload]);
  for (const [commit, payloads] of byCommit) {
    if (payloads.length > 1) problems.push(`commit ${commit} was acknowledged to ${payloads.join(' and ')}`);
  }
  const found = new Map<string, number[]>();
  try {
    const store = await openStore(directory);
    try {
      const feed = await store.feed('f');
      for await (const record of feed.read()) {
        const payload = text(record.payload);
        found.set(payload, [...(found.get(payload) ?? []), record.commit]);
      }
    } finally {
      await store.close();
    }
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    return [...problems, `the feed could not be read back: ${code ?? ''} ${message ?? String(error)}`];
  }
  for (const { payload, commit } of acknowledged) {
    const commits = found.get(payload) ?? [];
    if (commits.length !== 1 || commits[0] !== commit) {
      problems.push(
        `${payload}, acknowledged as commit ${commit}, was read back under commits [${commits.join(', ')}]`,
      );
    }
  }
  return problems;
}

/**
 * Everything wrong with one round of children: an exit other than 0 (LOCKED exits 0 too), an
 * opener that did not append everything, holding windows that overlap, and the acknowledgement
 * checks above.
 */
async function checkRound(directory: string, children: Child[]): Promise<string[]> {
  const problems: string[] = [];
  const windows: Array<{ name: string; from: bigint; to: bigint }> = [];
  for (const child of children) {
    const { code, signal } = await child.exit;
    if (code !== 0) problems.push(`${child.name} exited with ${code ?? signal}: ${child.stderr.trim().split('\n')[0]}`);
    const opened = child.said('opened');
    if (!opened) continue;
    if (child.acknowledgements.length !== appendsPerChild) {
      problems.push(`${child.name} opened the store but acknowledged ${child.acknowledgements.length} appends`);
    }
    // A child that never said it was closing may have held the directory until it died.
    const closing = child.said('closing');
    windows.push({ name: child.name, from: BigInt(opened.at!), to: closing ? BigInt(closing.at!) : never });
  }
  for (const [index, first] of windows.entries()) {
    for (const second of windows.slice(index + 1)) {
      if (first.from < second.to && second.from < first.to)
        problems.push(`${first.name} and ${second.name} held the directory at the same time`);
    }
  }
  const acknowledged = children.flatMap((child) => child.acknowledgements);
  return [...problems, ...(await checkAcknowledgements(directory, acknowledged))];
}

/** Starts contenders at once, waits until each has loaded the engine, then releases them together. */
async function startContenders(directory: string, names: string[]): Promise<Child[]> {
  const contenders = names.map((name) => new Child(name, directory, 'contend'));
  await Promise.all(contenders.map((child) => child.until('ready')));
  return contenders;
}

/**
 * One round: the LOCK in `state`, then `contenders` children racing to open the directory. In the
 * held state a child opens the store first and keeps it open until every contender has finished;
 * `deleteLock` removes the LOCK file while it does.
 */
async function runRound(round: number, state: LockState, contenders: number, deleteLock = false): Promise<string[]> {
  const directory = await prepare(state === 'stale' ? 'stale' : 'absent');
  const names = Array.from({ length: contenders }, (_, index) => `${round}-${String.fromCharCode(65 + index)}`);
  const problems: string[] = [];
  let holder: Child | undefined;
  if (state === 'held') {
    holder = new Child(`${round}-holder`, directory, 'hold');
    await holder.until('opened');
    if (!holder.said('opened')) problems.push(`the holder could not open the store: ${holder.stderr.trim()}`);
    if (deleteLock) fs.rmSync(path.join(directory, 'LOCK'), { force: true });
  }
  const children = await startContenders(directory, names);
  // The holder appends while the contenders try to open, so a contender that wrongly got in
  // would be writing at the same time as it.
  holder?.send('go');
  for (const child of children) child.send('go');
  await Promise.all(children.map((child) => child.exit));
  if (holder) {
    await holder.until('appended');
    holder.send('release');
    await holder.exit;
    for (const child of children) {
      if (!child.said('locked'))
        problems.push(`${child.name} was not refused with LOCKED while ${holder.name} held the store`);
    }
  } else if (!children.some((child) => child.said('opened'))) {
    // Nothing else holds the directory, so someone must get in; all LOCKED would be a lock that
    // can never be taken.
    problems.push('no child could open the store');
  }
  const all = holder ? [holder, ...children] : children;
  return [...problems, ...(await checkRound(directory, all))];
}

interface Failure {
  round: string;
  problems: string[];
}

/**
 * Runs rounds 1 to `count`, `roundsAtOnce` at a time, and returns the ones that went wrong. Each
 * round has its own data directory, so rounds running side by side never meet; running them side
 * by side lets one round's disk waits and read-back overlap another's children starting up.
 */
async function runRounds(count: number, round: (index: number) => Promise<Failure | undefined>): Promise<Failure[]> {
  const failures: Failure[] = [];
  let next = 1;
  const worker = async () => {
    for (let index = next++; index <= count; index = next++) {
      const failure = await round(index);
      if (failure) failures.push(failure);
    }
  };
  await Promise.all(Array.from({ length: roundsAtOnce }, worker));
  return failures;
}

/** Fails with every round that went wrong, and how many of how many that was. */
function expectNoFailures(failures: Failure[], rounds: number): void {
  const report = failures
    .sort((first, second) => Number.parseInt(first.round, 10) - Number.parseInt(second.round, 10))
    .map(({ round, problems }) => `round ${round}: ${problems.join('; ')}`);
  expect(report, `${failures.length} of ${rounds} rounds let two openers hold the directory or lost writes`).toEqual(
    [],
  );
}

/**
 * These tests spawn hundreds of processes; their limits guard against a hang, not a slowdown,
 * and they run beside the rest of the suite (the export, server and packaging tests among it),
 * which on two cores makes each spawn several times slower than alone.
 */
const underLoad = 3;

describe('the data directory lock under contention between processes', () => {
  it(
    `lets one opener at a time hold the directory across ${raceRounds} rounds of stale, absent and held LOCKs`,
    async () => {
      // Three rounds in five race over a stale LOCK, where the issue was seen; one each over an
      // absent LOCK and a live holder. Two or three contenders, alternating every cycle of states
      // so that each state gets both.
      const states: LockState[] = ['stale', 'absent', 'stale', 'held', 'stale'];
      const failures = await runRounds(raceRounds, async (round) => {
        const state = states[round % states.length];
        const problems = await runRound(round, state, 2 + (Math.floor(round / states.length) % 2));
        return problems.length > 0 ? { round: `${round} (${state})`, problems } : undefined;
      });
      expectNoFailures(failures, raceRounds);
    },
    90_000 * underLoad,
  );

  it(
    'refuses a new opener while a live process holds the store, even after LOCK is deleted',
    async () => {
      // With the lock taken on the directory itself, the LOCK file is only a note for people: the
      // kernel knows who holds the directory whatever happens to the file.
      const failures = await runRounds(deletedLockRounds, async (round) => {
        const problems = await runRound(round, 'held', 1, true);
        return problems.length > 0 ? { round: String(round), problems } : undefined;
      });
      expectNoFailures(failures, deletedLockRounds);
    },
    30_000 * underLoad,
  );

  it(
    `lets one of two CLI appends over a stale LOCK hold the directory, across ${cliRounds} rounds`,
    async () => {
      // The same race through the front door: two `streamstack append` processes started together
      // over a stale LOCK. Each either appends its record or is refused with LOCKED.
      const failures = await runRounds(cliRounds, async (round) => {
        const directory = await prepare('stale');
        const payloads = ['A', 'B'].map((name) => `cli-${round}-${name}`);
        const runs = await Promise.all(payloads.map((payload) => cliAppend(directory, payload)));
        const problems: string[] = [];
        const acknowledged: Acknowledgement[] = [];
        for (const [index, run] of runs.entries()) {
          const payload = payloads[index];
          const commit = run.status === 0 ? parseLine(run.stdout.trim().split('\n')[0]).commit : undefined;
          if (run.status === 0 && typeof commit === 'number') {
            acknowledged.push({ payload, commit });
          } else if (run.status !== 1 || errorCode(run.stderr) !== 'LOCKED') {
            // The only way an append may fail here is being refused because the other one holds
            // the directory.
            problems.push(`the append of ${payload} exited with ${run.status}: ${run.stderr.trim().split('\n')[0]}`);
          }
        }
        if (acknowledged.length === 0 && problems.length === 0) problems.push('neither append could open the store');
        problems.push(...(await checkAcknowledgements(directory, acknowledged)));
        return problems.length > 0 ? { round: String(round), problems } : undefined;
      });
      expectNoFailures(failures, cliRounds);
    },
    60_000 * underLoad,
  );
});

/** `streamstack --data <directory> append f` with one record whose payload is `payload`. */
function cliAppend(
  directory: string,
  payload: string,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cliBinary, '--data', directory, 'append', 'f'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdin.on('error', () => undefined);
    const deadline = setTimeout(() => child.kill('SIGKILL'), childDeadlineMs);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(deadline);
      resolve({ status, stdout, stderr });
    });
    child.stdin.end(`${JSON.stringify({ payload })}\n`);
  });
}

/** The code of the JSON error line the CLI prints on stderr, if there is one. */
function errorCode(stderr: string): string | undefined {
  const line = stderr.split('\n').find((candidate) => candidate.startsWith('{"error"'));
  const error = line === undefined ? undefined : (parseLine(line) as { error?: { code?: string } }).error;
  return error?.code;
}

describe('the fallback lock (no native module): a LOCK file it never guesses about', () => {
  const fallback = { ...process.env, STREAMSTACK_LOCK: 'file' };
  const run = (data: string, args: string[], input = '') =>
    spawnSync(process.execPath, [cliBinary, '--data', data, ...args], { input, encoding: 'utf8', env: fallback });

  it('refuses a stale LOCK naming its pid until --break-lock, removes its LOCK on close, and defers to a live OS-lock holder', async () => {
    const data = temporaryDirectory();
    expect(run(data, ['feed', 'create', 'f']).status).toBe(0);
    // A clean close leaves no LOCK behind, so the next opener is not refused.
    expect(fs.existsSync(path.join(data, 'LOCK'))).toBe(false);
    fs.writeFileSync(path.join(data, 'LOCK'), '4194399 file\n');
    const refused = run(data, ['append', 'f'], '{"payload":"a"}\n');
    expect(refused.status).toBe(1);
    expect(JSON.parse(refused.stderr.split('\n')[0]).error).toMatchObject({ code: 'LOCKED', pid: 4194399 });
    expect(refused.stderr).toContain('--break-lock');
    const broken = run(data, ['--break-lock', 'append', 'f'], '{"payload":"a"}\n');
    expect(broken.status).toBe(0);
    expect(fs.existsSync(path.join(data, 'LOCK'))).toBe(false);
    // A fallback holder that is alive keeps an OS-lock opener out too.
    fs.writeFileSync(path.join(data, 'LOCK'), `${process.pid} file\n`);
    const withOsLock = spawnSync(process.execPath, [cliBinary, '--data', data, 'append', 'f'], {
      input: '{"payload":"b"}\n',
      encoding: 'utf8',
    });
    expect(withOsLock.status).toBe(1);
    expect(withOsLock.stderr).toContain('LOCKED');
    fs.rmSync(path.join(data, 'LOCK'));
    const store = await openStore(data);
    expect((await (await store.feed('f')).readCommit(1)).map((record) => text(record.payload))).toEqual(['a']);
    await store.close();
  });
});
