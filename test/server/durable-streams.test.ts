/**
 * The Durable Streams compatibility route beyond what the conformance suite checks
 * (docs/http.md): the reversible mapping of stream names to feed names, producer and stream
 * state that survives a restart (it lives in the commits), typed errors, and the feeds the
 * streams become.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits, type StreamStackError } from '../../packages/engine/src/index.js';
import {
  streamFeedPrefix,
  streamNameBytesAlwaysFit,
  streamNameEncodedMax,
} from '../../packages/server/src/durable-stream-names.js';
import { feedStreamName, streamFeedName } from '../../packages/server/src/index.js';
import { durableStreamCall, startServer } from '../support/server.js';
import { openStore, temporaryDirectory } from '../support/store.js';

/** The engine's rule for feed names (docs/cli.md): what every mapped name must satisfy. */
const feedNameRule = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

function refusal(run: () => unknown): StreamStackError | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    return error as StreamStackError;
  }
}

describe('stream names as feed names', () => {
  it('states its sizes: 41 bytes of anything always fit, 125 plain characters fit, and the prefix takes the rest of the 128', () => {
    expect(streamFeedPrefix).toBe('ds.');
    expect(streamNameEncodedMax).toBe(limits.feedNameCharactersMax - 3);
    expect(streamNameEncodedMax).toBe(125);
    expect(streamNameBytesAlwaysFit).toBe(41);
    expect(streamFeedName(`${'\u{10ffff}'.repeat(10)}_`)).toHaveLength(3 + 41 * 3);
    expect(streamFeedName('a'.repeat(125))).toHaveLength(128);
    expect(refusal(() => streamFeedName('a'.repeat(126)))?.code).toBe('INVALID_NAME');
    expect(refusal(() => streamFeedName('_'.repeat(42)))?.code).toBe('INVALID_NAME');
  });

  it('maps every name of up to 10 code points (at most 40 UTF-8 bytes) to a valid feed name and back', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', minLength: 1, maxLength: 10 }), (name) => {
        const feed = streamFeedName(name);
        expect(feed).toMatch(feedNameRule);
        expect(feed.length).toBeLessThanOrEqual(limits.feedNameCharactersMax);
        expect(feedStreamName(feed)).toBe(name);
      }),
      // A leading byte-order mark is a character of the name (a random run found it once).
      { numRuns: 2000, examples: [['\ufeff'], ['\ufeff\u0000'], ['\ufeffa/b']] },
    );
  });

  it('keeps plain names (A-Z a-z 0-9 . -) of up to 125 characters as they are', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[A-Za-z0-9.-]{1,125}$/), (name) => {
        expect(streamFeedName(name)).toBe(`ds.${name}`);
        expect(feedStreamName(`ds.${name}`)).toBe(name);
      }),
      { numRuns: 1000 },
    );
  });

  it('takes or refuses any string of up to 130 UTF-16 units: a taken one comes back, a refused one is INVALID_NAME', () => {
    const units = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 130 }),
      fc.string({ unit: 'grapheme-ascii', maxLength: 130 }),
      fc.string({ unit: fc.constantFrom('\ud800', '\udfff', 'a', '_', '/'), maxLength: 50 }),
    );
    fc.assert(
      fc.property(units, (name) => {
        const refused = refusal(() => streamFeedName(name));
        if (refused) {
          expect(refused.code).toBe('INVALID_NAME');
          // Refused only when empty, not well-formed (a lone surrogate has no UTF-8), or too long.
          expect(name.length === 0 || !name.isWellFormed() || Buffer.byteLength(name) > streamNameBytesAlwaysFit).toBe(
            true,
          );
        } else {
          expect(feedStreamName(streamFeedName(name))).toBe(name);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('decodes only canonical encodings, so two feeds never name one stream', () => {
    const feedShaped = fc.stringMatching(/^ds\.[A-Za-z0-9._-]{1,40}$/);
    const escapes = fc
      .array(
        fc.oneof(
          fc.stringMatching(/^[A-Za-z0-9.-]$/),
          fc.integer({ min: 0, max: 255 }).map((byte) => `_${byte.toString(16).padStart(2, '0')}`),
        ),
        { minLength: 1, maxLength: 30 },
      )
      .map((parts) => `ds.${parts.join('')}`);
    fc.assert(
      fc.property(fc.oneof(feedShaped, escapes), (feed) => {
        const name = feedStreamName(feed);
        if (name !== undefined) expect(streamFeedName(name)).toBe(feed);
      }),
      { numRuns: 3000 },
    );
    expect(feedStreamName('ds._61')).toBeUndefined(); // 'a' escaped: not canonical
    expect(feedStreamName('ds._2F')).toBeUndefined(); // upper-case hex: not canonical
    expect(feedStreamName('ds._c3')).toBeUndefined(); // half a UTF-8 sequence
    expect(feedStreamName('orders')).toBeUndefined();
    expect(feedStreamName('ds.')).toBeUndefined();
  });

  it('gives names the engine takes: feeds are made under the mapped names', async () => {
    const store = await openStore(temporaryDirectory());
    try {
      for (const name of ['a/b/c', 'ünïcødé', '..', '_', 'space here', '\u0000', '😀'.repeat(10)]) {
        const feed = await store.createFeed(streamFeedName(name));
        expect(feedStreamName(feed.name)).toBe(name);
      }
      expect(await store.feedNames()).toHaveLength(7);
    } finally {
      await store.close();
    }
  });
});

const ds = durableStreamCall;

const producer = (id: string, epoch: number, seq: number) => ({
  'content-type': 'text/plain',
  'producer-id': id,
  'producer-epoch': String(epoch),
  'producer-seq': String(seq),
});

describe('the compatibility route across a restart', () => {
  it("still recognises an idempotent producer's duplicate, its gap and a fenced epoch after the server and store are reopened", async () => {
    const first = await startServer();
    await ds(first.url, 'PUT', 'orders', { headers: { 'content-type': 'text/plain' } });
    expect((await ds(first.url, 'POST', 'orders', { headers: producer('p', 0, 0), body: 'a' })).status).toBe(200);
    expect((await ds(first.url, 'POST', 'orders', { headers: producer('p', 0, 1), body: 'b' })).status).toBe(200);
    expect((await ds(first.url, 'POST', 'orders', { headers: producer('q', 3, 0), body: 'c' })).status).toBe(200);
    await first.server.close();

    const second = await startServer({ directory: first.directory });
    // The retry of seq 1 whose answer was lost: a duplicate, nothing written.
    const retry = await ds(second.url, 'POST', 'orders', { headers: producer('p', 0, 1), body: 'b' });
    expect(retry.status).toBe(204);
    expect([retry.headers.get('producer-epoch'), retry.headers.get('producer-seq')]).toEqual(['0', '1']);
    const gap = await ds(second.url, 'POST', 'orders', { headers: producer('p', 0, 3), body: 'd' });
    expect([
      gap.status,
      gap.json.error.code,
      gap.headers.get('producer-expected-seq'),
      gap.headers.get('producer-received-seq'),
    ]).toEqual([409, 'SEQ_MISMATCH', '2', '3']);
    const fenced = await ds(second.url, 'POST', 'orders', { headers: producer('q', 2, 0), body: 'e' });
    expect([fenced.status, fenced.json.error.code, fenced.headers.get('producer-epoch')]).toEqual([403, 'FENCED', '3']);
    expect((await ds(second.url, 'POST', 'orders', { headers: producer('p', 0, 2), body: 'f' })).status).toBe(200);
    expect((await ds(second.url, 'GET', 'orders?offset=-1')).text).toBe('abcf');
  });

  it('keeps the Content-Type, TTL, last Stream-Seq and closure (and who closed) in the commits', async () => {
    const first = await startServer();
    await ds(first.url, 'PUT', 'log', {
      headers: { 'content-type': 'application/json', 'stream-ttl': '3600' },
      body: '[{"n":1}]',
    });
    expect(
      (
        await ds(first.url, 'POST', 'log', {
          headers: { 'content-type': 'application/json', 'stream-seq': 'b' },
          body: '{"n":2}',
        })
      ).status,
    ).toBe(204);
    const closed = await ds(first.url, 'POST', 'log', {
      headers: { ...producer('w', 0, 0), 'content-type': 'application/json', 'stream-closed': 'true' },
      body: '{"n":3}',
    });
    expect([closed.status, closed.headers.get('stream-closed')]).toEqual([200, 'true']);
    await first.server.close();

    const second = await startServer({ directory: first.directory });
    const head = await ds(second.url, 'HEAD', 'log');
    expect([
      head.status,
      head.headers.get('content-type'),
      head.headers.get('stream-ttl'),
      head.headers.get('stream-closed'),
    ]).toEqual([200, 'application/json', '3600', 'true']);
    expect(head.headers.get('stream-next-offset')).toBe(closed.headers.get('stream-next-offset'));
    const read = await ds(second.url, 'GET', 'log?offset=-1');
    expect(read.json).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect(read.headers.get('stream-closed')).toBe('true');
    // The closing append's retry is a duplicate; any other append is refused as closed.
    expect(
      (
        await ds(second.url, 'POST', 'log', {
          headers: { ...producer('w', 0, 0), 'content-type': 'application/json', 'stream-closed': 'true' },
          body: '{"n":3}',
        })
      ).status,
    ).toBe(204);
    const refused = await ds(second.url, 'POST', 'log', {
      headers: { 'content-type': 'application/json' },
      body: '{"n":4}',
    });
    expect([refused.status, refused.json.error.code, refused.headers.get('stream-closed')]).toEqual([
      409,
      'STREAM_SEALED',
      'true',
    ]);
    // The same PUT is idempotent after the restart: the configuration came back from commit 1.
    expect(
      (
        await ds(second.url, 'PUT', 'log', {
          headers: { 'content-type': 'application/json', 'stream-ttl': '3600', 'stream-closed': 'true' },
        })
      ).status,
    ).toBe(200);
  });

  it('still refuses a Stream-Seq that does not grow after a restart', async () => {
    const first = await startServer();
    await ds(first.url, 'PUT', 's', { headers: { 'content-type': 'text/plain' } });
    await ds(first.url, 'POST', 's', { headers: { 'content-type': 'text/plain', 'stream-seq': '0005' }, body: 'x' });
    await first.server.close();
    const second = await startServer({ directory: first.directory });
    const stale = await ds(second.url, 'POST', 's', {
      headers: { 'content-type': 'text/plain', 'stream-seq': '0005' },
      body: 'y',
    });
    expect([stale.status, stale.json.error.code]).toEqual([409, 'SEQ_MISMATCH']);
    expect(
      (
        await ds(second.url, 'POST', 's', {
          headers: { 'content-type': 'text/plain', 'stream-seq': '0006' },
          body: 'y',
        })
      ).status,
    ).toBe(204);
  });
});

describe('the compatibility route and the feeds behind it', () => {
  it('makes each stream a feed under its mapped name, and deletes the feed with the stream', async () => {
    const { url } = await startServer();
    const name = encodeURIComponent('tenant/a b');
    expect((await ds(url, 'PUT', name, { headers: { 'content-type': 'text/plain' }, body: 'hi' })).status).toBe(201);
    const feeds = (await fetch(`${url}/v1/feeds`).then((response) => response.text()))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line).name);
    expect(feeds).toEqual([streamFeedName('tenant/a b')]);
    expect(feeds[0]).toBe('ds.tenant_2fa_20b');
    expect((await ds(url, 'DELETE', name)).status).toBe(204);
    expect((await fetch(`${url}/v1/feeds/${feeds[0]}`)).status).toBe(404);
    // The metrics no longer look for the deleted feed.
    expect((await fetch(`${url}/metrics`)).status).toBe(200);
  });

  it('gives every refusal a code in the error JSON, with the protocol status and headers', async () => {
    const { url } = await startServer();
    await ds(url, 'PUT', 't', { headers: { 'content-type': 'text/plain' } });
    const cases: [Promise<Awaited<ReturnType<typeof ds>>>, number, string][] = [
      [
        ds(url, 'POST', 't', { headers: { 'content-type': 'application/json' }, body: '{}' }),
        409,
        'CONTENT_TYPE_MISMATCH',
      ],
      [ds(url, 'POST', 't', { headers: { 'content-type': 'text/plain' }, body: '' }), 400, 'INVALID_ARGUMENT'],
      [ds(url, 'GET', 't?offset=12'), 400, 'INVALID_ARGUMENT'],
      [ds(url, 'GET', 't?offset=9999999999999999'), 400, 'INVALID_ARGUMENT'],
      [ds(url, 'GET', 'missing'), 404, 'FEED_NOT_FOUND'],
      [ds(url, 'PUT', 't', { headers: { 'content-type': 'text/csv' } }), 409, 'FEED_EXISTS'],
      [
        ds(url, 'PUT', 'u', { headers: { 'stream-ttl': '60', 'stream-expires-at': new Date().toISOString() } }),
        400,
        'INVALID_ARGUMENT',
      ],
      [ds(url, 'PUT', 'x'.repeat(126)), 400, 'INVALID_NAME'],
      [
        ds(url, 'POST', 't', { headers: { 'content-type': 'text/plain', 'producer-id': 'p' }, body: 'x' }),
        400,
        'INVALID_ARGUMENT',
      ],
    ];
    for (const [answer, status, code] of cases) {
      const { status: got, json } = await answer;
      expect([got, json?.error?.code]).toEqual([status, code]);
    }
    const json = await ds(url, 'PUT', 'j', { headers: { 'content-type': 'application/json' } });
    expect(json.status).toBe(201);
    const invalid = await ds(url, 'POST', 'j', { headers: { 'content-type': 'application/json' }, body: '{ nope' });
    expect([invalid.status, invalid.json.error.code]).toEqual([400, 'INVALID_RECORD']);
  });

  it('refuses a feed of the namespace that is not a stream, and takes over one whose creation was cut short', async () => {
    const { url } = await startServer();
    await fetch(`${url}/v1/feeds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'ds.native' }),
    });
    await fetch(`${url}/v1/feeds/ds.native/records`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: '{"payload":"x"}\n',
    });
    const foreign = await ds(url, 'PUT', 'native', { headers: { 'content-type': 'text/plain' } });
    expect([foreign.status, foreign.json.error.code]).toEqual([409, 'FEED_EXISTS']);
    expect((await ds(url, 'GET', 'native')).status).toBe(404);
    // A feed with no commit yet is what a crash between creating the feed and its first commit leaves.
    await fetch(`${url}/v1/feeds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'ds.cut' }),
    });
    expect((await ds(url, 'HEAD', 'cut')).status).toBe(404);
    expect((await ds(url, 'PUT', 'cut', { headers: { 'content-type': 'text/plain' }, body: 'whole' })).status).toBe(
      201,
    );
    expect((await ds(url, 'GET', 'cut')).text).toBe('whole');
  });

  it('deletes an expired stream on its own, without a request for it', async () => {
    const { url } = await startServer({ durableStreams: { expirySweepMs: 100 } });
    await ds(url, 'PUT', 'brief', { headers: { 'content-type': 'text/plain', 'stream-ttl': '1' } });
    await ds(url, 'PUT', 'lasting', { headers: { 'content-type': 'text/plain' } });
    const feeds = async () =>
      (await fetch(`${url}/v1/feeds`).then((response) => response.text()))
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line).name);
    expect(await feeds()).toEqual(['ds.brief', 'ds.lasting']);
    const deadline = Date.now() + 10_000;
    while ((await feeds()).includes('ds.brief') && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await feeds()).toEqual(['ds.lasting']);
  });
});
