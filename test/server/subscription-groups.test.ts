/**
 * Subscription groups over HTTP: a group created with PUT, workers claiming (with a long-poll),
 * acknowledging and giving work back, parked work read from the dead-letter feed, typed errors,
 * and scopes: creating a group needs write on its feed and its dead-letter feed, a worker needs
 * only read, and no token reaches a group of a feed it does not cover.
 */
import { describe, expect, it } from 'vitest';
import { hashToken, type TokenGrant } from '../../packages/server/src/index.js';
import { call, ndjson, startServer } from '../support/server.js';

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('subscription groups over HTTP', () => {
  it('shares a feed among workers: claim, long-poll, ack, nack, park', async () => {
    const { url } = await startServer();
    expect((await call(url, 'POST', '/v1/feeds', { body: { name: 'jobs' } })).status).toBe(201);
    for (const payload of ['a', 'b']) {
      await call(url, 'POST', '/v1/feeds/jobs/records', { body: ndjson({ payload, key: payload }) });
    }
    const created = await call(url, 'PUT', '/v1/feeds/jobs/groups/senders', {
      body: { maxDeliveries: 1, orderedBy: 'key' },
    });
    expect([created.status, created.json]).toEqual([
      200,
      expect.objectContaining({ name: 'senders', cursor: 0, orderedBy: 'key', deadLetter: 'jobs.senders.parked' }),
    ]);

    const first = await call(url, 'POST', '/v1/feeds/jobs/groups/senders/claim', { body: { worker: 'w1' } });
    expect(first.json.claims).toEqual([
      expect.objectContaining({
        commit: expect.objectContaining({ commit: 1 }),
        delivery: 1,
        records: [expect.objectContaining({ payload: 'a', key: 'a' })],
      }),
    ]);
    const second = await call(url, 'POST', '/v1/feeds/jobs/groups/senders/claim', { body: { worker: 'w2', max: 5 } });
    expect(second.json.claims.map((claim: { commit: { commit: number } }) => claim.commit.commit)).toEqual([2]);

    // A long-poll claim is answered by the commit appended while it waits.
    const waiting = call(url, 'POST', '/v1/feeds/jobs/groups/senders/claim', {
      body: { worker: 'w3', waitMs: 10_000 },
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    await call(url, 'POST', '/v1/feeds/jobs/records', { body: ndjson({ payload: 'c', key: 'c' }) });
    expect((await waiting).json.claims.map((claim: { commit: { commit: number } }) => claim.commit.commit)).toEqual([
      3,
    ]);

    const wrong = await call(url, 'POST', '/v1/feeds/jobs/groups/senders/ack', { body: { worker: 'w2', commit: 1 } });
    expect([wrong.status, wrong.json.error]).toEqual([
      409,
      expect.objectContaining({ code: 'CLAIM_NOT_HELD', holder: 'w1' }),
    ]);
    expect(
      (await call(url, 'POST', '/v1/feeds/jobs/groups/senders/ack', { body: { worker: 'w1', commit: 1 } })).json,
    ).toEqual({
      commit: 1,
      acked: true,
    });
    const nack = await call(url, 'POST', '/v1/feeds/jobs/groups/senders/nack', {
      body: { worker: 'w2', commit: 2, reason: 'smtp down' },
    });
    expect(nack.json).toEqual({ commit: 2, outcome: 'parked', deliveries: 1 });
    const parked = await call(url, 'GET', '/v1/feeds/jobs.senders.parked/records');
    expect(parked.lines).toEqual([
      expect.objectContaining({ payload: 'b', key: 'b', tags: ['parked:jobs/senders/2'] }),
    ]);

    await call(url, 'POST', '/v1/feeds/jobs/groups/senders/ack', { body: { worker: 'w3', commit: 3 } });
    const info = await call(url, 'GET', '/v1/feeds/jobs/groups/senders');
    expect(info.json).toEqual(expect.objectContaining({ cursor: 3, acked: 2, parked: 1, held: 0 }));
    expect((await call(url, 'GET', '/v1/feeds/jobs/groups')).lines.map((line) => line.name)).toEqual(['senders']);
    const metrics = (await call(url, 'GET', '/metrics')).text;
    expect(metrics).toContain('streamstack_subscription_group{feed="jobs",group="senders",count="acked"} 2');
    expect(metrics).toContain('streamstack_subscription_group{feed="jobs",group="senders",count="parked"} 1');
    expect(metrics).toContain('streamstack_subscription_lag_commits{feed="jobs",subscription="senders"} 0');

    const missing = await call(url, 'POST', '/v1/feeds/jobs/groups/nobody/claim', { body: { worker: 'w1' } });
    expect([missing.status, missing.json.error.code]).toEqual([404, 'SUBSCRIPTION_NOT_FOUND']);
    const bad = await call(url, 'POST', '/v1/feeds/jobs/groups/senders/claim', { body: { worker: 'w1', max: 0 } });
    expect([bad.status, bad.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
    const moved = await call(url, 'POST', '/v1/feeds/jobs/subscriptions/senders/advance', { body: { cursor: 3 } });
    expect([moved.status, moved.json.error.code]).toEqual([409, 'SUBSCRIPTION_GROUPED']);

    expect((await call(url, 'DELETE', '/v1/feeds/jobs/groups/senders')).json).toEqual({
      feed: 'jobs',
      group: 'senders',
      deleted: true,
    });
    expect((await call(url, 'GET', '/v1/feeds/jobs/subscriptions')).lines).toEqual([]);
  });

  it('needs write on the feed and its dead-letter feed to create a group, and read to work in one', async () => {
    const grants: TokenGrant[] = [
      { name: 'ops', sha256: hashToken('ops'), feeds: ['*'], operations: ['admin', 'write', 'read'] },
      { name: 'owner', sha256: hashToken('owner'), feeds: ['jobs', 'jobs.*'], operations: ['write', 'read'] },
      { name: 'narrow', sha256: hashToken('narrow'), feeds: ['jobs'], operations: ['write', 'read'] },
      { name: 'worker', sha256: hashToken('worker'), feeds: ['jobs'], operations: ['read'] },
      { name: 'stranger', sha256: hashToken('stranger'), feeds: ['other'], operations: ['write', 'read'] },
    ];
    const { url } = await startServer({ tokens: grants });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'jobs' }, headers: bearer('ops') });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'other' }, headers: bearer('ops') });
    await call(url, 'POST', '/v1/feeds/jobs/records', { body: ndjson({ payload: 'x' }), headers: bearer('ops') });

    const asWorker = await call(url, 'PUT', '/v1/feeds/jobs/groups/g', { body: {}, headers: bearer('worker') });
    expect(asWorker.status).toBe(403);
    // Parking writes the dead-letter feed: a token that may not write there may not name it.
    const narrow = await call(url, 'PUT', '/v1/feeds/jobs/groups/g', { body: {}, headers: bearer('narrow') });
    expect([narrow.status, narrow.json.error]).toEqual([403, expect.objectContaining({ feed: 'jobs.g.parked' })]);
    const elsewhere = await call(url, 'PUT', '/v1/feeds/jobs/groups/g', {
      body: { deadLetter: 'other' },
      headers: bearer('owner'),
    });
    expect(elsewhere.status).toBe(403);
    expect((await call(url, 'GET', '/v1/feeds/jobs/groups', { headers: bearer('ops') })).lines).toEqual([]);
    expect((await call(url, 'PUT', '/v1/feeds/jobs/groups/g', { body: {}, headers: bearer('owner') })).status).toBe(
      200,
    );

    const claim = await call(url, 'POST', '/v1/feeds/jobs/groups/g/claim', {
      body: { worker: 'w' },
      headers: bearer('worker'),
    });
    expect(claim.json.claims).toHaveLength(1);
    expect(
      (
        await call(url, 'POST', '/v1/feeds/jobs/groups/g/ack', {
          body: { worker: 'w', commit: 1 },
          headers: bearer('worker'),
        })
      ).status,
    ).toBe(200);
    expect((await call(url, 'DELETE', '/v1/feeds/jobs/groups/g', { headers: bearer('worker') })).status).toBe(403);
    const stranger = await call(url, 'POST', '/v1/feeds/jobs/groups/g/claim', {
      body: { worker: 's' },
      headers: bearer('stranger'),
    });
    expect(stranger.status).toBe(403);
    const strangerInfo = await call(url, 'GET', '/v1/feeds/jobs/groups/g', { headers: bearer('stranger') });
    expect(strangerInfo.status).toBe(403);
  });
});
