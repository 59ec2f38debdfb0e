/**
 * The front door: whatever arrives on stdin, `streamstack append` either commits it or refuses it
 * with a typed error and leaves the data directory byte-for-byte as it was; a reader closing
 * stdout early and failures of the operating system end quietly or as typed errors, never as a
 * stack trace. The engine API refuses strings that UTF-8 cannot carry unchanged.
 */
import { spawn, spawnSync } from 'node:child_process';
import { limits, StreamStackError } from '@streamstack/engine';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { byteLines, nestsDeeperThan, parseRecordLine, readRecords } from '../../packages/cli/src/io.js';
import { typedErrorOf } from '../../packages/cli/src/main.js';
import { validateMessage, validateRecords } from '../../packages/engine/src/api/records.js';
import { failure } from '../support/failure.js';
import { digestTree, temporaryDirectory } from '../support/store.js';

const binary = new URL('../../packages/cli/bin/streamstack.js', import.meta.url).pathname;

/** Codes `append` may refuse input with; anything else (INTERNAL above all) is a bug. */
const inputRefusals = ['INVALID_RECORD', 'INVALID_ARGUMENT', 'RECORD_TOO_LARGE'];

/**
 * Each run of a CLI property spawns the CLI (150-500 ms) and digests a data directory holding a
 * preallocated 64 MiB WAL segment (about 150 ms), so runs are few and the timeout generous.
 */
const cliRuns = 40;
const cliPropertyTimeoutMs = 180_000;

const utf8 = (text: string) => Buffer.from(text, 'utf8');

function cli(data: string, args: string[], input: string | Uint8Array = '') {
  const result = spawnSync(process.execPath, [binary, '--data', data, ...args], { input });
  return { status: result.status, stdout: result.stdout.toString('utf8'), stderr: result.stderr.toString('utf8') };
}

/** A data directory holding one empty feed `f`. */
function feedDirectory(): string {
  const data = temporaryDirectory();
  expect(cli(data, ['feed', 'create', 'f']).status).toBe(0);
  return data;
}

/** The one typed error line on stderr; anything else there (a stack trace above all) fails. */
function typedError(stderr: string): { code: string; message: string; [detail: string]: unknown } {
  const lines = stderr.split('\n').filter((line) => line !== '');
  expect(lines, stderr).toHaveLength(1);
  expect(stderr).not.toMatch(/\n\s+at /);
  return (JSON.parse(lines[0]) as { error: { code: string; message: string } }).error;
}

/** Appends `input` to feed `f`, expects a refusal, and checks nothing on disk changed. */
function refusedAppend(data: string, input: string | Uint8Array) {
  const before = digestTree(data);
  const result = cli(data, ['append', 'f'], input);
  expect(result.status, result.stderr).toBe(1);
  expect(result.stdout).toBe('');
  expect(digestTree(data)).toBe(before);
  return typedError(result.stderr);
}

const nested = (levels: number, open = '[', close = ']') => `${open.repeat(levels)}${close.repeat(levels)}`;

