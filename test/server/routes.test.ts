import { describe, expect, it } from 'vitest';
import { call, ndjson, readEvents, startServer } from '../support/server.js';

describe('feeds, leases and streams over HTTP', () => {
  it('creates, lists and describes feeds, refusing duplicates and unknown feeds with their statuses', async () => {
    const { url } = await startServer();
    expect((await call(url, 'POST', '/v1/feeds', { body: { name: 'orders' } })).status).toBe(201);
    await call(url, 'POST', '/v1/feeds', { body: { name: 'audit' } });
    const duplicate = await call(url, 'POST', '/v1/feeds', { body: { name: 'orders' } });
    expect(duplicate.status).toBe(409);
    expect(duplicate.json.error).toMatchObject({ code: 'FEED_EXISTS' });
    expect((await call(url, 'POST', '/v1/feeds', { body: { name: '../x' } })).json.error.code).toBe('INVALID_NAME');
    const list = await call(url, 'GET', '/v1/feeds');
    expect(list.headers.get('content-type')).toMatch(/application\/x-ndjson/);
    expect(list.lines.map((line) => line.name)).toEqual(['audit', 'orders']);
    const info = await call(url, 'GET', '/v1/feeds/orders');
    expect(info.json).toMatchObject({ name: 'orders', commits: 0, head: null, lease: null });
    const missing = await call(url, 'GET', '/v1/feeds/nothing');
    expect([missing.status, missing.json.error.code]).toEqual([404, 'FEED_NOT_FOUND']);
    // A feed name is checked before it touches the disk, however the URL encodes it.
    const outside = await call(url, 'GET', `/v1/feeds/${encodeURIComponent('../../etc')}`);
    expect([outside.status, outside.json.error.code]).toEqual([400, 'INVALID_NAME']);
    const route = await call(url, 'GET', '/v1/nowhere');
    expect([route.status, route.json.error.code]).toEqual([404, 'NOT_FOUND']);
  });

  it('runs a stream from lease to seal with fencing, expected seqs and a condition, each refusal with its status', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    const lease = await call(url, 'POST', '/v1/feeds/f/lease', { body: { holder: 'a', ttlMs: 60_000 } });
    expect(lease.status).toBe(201);
    const token = lease.json.token as string;
    const headers = { 'ss-fencing-token': token };
    const opened = await call(url, 'POST', '/v1/feeds/f/streams', { body: { message: 'batch job' }, headers });
    expect(opened.status).toBe(201);
    const id = opened.json.stream as string;
    const again = await call(url, 'POST', '/v1/feeds/f/streams', { body: {}, headers });
    expect([again.status, again.json.error.code]).toEqual([409, 'STREAM_OPEN']);
    const first = await call(url, 'POST', `/v1/feeds/f/streams/${id}/records`, {
      body: ndjson({ payload: 'a', type: 'booked', tags: ['course:7'] }, { payload: { n: 2 } }),
      headers: { ...headers, 'ss-expected-seq': '1' },
    });
    expect(first.json).toEqual({ stream: id, firstSeq: 1, lastSeq: 2 });
    const stale = await call(url, 'POST', `/v1/feeds/f/streams/${id}/records`, {
      body: ndjson({ payload: 'b' }),
      headers: { ...headers, 'ss-expected-seq': '1' },
    });
    expect([stale.status, stale.json.error.code]).toEqual([412, 'SEQ_MISMATCH']);
    const open = await call(url, 'GET', `/v1/feeds/f/streams/${id}/records`);
    expect(open.lines.map((line) => [line.seq, line.payload, line.commit])).toEqual([
      [1, 'a', null],
      [2, '{"n":2}', null],
    ]);
    expect((await call(url, 'GET', `/v1/feeds/f/streams/${id}`)).json).toEqual({ id, state: 'open', records: 2 });
    const unfenced = await call(url, 'POST', `/v1/feeds/f/streams/${id}/seal`);
    expect([unfenced.status, unfenced.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
    const sealed = await call(
      url,
      'POST',
      `/v1/feeds/f/streams/${id}/seal?ifNoMatchType=booked&ifNoMatchTag=course:7`,
      { headers },
    );
    expect(sealed.status).toBe(200);
    expect(sealed.json).toMatchObject({
      feed: 'f',
      commit: 1,
      records: 2,
      message: 'batch job',
      epoch: 1,
      oneShot: false,
    });
    // Condition: a booking for course 7 now lies after position 0, so a second one is refused.
    const refused = await call(
      url,
      'POST',
      '/v1/feeds/f/records?ifNoMatchType=booked&ifNoMatchTag=course:7&afterPosition=0',
      { body: ndjson({ payload: 'c', type: 'booked', tags: ['course:7'] }), headers },
    );
    expect(refused.status).toBe(412);
    expect(refused.json.error).toMatchObject({ code: 'CONDITION_FAILED' });
    const past = await call(
      url,
      'POST',
      '/v1/feeds/f/records?ifNoMatchType=booked&ifNoMatchTag=course:7&afterPosition=2&message=m',
      { body: ndjson({ payload: 'c', type: 'booked', tags: ['course:7'] }), headers },
    );
    expect(past.status).toBe(201);
    expect(past.json).toMatchObject({ commit: 2, message: 'm', oneShot: true });
    // A takeover fences the first holder.
    const expired = await call(url, 'POST', '/v1/feeds/f/lease', { body: { holder: 'b' } });
    expect([expired.status, expired.json.error.code]).toEqual([409, 'LEASE_HELD']);
    expect((await call(url, 'DELETE', '/v1/feeds/f/lease', { headers })).json).toEqual({ feed: 'f', released: true });
    const second = await call(url, 'POST', '/v1/feeds/f/lease', { body: { holder: 'b' } });
    const fenced = await call(url, 'POST', '/v1/feeds/f/streams', { body: {}, headers });
    expect([fenced.status]).toContain(412);
    expect(['FENCED', 'LEASE_EXPIRED']).toContain(fenced.json.error.code);
    const renewed = await call(url, 'PUT', '/v1/feeds/f/lease', {
      body: { ttlMs: 5000 },
      headers: { 'ss-fencing-token': second.json.token },
    });
    expect(renewed.json).toMatchObject({ epoch: 2, holder: 'b' });
    const aborted = await call(url, 'POST', '/v1/feeds/f/streams', {
      body: {},
      headers: { 'ss-fencing-token': second.json.token },
    });
    expect(
      (
        await call(url, 'POST', `/v1/feeds/f/streams/${aborted.json.stream}/abort`, {
          headers: { 'ss-fencing-token': second.json.token },
        })
      ).json,
    ).toEqual({ stream: aborted.json.stream, aborted: true });
  });

  it('refuses a bad record body whole, naming the line, and writes nothing', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    const bad = await call(url, 'POST', '/v1/feeds/f/records', {
      body: '{"payload":"ok"}\n{"payload":"x","tag":"t"}\n',
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ code: 'INVALID_RECORD', line: 2, field: 'tag' });
    const notJson = await call(url, 'POST', '/v1/feeds/f/records', { body: { payload: 'x' } });
    expect([notJson.status, notJson.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
    expect((await call(url, 'GET', '/v1/feeds/f')).json.commits).toBe(0);
  });
});

describe('reads over HTTP', () => {
  async function seeded() {
    const started = await startServer();
    const { url } = started;
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', {
      body: ndjson(
        { payload: 'v1', key: 'k', version: 1, type: 'a', tags: ['x'] },
        { payload: 'other', key: 'j', type: 'b' },
      ),
    });
    await call(url, 'POST', '/v1/feeds/f/records', {
      body: ndjson(
        { payload: 'v2', key: 'k', version: 2, type: 'a' },
        { payloadBase64: 'AP8=', type: 'b', tags: ['x'] },
      ),
    });
    await call(url, 'POST', '/v1/feeds/f/records', {
      body: ndjson({ payload: 'v1', key: 'k', version: 1, type: 'a', tags: ['x'] }),
    });
    return started;
  }

  it('reads after a cursor in every mode, with type and tag filters and a limit, as record lines', async () => {
    const { url } = await seeded();
    const raw = await call(url, 'GET', '/v1/feeds/f/records?after=0');
    expect(raw.headers.get('ss-head')).toBe('3');
    expect(raw.lines.map((line) => line.position)).toEqual([1, 2, 3, 4, 5]);
    expect(raw.lines[3]).toMatchObject({ payloadBase64: 'AP8=', type: 'b', tags: ['x'], commit: 2 });
    expect((await call(url, 'GET', '/v1/feeds/f/records?after=1')).lines.map((line) => line.position)).toEqual([
      3, 4, 5,
    ]);
    expect((await call(url, 'GET', '/v1/feeds/f/records?type=a')).lines.map((line) => line.position)).toEqual([
      1, 3, 5,
    ]);
    expect(
      (await call(url, 'GET', '/v1/feeds/f/records?type=a&type=b&tag=x')).lines.map((line) => line.position),
    ).toEqual([1, 4, 5]);
    expect((await call(url, 'GET', '/v1/feeds/f/records?limit=2')).lines).toHaveLength(2);
    expect((await call(url, 'GET', '/v1/feeds/f/records?mode=dedup')).lines.map((line) => line.position)).toEqual([
      1, 2, 3, 4,
    ]);
    const latest = (await call(url, 'GET', '/v1/feeds/f/records?mode=latest')).lines.filter((line) => line.key === 'k');
    expect(latest.map((line) => line.payload)).toEqual(['v2']);
    const badMode = await call(url, 'GET', '/v1/feeds/f/records?mode=newest');
    expect([badMode.status, badMode.json.error.code]).toEqual([400, 'INVALID_ARGUMENT']);
    const beyond = await call(url, 'GET', '/v1/feeds/f/records?after=9');
    expect([beyond.status, beyond.json.error.code]).toEqual([416, 'CURSOR_OUT_OF_RANGE']);
  });

  it('lists commits, gives one commit and its records, and gets keys as of a commit', async () => {
    const { url } = await seeded();
    expect((await call(url, 'GET', '/v1/feeds/f/commits?after=1&limit=1')).lines.map((line) => line.commit)).toEqual([
      2,
    ]);
    expect((await call(url, 'GET', '/v1/feeds/f/commits/2')).json).toMatchObject({
      commit: 2,
      parent: 1,
      records: 2,
      firstPosition: 3,
    });
    expect((await call(url, 'GET', '/v1/feeds/f/commits/7')).status).toBe(416);
    expect((await call(url, 'GET', '/v1/feeds/f/commits/2/records')).lines.map((line) => line.position)).toEqual([
      3, 4,
    ]);
    expect((await call(url, 'GET', '/v1/feeds/f/keys/k')).json).toMatchObject({ payload: 'v2', version: 2 });
    expect((await call(url, 'GET', '/v1/feeds/f/keys/k?asOf=1')).json).toMatchObject({ payload: 'v1', version: 1 });
    const none = await call(url, 'GET', '/v1/feeds/f/keys/none');
    expect([none.status, none.json.error.code]).toEqual([404, 'KEY_NOT_FOUND']);
  });

  it('long-polls: waits for the next commit after the cursor, or answers empty when the wait runs out', async () => {
    const { url } = await seeded();
    const started = Date.now();
    const empty = await call(url, 'GET', '/v1/feeds/f/records?after=3&wait=1');
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect([empty.status, empty.lines]).toEqual([200, []]);
    const waiting = call(url, 'GET', '/v1/feeds/f/records?after=3&wait=30');
    await new Promise((resolve) => setTimeout(resolve, 200));
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'late' }) });
    const answered = await waiting;
    expect(answered.lines.map((line) => [line.commit, line.payload])).toEqual([[4, 'late']]);
  });

  it('streams commits over SSE with their numbers as ids, resumes from Last-Event-ID, and sends heartbeats with the watermark', async () => {
    const { url } = await startServer({ live: { heartbeatMs: 100 } });
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'one' }) });
    const live = readEvents(
      url,
      '/v1/feeds/f/records?after=0',
      (events) => events.filter((event) => event.event === 'commit').length === 3,
    );
    await new Promise((resolve) => setTimeout(resolve, 100));
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'two' }, { payload: 'three' }) });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'four' }) });
    const { status, events } = await live;
    expect(status).toBe(200);
    const commits = events.filter((event) => event.event === 'commit');
    expect(commits.map((event) => event.id)).toEqual(['1', '2', '3']);
    expect(commits.map((event) => event.data.records.map((record: { payload: string }) => record.payload))).toEqual([
      ['one'],
      ['two', 'three'],
      ['four'],
    ]);
    expect(commits[1]!.data.commit).toMatchObject({ commit: 2, records: 2 });
    const resumed = await readEvents(
      url,
      '/v1/feeds/f/records?after=0',
      (seen) => seen.some((event) => event.event === 'commit'),
      { 'last-event-id': '2' },
    );
    expect(resumed.events.filter((event) => event.event === 'commit').map((event) => event.id)).toEqual(['3']);
    const quiet = await readEvents(
      url,
      '/v1/feeds/f/records?after=3',
      (seen) => seen.filter((event) => event.event === 'heartbeat').length >= 2,
    );
    expect(quiet.events.at(-1)).toEqual({ event: 'heartbeat', data: { commit: 3, position: 4 } });
    expect((await readEvents(url, '/v1/feeds/f/records?after=8', () => true)).status).toBe(416);
  });
});

