/**
 * Progress bars (docs/cli.md, Progress): the commands a user waits for draw a bar on stderr when
 * it is a terminal — run here under `script`, which gives the command a pseudo-terminal — that
 * ends at 100%; with stderr in a pipe, or with `--quiet`, they write nothing to stderr at all.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli, cliBinary } from '../support/cli.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const records = 3000;

/** NDJSON input of `count` keyed records, about 300 bytes each. */
function inputLines(count: number): string {
  return Array.from(
    { length: count },
    (_, index) =>
      `${JSON.stringify({ payload: `${'p'.repeat(250)} ${index}`, key: `k${index % 40}`, version: index })}\n`,
  ).join('');
}

/**
 * A data directory whose feed `f` has many small sealed segments (written through the engine with
 * small segments: the command line's are large), so that compactions have work to do.
 */
async function dataWithSegments(): Promise<string> {
  const data = temporaryDirectory();
  const store = await openStore(data);
  const feed = await store.createFeed('f');
  const lines = inputLines(records).trimEnd().split('\n');
  for (let at = 0; at < lines.length; at += 50) {
    await feed.append(
      lines.slice(at, at + 50).map((line) => JSON.parse(line) as { payload: string; key: string; version: number }),
    );
  }
  await store.close();
  return data;
}

/** Runs `streamstack --data DATA ARGS` under a pseudo-terminal; returns what the terminal showed (stderr: stdout goes to a file). */
function onTerminal(
  data: string,
  args: string,
  stdin = '',
): { status: number | null; terminal: string; stdout: string } {
  const out = path.join(temporaryDirectory(), 'stdout');
  const command = `${process.execPath} ${cliBinary} --data ${data} ${args}${stdin} > ${out}`;
  const result = spawnSync('script', ['-qfec', command, '/dev/null'], { input: '', encoding: 'utf8', timeout: 60_000 });
  return { status: result.status, terminal: result.stdout, stdout: fs.readFileSync(out, 'utf8') };
}

/** The commands with a bar, as run against the directory `dataWithSegments` made. */
const commands: { name: string; args: (data: string) => string }[] = [
  { name: 'verify', args: () => 'verify f' },
  { name: 'compact', args: () => 'compact f' },
  { name: 'compact --keys', args: () => 'compact f --keys --horizon 40' },
  { name: 'trim', args: () => 'trim f --before 20' },
  { name: 'export', args: (data) => `export f --format parquet --out ${path.join(data, 'export')}` },
];

describe('progress bars', () => {
  for (const command of commands) {
    it(`${command.name}: a bar on a terminal that ends at 100%; nothing on stderr in a pipe or with --quiet`, async () => {
      const data = await dataWithSegments();
      const shown = onTerminal(data, command.args(data));
      expect(shown.status, shown.terminal).toBe(0);
      expect(shown.terminal).toContain(`${command.name} [`);
      expect(shown.terminal).toContain('100%');
      expect(shown.terminal).toMatch(/\/s \|/);
      // The result line is on stdout as ever, and no bar is mixed into it.
      expect(JSON.parse(shown.stdout.trim())).toMatchObject({ feed: 'f' });

      const quietData = await dataWithSegments();
      const quiet = onTerminal(quietData, `${command.args(quietData)} --quiet`);
      expect(quiet.status, quiet.terminal).toBe(0);
      expect(quiet.terminal).toBe('');

      const pipedData = await dataWithSegments();
      const piped = cli(pipedData, command.args(pipedData).split(' '));
      expect(piped.status, piped.stderr).toBe(0);
      expect(piped.stderr).toBe('');
    }, 120_000);
  }

  it('append: bytes of a regular file on stdin to 100%; records and their rate from a pipe; nothing with --quiet or piped stderr', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const input = path.join(temporaryDirectory(), 'records.ndjson');
    fs.writeFileSync(input, inputLines(records));

    const fromFile = onTerminal(data, 'append f --commit-every 500', ` < ${input}`);
    expect(fromFile.status, fromFile.terminal).toBe(0);
    expect(fromFile.terminal).toContain('append [');
    expect(fromFile.terminal).toContain('100%');
    expect(fromFile.terminal).toContain(' KiB of ');
    expect(fromFile.stdout.trim().split('\n')).toHaveLength(records / 500);

    // From a pipe there is no total: what is done, and the rate.
    const out = path.join(temporaryDirectory(), 'stdout');
    const piped = spawnSync(
      'script',
      ['-qfec', `cat ${input} | ${process.execPath} ${cliBinary} --data ${data} append f > ${out}`, '/dev/null'],
      { input: '', encoding: 'utf8', timeout: 60_000 },
    );
    expect(piped.status, piped.stdout).toBe(0);
    expect(piped.stdout).toContain(`append ${records} records | `);
    expect(piped.stdout).not.toContain('%');

    expect(onTerminal(data, 'append f -q', ` < ${input}`).terminal).toBe('');
    const noTerminal = cli(data, ['append', 'f'], inputLines(records));
    expect(noTerminal.status).toBe(0);
    expect(noTerminal.stderr).toBe('');
    expect(cli(data, ['feed', 'info', 'f']).lines[0]).toMatchObject({ records: 4 * records });
  }, 120_000);
});
