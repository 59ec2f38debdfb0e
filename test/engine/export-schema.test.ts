/**
 * The export schema is fixed (docs/formats.md, Export schema): every file of every export of a
 * format has the same columns whatever its payloads are, the manifest's `columns` is exactly each
 * file's schema (names, types, nullability), and the values are those `read` gives. Checked by
 * readers that share no code with StreamStack (test/support/export_schema.py): pyarrow and DuckDB
 * for Arrow IPC and Parquet, Python's json module, pyarrow and DuckDB for NDJSON, on feeds of text
 * payloads only, binary payloads only, and mixed ones (1 in 1,000 binary), and on ranges of the
 * mixed feed whose records are all text or all binary.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type AppendRecord,
  type ExportFormat,
  type ExportManifest,
  type Feed,
  recordLine,
  type StoredRecord,
} from '../../packages/engine/src/index.js';
import { hex, sharedRowFields } from '../support/export-rows.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const reader = new URL('../support/export_schema.py', import.meta.url).pathname;
const formats: ExportFormat[] = ['ndjson', 'arrow', 'parquet'];

type Column = ExportManifest['columns'][number];

/** What each reader calls the Arrow types the manifest names (as Apache Arrow's JavaScript library writes them). */
const pyarrowTypes: Record<string, string> = {
  Utf8: 'string',
  Int64: 'int64',
  'Timestamp<MILLISECOND, UTC>': 'timestamp[ms, tz=UTC]',
  Bool: 'bool',
  'List<Utf8>': 'list<tag: string not null>',
  Binary: 'binary',
};
const duckdbTypes: Record<string, string> = {
  Utf8: 'VARCHAR',
  Int64: 'BIGINT',
  'Timestamp<MILLISECOND, UTC>': 'TIMESTAMP WITH TIME ZONE',
  Bool: 'BOOLEAN',
  'List<Utf8>': 'VARCHAR[]',
  Binary: 'BLOB',
};
/** The JSON type of an NDJSON value of each Arrow type. */
const jsonTypes: Record<string, string> = {
  Utf8: 'string',
  Int64: 'integer',
  Bool: 'boolean',
  'List<Utf8>': 'array<string>',
};

interface FileRead {
  path: string;
  error?: string;
  schemas?: {
    pyarrow?: Column[];
    duckdb?: { name: string; type: string }[];
    parquet?: { name: string; repetition: string }[];
    lines?: { names: string[]; types: Record<string, string[]> };
  };
  rows?: Record<string, Record<string, unknown>[]>;
}

function readBack(format: ExportFormat, directory: string, manifest: ExportManifest): FileRead[] {
  const files = manifest.files.map((file) => path.join(directory, file.name));
  const out = JSON.parse(
    execFileSync('python3', [reader, format, JSON.stringify(manifest.columns), ...files], {
      encoding: 'utf8',
      maxBuffer: 1 << 28,
    }),
  ) as { files: FileRead[] };
  return out.files;
}

/** The payload as `streamstack read` writes it: text where it is valid UTF-8, else base64. */
function asRead(record: StoredRecord): { text: string | null; base64: string | null } {
  const line = recordLine(record);
  return {
    text: typeof line.payload === 'string' ? line.payload : null,
    base64: typeof line.payloadBase64 === 'string' ? line.payloadBase64 : null,
  };
}

/** The row a file of `format` holds for `record`, as the reader script normalises it. */
function expectedRow(format: ExportFormat, record: StoredRecord): Record<string, unknown> {
  const common = sharedRowFields(record);
  const { text, base64 } = asRead(record);
  if (format === 'ndjson')
    return {
      ...common,
      fingerprintBase64: Buffer.from(record.fingerprint).toString('base64'),
      payload: text,
      payloadBase64: base64,
    };
  return { ...common, fingerprint: hex(record.fingerprint), payload: hex(record.payload), payloadText: text };
}

const encoder = new TextEncoder();

/** Text payloads with what JSON escapes, multi-byte characters, a leading byte-order mark, and empty ones. */
function textPayload(id: number): string {
  if (id % 97 === 0) return '';
  if (id % 89 === 0) return `\ufeffbom ${id}`;
  return `payload ${id} ünïcödé "quoted" \\ \n\t\u0001 😀 ${'.'.repeat(id % 30)}`;
}

/** Payloads that are not UTF-8, each differently: a stray byte, a cut character, a surrogate, an overlong form. */
function binaryPayload(id: number): Uint8Array {
  switch (id % 5) {
    case 0:
      return Uint8Array.of(0xff, id & 0xff, 0x00);
    case 1:
      return Uint8Array.of(...encoder.encode(`text then `), 0xc3);
    case 2:
      return Uint8Array.of(0xed, 0xa0, 0x80);
    case 3:
      return Uint8Array.of(0xc0, 0x80, ...encoder.encode(`${id}`));
    default:
      return Uint8Array.of(0x80);
  }
}

function record(id: number, payload: string | Uint8Array): AppendRecord {
  return {
    payload,
    ...(id % 2 === 0 ? { key: `key-${id % 17}` } : {}),
    ...(id % 3 === 1 ? { version: 1 + (id % 5) } : {}),
    ...(id % 4 === 3 ? { type: ['created', 'gelöscht'][id % 2] } : {}),
    tags: Array.from({ length: id % 3 }, (_, t) => `tag:${(id + t) % 4}`),
    ...(id % 11 === 5 ? { fingerprint: encoder.encode(`fp-${id}`) } : {}),
  };
}