describe('subscriptions, retention and verify over HTTP', () => {
  it('creates, polls, advances, resets, lists and deletes subscriptions', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    for (const payload of ['a', 'b', 'c'])
      await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload }) });
    expect((await call(url, 'POST', '/v1/feeds/f/subscriptions', { body: { name: 'billing' } })).json).toMatchObject({
      name: 'billing',
      cursor: 0,
      lag: { commits: 3 },
    });
    expect((await call(url, 'POST', '/v1/feeds/f/subscriptions', { body: { name: 'billing' } })).status).toBe(409);
    const polled = await call(url, 'GET', '/v1/feeds/f/subscriptions/billing/poll?max=2');
    expect(polled.json.cursor).toBe(2);
    expect(polled.json.commits.map((commit: any) => commit.records[0].payload)).toEqual(['a', 'b']);
    expect(
      (await call(url, 'POST', '/v1/feeds/f/subscriptions/billing/advance', { body: { cursor: 2 } })).json,
    ).toMatchObject({ cursor: 2, lag: { commits: 1 } });
    const behind = await call(url, 'POST', '/v1/feeds/f/subscriptions/billing/advance', { body: { cursor: 1 } });
    expect([behind.status, behind.json.error.code]).toEqual([409, 'CURSOR_BEHIND']);
    expect(
      (await call(url, 'POST', '/v1/feeds/f/subscriptions/billing/reset', { body: { cursor: 1 } })).json.cursor,
    ).toBe(1);
    expect((await call(url, 'POST', '/v1/feeds/f/subscriptions/billing/reset', { body: { cursor: 9 } })).status).toBe(
      416,
    );
    expect((await call(url, 'GET', '/v1/feeds/f/subscriptions')).lines.map((line) => [line.name, line.cursor])).toEqual(
      [['billing', 1]],
    );
    expect((await call(url, 'DELETE', '/v1/feeds/f/subscriptions/billing')).json.deleted).toBe(true);
    expect((await call(url, 'GET', '/v1/feeds/f/subscriptions/billing')).status).toBe(404);
  });

  it('answers 410 TRIMMED for a cursor below the low mark, over plain reads and SSE alike', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    // The test store's 64 KiB segments roll every few of these commits (distinct payloads: a
    // payload is stored once per feed).
    for (let commit = 0; commit < 40; commit++)
      await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: `${commit}:`.padEnd(8000, 'x') }) });
    const trimmed = await call(url, 'POST', '/v1/feeds/f/trim', { body: { before: 30 } });
    const lowMark = trimmed.json.lowMark as number;
    expect(lowMark).toBeGreaterThan(1);
    const gone = await call(url, 'GET', '/v1/feeds/f/records?after=0');
    expect([gone.status, gone.json.error.code]).toEqual([410, 'TRIMMED']);
    expect((await readEvents(url, '/v1/feeds/f/records?after=0', () => true)).status).toBe(410);
    expect((await call(url, 'GET', '/v1/feeds/f/commits?after=0')).status).toBe(410);
    const kept = await call(url, 'GET', '/v1/feeds/f/records');
    expect(kept.lines[0].commit).toBe(lowMark);
  });

  it('sets and shows retention, trims, and verifies', async () => {
    const { url } = await startServer();
    await call(url, 'POST', '/v1/feeds', { body: { name: 'f' } });
    await call(url, 'POST', '/v1/feeds/f/records', { body: ndjson({ payload: 'a' }) });
    expect((await call(url, 'PUT', '/v1/feeds/f/retention', { body: { maxRecords: 1000 } })).json.policy).toEqual({
      maxRecords: 1000,
    });
    expect((await call(url, 'GET', '/v1/feeds/f/retention')).json).toMatchObject({
      policy: { maxRecords: 1000 },
      lowMark: 1,
    });
    expect((await call(url, 'PUT', '/v1/feeds/f/retention', { body: { maxRecords: -1 } })).status).toBe(400);
    expect((await call(url, 'POST', '/v1/feeds/f/trim', { body: { before: 1 } })).json).toMatchObject({ lowMark: 1 });
    expect((await call(url, 'GET', '/v1/feeds/f/verify')).json).toMatchObject({ feed: 'f', ok: true, commits: 1 });
    expect((await call(url, 'GET', '/v1/verify')).lines.map((line) => line.feed)).toEqual(['f']);
  });
});
