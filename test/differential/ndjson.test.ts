/**
 * `ndjsonLines`, native and ts: a batch's NDJSON lines, export lines and read lines, are byte
 * for byte the same from both kernel sets; every export line is what `JSON.stringify` writes for
 * the record, every read line what it writes for `recordLine(record)`; both say -1 when the lines
 * do not fit, and both refuse the same bad columns with the same code.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { StreamRecord } from '../../packages/engine/src/api/stream.js';
import type { NdjsonColumns } from '../../packages/engine/src/kernels/kernels.js';
import { bytesField, recordLine } from '../../packages/protocol/src/record-lines.js';
import { branchTally, expectSameOutcome, native, ts } from './both.js';

const encoder = new TextEncoder();
const flags = { key: 2, version: 4, tombstone: 8, elsewhere: 128 };

/** Text with what JSON escapes and multi-byte characters. */
const textArb = fc.string({
  unit: fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom('a', 'Z', '0', ' ', '{', '}', ':', 'x') },
    { weight: 2, arbitrary: fc.constantFrom('"', '\\', '\n', '\t', '\u0001', '\u001f', '\u007f') },
    { weight: 1, arbitrary: fc.constantFrom('é', '€', '\u{1f600}', '\u2028') },
  ),
  maxLength: 120,
});

interface TestRecord {
  key?: string;
  version?: number;
  tombstone: boolean;
  typeId: number;
  tags: string[];
  fingerprint: Uint8Array;
  payload: Uint8Array;
  elsewhere: boolean;
  seq: number;
  position: number;
  timestamp: number;
}

/**
 * Payloads of every kind, each written its own way: text, bytes (rarely UTF-8), text with one
 * byte that makes it not UTF-8, and text cut inside a multi-byte character.
 */
const payloadArb = fc.oneof(
  textArb.map((value) => encoder.encode(value)),
  fc.uint8Array({ maxLength: 200 }),
  fc
    .tuple(textArb, fc.constantFrom(0x80, 0xbf, 0xc0, 0xf8, 0xff))
    .map(([value, byte]) => Uint8Array.of(...encoder.encode(value), byte, ...encoder.encode(value))),
  textArb.map((value) => encoder.encode(`${value}é€😀`)).map((bytes) => bytes.subarray(0, bytes.length - 1)),
);

const isText = (payload: Uint8Array) => 'payload' in bytesField('payload', payload);

const recordArb = (types: number) =>
  fc.record({
    key: fc.option(textArb, { nil: undefined }),
    version: fc.option(fc.maxSafeNat(), { nil: undefined }),
    tombstone: fc.boolean(),
    typeId: fc.integer({ min: -1, max: types - 1 }),
    tags: fc.array(textArb, { maxLength: 4 }),
    // Bytes (rarely UTF-8) or text: a read line writes a fingerprint as text where it is UTF-8.
    fingerprint: fc.oneof(
      fc.uint8Array({ minLength: 1, maxLength: 32 }),
      textArb.filter((text) => text.length > 0).map((text) => encoder.encode(text)),
    ),
    payload: payloadArb,
    elsewhere: fc.boolean(),
    seq: fc.maxSafeNat(),
    position: fc.maxSafeNat(),
    timestamp: fc.maxSafeNat(),
  });

/**
 * The commit of row `row` of a batch: 7 for every row of a batch of one commit; in a batch that
 * spans commits, a new one every three rows. Its stream is `s-` and its number less six.
 */
function commitOfRow(row: number, spanning: boolean): number {
  return spanning ? 7 + Math.floor(row / 3) : 7;
}

/** The head every line of `commit`'s rows starts with. */
function headOf(commit: number): string {
  return `{"feed":"f","commit":${commit},"stream":"s-${commit - 6}","seq":`;
}

/** The heads of a batch: one, or one per commit with each row's (`commitOfRow`). */
function headsOf(rows: number, spanning: boolean) {
  if (!spanning) return { head: encoder.encode(headOf(7)), headEnds: new Uint32Array(0), rowHeads: new Uint32Array(0) };
  const commits = rows === 0 ? 0 : commitOfRow(rows - 1, true) - 6;
  const heads = Array.from({ length: commits }, (_, index) => encoder.encode(headOf(7 + index)));
  let end = 0;
  return {
    head: Buffer.concat(heads),
    headEnds: Uint32Array.from(heads, (head) => (end += head.length)),
    rowHeads: Uint32Array.from({ length: rows }, (_, row) => commitOfRow(row, true) - 7),
  };
}

