/**
 * `streamstack serve` as a process of its own, for the tests and the benches: started on a free
 * port, its URL read from its log once it listens, stopped (or paused) by signal.
 */
import { spawn } from 'node:child_process';

const cliBinary = new URL('../../packages/cli/bin/streamstack.js', import.meta.url).pathname;

/**
 * Starts `streamstack [global…] serve --port 0 [args…]` over data directory `data`.
 *
 * @param {string} data
 * @param {readonly string[]} [args]
 * @param {{ globalArgs?: readonly string[], env?: Record<string, string> }} [options]
 * @returns {{ child: import('node:child_process').ChildProcess, url: Promise<string>, exited: Promise<number | null>, output(): string }}
 */
export function startServe(data, args = [], options = {}) {
  const child = spawn(
    process.execPath,
    [cliBinary, '--data', data, ...(options.globalArgs ?? []), 'serve', '--port', '0', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...options.env } },
  );
  let output = '';
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  const url = new Promise((resolve, reject) => {
    child.stdout.on('data', (chunk) => {
      output += String(chunk);
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match) resolve(match[1]);
    });
    child.stderr.on('data', (chunk) => {
      output += String(chunk);
    });
    exited.then(() => reject(new Error(`serve exited early: ${output}`)));
  });
  // A caller that failed before awaiting the URL must not leave an unhandled rejection behind.
  url.catch(() => undefined);
  return { child, url, exited, output: () => output };
}
