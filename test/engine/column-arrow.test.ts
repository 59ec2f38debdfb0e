/**
 * The columnar read form and its Arrow conversion: every column of every batch says what the
 * record made from it says, and an Arrow batch written to IPC and read back with `apache-arrow`
 * holds the same values, column by column. The records cover every optional field present and
 * absent, non-ASCII strings, payloads stored once and repeated from earlier commits (they lie
 * outside the run), and runs of one pack and of several.
 */
import * as arrow from 'apache-arrow';
import { describe, expect, it } from 'vitest';
import {
  type AppendRecord,
  type ColumnBatch,
  isStreamStackError,
  limits,
  type StoredRecord,
} from '../../packages/engine/src/index.js';
import { branchTally } from '../support/branches.js';
import { openStore, temporaryDirectory } from '../support/store.js';

const encoder = new TextEncoder();

function recordsOf(commit: number, count: number): AppendRecord[] {
  return Array.from({ length: count }, (_, n) => {
    const id = commit * 1000 + n;
    return {
      // Every fifth payload repeats one of commit 0's: stored once, read from that run.
      payload: n % 5 === 4 ? `shared-${n % 3}` : `payload ${id} ${'é'.repeat(n % 4)}${'.'.repeat((id * 37) % 300)}`,
      ...(n % 3 === 0 ? {} : { key: `key-${id % 17}-ключ` }),
      ...(n % 4 === 1 ? { version: 1 + (id % 5) } : {}),
      ...(n % 11 === 2 ? { key: `gone-${id}`, tombstone: true } : {}),
      ...(n % 6 === 5 ? {} : { type: ['created', 'updated', 'ändrad'][id % 3] }),
      tags: Array.from({ length: n % 4 }, (_, t) => `tag:${(id + t) % 9}${t === 2 ? '✓' : ''}`),
      ...(n % 7 === 3 ? { fingerprint: encoder.encode(`own-${id % 4}`) } : {}),
    };
  });
}

function expectColumnsMatch(batch: ColumnBatch, records: readonly StoredRecord[]): void {
  expect(batch.length).toBe(records.length);
  const rows = Array.from({ length: batch.length }, (_, row) => row);
  const column = <T>(name: string, fromBatch: (row: number) => T, fromRecord: (record: StoredRecord) => T) =>
    expect(rows.map(fromBatch), name).toEqual(records.map(fromRecord));
  column(
    'position',
    (row) => batch.positions[row],
    (record) => record.position,
  );
  column(
    'seq',
    (row) => batch.seqs[row],
    (record) => record.seq,
  );
  column(
    'timestamp',
    (row) => batch.timestamps[row],
    (record) => record.timestamp,
  );
  column(
    'version',
    (row) => (batch.hasVersion(row) ? batch.versions[row] : undefined),
    (record) => record.version,
  );
  column(
    'tombstone',
    (row) => batch.isTombstone(row),
    (record) => record.tombstone,
  );
  column(
    'type',
    (row) => batch.type(row),
    (record) => record.type,
  );
  column(
    'key',
    (row) => batch.key(row),
    (record) => record.key,
  );
  column(
    'tags',
    (row) => batch.tags(row).join('\n'),
    (record) => record.tags.join('\n'),
  );
  column(
    'fingerprint',
    (row) => Buffer.from(batch.fingerprint(row)).toString('hex'),
    (record) => Buffer.from(record.fingerprint).toString('hex'),
  );
  column(
    'payload',
    (row) => text(batch.payload(row)),
    (record) => text(record.payload),
  );
}

