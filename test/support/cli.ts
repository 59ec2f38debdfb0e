/**
 * Runs the built `streamstack` command line as scripts do, and parses what it printed: NDJSON
 * lines from stdout and the typed error line from stderr.
 */
import { execFile, spawnSync } from 'node:child_process';

export const cliBinary = new URL('../../packages/cli/bin/streamstack.js', import.meta.url).pathname;

export interface CliResult {
  readonly status: number | null;
  readonly lines: Record<string, unknown>[];
  readonly stderr: string;
  /** The `error` object of the JSON error line on stderr, when there is one. */
  readonly error: Record<string, unknown> | undefined;
}

/** Runs `streamstack --data DATA ARGS…` with `input` on stdin and `env` added to the environment. */
export function cli(data: string, args: readonly string[], input = '', env: Record<string, string> = {}): CliResult {
  const result = spawnSync(process.execPath, [cliBinary, '--data', data, ...args], {
    input,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    // The default (1 MiB) cut a read of 4,000 records (1.05 MB) short now and then: the child is
    // stopped once its output passes it, mid-line, depending on how the pipe's reads fell.
    maxBuffer: 256 * 1024 * 1024,
  });
  return parsed(result);
}

/**
 * `cli` without blocking this process while the command runs (no input): for a command that
 * talks to a server this process runs.
 */
export function cliAsync(data: string, args: readonly string[], env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cliBinary, '--data', data, ...args],
      { encoding: 'utf8', env: { ...process.env, ...env }, maxBuffer: 256 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const status = error ? (typeof error.code === 'number' ? error.code : null) : 0;
        resolve(parsed({ status, stdout, stderr }));
      },
    );
  });
}

function parsed(result: { status: number | null; stdout: string; stderr: string }): CliResult {
  const lines = result.stdout
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  const errorLine = result.stderr.split('\n').find((line) => line.startsWith('{"error"'));
  const error = errorLine ? (JSON.parse(errorLine) as { error: Record<string, unknown> }).error : undefined;
  return { status: result.status, lines, stderr: result.stderr, error };
}
