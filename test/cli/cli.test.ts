/**
 * The command line as scripts use it (docs/cli.md): NDJSON on stdout, a JSON error on stderr with
 * exit code 1, exit code 2 for bad usage. Runs the built `streamstack` binary.
 */

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { storeFormatVersion } from '../../packages/engine/src/index.js';
import { cli, cliBinary } from '../support/cli.js';
import { temporaryDirectory } from '../support/store.js';

function errorOf(stderr: string): { code: string; message: string } {
  const line = stderr.split('\n').find((candidate) => candidate.startsWith('{"error"'));
  expect(line, stderr).toBeDefined();
  return (JSON.parse(line!) as { error: { code: string; message: string } }).error;
}

describe('streamstack command line', () => {
  it('deletes a feed: it leaves the list, its name can be created again, and an unknown one is FEED_NOT_FOUND', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'orders']);
    cli(data, ['feed', 'create', 'audit']);
    expect(cli(data, ['append', 'orders'], '{"payload":"a"}\n{"payload":"b"}\n').status).toBe(0);
    const deleted = cli(data, ['feed', 'delete', 'orders']);
    expect(deleted.status).toBe(0);
    expect(deleted.lines).toEqual([{ feed: 'orders', deleted: true }]);
    expect(cli(data, ['feed', 'list']).lines.map((line) => line.feed)).toEqual(['audit']);
    const info = cli(data, ['feed', 'info', 'orders']);
    expect(info.status).toBe(1);
    expect(info.error).toMatchObject({ code: 'FEED_NOT_FOUND', feed: 'orders' });
    const again = cli(data, ['feed', 'delete', 'orders']);
    expect(again.status).toBe(1);
    expect(again.error).toMatchObject({ code: 'FEED_NOT_FOUND', feed: 'orders' });
    expect(cli(data, ['feed', 'create', 'orders']).lines[0]).toMatchObject({ feed: 'orders', commits: 0, records: 0 });
    expect(cli(data, ['read', 'orders']).lines).toEqual([]);
  });

  it('forks a feed at a commit: the fork holds the source up to it and lives apart after', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'orders']);
    for (const payload of ['a', 'b', 'c']) cli(data, ['append', 'orders'], `{"payload":"${payload}"}\n`);
    const forked = cli(data, ['feed', 'fork', 'orders', 'trial', '--at', '2']);
    expect(forked.lines).toEqual([expect.objectContaining({ feed: 'trial', commits: 2 })]);
    cli(data, ['append', 'trial'], '{"payload":"t"}\n');
    expect(cli(data, ['read', 'trial']).lines.map((line) => line.payload)).toEqual(['a', 'b', 't']);
    expect(cli(data, ['read', 'orders']).lines.map((line) => line.payload)).toEqual(['a', 'b', 'c']);
    const late = cli(data, ['feed', 'fork', 'orders', 'late', '--at', '7']);
    expect([late.status, late.error?.code]).toEqual([1, 'CURSOR_OUT_OF_RANGE']);
  });

  it('runs a producer session: lease, stream, batches, seal, one-shot append, commits, verify', () => {
    const data = temporaryDirectory();
    expect(cli(data, ['feed', 'create', 'orders']).lines[0]).toMatchObject({ feed: 'orders', commits: 0 });
    const lease = cli(data, ['lease', 'acquire', 'orders', '--holder', 'me', '--ttl-ms', '600000']).lines[0];
    expect(lease).toMatchObject({ epoch: 1 });
    const token = lease.token as string;
    const stream = cli(data, ['stream', 'open', 'orders', '--token', token, '--message', 'hour 1']).lines[0]
      .stream as string;
    const input =
      '{"payload":"a","key":"k1","type":"t","tags":["x"]}\n\n{"payload":{"n":2}}\n{"payloadBase64":"AP8="}\n';
    expect(cli(data, ['append', 'orders', '--stream', stream, '--token', token], input).lines).toEqual([
      { stream, firstSeq: 1, lastSeq: 3 },
    ]);
    const mismatch = cli(
      data,
      ['append', 'orders', '--stream', stream, '--token', token, '--expected-seq', '1'],
      '{"payload":"b"}\n',
    );
    expect(mismatch.status).toBe(1);
    expect(errorOf(mismatch.stderr)).toMatchObject({ code: 'SEQ_MISMATCH' });
    const sealed = cli(data, ['stream', 'seal', 'orders', stream, '--token', token]);
    expect(sealed.lines[0]).toEqual({
      feed: 'orders',
      commit: 1,
      stream,
      parent: null,
      records: 3,
      firstPosition: 1,
      lastPosition: 3,
      openedAt: expect.any(Number),
      sealedAt: expect.any(Number),
      message: 'hour 1',
    });
    const withoutToken = cli(data, ['append', 'orders'], '{"payload":"c"}\n');
    expect(withoutToken.status).toBe(1);
    expect(errorOf(withoutToken.stderr).code).toBe('LEASE_HELD');
    expect(
      cli(data, ['append', 'orders', '--token', token, '--message', 'one-shot'], '{"payload":"c"}\n').lines[0],
    ).toMatchObject({
      commit: 2,
      parent: 1,
      firstPosition: 4,
      message: 'one-shot',
    });
    expect(cli(data, ['commits', 'orders']).lines.map((line) => line.commit)).toEqual([1, 2]);
    expect(cli(data, ['commits', 'orders', '--after', '1', '--limit', '5']).lines.map((line) => line.commit)).toEqual([
      2,
    ]);
    const verified = cli(data, ['verify']);
    expect(verified.status).toBe(0);
    expect(verified.lines[0]).toMatchObject({ feed: 'orders', ok: true, commits: 2, records: 4 });
    expect(cli(data, ['feed', 'info', 'orders']).lines[0]).toMatchObject({
      feed: 'orders',
      commits: 2,
      lease: { epoch: 1 },
    });
    expect(cli(data, ['lease', 'release', 'orders', '--token', token]).status).toBe(0);
  });

  it('reports typed errors with exit code 1 and bad usage with exit code 2', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const missing = cli(data, ['commits', 'nope']);
    expect(missing.status).toBe(1);
    expect(errorOf(missing.stderr).code).toBe('FEED_NOT_FOUND');
    const badRecord = cli(data, ['append', 'f'], '{"payload":"ok"}\nnot json\n');
    expect(badRecord.status).toBe(1);
    expect(errorOf(badRecord.stderr)).toMatchObject({ code: 'INVALID_RECORD' });
    expect(cli(data, ['commits', 'f']).lines).toEqual([]);
    expect(cli(data, ['no-such-command']).status).toBe(2);
    expect(cli(data, ['commits', 'f', '--limit', 'ten']).status).toBe(2);
    expect(cli(data, ['lease', 'acquire', 'f']).status).toBe(2);
  });

  it('exits 1 from verify when a file is damaged', async () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    cli(data, ['append', 'f'], '{"payload":"precious bytes"}\n');
    const fs = await import('node:fs');
    const path = await import('node:path');
    const directory = path.join(data, 'feeds', 'f', 'history');
    const segment = fs.readdirSync(directory).find((name) => name.endsWith('.hist'));
    const file = path.join(directory, segment!);
    const bytes = fs.readFileSync(file);
    expect(bytes.indexOf('precious')).toBeGreaterThan(0);
    bytes[bytes.indexOf('precious')] ^= 1;
    fs.writeFileSync(file, bytes);
    const verified = cli(data, ['verify', 'f']);
    expect(verified.status).toBe(1);
    expect(verified.lines[0]).toMatchObject({ feed: 'f', ok: false });
    expect(errorOf(verified.stderr).code).toBe('CORRUPT');
  });

  it('reads in every mode and scope, looks keys up, and keeps subscriptions', () => {
    const data = temporaryDirectory();
    cli(data, ['feed', 'create', 'f']);
    const first =
      '{"payload":"a","key":"k","version":1,"type":"t","tags":["x","y"]}\n{"payload":"b","key":"k","version":2}\n{"payload":"a"}\n';
    cli(data, ['append', 'f'], first);
    cli(
      data,
      ['append', 'f'],
      '{"payload":"gone","key":"k2"}\n{"payload":"x","key":"k2","tombstone":true,"version":1}\n',
    );
    const payloads = (args: string[]) => cli(data, ['read', 'f', ...args]).lines.map((line) => line.payload);
    expect(payloads([])).toEqual(['a', 'b', 'a', 'gone', 'x']);
    expect(payloads(['--mode', 'dedup'])).toEqual(['a', 'b', 'gone', 'x']);
    expect(payloads(['--mode', 'latest'])).toEqual(['b']);
    expect(payloads(['--after', '1'])).toEqual(['gone', 'x']);
    expect(payloads(['--tag', 'x', '--tag', 'y'])).toEqual(['a']);
    expect(payloads(['--type', 't', '--type', 'other'])).toEqual(['a']);
    expect(payloads(['--limit', '2'])).toEqual(['a', 'b']);
    expect(payloads(['--commit', '2'])).toEqual(['gone', 'x']);
    const line = cli(data, ['read', 'f', '--commit', '1']).lines[0];
    expect(line).toMatchObject({
      feed: 'f',
      commit: 1,
      seq: 1,
      position: 1,
      payload: 'a',
      key: 'k',
      version: 1,
      type: 't',
      tags: ['x', 'y'],
    });
    expect(cli(data, ['get', 'f', 'k']).lines[0]).toMatchObject({ payload: 'b', version: 2, position: 2 });
    expect(cli(data, ['get', 'f', 'k2', '--as-of', '2']).status).toBe(1);
    const outOfRange = cli(data, ['read', 'f', '--after', '3']);
    expect(outOfRange.status).toBe(1);
    expect(errorOf(outOfRange.stderr).code).toBe('CURSOR_OUT_OF_RANGE');

    expect(cli(data, ['sub', 'create', 'f', 'billing']).lines[0]).toMatchObject({
      subscription: 'billing',
      cursor: 0,
      lag: { commits: 2, records: 5 },
    });
    const polled = cli(data, ['sub', 'poll', 'f', 'billing', '--max', '3']).lines;
    expect(polled.map((entry) => entry.payload ?? entry.cursor)).toEqual(['a', 'b', 'a', 1]);
    expect(cli(data, ['sub', 'advance', 'f', 'billing', '1']).lines[0]).toMatchObject({
      cursor: 1,
      lag: { commits: 1 },
    });
    expect(cli(data, ['sub', 'poll', 'f', 'billing']).lines.map((entry) => entry.payload ?? entry.cursor)).toEqual([
      'gone',
      'x',
      2,
    ]);
    const behind = cli(data, ['sub', 'advance', 'f', 'billing', '0']);
    expect(behind.status).toBe(1);
    expect(errorOf(behind.stderr).code).toBe('CURSOR_BEHIND');
    expect(cli(data, ['sub', 'list', 'f']).lines).toEqual([
      expect.objectContaining({ feed: 'f', subscription: 'billing', cursor: 1 }),
    ]);
  });

  it('prints its version, and says which kernels load here and the store format it reads', () => {
    const data = temporaryDirectory();
    const version = (JSON.parse(fs.readFileSync('packages/cli/package.json', 'utf8')) as { version: string }).version;
    for (const flag of ['--version', '-V']) {
      const printed = spawnSync(process.execPath, [cliBinary, flag], { encoding: 'utf8' });
      expect(printed.status).toBe(0);
      expect(printed.stdout.trim()).toBe(version);
    }
    for (const kernels of ['native', 'ts']) {
      const info = cli(data, ['info'], '', { STREAMSTACK_KERNELS: kernels });
      expect(info.status).toBe(0);
      expect(info.lines).toEqual([
        { version, node: process.versions.node, kernels, storeFormat: storeFormatVersion, data: fs.realpathSync(data) },
      ]);
    }
  });
});
