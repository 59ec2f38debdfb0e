/**
 * Durable Streams subscriptions beyond what the conformance suite checks (docs/http.md): the
 * state survives a restart (offsets, generation, the signing key in its file), a lease that runs
 * out wakes again and fences the old wake, a failed delivery is retried and reported, webhook
 * URLs are checked against request forgery, the glob, the reserved names, the wake stream that a
 * pattern never links, and the tokens the routes take.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { checkWebhookUrl, globMatches, retryDelayMs } from '../../packages/server/src/durable-subscription-config.js';
import { hashToken } from '../../packages/server/src/index.js';
import { durableStreamCall as ds, startServer } from '../support/server.js';
import { temporaryDirectory } from '../support/store.js';

interface Delivery {
  readonly body: any;
  readonly raw: string;
  readonly signature: string;
  readonly at: number;
}

/** A webhook receiver on 127.0.0.1 answering each delivery with `answer(n)` (status and JSON). */
async function receiver(answer: (n: number) => { status: number; body: unknown } = () => ({ status: 200, body: {} })) {
  const deliveries: Delivery[] = [];
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const { status, body } = answer(deliveries.length);
      deliveries.push({
        body: JSON.parse(raw),
        raw,
        signature: String(request.headers['webhook-signature']),
        at: Date.now(),
      });
      response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  receivers.push(server);
  return { url: `http://127.0.0.1:${port}/hook`, deliveries };
}
const receivers: http.Server[] = [];
afterEach(async () => {
  for (const server of receivers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function until<T>(probe: () => T | undefined | Promise<T | undefined>, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function control(
  url: string,
  method: string,
  name: string,
  body?: unknown,
  headers: Record<string, string> = {},
) {
  return ds(url, method, `__ds/${name}`, {
    headers: { 'content-type': 'application/json', ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

const json = { 'content-type': 'application/json' };

function verifies(delivery: Delivery, jwks: { keys: crypto.JsonWebKey[] }): boolean {
  const [, t, kid, signature] = /^t=(\d+),kid=([^,]+),ed25519=(.+)$/.exec(delivery.signature) ?? [];
  const key = jwks.keys.find((candidate) => (candidate as { kid?: string }).kid === kid);
  if (!key || !t) return false;
  const publicKey = crypto.createPublicKey({ key, format: 'jwk' });
  return crypto.verify(null, Buffer.from(`${t}.${delivery.raw}`), publicKey, Buffer.from(signature!, 'base64url'));
}

/**
 * A server with a webhook subscription `name` to stream `jobs`, whose wakes hold a 1 s lease, and
 * a first job in the stream: the receiver's deliveries begin.
 */
async function leasedJobs(name: string, answer?: Parameters<typeof receiver>[0]) {
  const hook = await receiver(answer);
  const { url } = await startServer();
  await control(url, 'PUT', `subscriptions/${name}`, {
    type: 'webhook',
    streams: ['jobs'],
    webhook: { url: hook.url },
    lease_ttl_ms: 1000,
  });
  await ds(url, 'PUT', 'jobs', { headers: json, body: '{"job":1}' });
  return hook;
}

describe('Durable Streams subscriptions', () => {
  it('keep their offsets, generation and signing key across a restart, and go on waking after it', async () => {
    const keyFile = path.join(temporaryDirectory(), 'webhook.pem');
    const hook = await receiver();
    const first = await startServer({ durableStreams: { webhookKeyFile: keyFile } });
    const kid = (await control(first.url, 'GET', 'jwks.json')).json.keys[0].kid;
    await ds(first.url, 'PUT', 'events/a', { headers: json, body: '{"n":0}' });
    const created = await control(first.url, 'PUT', 'subscriptions/keep', {
      type: 'webhook',
      pattern: 'events/*',
      webhook: { url: hook.url },
    });
    expect(created.status).toBe(201);
    // Existing streams are linked at their tails: nothing is pending, nothing is delivered.
    await ds(first.url, 'POST', 'events/a', { headers: json, body: '{"n":1}' });
    const wake = (await until(() => hook.deliveries[0])).body;
    expect(wake.generation).toBe(1);
    const tail = wake.streams[0].tail_offset;
    const callback = await fetch(wake.callback_url, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${wake.callback_token}` },
      body: JSON.stringify({
        wake_id: wake.wake_id,
        generation: 1,
        acks: [{ stream: 'events/a', offset: tail }],
        done: true,
      }),
    });
    expect([callback.status, await callback.json()]).toEqual([200, { ok: true, next_wake: false }]);
    await first.server.close();

    const second = await startServer({ directory: first.directory, durableStreams: { webhookKeyFile: keyFile } });
    const jwks = (await control(second.url, 'GET', 'jwks.json')).json;
    expect(jwks.keys[0].kid).toBe(kid);
    const view = (await control(second.url, 'GET', 'subscriptions/keep')).json;
    expect([view.generation, view.streams]).toEqual([1, [{ path: 'events/a', link_type: 'glob', acked_offset: tail }]]);
    await ds(second.url, 'PUT', 'events/b', { headers: json, body: '{"n":2}' });
    const next = await until(() => hook.deliveries[1]);
    expect(next.body.generation).toBe(2);
    expect(verifies(next, jwks)).toBe(true);
    const pending = next.body.streams.filter((stream: any) => stream.has_pending).map((stream: any) => stream.path);
    expect(pending).toEqual(['events/b']);
  });

  it('wake again with a new generation when a lease runs out, and fence the old wake', async () => {
    const hook = await leasedJobs('slow');
    const first = (await until(() => hook.deliveries[0])).body;
    const second = await until(() => hook.deliveries[1], 15_000);
    expect(second.body.generation).toBe(first.generation + 1);
    expect(second.at - hook.deliveries[0]!.at).toBeGreaterThanOrEqual(900);
    const stale = await fetch(first.callback_url, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${first.callback_token}` },
      body: JSON.stringify({ wake_id: first.wake_id, generation: first.generation, done: true }),
    });
    expect([stale.status, ((await stale.json()) as any).error.code]).toEqual([409, 'FENCED']);
    // A token of the current wake for another subscription or generation is no token of it.
    const forged = await fetch(second.body.callback_url, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${first.callback_token}` },
      body: JSON.stringify({ wake_id: second.body.wake_id, generation: second.body.generation, done: true }),
    });
    expect(forged.status).toBe(409);
  });

  it('wake again and retry when their timers fire before the wall clock reaches the time they wait for', async () => {
    // Timers run on a monotonic clock and `Date.now` on the wall clock, which may lag it: here
    // by 2%, so every lease and retry timer fires a little before its time on the wall clock.
    const realNow = Date.now;
    const start = realNow();
    const lagging = vi.spyOn(Date, 'now').mockImplementation(() => start + Math.floor((realNow() - start) * 0.98));
    try {
      const hook = await leasedJobs('lagging', (n) =>
        n === 1 ? { status: 500, body: {} } : { status: 200, body: {} },
      );
      // The first wake's lease runs out, the second wake's delivery fails, and its retry comes.
      const generations = [];
      for (let n = 0; n < 3; n++) generations.push((await until(() => hook.deliveries[n], 15_000)).body.generation);
      expect(generations).toEqual([1, 2, 3]);
    } finally {
      lagging.mockRestore();
    }
  });

  it('retry a failed delivery with backoff, report it as failed meanwhile, and recover', async () => {
    const hook = await receiver((n) => (n === 0 ? { status: 500, body: {} } : { status: 200, body: { done: true } }));
    const { url } = await startServer();
    await control(url, 'PUT', 'subscriptions/flaky', { type: 'webhook', streams: ['log'], webhook: { url: hook.url } });
    await ds(url, 'PUT', 'log', { headers: json, body: '{"x":1}' });
    await until(() => hook.deliveries[0]);
    expect(
      (
        await until(async () => {
          const view = (await control(url, 'GET', 'subscriptions/flaky')).json;
          return view.status === 'failed' ? view : undefined;
        })
      ).status,
    ).toBe('failed');
    const retried = await until(() => hook.deliveries[1], 15_000);
    expect(retried.at - hook.deliveries[0]!.at).toBeGreaterThanOrEqual(700);
    const view = await until(async () => {
      const found = (await control(url, 'GET', 'subscriptions/flaky')).json;
      return found.status === 'active' && found.streams[0].acked_offset !== '0000000000000000_0000000000000000'
        ? found
        : undefined;
    });
    expect(view.streams[0].acked_offset).toBe(retried.body.streams[0].tail_offset);
    // The schedule: doubling from 1 s to 60 s, each wait within 20% of it.
    expect([1, 2, 3, 7, 20].map((attempt) => retryDelayMs(attempt, () => 0.5))).toEqual([
      1000, 2000, 4000, 60000, 60000,
    ]);
    expect(retryDelayMs(1, () => 0)).toBe(800);
    expect(retryDelayMs(1, () => 1)).toBe(1200);
  });

  it('refuse webhook URLs that reach private networks, and take https and the localhost exception', async () => {
    for (const bad of [
      'http://10.0.0.1/hook',
      'https://10.0.0.1/hook',
      'https://192.168.1.20/hook',
      'https://172.16.0.1/hook',
      'https://169.254.169.254/latest',
      'https://[::1]/hook',
      'https://[fd00::1]/hook',
      'https://[::ffff:10.0.0.1]/hook',
      'http://example.com/hook',
      'https://user:secret@example.com/hook',
      'ftp://example.com/hook',
      'not a url',
    ]) {
      expect(() => checkWebhookUrl(bad), bad).toThrow(expect.objectContaining({ code: 'WEBHOOK_URL_REJECTED' }));
    }
    for (const good of [
      'https://example.com/hook',
      'http://localhost:8080/x',
      'http://127.0.0.7:9/x',
      'https://8.8.8.8/x',
    ]) {
      expect(checkWebhookUrl(good), good).toBe(new URL(good).toString());
    }
    const { url } = await startServer();
    const refused = await control(url, 'PUT', 'subscriptions/ssrf', {
      type: 'webhook',
      pattern: '*',
      webhook: { url: 'http://10.0.0.1/' },
    });
    expect([refused.status, refused.json.error.code]).toEqual([400, 'WEBHOOK_URL_REJECTED']);
    expect((await control(url, 'GET', 'subscriptions/ssrf')).status).toBe(404);
  });

  it('match globs by segment, keep __ds names for the protocol, and never link a pull-wake its own wake stream', async () => {
    expect(globMatches('events/*', 'events/a')).toBe(true);
    expect(globMatches('events/*', 'events/a/b')).toBe(false);
    expect(globMatches('events/**', 'events')).toBe(true);
    expect(globMatches('events/**', 'events/a/b')).toBe(true);
    expect(globMatches('**/x', 'a/b/x')).toBe(true);
    expect(globMatches('*', 'a/b')).toBe(false);
    const { url } = await startServer();
    const reserved = await ds(url, 'PUT', '__ds/mine', { headers: json });
    expect([reserved.status, reserved.json.error.code]).toEqual([400, 'INVALID_NAME']);
    await ds(url, 'PUT', 'wake/pool', { headers: json, body: '[]' });
    await control(url, 'PUT', 'subscriptions/all', {
      type: 'pull-wake',
      pattern: '**',
      wake_stream: 'wake/pool',
      lease_ttl_ms: 1000,
    });
    await ds(url, 'PUT', 'orders/1', { headers: json, body: '{"o":1}' });
    const events = await until(async () => {
      const read = (await ds(url, 'GET', 'wake/pool?offset=-1')).json;
      return read.length > 0 ? read : undefined;
    });
    expect(events).toEqual([
      expect.objectContaining({ type: 'wake', subscription_id: 'all', stream: 'orders/1', generation: 1 }),
    ]);
    const claim = (await control(url, 'POST', 'subscriptions/all/claim', { worker: 'w' })).json;
    expect(claim.streams.map((stream: any) => stream.path)).toEqual(['orders/1']);
    const tail = claim.streams[0].tail_offset;
    const ack = await control(
      url,
      'POST',
      'subscriptions/all/ack',
      {
        wake_id: claim.wake_id,
        generation: claim.generation,
        acks: [{ stream: 'orders/1', offset: tail }],
        done: true,
      },
      { authorization: `Bearer ${claim.token}` },
    );
    expect(ack.json).toEqual({ ok: true, next_wake: false });
    await new Promise((resolve) => setTimeout(resolve, 300));
    // The wake event went to a stream the pattern matches, yet woke nothing more.
    expect((await ds(url, 'GET', 'wake/pool?offset=-1')).json).toHaveLength(1);
    expect((await control(url, 'POST', 'subscriptions/all/claim', { worker: 'w' })).status).toBe(204);
  });

  it('need admin across every feed to manage one, read across feeds to claim, and the wake token alone to call back', async () => {
    const hook = await receiver();
    const grants = [
      { name: 'all', sha256: hashToken('all-secret'), feeds: ['*'], operations: ['admin', 'read', 'write'] as const },
      {
        name: 'events',
        sha256: hashToken('events-secret'),
        feeds: ['ds.events*'],
        operations: ['admin', 'read', 'write'] as const,
      },
      { name: 'streams', sha256: hashToken('streams-secret'), feeds: ['ds.*'], operations: ['read'] as const },
    ];
    const { url } = await startServer({ tokens: grants });
    const as = (token: string) => ({ authorization: `Bearer ${token}` });
    const body = { type: 'webhook', pattern: 'events/*', webhook: { url: hook.url } };
    expect((await control(url, 'PUT', 'subscriptions/s', body, as('events-secret'))).status).toBe(403);
    expect((await control(url, 'PUT', 'subscriptions/s', body, as('all-secret'))).status).toBe(201);
    expect((await control(url, 'GET', 'subscriptions/s', undefined, as('events-secret'))).status).toBe(403);
    expect((await control(url, 'GET', 'jwks.json')).status).toBe(200);
    // The subscription's state is a feed outside the streams' namespace: a token for every stream does not read it.
    const state = (token: string) => fetch(`${url}/v1/feeds/dssub.s/records`, { headers: as(token) });
    expect((await state('streams-secret')).status).toBe(403);
    expect((await state('all-secret')).status).toBe(200);
    await ds(url, 'PUT', 'events/x', { headers: { ...json, ...as('events-secret') }, body: '{"e":1}' });
    const wake = (await until(() => hook.deliveries[0])).body;
    const answer = await fetch(wake.callback_url, {
      method: 'POST',
      headers: { ...json, authorization: `Bearer ${wake.callback_token}` },
      body: JSON.stringify({ wake_id: wake.wake_id, generation: wake.generation, done: true }),
    });
    expect(answer.status).toBe(200);
  });

  it('start a stream deleted and made again over from its new start, not from the offset acked before', async () => {
    const hook = await receiver(() => ({ status: 200, body: { done: true } }));
    const { url } = await startServer();
    await control(url, 'PUT', 'subscriptions/again', { type: 'webhook', streams: ['log'], webhook: { url: hook.url } });
    await ds(url, 'PUT', 'log', { headers: json, body: '[{"n":1},{"n":2}]' });
    await ds(url, 'POST', 'log', { headers: json, body: '{"n":3}' });
    const acked = async () => (await control(url, 'GET', 'subscriptions/again')).json.streams[0].acked_offset;
    const before = await until(async () => {
      const offset = await acked();
      return offset === (await ds(url, 'HEAD', 'log')).headers.get('stream-next-offset') ? offset : undefined;
    });
    expect(before).not.toBe('0000000000000000_0000000000000000');
    await ds(url, 'DELETE', 'log');
    await ds(url, 'PUT', 'log', { headers: json, body: '{"n":"new"}' });
    const woken = await until(() =>
      hook.deliveries.find(
        (delivery) =>
          delivery.body.streams[0].acked_offset === '0000000000000000_0000000000000000' && delivery.body.generation > 1,
      ),
    );
    expect(woken.body.streams[0]).toMatchObject({
      has_pending: true,
      tail_offset: '0000000000000001_0000000000000000',
    });
  });

  it('show and act on no change whose write failed: the state goes back to what its feed holds', async () => {
    const { url, store } = await startServer();
    await ds(url, 'PUT', 'wake/q', { headers: json, body: '[]' });
    await control(url, 'PUT', 'subscriptions/w', {
      type: 'pull-wake',
      streams: ['jobs/1'],
      wake_stream: 'wake/q',
      lease_ttl_ms: 60_000,
    });
    await ds(url, 'PUT', 'jobs/1', { headers: json, body: '{"j":1}' });
    await until(async () => ((await ds(url, 'GET', 'wake/q?offset=-1')).json.length > 0 ? true : undefined));
    const claim = (await control(url, 'POST', 'subscriptions/w/claim', { worker: 'w1' })).json;
    const before = (await control(url, 'GET', 'subscriptions/w')).json;
    // Another holder of the subscription feed's lease makes its next write fail.
    const feed = await store.feed('dssub.w');
    const { token } = await feed.acquireLease({ holder: 'in-the-way', ttlMs: 60_000 });
    const ack = () =>
      control(
        url,
        'POST',
        'subscriptions/w/ack',
        {
          wake_id: claim.wake_id,
          generation: claim.generation,
          acks: [{ stream: 'jobs/1', offset: claim.streams[0].tail_offset }],
          done: true,
        },
        { authorization: `Bearer ${claim.token}` },
      );
    const failed = await ack();
    expect(failed.status).toBeGreaterThanOrEqual(400);
    expect(failed.json.error.code).toBe('LEASE_HELD');
    expect((await control(url, 'GET', 'subscriptions/w')).json).toEqual(before);
    // The wake the failed ack would have ended is still held: once the write goes through, it ends.
    await feed.releaseLease({ token });
    expect((await ack()).json).toEqual({ ok: true, next_wake: false });
    const after = (await control(url, 'GET', 'subscriptions/w')).json;
    expect(after.streams[0].acked_offset).toBe(claim.streams[0].tail_offset);
    expect(after.streams[0].acked_offset).not.toBe(before.streams[0].acked_offset);
  });
});