describe('append input lines', () => {
  it('refuses a line that is not UTF-8, naming it, instead of storing replacement characters', async () => {
    const input = Buffer.concat([utf8('{"payload":"ok"}\n\n{"payload":"a'), Buffer.from([0xff, 0xfe]), utf8('b"}\n')]);
    const error = await failure(() => readRecords([input]));
    expect(error).toMatchObject({ code: 'INVALID_RECORD', details: { line: 3 } });
    expect(error.message).toContain('payloadBase64');
    const data = feedDirectory();
    expect(refusedAppend(data, input)).toMatchObject({ code: 'INVALID_RECORD', line: 3 });
  });

  it('splits on LF and CRLF alike, and keeps characters split across chunks whole', async () => {
    const records = await readRecords([
      utf8('{"payload":"a"}\r\n{"payload":"\u00e9'),
      utf8('"}\r\n\r\n{"payload":"c"}'),
    ]);
    expect(records.map((record) => record.payload)).toEqual(['a', '\u00e9', 'c']);
    const split = await readRecords([utf8('{"payload":"'), Buffer.from([0xc3]), Buffer.from([0xa9]), utf8('"}')]);
    expect(split.map((record) => record.payload)).toEqual(['\u00e9']);
  });

  it('gives the same lines however the bytes are chunked', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ maxLength: 200, size: 'max' }),
        fc.array(fc.nat(), { maxLength: 10, size: 'max' }),
        async (bytes, cuts) => {
          const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
          const chunks = [0, ...points].map((start, at) => bytes.subarray(start, [...points, bytes.length][at]));
          const whole: Uint8Array[] = [];
          for await (const line of byteLines([bytes])) whole.push(line);
          const chunked: Uint8Array[] = [];
          for await (const line of byteLines(chunks)) chunked.push(line);
          expect(chunked.map((line) => Buffer.from(line).toString('hex'))).toEqual(
            whole.map((line) => Buffer.from(line).toString('hex')),
          );
          // Lines end at '\n' (a last line without one still counts, a trailing '\n' opens none),
          // and each loses one '\r' before its end: a lone '\r' is an empty line.
          const pieces = Buffer.from(bytes).toString('latin1').split('\n');
          if (pieces.at(-1) === '') pieces.pop();
          const expected = pieces.map((line) => line.replace(/\r$/, ''));
          expect(whole.map((line) => Buffer.from(line).toString('latin1'))).toEqual(expected);
        },
      ),
      // A lone '\r', which once tripped this property's own oracle, is always among the inputs.
      {
        numRuns: 300,
        examples: [
          [Uint8Array.from([13]), []],
          [Uint8Array.from([13, 10, 13]), [1]],
        ],
      },
    );
  });

  it('accepts only canonical base64 in payloadBase64', async () => {
    expect(parseRecordLine({ payloadBase64: 'AP8=' }, 1).payload).toEqual(new Uint8Array([0x00, 0xff]));
    expect(parseRecordLine({ payloadBase64: '' }, 1).payload).toEqual(new Uint8Array([]));
    // `Q` is too short, `QR==` has stray bits, the others lack padding, use the URL alphabet or hold spaces.
    for (const text of ['Q', 'QR==', 'AP8', 'AP-_', 'AP 8=', 'AP8=\n', 'A===', 5]) {
      expect(() => parseRecordLine({ payloadBase64: text }, 7), String(text)).toThrow(
        expect.objectContaining({ code: 'INVALID_RECORD', details: { line: 7, field: 'payloadBase64' } }),
      );
    }
    await fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64, size: 'max' }), (bytes) => {
        expect(parseRecordLine({ payloadBase64: Buffer.from(bytes).toString('base64') }, 1).payload).toEqual(bytes);
      }),
    );
    const data = feedDirectory();
    expect(refusedAppend(data, '{"payloadBase64":"Q"}\n')).toMatchObject({
      code: 'INVALID_RECORD',
      line: 1,
      field: 'payloadBase64',
    });
  });

  it('refuses unknown fields by name, and a line with both payload and payloadBase64', () => {
    for (const field of ['tag', 'paylod', 'Payload', '__proto__']) {
      const line = JSON.parse(`{"payload":"x",${JSON.stringify(field)}:["a"]}`) as unknown;
      expect(() => parseRecordLine(line, 2)).toThrow(
        expect.objectContaining({
          code: 'INVALID_RECORD',
          details: { line: 2, field },
          message: expect.stringContaining(JSON.stringify(field)),
        }),
      );
    }
    expect(() => parseRecordLine({ payload: 'x', payloadBase64: 'eA==' }, 1)).toThrow(
      expect.objectContaining({ code: 'INVALID_RECORD' }),
    );
    const data = feedDirectory();
    expect(refusedAppend(data, '{"payload":"x","tag":["a"]}\n')).toMatchObject({
      code: 'INVALID_RECORD',
      line: 1,
      field: 'tag',
    });
    expect(refusedAppend(data, '{"payload":"x","payloadBase64":"eA=="}\n')).toMatchObject({
      code: 'INVALID_RECORD',
      line: 1,
    });
  });

  it(`refuses a payload nested deeper than ${limits.jsonNestingDepthMax} levels, at exactly the limit`, () => {
    const depthMax = limits.jsonNestingDepthMax;
    expect(parseRecordLine(JSON.parse(`{"payload":${nested(depthMax)}}`), 1).payload).toBe(nested(depthMax));
    expect(
      parseRecordLine(JSON.parse(`{"payload":${nested(depthMax, '{"a":', '}').replace(/:}/, ':0}')}}`), 1),
    ).toBeDefined();
    expect(() => parseRecordLine(JSON.parse(`{"payload":${nested(depthMax + 1)}}`), 1)).toThrow(
      expect.objectContaining({ code: 'INVALID_RECORD', details: { line: 1, field: 'payload' } }),
    );
    expect(nestsDeeperThan(JSON.parse(nested(100_000)), depthMax)).toBe(true);
    expect(nestsDeeperThan([[1], { a: [2] }, 'x'], 3)).toBe(false);
    expect(nestsDeeperThan([[1], { a: [2] }, 'x'], 2)).toBe(true);
    const data = feedDirectory();
    expect(refusedAppend(data, `{"payload":${nested(10_000)}}\n`)).toMatchObject({
      code: 'INVALID_RECORD',
      field: 'payload',
    });
    expect(refusedAppend(data, `{"payload":${nested(10_000, '{"a":', '}').replace(/:}/, ':0}')}}\n`)).toMatchObject({
      code: 'INVALID_RECORD',
      field: 'payload',
    });
  });

  it('refuses lone surrogates written as JSON escapes, and keeps a leading byte-order mark on the way out', () => {
    const data = feedDirectory();
    expect(refusedAppend(data, '{"payload":"a\\ud800"}\n')).toMatchObject({ code: 'INVALID_RECORD', field: 'payload' });
    expect(refusedAppend(data, '{"payload":"a","tags":["\\udfff"]}\n')).toMatchObject({
      code: 'INVALID_RECORD',
      field: 'tags',
    });
    expect(cli(data, ['append', 'f'], '{"payload":"\\ufeffbom \\ud83d\\ude00"}\n').status).toBe(0);
    const read = cli(data, ['read', 'f']);
    expect(JSON.parse(read.stdout).payload).toBe('\ufeffbom \u{1f600}');
  });
});