/** Commits of `perCommit` records, the record `id`'s payload `payloadOf(id)`. */
async function appendCommits(
  feed: Feed,
  commits: number,
  perCommit: number,
  payloadOf: (id: number) => string | Uint8Array,
): Promise<void> {
  for (let commit = 0; commit < commits; commit++) {
    await feed.append(
      Array.from({ length: perCommit }, (_, n) => record(commit * perCommit + n, payloadOf(commit * perCommit + n))),
    );
  }
}

/** 1 in 1,000 of the mixed feed's first ten commits' payloads is binary. */
const mixedBinaryEvery = 1000;

describe('the export schema', () => {
  it.each(formats)(
    'is the same in every %s file whatever its payloads, equals the manifest’s columns in names, types and nullability, and holds the values read gives',
    async (format) => {
      const directory = temporaryDirectory();
      const store = await openStore(directory);
      try {
        const text = await store.createFeed('text');
        await appendCommits(text, 4, 500, textPayload);
        const binary = await store.createFeed('binary');
        await appendCommits(binary, 2, 500, binaryPayload);
        const mixed = await store.createFeed('mixed');
        await appendCommits(mixed, 10, 500, (id) =>
          id % mixedBinaryEvery === mixedBinaryEvery - 1 ? binaryPayload(id) : textPayload(id),
        );
        // Commit 11 is binary only, with two payloads that are each a half of one character and
        // lie side by side: valid UTF-8 together, neither on its own.
        await mixed.append([
          record(1, Uint8Array.of(0xc3)),
          record(2, Uint8Array.of(0xa9)),
          ...Array.from({ length: 48 }, (_, n) => record(n, binaryPayload(n))),
        ]);

        const exports: {
          name: string;
          feed: Feed;
          after?: number;
          upTo?: number;
          binaryRows: 'none' | 'some' | 'all';
        }[] = [
          { name: 'text only', feed: text, binaryRows: 'none' },
          { name: 'binary only', feed: binary, binaryRows: 'all' },
          { name: '1 in 1,000 binary', feed: mixed, upTo: 10, binaryRows: 'some' },
          { name: 'mixed, ending in a binary commit', feed: mixed, binaryRows: 'some' },
          { name: 'a range of text only', feed: mixed, upTo: 1, binaryRows: 'none' },
          { name: 'a range of binary only', feed: mixed, after: 10, binaryRows: 'all' },
        ];
        let columns: readonly Column[] | undefined;
        for (const [index, { name, feed, after, upTo, binaryRows }] of exports.entries()) {
          const to = path.join(directory, `out-${index}`);
          const manifest = await feed.export({ format, after, upTo, to });
          const records = await collect(feed.read({ after, upTo }));
          const binaryCount = records.filter((stored) => asRead(stored).text === null).length;
          expect(
            binaryRows === 'none'
              ? binaryCount === 0
              : binaryRows === 'all'
                ? binaryCount === records.length
                : binaryCount > 0 && binaryCount < records.length,
            name,
          ).toBe(true);
          // One schema for the format, whatever the payloads.
          columns ??= manifest.columns;
          expect(manifest.columns, `${name}: the manifest's columns`).toEqual(columns);
          expect(manifest.files.length, name).toBeGreaterThan(0);
          const files = readBack(format, to, manifest);
          const rows: Record<string, Record<string, unknown>[]> = {};
          for (const [at, file] of files.entries()) {
            const what = `${format} ${name}: ${manifest.files[at].name}`;
            expectSchema(format, manifest.columns, file, what);
            expect(file.error, `${what}: the query naming every column`).toBeUndefined();
            for (const [readerName, readerRows] of Object.entries(file.rows!))
              (rows[readerName] ??= []).push(...readerRows);
            const fileRecords = records.filter(
              (stored) =>
                stored.commit >= manifest.files[at].firstCommit && stored.commit <= manifest.files[at].lastCommit,
            );
            expect(manifest.files[at].payloadText, `${what}: payloadText says whether every payload is text`).toBe(
              fileRecords.every((stored) => asRead(stored).text !== null),
            );
          }
          const expected = records.map((stored) => expectedRow(format, stored));
          for (const [readerName, readerRows] of Object.entries(rows))
            expect(readerRows, `${format} ${name}, read by ${readerName}`).toEqual(expected);
        }
      } finally {
        await store.close();
      }
    },
    120_000,
  );
});

/** Checks that the schema each reader sees in `file` is exactly `columns`. */
function expectSchema(format: ExportFormat, columns: readonly Column[], file: FileRead, what: string): void {
  expect(file.schemas, `${what}: a schema was read (${file.error})`).toBeDefined();
  const names = columns.map((column) => column.name);
  if (format === 'ndjson') {
    // An NDJSON file's schema is its lines' fields: the same names in the same order on every
    // line, each value of its column's JSON type, and null only where the column is nullable.
    const lines = file.schemas!.lines!;
    expect(lines.names, `${what}: the fields of every line`).toEqual(names);
    for (const column of columns) {
      const allowed = [jsonTypes[column.type], ...(column.nullable ? ['null'] : [])];
      for (const seen of lines.types[column.name] ?? [])
        expect(allowed, `${what}: ${column.name} holds a ${seen}`).toContain(seen);
    }
    return;
  }
  expect(file.schemas!.pyarrow, `${what}: the Arrow schema pyarrow reads`).toEqual(
    columns.map((column) => ({ name: column.name, type: pyarrowTypes[column.type], nullable: column.nullable })),
  );
  expect(file.schemas!.duckdb, `${what}: the columns DuckDB binds`).toEqual(
    columns.map((column) => ({ name: column.name, type: duckdbTypes[column.type] })),
  );
  if (format === 'parquet') {
    expect(file.schemas!.parquet, `${what}: the Parquet schema's repetitions`).toEqual(
      columns.map((column) => ({ name: column.name, repetition: column.nullable ? 'OPTIONAL' : 'REQUIRED' })),
    );
  }
}
