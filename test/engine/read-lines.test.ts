/**
 * `feed.readLines`: a read as NDJSON bytes, written by the kernels from the columns, is exactly
 * the lines `read` gives through `recordLine` and `JSON.stringify`, for every mode, filter,
 * cursor and limit, with both kernel sets; its chunks end at line ends; bad options are refused
 * as `read` refuses them. The CLI's `read` and the server's `GET …/records` print these lines.
 */
import { describe, expect, it } from 'vitest';
import { type Feed, isStreamStackError, type ReadOptions } from '../../packages/engine/src/index.js';
import { readLinesChunkBytes } from '../../packages/engine/src/limits.js';
import { recordLine } from '../../packages/protocol/src/record-lines.js';
import { openStore, smallSegmentBytes, temporaryDirectory } from '../support/store.js';

const kernelSets = ['native', 'ts'] as const;
const decoder = new TextDecoder();

/** A payload of each kind a read writes differently: JSON text, text to escape, binary, empty. */
function payloadOf(n: number): string | Uint8Array {
  switch (n % 5) {
    case 0:
      return JSON.stringify({ id: n, name: `item ${n}`, note: 'é€😀' });
    case 1:
      return `line "${n}"\n\ttab\u0001`;
    case 2:
      return Uint8Array.from({ length: 40 + (n % 50) }, (_, at) => (n * 31 + at * 7) & 0xff);
    case 3:
      return '';
    default:
      return Uint8Array.of(0xef, 0xbb, 0xbf, 0x41, n & 0x7f); // A byte-order mark, then text.
  }
}

/**
 * Writes 120 small commits of 1 to 9 records and one large commit (about 2 MB of lines, more
 * than a chunk), in small segments; records keyed, versioned, typed, tagged, tombstoned, with
 * given fingerprints (text and bytes) on some.
 */
async function writeFeed(feed: Feed): Promise<void> {
  let n = 0;
  const recordOf = () => {
    n++;
    return {
      payload: payloadOf(n),
      ...(n % 3 === 0 ? {} : { key: `key-${n % 40}` }),
      ...(n % 4 === 0 ? { version: n } : {}),
      ...(n % 11 === 0 && n % 3 !== 0 ? { tombstone: true } : {}),
      ...(n % 2 === 0 ? { type: n % 6 === 0 ? 'created' : 'up"dated' } : {}),
      ...(n % 5 === 0 ? {} : { tags: [`customer:${n % 7}`, ...(n % 10 === 1 ? ['region:é'] : [])] }),
      ...(n % 13 === 0
        ? { fingerprint: `fp-${n}` }
        : n % 17 === 0
          ? { fingerprint: Uint8Array.of(0xff, n & 0xff) }
          : {}),
    };
  };
  for (let commit = 0; commit < 120; commit++) await feed.append(Array.from({ length: 1 + (commit % 9) }, recordOf));
  await feed.append(Array.from({ length: 12_000 }, recordOf));
}

async function linesOfRead(feed: Feed, options: ReadOptions): Promise<string> {
  let lines = '';
  for await (const record of feed.read(options)) lines += `${JSON.stringify(recordLine(record))}\n`;
  return lines;
}

async function chunksOf(feed: Feed, options: ReadOptions): Promise<Uint8Array[]> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of feed.readLines(options)) chunks.push(chunk);
  return chunks;
}

describe('feed.readLines', () => {
  for (const kernels of kernelSets) {
    it(`gives exactly the record lines of read, in chunks of whole lines, in every mode (${kernels})`, async () => {
      const store = await openStore(temporaryDirectory(), { kernels, segmentBytes: smallSegmentBytes });
      try {
        const feed = await store.createFeed('f');
        await writeFeed(feed);
        const cases: ReadOptions[] = [
          {},
          { mode: 'dedup' },
          { mode: 'latest' },
          { after: 37, upTo: 90 },
          { after: 100, limit: 5_000 },
          { limit: 7 },
          { filter: { types: ['up"dated'] } },
          { filter: { tags: ['customer:3'] }, plan: 'index' },
          { filter: { tags: ['customer:3'] }, plan: 'scan', mode: 'dedup' },
          { filter: { types: ['created'], tags: ['region:é'] }, mode: 'latest' },
          { after: 121 },
        ];
        let largest = 0;
        for (const options of cases) {
          const chunks = await chunksOf(feed, options);
          const expected = await linesOfRead(feed, options);
          expect(chunks.map((chunk) => decoder.decode(chunk)).join(''), JSON.stringify(options)).toBe(expected);
          for (const chunk of chunks) {
            expect(chunk.at(-1), 'a chunk ends at the end of a line').toBe(0x0a);
            largest = Math.max(largest, chunk.length);
          }
          if (options.after === 121) expect(chunks).toEqual([]);
        }
        // The large commit's lines run past a chunk: they came as a chunk of their own.
        expect(largest).toBeGreaterThan(readLinesChunkBytes);
        // Binary payloads and fingerprints came as base64, text ones as text.
        const all = decoder.decode(Buffer.concat(await chunksOf(feed, {})));
        for (const field of [
          '"payloadBase64":',
          '"payload":"',
          '"fingerprint":"fp-',
          '"fingerprintBase64":',
          '"tombstone":true',
          '"version":',
        ])
          expect(all).toContain(field);
      } finally {
        await store.close();
      }
    });
  }

  it('refuses bad options as read does, and a cursor past the head', async () => {
    const store = await openStore(temporaryDirectory());
    try {
      const feed = await store.createFeed('f');
      await feed.append([{ payload: 'a' }]);
      const codeOf = async (read: () => Promise<unknown>) => {
        try {
          await read();
          return 'no error';
        } catch (error) {
          return isStreamStackError(error) ? error.code : String(error);
        }
      };
      const cases: [unknown, string][] = [
        [{ mode: 'fast' }, 'INVALID_ARGUMENT'],
        [{ limt: 3 }, 'INVALID_ARGUMENT'],
        [{ limit: -2 }, 'INVALID_ARGUMENT'],
        [{ after: 3 }, 'CURSOR_OUT_OF_RANGE'],
        [{ upTo: 5 }, 'CURSOR_OUT_OF_RANGE'],
      ];
      for (const [options, code] of cases) {
        expect(await codeOf(() => chunksOf(feed, options as ReadOptions)), JSON.stringify(options)).toBe(code);
        expect(await codeOf(() => linesOfRead(feed, options as ReadOptions)), `read ${JSON.stringify(options)}`).toBe(
          code,
        );
      }
    } finally {
      await store.close();
    }
  });
});
