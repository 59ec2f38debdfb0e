/**
 * Export, read back by readers that share no code with StreamStack (DuckDB for Parquet and
 * NDJSON, pyarrow for Arrow IPC, through test/support/export_reader.py): every row and field of
 * every mode × format equals `feed.read` of the same range; the text payload column holds each
 * payload that is text and null for the others; two exports are byte-identical and the manifest's
 * checksums are the files'; an export up to C and one after C hold exactly one export of all;
 * bad input fails typed with nothing written. Also the read bound `upTo` the export rests on.
 */
import { isUtf8 } from 'node:buffer';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type AppendRecord,
  type ExportFormat,
  type ExportManifest,
  type Feed,
  isStreamStackError,
  limits,
  type ReadMode,
  readExportManifest,
  type StoredRecord,
  verifyExport,
} from '../../packages/engine/src/index.js';
import { hex, sharedRowFields } from '../support/export-rows.js';
import { collect, openStore, temporaryDirectory } from '../support/store.js';

const reader = new URL('../support/export_reader.py', import.meta.url).pathname;
const formats: ExportFormat[] = ['ndjson', 'arrow', 'parquet'];
const modes: ReadMode[] = ['raw', 'dedup', 'latest'];

interface Row {
  feed: string;
  commit: number;
  stream: string;
  seq: number;
  position: number;
  timestamp: number;
  key: string | null;
  version: number | null;
  tombstone: boolean;
  type: string | null;
  tags: string[];
  fingerprint: string;
  payload: string;
  payloadText?: string | null;
}

function readBack(
  format: ExportFormat,
  directory: string,
  manifest: ExportManifest,
): { rows: Row[]; files: { sha256: string; rows: Row[] }[] } {
  const files = manifest.files.map((file) => path.join(directory, file.name));
  if (files.length === 0) return { rows: [], files: [] };
  const out = JSON.parse(
    execFileSync('python3', [reader, format, ...files], { encoding: 'utf8', maxBuffer: 1 << 28 }),
  ) as { files: { sha256: string; rows: Row[] }[] };
  return { rows: out.files.flatMap((file) => file.rows), files: out.files };
}

function expectedRow(record: StoredRecord): Row {
  return {
    ...sharedRowFields(record),
    fingerprint: hex(record.fingerprint),
    payload: hex(record.payload),
  };
}

const encoder = new TextEncoder();

/** Commit `commit`'s records: keys updated across commits, tombstones, types, tags, own fingerprints and repeated payloads. */
function recordsOf(commit: number, binary: boolean): AppendRecord[] {
  return Array.from({ length: 1 + ((commit * 37) % 60) }, (_, n) => {
    const id = commit * 100 + n;
    return {
      // Every seventh payload repeats an earlier one: dedup drops it.
      payload:
        binary && n === 3
          ? new Uint8Array([0xff, 0x00, 0xc3, commit & 0xff])
          : n % 7 === 6
            ? `repeat ${n % 3}`
            : `payload ${id} ünïcödé ${'.'.repeat(id % 50)}`,
      ...(n % 4 === 0 ? {} : { key: `key-${id % 23}` }),
      ...(n % 3 === 1 ? { version: 1 + (id % 4) } : {}),
      ...(n % 13 === 5 ? { key: `key-${id % 23}`, tombstone: true } : {}),
      ...(n % 5 === 4 ? {} : { type: ['created', 'updated', 'gelöscht'][id % 3] }),
      tags: Array.from({ length: n % 3 }, (_, t) => `tag:${(id + t) % 5}`),
      ...(n % 9 === 2 ? { fingerprint: encoder.encode(`fp-${id % 6}`) } : {}),
    };
  });
}

/** A feed of 30 commits, some as streams of several appends; with `binary`, some payloads are not UTF-8. */
async function feedWith(directory: string, binary: boolean): Promise<{ feed: Feed; close: () => Promise<void> }> {
  const store = await openStore(directory, { segmentBytes: 256 * 1024 });
  const feed = await store.createFeed('f');
  for (let commit = 1; commit <= 30; commit++) {
    const records = recordsOf(commit, binary && commit % 10 === 4);
    if (commit % 3 !== 0) await feed.append(records);
    else {
      const { token } = await feed.acquireLease({ holder: 'test' });
      const stream = await feed.openStream({ token });
      for (let at = 0; at < records.length; at += 20) await stream.append(records.slice(at, at + 20), { token });
      await stream.seal({ token });
      await feed.releaseLease({ token });
    }
  }
  return { feed, close: () => store.close() };
}