/** Strings of any code points, lone surrogates among them. */
const anyText = fc.string({
  unit: fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
    { weight: 1, arbitrary: fc.constantFrom('\ud800', '\udbff', '\udc00', '\udfff') },
  ),
  maxLength: 12,
  size: 'max',
});
const someText = fc.string({ unit: 'binary', minLength: 1, maxLength: 16, size: 'max' });
const anyJson = fc.jsonValue({ maxDepth: 3 });

/** A record line the engine must accept. */
const validRecord = fc
  .record(
    {
      payload: fc.oneof(fc.string({ unit: 'binary', maxLength: 40, size: 'max' }), anyJson),
      key: someText,
      version: fc.nat(),
      tombstone: fc.boolean(),
      type: someText,
      tags: fc.array(someText, { maxLength: 4, size: 'max' }),
      fingerprint: someText,
      timestamp: fc.nat(),
    },
    { requiredKeys: ['payload'] },
  )
  // A tombstone deletes a key, so it needs one.
  .map((record) => (record.tombstone && record.key === undefined ? { ...record, tombstone: undefined } : record));
const validBinaryRecord = fc
  .uint8Array({ maxLength: 40, size: 'max' })
  .map((bytes) => ({ payloadBase64: Buffer.from(bytes).toString('base64') }));
const validLine = fc
  .oneof({ weight: 3, arbitrary: validRecord }, { weight: 1, arbitrary: validBinaryRecord })
  .map((record) => JSON.stringify(record));

