/**
 * powerloss-fs for tests (tools/powerloss-fs, built by scripts/test-tools.sh, which `pnpm test` runs first): a FUSE mount over a
 * backing directory that holds unsynced writes and unsynced names in memory until an fsync makes
 * them durable, and a simulated power loss that drops them.
 *
 *   const pfs = await startPowerlossFs({ seed: 7 });
 *   // ... use pfs.mount as the data directory ...
 *   await pfs.losePower();          // or losePower(true): a seeded random subset of unsynced pages survives
 *   // pfs.backing now holds exactly what survived; read it directly, or mount it again:
 *   const again = await startPowerlossFs({ backing: pfs.backing });
 *
 * Needs root (it mounts) and /dev/fuse. A daemon started inside a test is stopped when that test
 * finishes, one started in beforeAll when the file finishes; `stop()` may also be called by hand.
 * Backing directories made here are removed when the file finishes, not by `stop()`, so that a
 * backing can be mounted again after a power loss.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, onTestFinished } from 'vitest';

export const powerlossFsBinary = fileURLToPath(
  new URL('../../tools/powerloss-fs/target/release/powerloss-fs', import.meta.url),
);

/** The `stats` reply. */
export interface PowerlossStats {
  readonly seed: number;
  readonly nodes: number;
  readonly dirty_files: number;
  readonly dirty_pages: number;
  readonly pending_names: number;
  readonly writes: number;
  readonly bytes_written: number;
  readonly fsyncs: number;
  readonly fsyncdirs: number;
  readonly failed_fsyncs: number;
  /** How many file fsyncs from now the armed failure is (0: none armed). */
  readonly fail_fsync_armed: number;
}

/** The `lose-power` reply: what the power loss let through and what it dropped. */
export interface PowerLoss {
  readonly torn: boolean;
  readonly torn_pages_written: number;
  readonly dropped_pages: number;
  readonly dropped_names: number;
}

export interface PowerlossFs {
  /** Where the file system is mounted: the directory to run the code under test in. */
  readonly mount: string;
  /** The backing directory: after a power loss, exactly what survived. */
  readonly backing: string;
  /** The control socket. */
  readonly control: string;
  readonly seed: number;
  readonly pid: number;
  /**
   * Drops everything unsynced, detaches the mount (files still open on it fail with ENOTCONN
   * from then on) and waits for the daemon to exit. `torn`: a seeded random subset of the
   * unsynced 4 KiB pages of files with a durable name reaches the backing files first.
   */
  losePower(torn?: boolean): Promise<PowerLoss>;
  /** The `n`th file fsync/fdatasync from now (1 = the next) fails with EIO and drops that file's unsynced data. */
  failFsync(n: number): Promise<void>;
  /** Makes everything durable, like sync(1). */
  sync(): Promise<void>;
  stats(): Promise<PowerlossStats>;
  /** Sends one control line and returns the reply after `ok` (throws on `error …`). */
  command(line: string): Promise<string>;
  /**
   * A clean unmount: everything pending is written out first (as a real unmount would), then the
   * mount is detached and the daemon ends (killed if files left open keep it alive). Safe to call
   * again, and after a power loss.
   */
  stop(): Promise<void>;
  /** What the daemon wrote on stderr. */
  log(): string;
}

export interface PowerlossFsOptions {
  /** Chooses the pages a torn power loss lets through; the default is fixed, so runs repeat. */
  readonly seed?: number;
  /** An existing backing directory (such as one that survived a power loss) instead of a new one. */
  readonly backing?: string;
}

const live = new Set<PowerlossFs>();
const temporary: string[] = [];

afterAll(async () => {
  for (const instance of [...live]) await instance.stop();
  for (const directory of temporary.splice(0)) {
    if (!mountedUnder(directory)) fs.rmSync(directory, { recursive: true, force: true });
  }
});

/** Whether anything is mounted at or below `directory` (then it must not be removed recursively). */
function mountedUnder(directory: string): boolean {
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  return mounts.some((line) => {
    const point = line.split(' ')[4];
    return point !== undefined && (point === directory || point.startsWith(`${directory}/`));
  });
}

function isMounted(point: string): boolean {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((line) => line.split(' ')[4] === point);
}