/** The records as a batch's columns: strings and payloads laid out in one buffer (or the external one). */
function columnsOf(
  records: readonly TestRecord[],
  types: readonly string[],
  readLines = false,
  spanning = false,
): NdjsonColumns {
  const parts: Uint8Array[] = [];
  const external: Uint8Array[] = [];
  let at = 0;
  let externalAt = 0;
  const place = (bytes: Uint8Array, into: 'bytes' | 'external'): [number, number] => {
    if (into === 'external') {
      external.push(bytes);
      return [externalAt, (externalAt += bytes.length)];
    }
    parts.push(bytes);
    return [at, (at += bytes.length)];
  };
  const rows = records.length;
  const columns = {
    seqs: new Float64Array(rows),
    positions: new Float64Array(rows),
    timestamps: new Float64Array(rows),
    versions: new Float64Array(rows),
    flags: new Uint8Array(rows),
    typeIds: new Int32Array(rows),
    keyStarts: new Uint32Array(rows),
    keyEnds: new Uint32Array(rows),
    tagRows: new Uint32Array(rows + 1),
    fingerprintStarts: new Uint32Array(rows),
    fingerprintEnds: new Uint32Array(rows),
    payloadStarts: new Uint32Array(rows),
    payloadEnds: new Uint32Array(rows),
  };
  const tagStarts: number[] = [];
  const tagEnds: number[] = [];
  records.forEach((record, row) => {
    columns.seqs[row] = record.seq;
    columns.positions[row] = record.position;
    columns.timestamps[row] = record.timestamp;
    columns.versions[row] = record.version ?? 0;
    columns.typeIds[row] = record.typeId;
    columns.flags[row] =
      (record.key !== undefined ? flags.key : 0) |
      (record.version !== undefined ? flags.version : 0) |
      (record.tombstone ? flags.tombstone : 0) |
      (record.elsewhere ? flags.elsewhere : 0);
    [columns.keyStarts[row], columns.keyEnds[row]] =
      record.key !== undefined ? place(encoder.encode(record.key), 'bytes') : [at, at];
    columns.tagRows[row] = tagStarts.length;
    for (const tag of record.tags) {
      const [start, end] = place(encoder.encode(tag), 'bytes');
      tagStarts.push(start);
      tagEnds.push(end);
    }
    [columns.fingerprintStarts[row], columns.fingerprintEnds[row]] = place(record.fingerprint, 'bytes');
    [columns.payloadStarts[row], columns.payloadEnds[row]] = place(
      record.payload,
      record.elsewhere ? 'external' : 'bytes',
    );
  });
  columns.tagRows[rows] = tagStarts.length;
  const typeBytes = types.map((type) => encoder.encode(JSON.stringify(type)));
  let typeAt = 0;
  return {
    ...headsOf(rows, spanning),
    types: Buffer.concat(typeBytes),
    typeEnds: Uint32Array.from(typeBytes, (bytes) => (typeAt += bytes.length)),
    bytes: Buffer.concat(parts),
    external: Buffer.concat(external),
    ...columns,
    tagStarts: Uint32Array.from(tagStarts),
    tagEnds: Uint32Array.from(tagEnds),
    keyFlag: flags.key,
    versionFlag: flags.version,
    tombstoneFlag: flags.tombstone,
    elsewhereFlag: flags.elsewhere,
    readLines,
  };
}

/** What `JSON.stringify` writes for a record's line, its payload as `read` writes it: text where it is UTF-8, else base64, the other null. */
function expectedLine(record: TestRecord, types: readonly string[], commit = 7): string {
  const value: Record<string, unknown> = {
    feed: 'f',
    commit,
    stream: `s-${commit - 6}`,
    seq: record.seq,
    position: record.position,
    timestamp: record.timestamp,
    key: record.key ?? null,
    version: record.version ?? null,
    tombstone: record.tombstone,
    type: record.typeId < 0 ? null : types[record.typeId],
    tags: record.tags,
    fingerprintBase64: Buffer.from(record.fingerprint).toString('base64'),
  };
  const asRead = bytesField('payload', record.payload);
  value.payload = asRead.payload ?? null;
  value.payloadBase64 = asRead.payloadBase64 ?? null;
  return `${JSON.stringify(value)}\n`;
}

/** The read line of a record: what `recordLine` makes of it, as `JSON.stringify` writes it. */
function expectedReadLine(record: TestRecord, types: readonly string[], commit = 7): string {
  const stored: StreamRecord = {
    feed: 'f',
    commit,
    stream: `s-${commit - 6}`,
    seq: record.seq,
    position: record.position,
    timestamp: record.timestamp,
    payload: record.payload,
    fingerprint: record.fingerprint,
    key: record.key,
    version: record.version,
    tombstone: record.tombstone,
    type: record.typeId < 0 ? undefined : types[record.typeId],
    tags: record.tags,
  } as StreamRecord;
  return `${JSON.stringify(recordLine(stored))}\n`;
}