function sha256(file: string): string {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

describe('feed.export', () => {
  it.each(formats)(
    'writes %s files whose every row equals feed.read of the range, in all three modes, each text payload also as text and the others null there',
    async (format) => {
      let binaryFiles = 0;
      for (const binary of [false, true]) {
        const directory = temporaryDirectory();
        const { feed, close } = await feedWith(directory, binary);
        try {
          for (const mode of modes) {
            for (const [after, upTo] of [
              [0, 30],
              [5, 22],
            ] as const) {
              const to = path.join(directory, `out-${mode}-${after}`);
              const manifest = await feed.export({ format, mode, after, upTo, to });
              const expected = (await collect(feed.read({ after, upTo, mode }))).map(expectedRow);
              expect(expected.length).toBeGreaterThan(0);
              expect(manifest).toMatchObject({ feed: 'f', mode, format, after, upTo, records: expected.length });
              const { rows, files } = readBack(format, to, manifest);
              // One file here: every file has the text column, whatever its payloads; the manifest
              // says whether every payload of the file is text.
              expect(manifest.files).toHaveLength(1);
              const allText = expected.every((row) => isUtf8(Buffer.from(row.payload, 'hex')));
              if (!allText) binaryFiles++;
              expect(manifest.files[0].payloadText).toBe(allText);
              for (const row of rows) {
                const bytes = Buffer.from(row.payload, 'hex');
                expect(row.payloadText, 'the text column is in every file').toBeDefined();
                expect(row.payloadText).toBe(isUtf8(bytes) ? bytes.toString('utf8') : null);
                delete row.payloadText;
              }
              expect(rows, `${format} ${mode} (${after}, ${upTo}] binary=${binary}`).toEqual(expected);
              // The checksums the manifest names are those an independent hash of each file gives.
              expect(files.map((file) => file.sha256)).toEqual(manifest.files.map((file) => file.sha256));
            }
          }
        } finally {
          await close();
        }
      }
      expect(binaryFiles, 'some exports hold binary payloads').toBeGreaterThan(0);
    },
  );

  it.each(formats)(
    'is deterministic (%s): the same range twice gives byte-identical files and manifests, which verify',
    async (format) => {
      const directory = temporaryDirectory();
      // With binary payloads among the text ones: their rows' text is null, in a column of its own.
      const { feed, close } = await feedWith(directory, true);
      try {
        const first = await feed.export({ format, mode: 'dedup', to: path.join(directory, 'a') });
        const second = await feed.export({ format, mode: 'dedup', to: path.join(directory, 'b') });
        expect(fs.readFileSync(path.join(directory, 'a', 'manifest.json'))).toEqual(
          fs.readFileSync(path.join(directory, 'b', 'manifest.json')),
        );
        expect(first.files.length).toBeGreaterThan(0);
        for (const file of first.files) {
          expect(fs.readFileSync(path.join(directory, 'a', file.name))).toEqual(
            fs.readFileSync(path.join(directory, 'b', file.name)),
          );
          expect(sha256(path.join(directory, 'a', file.name))).toBe(file.sha256);
        }
        expect(second).toEqual(first);
        expect((await verifyExport(path.join(directory, 'a'))).problems).toEqual([]);
        fs.appendFileSync(path.join(directory, 'b', first.files[0].name), 'x');
        expect((await verifyExport(path.join(directory, 'b'))).problems).toHaveLength(1);
      } finally {
        await close();
      }
    },
  );

  it('reads back manifests of version 1 (before the fixed schema) and 2, and refuses others as CORRUPT', async () => {
    const directory = temporaryDirectory();
    const { feed, close } = await feedWith(directory, false);
    try {
      const to = path.join(directory, 'out');
      const manifest = await feed.export({ format: 'arrow', upTo: 4, to });
      expect(manifest.manifestVersion).toBe(2);
      const file = path.join(to, 'manifest.json');
      const text = fs.readFileSync(file, 'utf8');
      for (const version of [1, 2]) {
        fs.writeFileSync(file, text.replace('"manifestVersion": 2', `"manifestVersion": ${version}`));
        // What continuing an export needs (its upTo, mode and format), and verifying its files.
        expect(await readExportManifest(to)).toMatchObject({
          manifestVersion: version,
          upTo: 4,
          mode: 'raw',
          format: 'arrow',
        });
        expect((await verifyExport(to)).problems).toEqual([]);
      }
      fs.writeFileSync(file, text.replace('"manifestVersion": 2', '"manifestVersion": 3'));
      const error = await readExportManifest(to).then(
        () => undefined,
        (caught: unknown) => caught,
      );
      expect(isStreamStackError(error, 'CORRUPT'), String(error)).toBe(true);
    } finally {
      await close();
    }
  });

  it.each(['raw', 'dedup'] as const)(
    'resumes exactly (%s): an export up to C, then one after C, hold the rows of one export of all',
    async (mode) => {
      const directory = temporaryDirectory();
      const { feed, close } = await feedWith(directory, true);
      try {
        const whole = await feed.export({ format: 'parquet', mode, to: path.join(directory, 'whole') });
        const first = await feed.export({ format: 'parquet', mode, upTo: 13, to: path.join(directory, 'first') });
        const rest = await feed.export({
          format: 'parquet',
          mode,
          after: first.upTo,
          to: path.join(directory, 'rest'),
        });
        expect(rest.upTo).toBe(whole.upTo);
        expect(first.records + rest.records).toBe(whole.records);
        const rows = [
          ...readBack('parquet', path.join(directory, 'first'), first).rows,
          ...readBack('parquet', path.join(directory, 'rest'), rest).rows,
        ];
        expect(rows).toEqual(readBack('parquet', path.join(directory, 'whole'), whole).rows);
        // Nothing new since: a continuation holds no files, and says so.
        const none = await feed.export({ format: 'parquet', mode, after: rest.upTo, to: path.join(directory, 'none') });
        expect(none).toMatchObject({ after: 30, upTo: 30, records: 0, files: [] });
      } finally {
        await close();
      }
    },
  );

  it('gives Parquet row groups the statistics range queries use: least and greatest position, commit and timestamp', async () => {
    const directory = temporaryDirectory();
    const { feed, close } = await feedWith(directory, false);
    try {
      const manifest = await feed.export({ format: 'parquet', after: 5, upTo: 22, to: path.join(directory, 'out') });
      const records = await collect(feed.read({ after: 5, upTo: 22 }));
      const file = path.join(directory, 'out', manifest.files[0].name);
      // DuckDB reads the statistics from the file's footer, as a query planner would.
      const script = [
        'import sys, json, duckdb',
        'rows = duckdb.sql("select path_in_schema, stats_min_value, stats_max_value from parquet_metadata(\'" + sys.argv[1] + "\')").fetchall()',
        'print(json.dumps({name: [low, high] for name, low, high in rows}))',
      ].join('\n');
      const statistics = JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' })) as Record<
        string,
        [string | null, string | null]
      >;
      const span = (values: number[]) => [String(Math.min(...values)), String(Math.max(...values))];
      expect(statistics.position).toEqual(span(records.map((record) => record.position)));
      expect(statistics.commit).toEqual(span(records.map((record) => record.commit)));
      expect(statistics.timestamp?.every((value) => value !== null)).toBe(true);
      // Columns no range query filters by carry none: computing them cost a fifth of the writer.
      expect(statistics.payload).toEqual([null, null]);
    } finally {
      await close();
    }
  });

  it('splits a large export into files of about the target size, every file named in the manifest and of the manifest’s columns', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory, { segmentBytes: 8 * 1024 * 1024 });
    try {
      const feed = await store.createFeed('f');
      // Payloads of 64 KiB: the target is reached after about target / 64 KiB records.
      const payload = 'x'.repeat(64 * 1024);
      const perCommit = 32;
      const commits = Math.ceil((limits.exportFileBytesTarget * 1.5) / (payload.length * perCommit));
      // The last commit's first payload is not UTF-8: the second file holds a binary payload, the
      // first none, and both have the same columns.
      const payloadOf = (commit: number, n: number) =>
        commit === commits - 1 && n === 0
          ? Uint8Array.of(0xff, ...encoder.encode(payload))
          : `${commit}-${n}-${payload}`;
      for (let commit = 0; commit < commits; commit++)
        await feed.append(Array.from({ length: perCommit }, (_, n) => ({ payload: payloadOf(commit, n) })));
      const manifest = await feed.export({ format: 'arrow', to: path.join(directory, 'out') });
      expect(manifest.files.length).toBe(2);
      expect(manifest.files.map((file) => file.payloadText)).toEqual([true, false]);
      expect(manifest.files.reduce((total, file) => total + file.records, 0)).toBe(commits * perCommit);
      expect(manifest.files[1].firstCommit).toBe(manifest.files[0].lastCommit + 1);
      // The rows are too many bytes to pass through JSON: pyarrow reads just the positions, and
      // each file's schema.
      const script =
        'import sys, json, pyarrow.ipc as ipc; t = ipc.open_file(sys.argv[1]).read_all(); print(json.dumps({"positions": t.column("position").to_pylist(), "columns": [[f.name, f.nullable] for f in t.schema]}))';
      const files = manifest.files.map(
        (file) =>
          JSON.parse(
            execFileSync('python3', ['-c', script, path.join(directory, 'out', file.name)], { encoding: 'utf8' }),
          ) as { positions: number[]; columns: [string, boolean][] },
      );
      expect(files.flatMap((file) => file.positions)).toEqual(
        Array.from({ length: commits * perCommit }, (_, n) => n + 1),
      );
      for (const file of files)
        expect(file.columns).toEqual(manifest.columns.map((column) => [column.name, column.nullable]));
    } finally {
      await store.close();
    }
  });

  it('refuses bad input with a typed error and writes nothing', async () => {
    const directory = temporaryDirectory();
    const { feed, close } = await feedWith(directory, false);
    try {
      const file = path.join(directory, 'a-file');
      fs.writeFileSync(file, 'not a directory');
      const finished = path.join(directory, 'finished');
      await feed.export({ format: 'ndjson', to: finished, upTo: 1 });
      const finishedBefore = fs.readdirSync(finished).sort();
      const to = path.join(directory, 'out');
      const cases: [string, Record<string, unknown>, string][] = [
        ['unknown format', { format: 'csv', to }, 'INVALID_ARGUMENT'],
        ['unknown mode', { format: 'arrow', mode: 'newest', to }, 'INVALID_ARGUMENT'],
        ['missing to', { format: 'arrow' }, 'INVALID_ARGUMENT'],
        ['to is a file', { format: 'arrow', to: file }, 'INVALID_ARGUMENT'],
        ['to cannot be created', { format: 'arrow', to: path.join(file, 'below') }, 'IO'],
        ['to holds an export', { format: 'arrow', to: finished }, 'INVALID_ARGUMENT'],
        ['upTo before after', { format: 'arrow', to, after: 10, upTo: 4 }, 'INVALID_ARGUMENT'],
        ['upTo beyond the head', { format: 'arrow', to, upTo: 31 }, 'CURSOR_OUT_OF_RANGE'],
        ['after beyond the head', { format: 'arrow', to, after: 31 }, 'CURSOR_OUT_OF_RANGE'],
        ['negative after', { format: 'arrow', to, after: -1 }, 'CURSOR_OUT_OF_RANGE'],
      ];
      for (const [what, options, code] of cases) {
        const error = await feed.export(options as never).then(
          () => undefined,
          (caught: unknown) => caught,
        );
        expect(isStreamStackError(error, code as never), `${what}: ${String(error)}`).toBe(true);
        expect(fs.existsSync(to), what).toBe(false);
      }
      expect(fs.readFileSync(file, 'utf8')).toBe('not a directory');
      expect(fs.readdirSync(finished).sort()).toEqual(finishedBefore);
    } finally {
      await close();
    }
  });

  it('stops when its signal aborts, leaving no manifest', async () => {
    const directory = temporaryDirectory();
    const { feed, close } = await feedWith(directory, false);
    try {
      const controller = new AbortController();
      const to = path.join(directory, 'out');
      const error = await feed
        .export({
          format: 'ndjson',
          to,
          signal: controller.signal,
          onProgress: (progress) => progress.commit >= 3 && controller.abort(),
        })
        .then(
          () => undefined,
          (caught: unknown) => caught,
        );
      expect(error).toBeDefined();
      expect(fs.existsSync(path.join(to, 'manifest.json'))).toBe(false);
      // The directory an unfinished export left is used again.
      const manifest = await feed.export({ format: 'ndjson', to });
      expect(manifest.records).toBe((await collect(feed.read())).length);
    } finally {
      await close();
    }
  });
});