/** Lazily unmounts `point`, with fusermount3 where it is installed, else umount -l. */
export function unmountLazily(point: string): void {
  const result = spawnSync('fusermount3', ['-uz', point], { stdio: 'ignore' });
  if (result.error && isMounted(point)) spawnSync('umount', ['-l', point], { stdio: 'ignore' });
}

function exited(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(false);
    }, timeoutMs);
    const onExit = () => {
      clearTimeout(timer);
      resolve(true);
    };
    child.once('exit', onExit);
  });
}

function send(control: string, line: string, timeoutMs = 60_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection(control);
    let received = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`powerloss-fs: no reply to ${JSON.stringify(line)} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(`${line}\n`));
    socket.on('data', (chunk: string) => {
      received += chunk;
      const end = received.indexOf('\n');
      if (end < 0) return;
      clearTimeout(timer);
      socket.end();
      const reply = received.slice(0, end);
      if (reply === 'ok' || reply.startsWith('ok ')) resolve(reply.slice(3));
      else reject(new Error(`powerloss-fs: ${JSON.stringify(line)} failed: ${reply}`));
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** Starts the daemon on a fresh mount point (and a fresh backing directory unless one is given). */
export async function startPowerlossFs(options: PowerlossFsOptions = {}): Promise<PowerlossFs> {
  if (!fs.existsSync(powerlossFsBinary)) {
    throw new Error(`${powerlossFsBinary} is missing: run scripts/test-tools.sh (it builds tools/powerloss-fs)`);
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'powerloss-fs-'));
  temporary.push(root);
  const mount = path.join(root, 'mount');
  fs.mkdirSync(mount);
  let backing: string;
  if (options.backing === undefined) {
    backing = path.join(root, 'backing');
    fs.mkdirSync(backing);
  } else {
    backing = fs.realpathSync(options.backing);
  }
  const control = path.join(root, 'control.sock');
  const seed = options.seed ?? 1;

  const child = spawn(
    powerlossFsBinary,
    // --exit-with-parent: should this worker die, the daemon detaches its mount and exits too.
    ['--backing', backing, '--mount', mount, '--control', control, '--seed', String(seed), '--exit-with-parent'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-64 * 1024);
  });
  await new Promise<void>((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => fail(new Error('it did not report ready within 10 s')), 10_000);
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      unmountLazily(mount);
      reject(new Error(`powerloss-fs did not start: ${error.message}\n${stderr}`));
    };
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      stdout += chunk;
      if (stdout.split('\n').includes('ready')) {
        clearTimeout(timer);
        child.off('exit', onExit);
        resolve();
      }
    });
    const onExit = (code: number | null, signal: string | null) =>
      fail(new Error(`it exited (${code ?? signal}) before it was ready`));
    child.once('exit', onExit);
    child.once('error', fail);
  });
  if (!isMounted(mount)) throw new Error(`powerloss-fs reported ready, but ${mount} is not mounted\n${stderr}`);

  let stopped: Promise<void> | undefined;
  const instance: PowerlossFs = {
    mount,
    backing,
    control,
    seed,
    pid: child.pid!,
    async losePower(torn = false) {
      const reply = await send(control, torn ? 'lose-power torn' : 'lose-power');
      if (!(await exited(child, 10_000))) child.kill('SIGKILL');
      unmountLazily(mount); // the daemon detached already; this only makes sure
      return JSON.parse(reply) as PowerLoss;
    },
    async failFsync(n) {
      await send(control, `fail-fsync ${n}`);
    },
    async sync() {
      await send(control, 'sync');
    },
    async stats() {
      return JSON.parse(await send(control, 'stats')) as PowerlossStats;
    },
    command: (line) => send(control, line),
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          // A clean unmount writes everything out: done here first, so that files still open on
          // the mount (which keep the session alive after the unmount) do not prevent it.
          await send(control, 'sync', 30_000).catch(() => undefined);
        }
        unmountLazily(mount);
        if (!(await exited(child, 1_000))) {
          child.kill('SIGKILL');
          await exited(child, 5_000);
        }
        if (isMounted(mount)) unmountLazily(mount);
        fs.rmSync(control, { force: true });
        live.delete(instance);
      })();
      return stopped;
    },
    log: () => stderr,
  };
  live.add(instance);
  try {
    onTestFinished(() => instance.stop());
  } catch {
    // Started outside a test (beforeAll): stopped when the file finishes.
  }
  return instance;
}
