/**
 * Runs the children of the crash and power-loss tests: a script that prints one JSON line per
 * step (`"ready"` once it may be stopped) is started, and stopped — by SIGKILL, or by a power cut
 * and then SIGKILL — either a while after it is ready, or a few milliseconds after it starts the
 * `count`-th step of a kind the test aims at (a trim, a compaction). What it printed is parsed
 * into its lines: a line cut short by the stop is not an acknowledgement.
 */
import { spawn } from 'node:child_process';

export interface ChildStop {
  /** Stop this long after the aimed-at step starts, or (without `aimAt`) after ready. */
  readonly delayMs: number;
  /** Aim at the `count`-th line whose kind is `kind` after ready. */
  readonly aimAt?: { readonly kind: string; readonly count: number };
  /** Should the aimed-at steps not come, stop this long after ready anyway. */
  readonly fallbackMs: number;
  /**
   * A power cut: awaited before the child is killed, and only the lines printed before it
   * began count (the rest were never durable). Without one, the child is killed, and every
   * whole line it printed counts.
   */
  readonly cut?: () => Promise<unknown>;
}

/** Runs `script` with `args` and `env` until it is stopped as `stop` says; resolves its lines. */
export function runChild<Line>(
  script: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  stop: ChildStop,
): Promise<Line[]> {
  const child = spawn(process.execPath, [script, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let errors = '';
  let stopping = false;
  let stopped: Promise<string> | undefined;
  const parse = (text: string) =>
    text
      .split('\n')
      .slice(0, -1)
      .map((line) => JSON.parse(line) as Line);
  const begin = () => {
    if (stopping) return;
    stopping = true;
    stopped = (async () => {
      // What was printed before the cut is what the child was told was durable.
      const before = output;
      if (stop.cut) await stop.cut();
      child.kill('SIGKILL');
      return before;
    })();
  };
  return new Promise((resolve, reject) => {
    let ready = false;
    let seen = 0;
    let fallback: NodeJS.Timeout | undefined;
    const stopSoon = (delayMs: number) => {
      clearTimeout(fallback);
      setTimeout(begin, delayMs);
    };
    const marker = stop.aimAt ? `"kind":"${stop.aimAt.kind}"` : undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      const piece = chunk.toString();
      output += piece;
      if (!ready && output.includes('"ready"')) {
        ready = true;
        if (!marker) stopSoon(stop.delayMs);
        else fallback = setTimeout(begin, stop.fallbackMs);
      }
      if (ready && marker && !stopping) {
        seen += piece.split(marker).length - 1;
        if (seen >= stop.aimAt!.count) stopSoon(stop.delayMs);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(fallback);
      // After a power cut the child may fail on its own (its files are gone) before the kill.
      if (!stopping || (!stop.cut && signal !== 'SIGKILL')) {
        reject(
          new Error(`child ${script} ${args.join(' ')} exited with ${code ?? signal} before it was stopped: ${errors}`),
        );
        return;
      }
      void stopped!.then((before) => resolve(parse(stop.cut ? before : output)), reject);
    });
  });
}
