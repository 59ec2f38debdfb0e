import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { hashToken } from '../../packages/server/src/index.js';
import { cli, cliBinary } from '../support/cli.js';
import { startServe } from '../support/serve-process.mjs';
import { temporaryDirectory } from '../support/store.js';

/** Starts `streamstack serve` and resolves with its URL once its log says it listens. */
function serve(data: string, args: string[] = []) {
  return startServe(data, args);
}

describe('streamstack serve', () => {
  it('serves the data directory with bearer tokens made by token create, logs JSON without them, and drains on SIGTERM', async () => {
    const data = temporaryDirectory();
    const tokens = path.join(temporaryDirectory(), 'tokens.json');
    // `token create` makes the token and the entry that holds only its hash.
    const created = cli(data, [
      'token',
      'create',
      '--name',
      'ops',
      '--feed',
      '*',
      '--op',
      'admin',
      '--op',
      'read',
      '--op',
      'write',
    ]);
    expect(created.status).toBe(0);
    const { token: secret, entry } = created.lines[0] as { token: string; entry: Record<string, unknown> };
    expect(entry).toEqual({
      name: 'ops',
      sha256: hashToken(secret),
      feeds: ['*'],
      operations: ['admin', 'read', 'write'],
    });
    expect(cli(data, ['token', 'create', '--name', 'x', '--feed', 'a', '--op', 'fly']).status).toBe(2);
    fs.writeFileSync(tokens, JSON.stringify({ tokens: [entry] }));
    const server = serve(data, ['--tokens', tokens]);
    const url = await server.url;
    const headers = { authorization: `Bearer ${secret}`, 'content-type': 'application/json' };
    expect(
      (await fetch(`${url}/v1/feeds`, { method: 'POST', headers, body: JSON.stringify({ name: 'f' }) })).status,
    ).toBe(201);
    const appended = await fetch(`${url}/v1/feeds/f/records`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/x-ndjson' },
      body: '{"payload":"over http"}\n',
    });
    expect(appended.status).toBe(201);
    expect((await fetch(`${url}/v1/feeds/f`)).status).toBe(401);
    // The directory is locked while the server runs.
    expect(cli(data, ['feed', 'create', 'g']).error).toMatchObject({ code: 'LOCKED' });
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    const lines = server
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(lines.length).toBeGreaterThan(2);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(server.output()).not.toContain(secret);
    // Drained and closed: the lock is gone and the append is there.
    expect(cli(data, ['read', 'f']).lines.map((line) => line.payload)).toEqual(['over http']);
  });

  it('refuses to listen beyond loopback without a token file', async () => {
    const server = spawn(
      process.execPath,
      [cliBinary, '--data', temporaryDirectory(), 'serve', '--host', '0.0.0.0', '--port', '0'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    server.stderr.on('data', (chunk) => (stderr += String(chunk)));
    const code = await new Promise((resolve) => server.once('exit', resolve));
    expect(code).toBe(1);
    expect(stderr).toContain('"code":"INVALID_ARGUMENT"');
  });

  it('answers only Host names it is given (--allow-host) and sends CORS headers only to --cors origins', async () => {
    const server = serve(temporaryDirectory(), ['--allow-host', 'streams.internal', '--cors', 'https://app.example']);
    const url = await server.url;
    const port = new URL(url).port;
    const get = (host: string, origin?: string) =>
      new Promise<{ status: number; allowOrigin: string | undefined; body: string }>((resolve, reject) => {
        const request = http.get(
          { hostname: '127.0.0.1', port, path: '/health', headers: { host, ...(origin ? { origin } : {}) } },
          (response) => {
            let body = '';
            response.on('data', (chunk) => (body += String(chunk)));
            response.on('end', () =>
              resolve({
                status: response.statusCode!,
                allowOrigin: response.headers['access-control-allow-origin'] as string | undefined,
                body,
              }),
            );
          },
        );
        request.on('error', reject);
      });
    expect(await get(`streams.internal:${port}`, 'https://app.example')).toMatchObject({
      status: 200,
      allowOrigin: 'https://app.example',
    });
    expect(await get(`127.0.0.1:${port}`, 'https://elsewhere.example')).toMatchObject({
      status: 200,
      allowOrigin: undefined,
    });
    const refused = await get(`evil.example:${port}`);
    expect([refused.status, JSON.parse(refused.body).error.code]).toEqual([403, 'FORBIDDEN']);
    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
  });

  it('signs Durable Streams webhooks with the key of --webhook-key, made owner-only and kept across restarts', async () => {
    const data = temporaryDirectory();
    const keyFile = path.join(temporaryDirectory(), 'webhook.pem');
    const kidOf = async (url: string) =>
      ((await (await fetch(`${url}/ds/v1/stream/__ds/jwks.json`)).json()) as { keys: { kid: string }[] }).keys[0]!.kid;
    const first = serve(data, ['--webhook-key', keyFile]);
    const kid = await kidOf(await first.url);
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600);
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    const second = serve(data, ['--webhook-key', keyFile]);
    expect(await kidOf(await second.url)).toBe(kid);
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    // Without the flag the key is the process's own: another one each start.
    const third = serve(data);
    expect(await kidOf(await third.url)).not.toBe(kid);
    third.child.kill('SIGTERM');
    expect(await third.exited).toBe(0);
  });
});
