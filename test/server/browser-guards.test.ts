/**
 * What keeps a web page from driving a server on loopback (docs/http.md, Browsers): the Host
 * check against DNS rebinding, the Origin check against cross-site writes, CORS only for the
 * origins configured, and writes only in their documented content types. Requests go through
 * node:http, since fetch does not let a caller set Host.
 */
import http from 'node:http';
import { describe, expect, it } from 'vitest';
import { startServer } from '../support/server.js';

interface RawAnswer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
  readonly json: any;
}

/** One request with exactly the headers given (Host included). */
function send(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<RawAnswer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const request = http.request({ hostname, port, method, path, headers }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => {
        let json: unknown;
        try {
          json = text === '' ? undefined : JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: response.statusCode!, headers: response.headers, text, json });
      });
    });
    request.on('error', reject);
    request.end(body);
  });
}

const evil = { host: 'evil.example', origin: 'http://evil.example' };

describe('browser guards', () => {
  it('refuses a DNS-rebound request (a Host that is not this server) on every route, and changes nothing', async () => {
    const { url } = await startServer();
    const host = new URL(url).host;
    expect(
      (await send(url, 'PUT', '/ds/v1/stream/victim', { 'content-type': 'text/plain', host }, 'kept')).status,
    ).toBe(201);
    const deleted = await send(url, 'DELETE', '/ds/v1/stream/victim', { host: evil.host, origin: evil.origin });
    expect([deleted.status, deleted.json?.error]).toEqual([
      403,
      expect.objectContaining({ code: 'FORBIDDEN', reason: 'host', host: evil.host }),
    ]);
    for (const [method, path] of [
      ['GET', '/v1/feeds'],
      ['POST', '/v1/feeds/victim/trim'],
      ['GET', '/metrics'],
      ['GET', '/no/such/route'],
    ]) {
      const refused = await send(url, method!, path!, { host: `${evil.host}:${new URL(url).port}` });
      expect([refused.status, refused.json?.error?.code, refused.json?.error?.reason], `${method} ${path}`).toEqual([
        403,
        'FORBIDDEN',
        'host',
      ]);
    }
    // The stream and its feed are still there, with their data.
    const read = await send(url, 'GET', '/ds/v1/stream/victim?offset=-1', { host });
    expect([read.status, read.text]).toEqual([200, 'kept']);
    // Loopback names and addresses are this server.
    for (const name of ['localhost', 'app.localhost', '127.0.0.1', '[::1]']) {
      expect((await send(url, 'GET', '/health', { host: `${name}:${new URL(url).port}` })).status, name).toBe(200);
    }
  });

  it('refuses a cross-site write (an Origin not allowed) with the error shape, sends no CORS headers, and changes nothing', async () => {
    const { url } = await startServer();
    const host = new URL(url).host;
    await send(url, 'PUT', '/ds/v1/stream/victim', { 'content-type': 'text/plain', host }, 'kept');
    await send(url, 'POST', '/v1/feeds', { 'content-type': 'application/json', host }, '{"name":"orders"}');
    // A simple cross-site POST: text/plain, no preflight; and a DELETE after a preflight.
    const appended = await send(
      url,
      'POST',
      '/ds/v1/stream/victim',
      { host, origin: evil.origin, 'content-type': 'text/plain' },
      'injected',
    );
    expect([appended.status, appended.json?.error]).toEqual([
      403,
      expect.objectContaining({ code: 'FORBIDDEN', reason: 'origin', origin: evil.origin }),
    ]);
    const deleted = await send(url, 'DELETE', '/ds/v1/stream/victim', { host, origin: evil.origin });
    expect([deleted.status, deleted.json?.error?.reason]).toEqual([403, 'origin']);
    const trimmed = await send(
      url,
      'POST',
      '/v1/feeds/orders/records',
      { host, origin: evil.origin, 'content-type': 'application/x-ndjson' },
      '{"payload":"x"}\n',
    );
    expect([trimmed.status, trimmed.json?.error?.reason]).toEqual([403, 'origin']);
    const preflight = await send(url, 'OPTIONS', '/ds/v1/stream/victim', {
      host,
      origin: evil.origin,
      'access-control-request-method': 'DELETE',
    });
    expect([preflight.status, preflight.json?.error?.code, preflight.headers['access-control-allow-origin']]).toEqual([
      403,
      'FORBIDDEN',
      undefined,
    ]);
    // A read is answered, but without CORS headers a page cannot see it.
    const read = await send(url, 'GET', '/ds/v1/stream/victim?offset=-1', { host, origin: evil.origin });
    expect([
      read.status,
      read.text,
      read.headers['access-control-allow-origin'],
      read.headers['cross-origin-resource-policy'],
    ]).toEqual([200, 'kept', undefined, 'same-origin']);
    expect((await send(url, 'GET', '/v1/feeds/orders', { host })).json.head).toBeNull();
    // The server's own origin is no cross-site caller.
    expect(
      (
        await send(
          url,
          'POST',
          '/ds/v1/stream/victim',
          { host, origin: `http://${host}`, 'content-type': 'text/plain' },
          '!',
        )
      ).status,
    ).toBe(204);
  });

  it('takes writes only in their documented content types: text/plain and form bodies get 415', async () => {
    const { url } = await startServer();
    const host = new URL(url).host;
    await send(url, 'POST', '/v1/feeds', { 'content-type': 'application/json', host }, '{"name":"orders"}');
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
      const refused = await send(
        url,
        'POST',
        '/v1/feeds/orders/records',
        { host, 'content-type': type },
        '{"payload":"x"}\n',
      );
      expect([refused.status, refused.json?.error?.code], type).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
      const created = await send(url, 'POST', '/v1/feeds', { host, 'content-type': type }, '{"name":"other"}');
      expect([created.status, created.json?.error?.code], type).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    }
    expect((await send(url, 'GET', '/v1/feeds/orders', { host })).json.head).toBeNull();
    expect((await send(url, 'GET', '/v1/feeds/other', { host })).status).toBe(404);
    // JSON Lines is NDJSON by another name.
    expect(
      (
        await send(
          url,
          'POST',
          '/v1/feeds/orders/records',
          { host, 'content-type': 'application/jsonl' },
          '{"payload":"x"}\n',
        )
      ).status,
    ).toBe(201);
  });

  it('serves configured hosts and CORS origins', async () => {
    const { url } = await startServer({ allowedHosts: ['streams.internal'], corsOrigins: ['https://app.example'] });
    const port = new URL(url).port;
    const host = `streams.internal:${port}`;
    const origin = 'https://app.example';
    const preflight = await send(url, 'OPTIONS', '/ds/v1/stream/s', {
      host,
      origin,
      'access-control-request-method': 'PUT',
      'access-control-request-headers': 'content-type',
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe(origin);
    expect(preflight.headers['access-control-allow-methods']).toContain('PUT');
    const created = await send(url, 'PUT', '/ds/v1/stream/s', { host, origin, 'content-type': 'text/plain' }, 'a');
    expect([
      created.status,
      created.headers['access-control-allow-origin'],
      created.headers['cross-origin-resource-policy'],
    ]).toEqual([201, origin, 'cross-origin']);
    expect(created.headers['access-control-expose-headers']).toContain('Stream-Next-Offset');
    // Another origin still cannot write, nor another host reach the server.
    expect(
      (await send(url, 'POST', '/ds/v1/stream/s', { host, origin: evil.origin, 'content-type': 'text/plain' }, 'b'))
        .status,
    ).toBe(403);
    expect((await send(url, 'GET', '/health', { host: `other.internal:${port}` })).status).toBe(403);
  });
});
