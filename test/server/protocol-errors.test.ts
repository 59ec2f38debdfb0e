/**
 * Every error answer is the error shape with a stable code, including the ones no route makes:
 * fastify's own (a bad URL escape, no such route, a body that does not parse) and Node's HTTP
 * parser's (headers too large, broken chunked encoding, an unknown method), answered by the
 * server's clientError handler. Raw requests go over a socket, since no HTTP client sends them.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { call, startServer } from '../support/server.js';

/** Writes `request` as it is and reads the whole answer (the server closes after an error). */
function rawExchange(url: string, request: string | Buffer): Promise<{ status: number; head: string; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.end(request));
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const split = answer.indexOf('\r\n\r\n');
      const head = answer.slice(0, split);
      let body = answer.slice(split + 4);
      // A chunked answer: keep the data of its chunks.
      if (/transfer-encoding: chunked/i.test(head))
        body = body.replace(/^[0-9a-f]+\r\n|\r\n[0-9a-f]+\r\n/gi, '').replace(/\r\n0\r\n\r\n$|\r\n$/, '');
      resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1]), head, body });
    });
  });
}

function codeOf(body: string): unknown {
  return (JSON.parse(body) as { error: { code: unknown } }).error.code;
}

describe('error answers outside the routes', () => {
  it('types fastify’s own errors: a bad URL escape, no such route, a body that does not parse, a body too large', async () => {
    const { url } = await startServer({ bodyLimit: 1024 });
    for (const path of ['/v1/feeds/%zz', '/v1/feeds/%E0%A4%A', '/ds/v1/stream/%zz']) {
      const answer = await call(url, 'GET', path);
      expect([answer.status, answer.json?.error?.code], path).toEqual([400, 'INVALID_ARGUMENT']);
    }
    const missing = await call(url, 'GET', '/v2/nothing');
    expect([missing.status, missing.json?.error?.code]).toEqual([404, 'NOT_FOUND']);
    const badJson = await call(url, 'POST', '/v1/feeds', {
      body: '{"name":',
      headers: { 'content-type': 'application/json' },
    });
    expect([badJson.status, badJson.json?.error?.code]).toEqual([400, 'INVALID_ARGUMENT']);
    const large = await call(url, 'POST', '/v1/feeds', { body: { name: 'x'.repeat(2000) } });
    expect([large.status, large.json?.error?.code]).toEqual([413, 'REQUEST_TOO_LARGE']);
  });

  it('types the HTTP parser’s errors: headers too large (431), broken chunked encoding and an unknown method (400)', async () => {
    const { url } = await startServer();
    const host = new URL(url).host;
    const huge = await rawExchange(
      url,
      `GET /health HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${'a'.repeat(100 * 1024)}\r\n\r\n`,
    );
    expect([huge.status, codeOf(huge.body)]).toEqual([431, 'HEADERS_TOO_LARGE']);
    expect(huge.head).toMatch(/content-type: application\/json/i);
    const chunked = await rawExchange(
      url,
      `POST /v1/feeds HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
    );
    expect([chunked.status, codeOf(chunked.body)]).toEqual([400, 'INVALID_ARGUMENT']);
    const method = await rawExchange(url, `FROB /health HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    expect([method.status, codeOf(method.body)]).toEqual([400, 'INVALID_ARGUMENT']);
    expect(JSON.parse(method.body).error.reason).toMatch(/^HPE_/);
    // The server still answers after them.
    expect((await call(url, 'GET', '/health')).status).toBe(200);
  });
});