/** Known and misspelt field names, and anything at all. */
const anyField = fc.oneof(
  fc.constantFrom(
    'payload',
    'payloadBase64',
    'key',
    'version',
    'tombstone',
    'type',
    'tags',
    'fingerprint',
    'timestamp',
    'tag',
    'paylod',
  ),
  fc.string({ maxLength: 8 }),
);
const anyValue = fc.oneof(
  anyJson,
  anyText,
  fc.base64String({ maxLength: 12 }),
  fc.array(anyText, { maxLength: 3 }),
  fc.integer(),
);
const wildLine = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.dictionary(anyField, anyValue, { maxKeys: 5, size: 'max' }).map((record) => JSON.stringify(record)),
  },
  {
    weight: 1,
    arbitrary: fc
      .integer({ min: 1, max: 3 * limits.jsonNestingDepthMax })
      .map((levels) => `{"payload":${nested(levels)}}`),
  },
  { weight: 1, arbitrary: anyJson.map((value) => JSON.stringify(value)) },
);

/**
 * Pipes inputs into `append f` of one data directory: each gives either exit 0 and one commit
 * line, or exit 1, one typed error and a data directory unchanged since the previous run. It
 * tallies both outcomes, and `check` insists a property reached both.
 */
class Appender {
  accepted = 0;
  refused = 0;
  readonly data = feedDirectory();
  /** The directory's digest after the previous run, so that each run digests it only once. */
  private digest = digestTree(this.data);

  /** Returns whether `input` was accepted. */
  append(input: Uint8Array): boolean {
    const result = cli(this.data, ['append', 'f'], input);
    // The baseline moves on even when a check below fails, so that shrinking compares runs fairly.
    const [before, after] = [this.digest, digestTree(this.data)];
    this.digest = after;
    expect([0, 1], result.stderr).toContain(result.status);
    if (result.status === 0) {
      expect(result.stderr).toBe('');
      const lines = result.stdout.split('\n').filter((line) => line !== '');
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0])).toMatchObject({
        feed: 'f',
        commit: expect.any(Number),
        records: expect.any(Number),
      });
      this.accepted++;
      return true;
    }
    expect(inputRefusals).toContain(typedError(result.stderr).code);
    expect(result.stdout).toBe('');
    expect(after, 'a refusal changed the data directory').toBe(before);
    this.refused++;
    return false;
  }

  check(): void {
    expect(this.accepted, 'runs accepted').toBeGreaterThan(0);
    expect(this.refused, 'runs refused').toBeGreaterThan(0);
  }
}

describe('append, fuzzed', () => {
  it('takes arbitrary bytes: a commit or a typed refusal that changes nothing', {
    timeout: cliPropertyTimeoutMs,
  }, () => {
    const appender = new Appender();
    const junkLine = fc.uint8Array({ maxLength: 48, size: 'max' });
    // A valid line with one byte put in somewhere: often invalid JSON or UTF-8, sometimes harmless.
    const damagedLine = fc.tuple(validLine, fc.nat(), fc.integer({ min: 0, max: 255 })).map(([line, at, byte]) => {
      const bytes = utf8(line);
      const cut = at % (bytes.length + 1);
      return Buffer.concat([bytes.subarray(0, cut), Buffer.from([byte]), bytes.subarray(cut)]);
    });
    const line = fc.oneof(
      { weight: 6, arbitrary: validLine.map(utf8) },
      { weight: 1, arbitrary: junkLine },
      { weight: 1, arbitrary: damagedLine },
    );
    const input = fc
      .tuple(fc.array(line, { maxLength: 6, size: 'max' }), fc.constantFrom('\n', '\r\n'), fc.boolean())
      .map(([lines, separator, trailing]) =>
        Buffer.concat([...lines.flatMap((bytes) => [bytes, utf8(separator)]).slice(0, trailing ? undefined : -1)]),
      );
    fc.assert(
      fc.property(input, (bytes) => {
        appender.append(bytes);
      }),
      { numRuns: cliRuns },
    );
    appender.check();
  });

  it('takes arbitrary JSON lines: valid batches commit, anything else is refused and changes nothing', {
    timeout: cliPropertyTimeoutMs,
  }, () => {
    const appender = new Appender();
    const batch = fc.oneof(
      fc.record({ valid: fc.constant(true), lines: fc.array(validLine, { minLength: 1, maxLength: 4, size: 'max' }) }),
      fc.record({
        valid: fc.constant(false),
        lines: fc.array(fc.oneof(validLine, wildLine), { maxLength: 4, size: 'max' }),
      }),
    );
    fc.assert(
      fc.property(batch, ({ valid, lines }) => {
        const accepted = appender.append(utf8(lines.map((line) => `${line}\n`).join('')));
        if (valid) expect(accepted, lines.join('\n')).toBe(true);
      }),
      { numRuns: cliRuns },
    );
    appender.check();
  });
});

