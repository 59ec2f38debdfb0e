/**
 * `streamstack append` takes any amount of input (docs/cli.md, Appending any amount of input):
 * read as a stream and cut into batches, one commit for the whole input (through an implicit
 * stream when it passes one batch), one commit per N records with `--commit-every`, and batches
 * into an open stream with `--stream`. A failure or a kill before the end leaves no commit.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { limits } from '../../packages/engine/src/index.js';
import { cli, cliBinary } from '../support/cli.js';
import { temporaryDirectory } from '../support/store.js';

/** `count` NDJSON record lines, written to a file (spawnSync's input would hold them twice). */
function linesFile(directory: string, count: number, bad?: number): string {
  const file = path.join(directory, `input-${count}.ndjson`);
  const out = fs.createWriteStream(file);
  const chunk: string[] = [];
  for (let index = 0; index < count; index++) {
    chunk.push(
      index === bad
        ? '{"payload": not json}'
        : `{"payload":"record ${index}","key":"k${index % 1000}","type":"t${index % 3}"}`,
    );
    if (chunk.length === 10_000) {
      out.write(`${chunk.join('\n')}\n`);
      chunk.length = 0;
    }
  }
  out.end(chunk.length > 0 ? `${chunk.join('\n')}\n` : '');
  return file;
}

async function written(file: string): Promise<void> {
  // The stream above finishes asynchronously; wait until its size stops changing.
  for (let previous = -1; ; ) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    const size = fs.statSync(file).size;
    if (size === previous && size > 0) return;
    previous = size;
  }
}

/** Runs the CLI with `file` as stdin; returns its exit code, stdout lines, stderr and peak RSS (KB, from /proc). */
function run(
  data: string,
  args: readonly string[],
  file: string,
): Promise<{ status: number | null; lines: Record<string, unknown>[]; stderr: string; peakKb: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cliBinary, '--data', data, ...args], {
      stdio: [fs.openSync(file, 'r'), 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let peakKb = 0;
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const sample = setInterval(() => {
      try {
        const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
        peakKb = Math.max(peakKb, Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0));
      } catch {
        // The process has exited between two samples.
      }
    }, 25);
    child.on('error', reject);
    child.on('close', (status) => {
      clearInterval(sample);
      resolve({
        status,
        lines: stdout
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => JSON.parse(line)),
        stderr,
        peakKb,
      });
    });
  });
}

