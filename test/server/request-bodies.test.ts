/**
 * What an NDJSON request body costs the server: it is parsed as it arrives, so a body of more
 * records than a batch holds is refused as soon as the count passes the limit, holding a batch's
 * records at most; and only so many body bytes (NDJSON or a Durable Stream's) are read at once,
 * the rest wait or get 503.
 *
 * Memory is measured on a `streamstack serve` process of its own (the built CLI), as the growth
 * of its peak resident set (VmHWM in /proc) over the request, so nothing else in the test
 * process counts.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { cliBinary } from '../support/cli.js';
import { call, ndjson, startServer } from '../support/server.js';
import { temporaryDirectory } from '../support/store.js';

/** Peak resident bytes of process `pid` so far. */
function peakResidentBytes(pid: number): number {
  const match = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(match![1]) * 1024;
}

/** POSTs `body` and resolves with the status and the parsed answer. */
function post(url: string, path: string, body: Buffer): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${url}${path}`,
      { method: 'POST', headers: { 'content-type': 'application/x-ndjson', 'content-length': body.length } },
      (response) => {
        let text = '';
        response.on('data', (chunk) => (text += String(chunk)));
        response.on('end', () =>
          resolve({ status: response.statusCode!, json: text === '' ? undefined : JSON.parse(text) }),
        );
      },
    );
    // The server may answer before the whole body is sent, and close: the answer is what counts.
    request.on('error', reject);
    request.end(body);
  });
}

/** 1.75 million tiny record lines, about 60 MB. */
function tinyLinesBody(): Buffer {
  const line = Buffer.from('{"payload":"0123456789","key":"k"}\n');
  const count = 1_750_000;
  const body = Buffer.allocUnsafe(line.length * count);
  for (let at = 0; at < body.length; at += line.length) line.copy(body, at);
  return body;
}

/**
 * A server whose body gate holds 4 KiB (waits 300 ms), its feed `f`, a record line of 100
 * bytes of payload, a body of 30 of them (3.5 KB), and `send(body)`: a raw socket that has sent
 * the request head for that body and `body`, the client's to finish or cut.
 */
async function gatedServer() {
  const { url } = await startServer({ bodyLimit: 4096, bodyBytesInFlightMax: 4096, bodyWaitMs: 300 });
  await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
  const record = ndjson({ payload: 'x'.repeat(100) });
  const whole = Buffer.from(record.repeat(30));
  const { hostname, port } = new URL(url);
  const send = (part: Buffer, headers = ''): net.Socket => {
    const socket = net.connect(Number(port), hostname);
    socket.write(
      `POST /v1/feeds/f/records HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/x-ndjson\r\nContent-Length: ${whole.length}\r\n${headers}\r\n`,
    );
    socket.write(part);
    return socket;
  };
  return { url, record, whole, send };
}

describe('NDJSON request bodies', () => {
  it('refuses a body of more records than a batch holds while reading it, within a small multiple of its size in memory, alone or four at once', async () => {
    const child = spawn(process.execPath, [cliBinary, '--data', temporaryDirectory(), 'serve', '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let output = '';
        const look = (chunk: Buffer) => {
          output += String(chunk);
          const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
          if (match) resolve(match[1]!);
        };
        child.stdout.on('data', look);
        child.stderr.on('data', look);
        child.once('exit', () => reject(new Error(`serve exited: ${output}`)));
        setTimeout(() => reject(new Error(`no listening line: ${output}`)), 20_000);
      });
      expect((await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } })).status).toBe(201);
      expect((await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'warm' }) })).status).toBe(201);
      const body = tinyLinesBody();
      const before = peakResidentBytes(child.pid!);
      const started = Date.now();
      const refused = await post(url, '/v1/feeds/f/records', body);
      const oneSeconds = (Date.now() - started) / 1000;
      const oneGrowth = peakResidentBytes(child.pid!) - before;
      const mb = (bytes: number) => Math.round(bytes / 1e6);
      console.log(
        `body ${mb(body.length)} MB: peak RSS ${mb(before)} MB, +${mb(oneGrowth)} MB in ${oneSeconds.toFixed(1)} s`,
      );
      expect([refused.status, refused.json?.error?.code]).toEqual([400, 'INVALID_ARGUMENT']);
      // Before bodies were parsed as streams one such body cost 8 times its size, four 12 times.
      expect(oneGrowth).toBeLessThan(body.length);
      // Refused while reading: the error says where it stopped.
      expect([refused.json.error.recordsMax, refused.json.error.line]).toEqual([100_000, 100_001]);
      const beforeFour = peakResidentBytes(child.pid!);
      const startedFour = Date.now();
      const four = await Promise.all([1, 2, 3, 4].map(() => post(url, '/v1/feeds/f/records', body)));
      const fourSeconds = (Date.now() - startedFour) / 1000;
      const fourGrowth = peakResidentBytes(child.pid!) - beforeFour;
      expect(four.map((answer) => answer.json?.error?.code)).toEqual([
        'INVALID_ARGUMENT',
        'INVALID_ARGUMENT',
        'INVALID_ARGUMENT',
        'INVALID_ARGUMENT',
      ]);
      console.log(`four at once: +${mb(fourGrowth)} MB in ${fourSeconds.toFixed(1)} s`);
      // Nothing was appended: the refused bodies changed nothing.
      expect((await call(url, 'GET', '/v1/feeds/f')).json.head.commit).toBe(1);
      expect(fourGrowth).toBeLessThan(2 * body.length);
    } finally {
      // Waited for: the server closes its store on the way out (writing to the data directory),
      // and the directory is removed after the test.
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
    }
  }, 120_000);

  it('parses only so many body bytes at once: a body beyond them waits, then gets 503 UNAVAILABLE with Retry-After', async () => {
    const { url, record, whole, send } = await gatedServer();
    // A slow client: half its body now, the rest later. It holds its 3.5 KB reservation.
    const slow = send(whole.subarray(0, 1000), 'Connection: close\r\n');
    let slowAnswer = '';
    slow.on('data', (chunk) => (slowAnswer += String(chunk)));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const busy = await call(url, 'POST', '/v1/feeds/f/records', { body: record.repeat(10) });
    expect([busy.status, busy.json?.error?.code, busy.headers.get('retry-after')]).toEqual([503, 'UNAVAILABLE', '1']);
    // A Durable Stream's body takes its room in the same gate.
    const streamBusy = await call(url, 'PUT', '/ds/v1/stream/s', {
      body: 'y'.repeat(1000),
      headers: { 'content-type': 'text/plain' },
    });
    expect([streamBusy.status, streamBusy.json?.error?.code, streamBusy.headers.get('retry-after')]).toEqual([
      503,
      'UNAVAILABLE',
      '1',
    ]);
    // Connection: close: the server ends the connection after its answer (a client's half-close
    // would abort the request instead, so the socket is not ended here).
    const closed = new Promise((resolve) => slow.on('close', resolve));
    slow.write(whole.subarray(1000));
    await closed;
    expect(slowAnswer).toMatch(/^HTTP\/1\.1 201/);
    // The room is free again, and a body within the limit is never refused for it alone.
    expect((await call(url, 'POST', '/v1/feeds/f/records', { body: record.repeat(10) })).status).toBe(201);
    expect((await call(url, 'GET', '/v1/feeds/f')).json.head.commit).toBe(2);
    expect((await call(url, 'GET', '/ds/v1/stream/s?offset=-1')).status).toBe(404);
  });

  it('lets go of a body its client cut short: its room in the gate is free again, and nothing of it is appended', async () => {
    const { url, record, whole, send } = await gatedServer();
    for (let attempt = 0; attempt < 3; attempt++) {
      // Half a body, then the connection is gone: the server never gets the rest.
      const cut = send(whole.subarray(0, 1000));
      await new Promise((resolve) => setTimeout(resolve, 50));
      cut.destroy();
      // Had the cut body kept its 3.5 KB reservation, this one would wait and get 503.
      const after = await call(url, 'POST', '/v1/feeds/f/records', { body: record.repeat(10) });
      expect(after.status).toBe(201);
    }
    const head = (await call(url, 'GET', '/v1/feeds/f')).json.head;
    expect([head.commit, head.lastPosition]).toEqual([3, 30]);
  });
});