describe('ndjsonLines: native and ts agree, and match JSON.stringify', () => {
  it('write every record as JSON.stringify does, and both say when the lines do not fit', () => {
    const tally = branchTally('ndjsonLines', [
      'export lines',
      'read lines',
      'a payload as text',
      'a payload as base64',
      'text and base64 in one batch',
      'a fingerprint as text',
      'a key',
      'no key',
      'a payload elsewhere',
      'no type',
      'tags',
      'over 50 records',
      'out too small',
      'a batch spanning commits',
    ]);
    // Batches of up to 80 records (size 'max', so long ones come often), each with up to 4 tags
    // and strings up to 120 characters; payloads text or not, mixed in a batch (up to 200 random
    // bytes, or texts of up to 120 characters, twice over around a stray byte); the out buffer is
    // sometimes cut a byte short of the lines.
    const batchArb = fc.array(textArb, { minLength: 1, maxLength: 4 }).chain((types) =>
      fc.record({
        types: fc.constant(types),
        records: fc.array(recordArb(types.length), { maxLength: 80, size: 'max' }),
        short: fc.boolean(),
        readLines: fc.boolean(),
        spanning: fc.boolean(),
      }),
    );
    fc.assert(
      fc.property(batchArb, ({ types, records, short, readLines, spanning }) => {
        const columns = columnsOf(records, types, readLines, spanning);
        const expected = records
          .map((record, row) =>
            (readLines ? expectedReadLine : expectedLine)(record, types, commitOfRow(row, spanning)),
          )
          .join('');
        tally.hit('a batch spanning commits', spanning && records.length > 3);
        tally.hit(readLines ? 'read lines' : 'export lines');
        const bytes = encoder.encode(expected);
        const texts = records.filter((record) => isText(record.payload)).length;
        tally.hit('a payload as text', texts > 0);
        tally.hit('a payload as base64', texts < records.length);
        tally.hit('text and base64 in one batch', texts > 0 && texts < records.length);
        tally.hit('over 50 records', records.length > 50);
        for (const record of records) {
          tally.hit(record.key === undefined ? 'no key' : 'a key');
          tally.hit('a payload elsewhere', record.elsewhere);
          tally.hit('no type', record.typeId < 0);
          tally.hit('tags', record.tags.length > 0);
          tally.hit('a fingerprint as text', readLines && isText(record.fingerprint));
        }
        const size = short && bytes.length > 0 ? bytes.length - 1 : bytes.length + 16;
        tally.hit('out too small', size < bytes.length);
        const written = expectSameOutcome((kernels) => {
          const out = new Uint8Array(size);
          const length = kernels.ndjsonLines(columns, out);
          return length < 0 ? length : out.slice(0, length);
        });
        expect(written).toEqual({ ok: true, value: size < bytes.length ? -1 : new Uint8Array(bytes) });
      }),
      { numRuns: 300 },
    );
    tally.expectAllReached();
  });

  it('refuse keys that are not UTF-8 and columns that do not fit, with the same codes', () => {
    const base = (): TestRecord => ({
      key: 'k',
      tombstone: false,
      typeId: 0,
      tags: ['t'],
      fingerprint: Uint8Array.of(1),
      payload: encoder.encode('p'),
      elsewhere: false,
      seq: 1,
      position: 1,
      timestamp: 1,
    });
    const good = columnsOf([base(), base()], ['created']);
    const out = new Uint8Array(4096);
    expect(native.ndjsonLines(good, out)).toBe(ts.ndjsonLines(good, out));
    const badKey = {
      ...good,
      bytes: Uint8Array.from(good.bytes, (byte, at) => (at === good.keyStarts[1] ? 0xff : byte)),
    };
    const cases: [string, NdjsonColumns, string][] = [
      ['a key that is not UTF-8', badKey, 'CORRUPT'],
      ['a seq that is not a safe integer', { ...good, seqs: Float64Array.of(1, 1.5) }, 'INVALID_ARGUMENT'],
      ['a position past 2^53', { ...good, positions: Float64Array.of(1, 2 ** 60) }, 'INVALID_ARGUMENT'],
      ['a column short of the rows', { ...good, keyEnds: good.keyEnds.subarray(0, 1) }, 'INVALID_ARGUMENT'],
      [
        'a payload past its bytes',
        { ...good, payloadEnds: Uint32Array.of(good.payloadEnds[0], good.bytes.length + 1) },
        'INVALID_ARGUMENT',
      ],
      ['a type that is not the batch’s', { ...good, typeIds: Int32Array.of(0, 1) }, 'INVALID_ARGUMENT'],
      ['tags past the tag columns', { ...good, tagRows: Uint32Array.of(0, 1, 5) }, 'INVALID_ARGUMENT'],
      [
        'a row head that is not the batch’s',
        { ...columnsOf([base(), base()], ['created'], false, true), rowHeads: Uint32Array.of(0, 1) },
        'INVALID_ARGUMENT',
      ],
      [
        'a head past the heads’ bytes',
        { ...columnsOf([base(), base()], ['created'], false, true), headEnds: Uint32Array.of(500) },
        'INVALID_ARGUMENT',
      ],
      [
        'row heads short of the rows',
        { ...columnsOf([base(), base()], ['created'], false, true), rowHeads: Uint32Array.of(0) },
        'INVALID_ARGUMENT',
      ],
    ];
    for (const [what, columns, code] of cases) {
      // Also into a buffer too small, and as read lines: the columns are refused whatever the room and the form.
      for (const room of [4096, 8])
        for (const readLines of [false, true])
          expect(
            expectSameOutcome((kernels) => kernels.ndjsonLines({ ...columns, readLines }, new Uint8Array(room))),
            what,
          ).toEqual({ ok: false, code });
    }
  });
});