describe('append of any amount of input', () => {
  it('appends 1.5 million lines in one call as one commit, and says how much memory it took', async () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const file = linesFile(data, 1_500_000);
    await written(file);
    const result = await run(data, ['append', 'f', '--message', 'bulk load'], file);
    expect(result.status, result.stderr).toBe(0);
    expect(result.lines).toEqual([
      expect.objectContaining({
        commit: 1,
        records: 1_500_000,
        firstPosition: 1,
        lastPosition: 1_500_000,
        message: 'bulk load',
      }),
    ]);
    console.log(`append of 1.5M lines: peak RSS ${Math.round(result.peakKb / 1024)} MB`);
    const commits = cli(data, ['commits', 'f']);
    expect(commits.lines).toHaveLength(1);
    // The last record is the last line, and the lease the command took for its stream is gone.
    expect(cli(data, ['read', 'f', '--after', '0', '--type', 't0', '--limit', '1']).lines[0]).toMatchObject({
      payload: 'record 0',
      position: 1,
    });
    expect(cli(data, ['get', 'f', 'k999']).lines[0]).toMatchObject({ payload: 'record 1499999', position: 1_500_000 });
    expect(cli(data, ['append', 'f'], '{"payload":"after"}\n').status).toBe(0);
  }, 180_000);

  it('appends into --stream a batch at a time, and --commit-every N makes one commit per N records', async () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const count = limits.batchRecordsMax * 2 + 7;
    const file = linesFile(data, count);
    await written(file);
    const token = cli(data, ['lease', 'acquire', 'f', '--holder', 'me', '--ttl-ms', '600000']).lines[0].token as string;
    const stream = cli(data, ['stream', 'open', 'f', '--token', token]).lines[0].stream as string;
    const appended = await run(
      data,
      ['append', 'f', '--stream', stream, '--token', token, '--expected-seq', '1'],
      file,
    );
    expect(appended.status, appended.stderr).toBe(0);
    expect(appended.lines).toEqual([{ stream, firstSeq: 1, lastSeq: count }]);
    expect(cli(data, ['stream', 'seal', 'f', stream, '--token', token]).lines[0]).toMatchObject({ records: count });

    const every = await run(
      data,
      ['append', 'f', '--token', token, '--commit-every', String(limits.batchRecordsMax)],
      file,
    );
    expect(every.status, every.stderr).toBe(0);
    expect(every.lines.map((line) => line.records)).toEqual([limits.batchRecordsMax, limits.batchRecordsMax, 7]);
    const usage = cli(data, ['append', 'f', '--commit-every', String(limits.batchRecordsMax + 1)], '{"payload":"x"}\n');
    expect(usage.status).toBe(2);
  }, 180_000);

  it('a bad line after many batches fails with INVALID_RECORD and leaves no commit, no open stream and no lease', async () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const file = linesFile(data, 200_000, 150_000);
    await written(file);
    const result = await run(data, ['append', 'f'], file);
    expect(result.status).toBe(1);
    expect(JSON.parse(result.stderr.trim().split('\n').at(-1)!).error).toMatchObject({
      code: 'INVALID_RECORD',
      line: 150_001,
    });
    expect(cli(data, ['commits', 'f']).lines).toEqual([]);
    // Its stream was aborted and its lease released: the next append needs no token.
    const next = cli(data, ['append', 'f'], '{"payload":"next"}\n');
    expect(next.status, next.stderr).toBe(0);
    expect(next.lines[0]).toMatchObject({ commit: 1, records: 1 });
  }, 120_000);

  it('a kill in the middle of a large append leaves no commit', async () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const child = spawn(process.execPath, [cliBinary, '--data', data, 'append', 'f'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    // Enough batches to open the implicit stream and append to it, then the input stalls.
    // Writing to a killed process's stdin fails with EPIPE, which is expected here.
    child.stdin.on('error', () => undefined);
    const lines = Array.from(
      { length: limits.batchRecordsMax / 2 },
      (_, index) => `{"payload":"record ${index}"}`,
    ).join('\n');
    for (let batch = 0; batch < 6; batch++) child.stdin.write(`${lines}\n`);
    const wal = path.join(data, 'feeds', 'f', 'wal');
    // A file listed may be renamed before its stat (a segment's `.tmp` going into place): it
    // counts as nothing this time, and under its new name the next.
    const walBytes = () =>
      fs.existsSync(wal)
        ? fs
            .readdirSync(wal)
            .reduce((sum, name) => sum + (fs.statSync(path.join(wal, name), { throwIfNoEntry: false })?.size ?? 0), 0)
        : 0;
    const deadline = Date.now() + 30_000;
    while (walBytes() < 1_000_000 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(walBytes()).toBeGreaterThanOrEqual(1_000_000);
    child.kill('SIGKILL');
    await new Promise((resolve) => child.on('close', resolve));
    expect(cli(data, ['commits', 'f']).lines).toEqual([]);
    expect(cli(data, ['read', 'f']).lines).toEqual([]);
  }, 120_000);

  it('on a terminal with nothing piped in, says how to use it before it waits, and types the empty input', async () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    // `script` gives the command a pseudo-terminal for stdin; Ctrl-D then ends its input.
    const child = spawn('script', ['-qec', `${process.execPath} ${cliBinary} --data ${data} append f`, '/dev/null'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const deadline = Date.now() + 20_000;
    while (!output.includes('reading NDJSON records from stdin') && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 50));
    expect(output).toContain('end with Ctrl-D');
    child.stdin.write('\u0004');
    const status = await new Promise((resolve) => child.on('close', resolve));
    expect(status).toBe(1);
    expect(output).toContain('"code":"INVALID_ARGUMENT"');
    expect(cli(data, ['commits', 'f']).lines).toEqual([]);
  }, 60_000);
});
