import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { hashToken, parseTokenFile, type TokenGrant } from '../../packages/server/src/index.js';
import { call, ndjson, startServer } from '../support/server.js';

const grants: TokenGrant[] = [
  {
    name: 'ingest',
    sha256: hashToken('ingest-secret'),
    feeds: ['orders', 'audit.*'],
    operations: ['write', 'lease', 'read'],
  },
  { name: 'reader', sha256: hashToken('reader-secret'), feeds: ['orders'], operations: ['read'] },
  { name: 'ops', sha256: hashToken('ops-secret'), feeds: ['*'], operations: ['admin', 'read'] },
];
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('bearer tokens', () => {
  it('refuses requests without a known token (401) and outside a token’s feeds or operations (403)', async () => {
    const { url } = await startServer({ tokens: grants });
    expect(
      (await call(url, 'POST', '/v1/feeds', { body: { name: 'orders' }, headers: bearer('ops-secret') })).status,
    ).toBe(201);
    await call(url, 'POST', '/v1/feeds', { body: { name: 'audit.eu' }, headers: bearer('ops-secret') });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'payroll' }, headers: bearer('ops-secret') });
    const anonymous = await call(url, 'GET', '/v1/feeds/orders');
    expect([anonymous.status, anonymous.json.error.code]).toEqual([401, 'UNAUTHENTICATED']);
    expect((await call(url, 'GET', '/v1/feeds/orders', { headers: bearer('guess') })).status).toBe(401);
    // By prefix: audit.* covers audit.eu; payroll is nobody's but ops'.
    expect(
      (
        await call(url, 'POST', '/v1/feeds/audit.eu/records', {
          body: ndjson({ payload: 'a' }),
          headers: bearer('ingest-secret'),
        })
      ).status,
    ).toBe(201);
    const outside = await call(url, 'POST', '/v1/feeds/payroll/records', {
      body: ndjson({ payload: 'a' }),
      headers: bearer('ingest-secret'),
    });
    expect([outside.status, outside.json.error]).toEqual([
      403,
      expect.objectContaining({ code: 'FORBIDDEN', operation: 'write', feed: 'payroll' }),
    ]);
    const readOnly = await call(url, 'POST', '/v1/feeds/orders/records', {
      body: ndjson({ payload: 'a' }),
      headers: bearer('reader-secret'),
    });
    expect(readOnly.status).toBe(403);
    expect(
      (await call(url, 'POST', '/v1/feeds/orders/lease', { body: { holder: 'r' }, headers: bearer('reader-secret') }))
        .status,
    ).toBe(403);
    expect((await call(url, 'GET', '/v1/feeds/orders/records', { headers: bearer('reader-secret') })).status).toBe(200);
    expect(
      (await call(url, 'POST', '/v1/feeds', { body: { name: 'mine' }, headers: bearer('ingest-secret') })).status,
    ).toBe(403);
    expect(
      (await call(url, 'PUT', '/v1/feeds/orders/retention', { body: {}, headers: bearer('ingest-secret') })).status,
    ).toBe(403);
    // A list shows only the feeds a token may read.
    expect(
      (await call(url, 'GET', '/v1/feeds', { headers: bearer('ingest-secret') })).lines.map((line) => line.name),
    ).toEqual(['audit.eu', 'orders']);
    expect((await call(url, 'GET', '/v1/feeds', { headers: bearer('ops-secret') })).lines).toHaveLength(3);
    expect((await call(url, 'GET', '/metrics', { headers: bearer('reader-secret') })).status).toBe(403);
    expect((await call(url, 'GET', '/metrics', { headers: bearer('ops-secret') })).status).toBe(200);
  });

  it('never writes a bearer token or a fencing token to the log', async () => {
    let log = '';
    const stream = new Writable({
      write(chunk, _encoding, done) {
        log += String(chunk);
        done();
      },
    });
    const { url } = await startServer({
      tokens: grants,
      logger: {
        level: 'trace',
        stream,
        serializers: {
          req: (request: { headers: unknown; method: string }) => ({
            method: request.method,
            headers: request.headers,
          }),
        },
      },
    });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'orders' }, headers: bearer('ops-secret') });
    const lease = await call(url, 'POST', '/v1/feeds/orders/lease', {
      body: { holder: 'i' },
      headers: bearer('ingest-secret'),
    });
    await call(url, 'POST', '/v1/feeds/orders/streams', {
      body: {},
      headers: { ...bearer('ingest-secret'), 'ss-fencing-token': lease.json.token },
    });
    await call(url, 'GET', '/v1/feeds/orders', { headers: bearer('wrong-secret') });
    expect(log).toContain('"method":"POST"');
    expect(log).toContain('[Redacted]');
    for (const secret of ['ops-secret', 'ingest-secret', 'wrong-secret', lease.json.token])
      expect(log).not.toContain(secret);
  });

  it('checks a token file whole', () => {
    expect(parseTokenFile({ tokens: grants })).toHaveLength(3);
    expect(() =>
      parseTokenFile({ tokens: [{ name: 'x', sha256: 'short', feeds: ['*'], operations: ['read'] }] }),
    ).toThrow(/sha256/);
    expect(() =>
      parseTokenFile({ tokens: [{ name: 'x', sha256: hashToken('t'), feeds: ['*'], operations: ['delete'] }] }),
    ).toThrow(/operations/);
    expect(() => parseTokenFile([])).toThrow(/tokens/);
  });

  it('without tokens listens on loopback only', async () => {
    const { server } = await startServer();
    await expect(server.listen({ host: '0.0.0.0', port: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it('shows a token on /metrics only the feeds it covers, and process-wide series only to an unscoped admin', async () => {
    const scoped: TokenGrant[] = [
      ...grants,
      { name: 'audit-ops', sha256: hashToken('audit-ops-secret'), feeds: ['audit.*'], operations: ['admin', 'write'] },
      { name: 'orders-ops', sha256: hashToken('orders-ops-secret'), feeds: ['orders'], operations: ['admin'] },
    ];
    const { url } = await startServer({ tokens: scoped });
    for (const name of ['orders', 'audit.eu', 'payroll']) {
      await call(url, 'POST', '/v1/feeds', { body: { name }, headers: bearer('ops-secret') });
      await call(url, 'POST', `/v1/feeds/${name}/records`, {
        body: ndjson({ payload: 'a' }),
        headers: bearer('ingest-secret'),
      });
      await call(url, 'POST', `/v1/feeds/${name}/subscriptions`, {
        body: { name: 's' },
        headers: bearer('ops-secret'),
      });
    }
    await call(url, 'POST', '/v1/feeds/payroll/records', {
      body: ndjson({ payload: 'b' }),
      headers: bearer('ops-secret'),
    });
    const all = await call(url, 'GET', '/metrics', { headers: bearer('ops-secret') });
    expect(all.text).toContain('feed="payroll"');
    expect(all.text).toContain('process_cpu_user_seconds_total');
    const audit = await call(url, 'GET', '/metrics', { headers: bearer('audit-ops-secret') });
    expect(audit.status).toBe(200);
    expect(audit.text).toContain('streamstack_subscription_lag_commits{feed="audit.eu",subscription="s"}');
    expect(audit.text).not.toContain('feed="orders"');
    expect(audit.text).not.toContain('feed="payroll"');
    // Process-wide series (latency by route, Node's own) say what every token's requests did.
    expect(audit.text).not.toContain('process_cpu_user_seconds_total');
    expect(audit.text).not.toContain('streamstack_http_request_duration_seconds');
    const orders = await call(url, 'GET', '/metrics', { headers: bearer('orders-ops-secret') });
    expect(orders.text).toContain('feed="orders"');
    expect(orders.text).not.toMatch(/feed="(audit\.eu|payroll)"/);
  });
});