describe('reads bounded by upTo', () => {
  it('read the commits (after, upTo] in every mode, and refuse an upTo before after or past the head', async () => {
    const directory = temporaryDirectory();
    const { feed, close } = await feedWith(directory, false);
    try {
      for (const mode of modes) {
        const bounded = await collect(feed.read({ after: 4, upTo: 17, mode }));
        expect(bounded.every((record) => record.commit > 4 && record.commit <= 17)).toBe(true);
        if (mode !== 'latest') {
          expect(bounded).toEqual(
            (await collect(feed.read({ after: 4, mode }))).filter((record) => record.commit <= 17),
          );
        }
      }
      // A filtered RAW read (the planner's path) stops at the bound too.
      const filtered = await collect(feed.read({ upTo: 9, filter: { types: ['created'] } }));
      expect(filtered).toEqual(
        (await collect(feed.read({ filter: { types: ['created'] } }))).filter((record) => record.commit <= 9),
      );
      expect(await collect(feed.read({ after: 7, upTo: 7 }))).toEqual([]);
      const codeOf = async (options: object) => {
        try {
          await collect(feed.readColumns(options));
          return undefined;
        } catch (error) {
          return isStreamStackError(error) ? error.code : String(error);
        }
      };
      expect(await codeOf({ after: 8, upTo: 7 })).toBe('INVALID_ARGUMENT');
      expect(await codeOf({ upTo: 31 })).toBe('CURSOR_OUT_OF_RANGE');
      expect(await codeOf({ upTo: -2 })).toBe('CURSOR_OUT_OF_RANGE');
    } finally {
      await close();
    }
  });
});
