/**
 * `streamstack export` (docs/cli.md): one NDJSON summary line on stdout, files and a manifest in
 * the directory, no progress bar when stderr is not a terminal, `--continue` picking up where a
 * previous export stopped, and a typed error with nothing written for a bad cursor.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { temporaryDirectory } from '../support/store.js';

function lines(count: number, from: number): string {
  return Array.from({ length: count }, (_, n) =>
    JSON.stringify({ payload: `record ${from + n}`, key: `k${(from + n) % 7}` }),
  ).join('\n');
}

describe('streamstack export', () => {
  it('exports a range, prints the manifest summary as one line, stays quiet on a non-terminal stderr, and continues from a manifest', () => {
    const data = temporaryDirectory();
    expect(cli(data, ['feed', 'create', 'f']).status).toBe(0);
    for (let commit = 0; commit < 6; commit++)
      expect(cli(data, ['append', 'f'], lines(10, commit * 10)).status).toBe(0);
    const first = path.join(data, 'export-1');
    const result = cli(data, ['export', 'f', '--format', 'parquet', '--out', first, '--up-to', '4']);
    expect(result.status).toBe(0);
    // Not a terminal: no progress bar, nothing at all on stderr.
    expect(result.stderr).toBe('');
    expect(result.lines).toEqual([
      {
        feed: 'f',
        out: first,
        format: 'parquet',
        mode: 'raw',
        after: 0,
        upTo: 4,
        records: 40,
        files: 1,
        bytes: expect.any(Number),
      },
    ]);
    const manifest = JSON.parse(fs.readFileSync(path.join(first, 'manifest.json'), 'utf8')) as {
      files: { name: string; bytes: number }[];
    };
    expect(result.lines[0].bytes).toBe(fs.statSync(path.join(first, manifest.files[0].name)).size);

    const second = path.join(data, 'export-2');
    const continued = cli(data, ['export', 'f', '--continue', first, '--out', second]);
    expect(continued.lines).toEqual([
      {
        feed: 'f',
        out: second,
        format: 'parquet',
        mode: 'raw',
        after: 4,
        upTo: 6,
        records: 20,
        files: 1,
        bytes: expect.any(Number),
      },
    ]);
    const clash = cli(data, [
      'export',
      'f',
      '--continue',
      first,
      '--format',
      'arrow',
      '--out',
      path.join(data, 'export-3'),
    ]);
    expect(clash.status).toBe(1);
    expect(clash.error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(fs.existsSync(path.join(data, 'export-3'))).toBe(false);
  });

  it('fails typed, writing nothing, for a cursor beyond the head, and as usage for an unknown format', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    cli(data, ['append', 'f'], lines(3, 0));
    const out = path.join(data, 'out');
    const beyond = cli(data, ['export', 'f', '--format', 'ndjson', '--out', out, '--after', '2']);
    expect(beyond.status).toBe(1);
    expect(beyond.error).toMatchObject({ code: 'CURSOR_OUT_OF_RANGE' });
    expect(cli(data, ['export', 'f', '--format', 'csv', '--out', out]).status).toBe(2);
    expect(cli(data, ['export', 'f', '--out', out]).error).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(fs.existsSync(out)).toBe(false);
  });
});
