/**
 * Runs the built `streamstack` command line as scripts do, and parses what it printed: NDJSON
 * lines from stdout and the typed error line from stderr.
 */
import { spawnSync } from 'node:child_process';

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
  });
  const lines = result.stdout
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
  const errorLine = result.stderr.split('\n').find((line) => line.startsWith('{"error"'));
  const error = errorLine ? (JSON.parse(errorLine) as { error: Record<string, unknown> }).error : undefined;
  return { status: result.status, lines, stderr: result.stderr, error };
}