describe('the columnar read form', () => {
  it.each(['native', 'ts'] as const)(
    'matches the object form column by column, and converts to Arrow that reads back the same (%s kernels)',
    async (kernels) => {
      const tally = branchTally(`columns (${kernels})`, [
        'a run of several packs',
        'a payload from an earlier run',
        'payloads back to back (zero-copy)',
        'a record without a type',
        'a tombstone',
        'a record without tags',
        'a batch spanning commits',
        'a batch of one commit',
      ]);
      const directory = temporaryDirectory();
      let store = await openStore(directory, { kernels, segmentBytes: 1 << 20 });
      let feed = await store.createFeed('f');
      const commits = 12;
      for (let commit = 0; commit < commits; commit++) {
        const records = recordsOf(commit, 1 + ((commit * 97) % 400));
        if (commit % 2 === 0) await feed.append(records);
        else {
          // A stream sealed from several batches: its run holds several packs.
          const { token } = await feed.acquireLease({ holder: 'test', ttlMs: 60_000 });
          const stream = await feed.openStream({ token });
          for (let at = 0; at < records.length; at += 50) await stream.append(records.slice(at, at + 50), { token });
          await stream.seal({ token });
          await feed.releaseLease({ token });
        }
      }
      for (const reopen of [false, true]) {
        if (reopen) {
          await store.close();
          store = await openStore(directory, { kernels, segmentBytes: 1 << 20 });
          feed = await store.feed('f');
        }
        const objects: StoredRecord[][] = [];
        for await (const batch of feed.readBatches()) objects.push(batch);
        const batches: ColumnBatch[] = [];
        for await (const batch of feed.readColumns()) batches.push(batch);
        // Batches may span commits (small ones read side by side); row by row, they are the
        // object form's records, each with its own commit and stream.
        const all = objects.flat();
        expect(batches.reduce((rows, batch) => rows + batch.length, 0)).toBe(all.length);
        let offset = 0;
        for (const batch of batches) {
          const records = all.slice(offset, offset + batch.length);
          offset += batch.length;
          expectColumnsMatch(batch, records);
          expect(batch.records().map(plain)).toEqual(records.map(plain));
          const commits = new Set(records.map((record) => record.commit));
          expect(batch.spansCommits).toBe(commits.size > 1);
          expect(batch.commit).toBe(records[0].commit);
          expect(Array.from(batch.commits)).toEqual(records.map((record) => record.commit));
          tally.hit('a batch spanning commits', commits.size > 1);
          tally.hit('a batch of one commit', commits.size === 1);
          // Per commit: between two runs lie their manifests and commit frames.
          const backToBack = new Map<number, boolean>();
          for (let row = 0; row < batch.length; row++) {
            const commit = batch.commitOf(row);
            const joined =
              row === 0 ||
              batch.commitOf(row - 1) !== commit ||
              batch.payloadStarts[row] === batch.payloadEnds[row - 1];
            backToBack.set(commit, (backToBack.get(commit) ?? true) && joined);
          }
          tally.hit('payloads back to back (zero-copy)', [...backToBack.values()].some(Boolean));
          tally.hit(
            'a run of several packs',
            [...backToBack.values()].some((value) => !value),
          );
          // Commit 0 stored the shared payloads: later commits' repeats lie in its run, not their own.
          tally.hit(
            'a payload from an earlier run',
            records.some((record) => record.commit > 1 && text(record.payload).startsWith('shared-')),
          );
          tally.hit(
            'a record without a type',
            records.some((record) => record.type === undefined),
          );
          tally.hit(
            'a tombstone',
            records.some((record) => record.tombstone),
          );
          tally.hit(
            'a record without tags',
            records.some((record) => record.tags.length === 0),
          );

          // Through IPC and back: what a reader of the Arrow stream sees.
          const table = arrow.tableFromIPC(arrow.tableToIPC(new arrow.Table(await batch.toArrow())));
          expect(table.numRows).toBe(batch.length);
          const column = (name: string) => table.getChild(name)!.toArray() as unknown[];
          const values = (name: string) =>
            Array.from({ length: table.numRows }, (_, row) => table.getChild(name)!.get(row));
          expect(Array.from(column('position') as unknown as BigInt64Array, Number)).toEqual(
            records.map((record) => record.position),
          );
          expect(values('commit').map(Number)).toEqual(records.map((record) => record.commit));
          expect(values('stream')).toEqual(records.map((record) => record.stream));
          expect(values('seq').map(Number)).toEqual(records.map((record) => record.seq));
          expect(values('timestamp').map(Number)).toEqual(records.map((record) => record.timestamp));
          expect(values('type').map((value) => value ?? undefined)).toEqual(records.map((record) => record.type));
          expect(values('key').map((value) => value ?? undefined)).toEqual(records.map((record) => record.key));
          expect(values('version').map((value) => (value === null ? undefined : Number(value)))).toEqual(
            records.map((record) => record.version),
          );
          expect(values('tombstone')).toEqual(records.map((record) => record.tombstone));
          expect(values('tags').map((value) => [...(value as arrow.Vector)])).toEqual(
            records.map((record) => [...record.tags]),
          );
          const hex = (bytes: unknown) => Buffer.from(bytes as Uint8Array).toString('hex');
          expect(values('fingerprint').map(hex)).toEqual(records.map((record) => hex(record.fingerprint)));
          expect(values('payload').map(hex)).toEqual(records.map((record) => hex(record.payload)));
        }
      }
      await store.close();
      tally.expectAllReached();
    },
  );

  it('reads a commit larger than a batch as several, and they agree with the commit read whole', async () => {
    const store = await openStore(temporaryDirectory(), { segmentBytes: 16 << 20 });
    const feed = await store.createFeed('f');
    const rowsMax = limits.columnBatchRowsMax;
    await feed.append(recordsOf(0, 50));
    // Over two batches' worth, with repeated payloads (stored by commit 0) and keys updated
    // across batch boundaries.
    const big = Array.from({ length: 2 * rowsMax + 123 }, (_, n) => ({
      payload: n % 9 === 0 ? 'shared-1' : `big ${n}`,
      key: `k${n % (rowsMax + 7)}`,
      version: n % 3,
      type: n % 2 === 0 ? 'even' : 'odd',
      tags: [`t${n % 5}`],
    }));
    await feed.append(big);
    await feed.append(recordsOf(2, 30));
    const whole: StoredRecord[] = [];
    for (let commit = 1; commit <= 3; commit++) whole.push(...(await feed.readCommit(commit)));
    const batches: ColumnBatch[] = [];
    for await (const batch of feed.readColumns()) batches.push(batch);
    // No batch holds more than a batch's rows; the large commit takes three at least (a batch
    // may hold its last rows with the next commit's first ones).
    expect(batches.every((batch) => batch.length <= rowsMax)).toBe(true);
    expect(batches.filter((batch) => Array.from(batch.commits).includes(2)).length).toBeGreaterThanOrEqual(3);
    expect(batches.flatMap((batch) => Array.from(batch.commits))).toEqual(whole.map((record) => record.commit));
    expect(batches.flatMap((batch) => batch.records()).map(plain)).toEqual(whole.map(plain));
    // The batch form of the object reads keeps one array per commit, however many batches it spans.
    const arrays: StoredRecord[][] = [];
    for await (const records of feed.readBatches()) arrays.push(records);
    expect(arrays.map((records) => records.length)).toEqual([50, big.length, 30]);
    expect(arrays.flat().map(plain)).toEqual(whole.map(plain));
    // Latest and dedup against oracles over the commits read whole.
    const winners = new Map<string, StoredRecord>();
    for (const record of whole) {
      const best = record.key === undefined ? undefined : winners.get(record.key);
      if (
        record.key !== undefined &&
        (!best ||
          (record.version ?? 0) > (best.version ?? 0) ||
          ((record.version ?? 0) === (best.version ?? 0) && record.position > best.position))
      )
        winners.set(record.key, record);
    }
    const latest = [...winners.values()].filter((record) => !record.tombstone).sort((a, b) => a.position - b.position);
    const latestRead: StoredRecord[] = [];
    for await (const batch of feed.readColumns({ mode: 'latest' })) latestRead.push(...batch);
    expect(latestRead.map(plain)).toEqual(latest.map(plain));
    const seen = new Set<string>();
    const dedup = whole.filter((record) => {
      const term = Buffer.from(record.fingerprint).toString('hex');
      return seen.has(term) ? false : (seen.add(term), true);
    });
    for (const dedupScope of ['history', 'window'] as const) {
      const dedupRead: StoredRecord[] = [];
      for await (const batch of feed.readColumns({ mode: 'dedup', dedupScope })) dedupRead.push(...batch);
      expect(dedupRead.map(plain), dedupScope).toEqual(dedup.map(plain));
    }
    const filtered: StoredRecord[] = [];
    for await (const batch of feed.readColumns({ filter: { types: ['even'], tags: ['t3'] }, plan: 'scan' }))
      filtered.push(...batch);
    expect(filtered.map(plain)).toEqual(
      whole.filter((record) => record.type === 'even' && record.tags.includes('t3')).map(plain),
    );
    await store.close();
  });

  it('refuses bad options with a typed error, as the object form does', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    await feed.append(recordsOf(0, 5));
    const bad: [unknown, string][] = [
      [{ mode: 'newest' }, 'INVALID_ARGUMENT'],
      [{ plan: 'fast', filter: { tags: ['tag:1'] } }, 'INVALID_ARGUMENT'],
      [{ filter: { tags: [7] } }, 'INVALID_ARGUMENT'],
      [{ after: -1 }, 'CURSOR_OUT_OF_RANGE'],
      [{ after: 2 }, 'CURSOR_OUT_OF_RANGE'],
      [{ limit: 1.5 }, 'INVALID_ARGUMENT'],
    ];
    for (const [options, code] of bad) {
      const columns = await (async () => {
        for await (const batch of feed.readColumns(options as never)) void batch;
      })().catch((error: unknown) => error);
      const objects = await (async () => {
        for await (const record of feed.read(options as never)) void record;
      })().catch((error: unknown) => error);
      expect(isStreamStackError(columns, code as never), `${JSON.stringify(options)}: ${String(columns)}`).toBe(true);
      expect((columns as { code: string }).code).toBe((objects as { code: string }).code);
    }
    await store.close();
  });

  it('filters, dedups and limits on the columns as the object form does', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    for (let commit = 0; commit < 6; commit++) await feed.append(recordsOf(commit, 120));
    const filters = [
      undefined,
      { types: ['ändrad'] },
      { tags: ['tag:3✓'] },
      { items: [{ types: ['created'], tags: ['tag:1'] }, { tags: ['tag:5', 'tag:6'] }] },
    ];
    for (const mode of ['raw', 'dedup', 'latest'] as const) {
      for (const filter of filters) {
        for (const limit of [undefined, 7, 130]) {
          for (const after of [0, 2]) {
            const options = { mode, after, ...(filter ? { filter } : {}), ...(limit === undefined ? {} : { limit }) };
            const objects: StoredRecord[] = [];
            for await (const record of feed.read(options)) objects.push(record);
            const columns: StoredRecord[] = [];
            for await (const batch of feed.readColumns(options)) columns.push(...batch);
            expect(columns.map(plain), JSON.stringify(options)).toEqual(objects.map(plain));
          }
        }
      }
    }
    await store.close();
  });
});

/** A record with its byte fields as hex: comparing thousands of typed arrays is slow. */
function plain(record: StoredRecord) {
  return {
    ...record,
    payload: Buffer.from(record.payload).toString('hex'),
    fingerprint: Buffer.from(record.fingerprint).toString('hex'),
  };
}

function text(bytes: Uint8Array): string {
  return new TextDecoder().decode(bytes);
}