describe('output and failures', () => {
  it('stops quietly with exit 0 when the reader closes stdout early', async () => {
    const data = feedDirectory();
    const records = 5_000;
    const input = Array.from({ length: records }, (_, at) =>
      JSON.stringify({ payload: `record ${at} `.repeat(8) }),
    ).join('\n');
    expect(cli(data, ['append', 'f'], input).status).toBe(0);
    // About a megabyte of output: far more than a pipe holds, so writing goes on past the close.
    const child = spawn(process.execPath, [binary, '--data', data, 'read', 'f'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    let firstLine = '';
    child.stdout.once('data', (chunk: Buffer) => {
      firstLine = chunk.toString('utf8').split('\n')[0];
      child.stdout.destroy();
    });
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
      child.on('close', (exitCode, exitSignal) => resolve([exitCode, exitSignal])),
    );
    expect(JSON.parse(firstLine)).toMatchObject({ feed: 'f', seq: 1 });
    expect(stderr).toBe('');
    expect({ code, signal }).toEqual({ code: 0, signal: null });
  });

  it('prints an OS failure as a typed IO error with its errno, never a stack trace', () => {
    const result = cli('/dev/null/data', ['feed', 'list']);
    expect(result.status).toBe(1);
    expect(typedError(result.stderr)).toMatchObject({ code: 'IO', errno: 'ENOTDIR' });
  });

  it('types what reaches main: OS errors as IO, everything else as INTERNAL', () => {
    for (const errno of ['EROFS', 'ENOSPC', 'EACCES', 'EPERM', 'EIO']) {
      const system = Object.assign(new Error(`${errno}: failed`), { code: errno, syscall: 'write', path: '/data/x' });
      const typed = typedErrorOf(system);
      expect(typed).toMatchObject({ code: 'IO', details: { errno, syscall: 'write', path: '/data/x' } });
      expect(typed.message).toContain('write /data/x');
    }
    const typed = new StreamStackError('FENCED', 'fenced');
    expect(typedErrorOf(typed)).toBe(typed);
    expect(typedErrorOf(new TypeError('x is undefined'))).toMatchObject({ code: 'INTERNAL' });
    expect(typedErrorOf(Object.assign(new TypeError('bad'), { code: 'ERR_INVALID_ARG_TYPE' }))).toMatchObject({
      code: 'INTERNAL',
    });
    expect(typedErrorOf('a thrown string')).toMatchObject({
      code: 'INTERNAL',
      message: expect.stringContaining('a thrown string'),
    });
  });
});

describe('engine API strings', () => {
  const lone = 'a\ud800b';

  it('refuses lone surrogates in every text field, naming it', () => {
    const cases: Array<[string, Record<string, unknown>]> = [
      ['payload', { payload: lone }],
      ['key', { payload: 'x', key: lone }],
      ['type', { payload: 'x', type: lone }],
      ['tags', { payload: 'x', tags: ['ok', lone] }],
      ['fingerprint', { payload: 'x', fingerprint: '\udfff' }],
    ];
    for (const [field, record] of cases) {
      expect(() => validateRecords([{ payload: 'fine' }, record]), field).toThrow(
        expect.objectContaining({ code: 'INVALID_RECORD', details: { index: 1, field } }),
      );
    }
    expect(() => validateMessage(lone)).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT', details: { field: 'message' } }),
    );
  });

  it('accepts well-formed strings, surrogate pairs included', () => {
    const pair = 'smile \u{1f600}';
    const [record] = validateRecords([{ payload: pair, key: pair, type: pair, tags: [pair], fingerprint: pair }]);
    expect(Buffer.from(record.payload).toString('utf8')).toBe(pair);
    expect(validateMessage(pair)).toBe(pair);
  });
});
