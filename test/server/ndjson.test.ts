import { describe, expect, it } from 'vitest';
import { readRecordLines, StreamStackError } from '../../packages/engine/src/index.js';
import { createServer } from '../../packages/server/src/index.js';
import { recordsOfBody, sendLines } from '../../packages/server/src/ndjson.js';
import { openStore, temporaryDirectory } from '../support/store.js';

describe('NDJSON answers', () => {
  async function answer(lines: () => AsyncGenerator<unknown>) {
    // The server's own app, with its error handler, and one more route that answers `lines`.
    const server = await createServer({ store: await openStore(temporaryDirectory()), logger: false });
    server.app.get('/test-lines', async (_request, reply) => sendLines(reply, lines()));
    const response = await server.app.inject({ method: 'GET', url: '/test-lines' });
    await server.close();
    return response;
  }

  it('sends each value as one line', async () => {
    const response = await answer(async function* () {
      yield { a: 1 };
      yield { b: 'two\nlines' };
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^application\/x-ndjson/);
    expect(response.body).toBe('{"a":1}\n{"b":"two\\nlines"}\n');
  });

  it('sends a body of one value whole, with its length, an empty one empty, and a longer one as a stream', async () => {
    const one = await answer(async function* () {
      yield { a: 1 };
    });
    expect([one.body, one.headers['content-length'], one.headers['transfer-encoding']]).toEqual([
      '{"a":1}\n',
      '8',
      undefined,
    ]);
    const none = await answer(async function* () {});
    expect([none.statusCode, none.body, none.headers['content-length']]).toEqual([200, '', '0']);
    const two = await answer(async function* () {
      yield { a: 1 };
      yield { a: 2 };
    });
    expect([two.body, two.headers['content-length'], two.headers['transfer-encoding']]).toEqual([
      '{"a":1}\n{"a":2}\n',
      undefined,
      'chunked',
    ]);
  });

  it('gives an error raised before the first line its own status, and ends the body with an error line after it', async () => {
    // biome-ignore lint/correctness/useYield: the body fails before its first line.
    const early = await answer(async function* () {
      throw new StreamStackError('CURSOR_OUT_OF_RANGE', 'beyond the head');
    });
    expect([early.statusCode, early.json()]).toEqual([
      416,
      { error: { code: 'CURSOR_OUT_OF_RANGE', message: 'beyond the head' } },
    ]);
    const late = await answer(async function* () {
      yield { a: 1 };
      throw new StreamStackError('CORRUPT', 'a frame failed its CRC', { details: { file: 'x', offset: 7 } });
    });
    expect(late.statusCode).toBe(200);
    expect(
      late.body
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line)),
    ).toEqual([{ a: 1 }, { error: { code: 'CORRUPT', message: 'a frame failed its CRC', file: 'x', offset: 7 } }]);
  });
});

describe('NDJSON request bodies', () => {
  it("read as the engine's line reader reads them: CRLF, byte-order marks, blank lines, bad lines and bad UTF-8", async () => {
    const text = [
      '',
      '\n',
      '{"payload":"a"}',
      '\r\n{"payload":"a","key":"k"}\r\n\r\n',
      '\uFEFF{"payload":"a"}\n\uFEFF{"payload":"b"}',
      '\uFEFF\uFEFF{"payload":"a"}',
      '\uFEFF\r\n{"payload":"é","tags":["x"]}\n  \n{"payloadBase64":"AAE="}',
      '{"payload":"a"}\n{bad',
      '{"payload":"a"}\n{"pay":1}',
      '\r',
    ];
    const bodies = [
      ...text.map((body) => Buffer.from(body)),
      Buffer.concat([Buffer.from('{"payload":"a"}\n'), Buffer.from([0xff, 0xfe]), Buffer.from('\n')]),
    ];
    const outcome = (promise: Promise<unknown>) =>
      promise.then(
        (records) => ({ records }),
        (error: StreamStackError) => ({ code: error.code, message: error.message }),
      );
    for (const body of bodies) {
      expect(await outcome(recordsOfBody(body)), JSON.stringify(body.toString())).toEqual(
        await outcome(readRecordLines([body])),
      );
    }
  });
});
