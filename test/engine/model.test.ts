/**
 * Model-based test of one feed: random interleavings of stream writes (open, append, seal,
 * abort), one-shot appends (sequential and concurrent, with reads racing them), restarts, a
 * subscription, and reads of every kind, each checked against a plain in-memory model of what
 * the feed must hold. Then focused tests of what the model run found or cannot reach
 * deterministically: handles of a closed store, and reads of an open stream racing its writer.
 *
 * The model is deliberately naive (arrays and linear scans) so that it is obviously right:
 * - positions are dense from 1 over published records, commits are numbered 1, 2, …;
 * - RAW is every record after the cursor, in position order;
 * - dedup keeps the first occurrence of each fingerprint, over the whole history or over the
 *   read window; the default fingerprint is CRC-32C then CRC-32 of the payload, little-endian;
 * - latest keeps, per key, the record with the highest version (missing = 0) then the highest
 *   position, over the read window; a tombstone winner hides its key; unkeyed records are out;
 * - a filter (one item, or an OR of items; an item is any of its `types` and all of its `tags`)
 *   selects from the mode's view, whatever plan finds it; `limit` takes the first records left;
 * - get(key, { asOf }) applies the winner rule to commits 1..asOf.
 *
 * Each run uses a fresh directory and small segments (64 KiB), so history and WAL segments roll.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import zlib from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import {
  type AppendRecord,
  type Commit,
  type Feed,
  limits,
  type Plan,
  type QueryItem,
  type ReadMode,
  type RecordFilter,
  type Store,
  type StoredRecord,
  type StoreOptions,
  Stream,
  type StreamRecord,
  StreamStackError,
} from '../../packages/engine/src/index.js';
import { branchTally } from '../support/branches.js';
import { objectStoreSuite } from '../support/object-store.js';
import {
  collect,
  cursorOf,
  digestTree,
  ManualClock,
  openStore,
  sequentialIds,
  temporaryDirectory,
  text,
} from '../support/store.js';

// ---- An independent default fingerprint -----------------------------------------------------

const crc32cTable = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const byte of bytes) c = crc32cTable[(c ^ byte) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const encoder = new TextEncoder();
const hex = (bytes: Uint8Array): string =>
  Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');

function defaultFingerprint(payload: string): string {
  const bytes = encoder.encode(payload);
  const out = Buffer.alloc(8);
  out.writeUInt32LE(crc32c(bytes), 0);
  out.writeUInt32LE(zlib.crc32(bytes) >>> 0, 4);
  return out.toString('hex');
}

// ---- What the generators produce --------------------------------------------------------------

interface RecordSpec {
  readonly payload: string;
  /** Hand the payload over as bytes rather than as a string. */
  readonly asBytes: boolean;
  readonly key?: string;
  readonly version?: number;
  readonly tombstone: boolean;
  readonly type?: string;
  readonly tags: readonly string[];
  readonly fingerprint?: { readonly form: 'string' | 'bytes'; readonly value: string };
  readonly timestamp?: number;
}

/**
 * Keys, types and tags from small pools, so that they repeat; one of each long and not ASCII,
 * and one of each starting with a byte-order mark, which is a character of the name and must
 * not be dropped as a decoder drops a leading BOM by default.
 */
const keys = ['k1', 'k2', 'k3', `ключ-${'ü'.repeat(60)}`, '\ufeffk1'] as const;
const types = ['t1', 't2', `тип-${'é'.repeat(50)}`, '\ufefft1'] as const;
const tags = ['red', 'green', `blue-${'ß'.repeat(50)}`, '\ufeffred'] as const;
const smallPayloads = ['alpha', 'beta', 'gamma', 'delta', '', 'héllo ✓', 'm'.repeat(1500)];

/**
 * A big payload, so that history and WAL segments (64 KiB) roll: usually distinct, sometimes
 * one of a few (stored once, then referenced from later segments).
 */
const bigPayload = (n: number): string => `big-${n}|${'z'.repeat(2000 + (n % 7) * 1300)}`;

const recordArb: fc.Arbitrary<RecordSpec> = fc
  .record({
    payload: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...smallPayloads) },
      { weight: 2, arbitrary: fc.nat().map(bigPayload) },
      { weight: 1, arbitrary: fc.nat(4).map(bigPayload) },
    ),
    asBytes: fc.boolean(),
    key: fc.option(fc.constantFrom(...keys), { nil: undefined, freq: 3 }),
    version: fc.option(
      fc.oneof(
        { weight: 8, arbitrary: fc.nat(3) },
        { weight: 1, arbitrary: fc.constantFrom(2 ** 31, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER) },
      ),
      {
        nil: undefined,
        freq: 2,
      },
    ),
    tombstone: fc.nat(5).map((n) => n === 0),
    type: fc.option(fc.constantFrom(...types), { nil: undefined, freq: 3 }),
    tags: fc.uniqueArray(fc.constantFrom(...tags), { maxLength: 3, size: 'max' }),
    fingerprint: fc.option(
      fc.record({ form: fc.constantFrom('string' as const, 'bytes' as const), value: fc.constantFrom('fp-1', 'fp-2') }),
      {
        nil: undefined,
        freq: 6,
      },
    ),
    timestamp: fc.option(fc.oneof(fc.nat(2_000_000_000_000), fc.constantFrom(0, Number.MAX_SAFE_INTEGER)), {
      nil: undefined,
      freq: 6,
    }),
  })
  .map((record) => ({ ...record, tombstone: record.tombstone && record.key !== undefined }));

/** Batches of 1–6 records. */
const batchArb = fc.array(recordArb, { minLength: 1, maxLength: 6, size: 'max' });

function toAppend(spec: RecordSpec): AppendRecord {
  return {
    payload: spec.asBytes ? encoder.encode(spec.payload) : spec.payload,
    ...(spec.key === undefined ? {} : { key: spec.key }),
    ...(spec.version === undefined ? {} : { version: spec.version }),
    ...(spec.tombstone ? { tombstone: true } : {}),
    ...(spec.type === undefined ? {} : { type: spec.type }),
    ...(spec.tags.length === 0 ? {} : { tags: spec.tags }),
    ...(spec.fingerprint === undefined
      ? {}
      : {
          fingerprint:
            spec.fingerprint.form === 'string' ? spec.fingerprint.value : encoder.encode(spec.fingerprint.value),
        }),
    ...(spec.timestamp === undefined ? {} : { timestamp: spec.timestamp }),
  };
}

// ---- The model --------------------------------------------------------------------------------

interface ModelRecord {
  readonly stream: string;
  readonly seq: number;
  readonly timestamp: number;
  /** The fingerprint the producer gave (hex), if any. */
  readonly givenFingerprint?: string;
  /** The fingerprint as stored: the given one, else the default. */
  readonly fingerprint: string;
  readonly payload: string;
  readonly key?: string;
  readonly version?: number;
  readonly tombstone: boolean;
  readonly type?: string;
  readonly tags: readonly string[];
  readonly commit?: number;
  readonly position?: number;
}

interface ModelCommit {
  readonly commit: number;
  readonly stream: string;
  readonly parent: number | null;
  readonly firstPosition: number;
  readonly lastPosition: number;
  readonly openedAt: number;
  readonly sealedAt: number;
  readonly message: string | null;
  readonly oneShot: boolean;
  readonly records: readonly ModelRecord[];
}

interface Model {
  readonly commits: ModelCommit[];
  open: { id: string; openedAt: number; message?: string; records: ModelRecord[] } | undefined;
  /** Streams sealed into a commit (including one-shot ones): id -> commit. */
  readonly finished: Map<string, number>;
  readonly aborted: string[];
  /** Aborted streams that a restart has happened since. */
  readonly abortedBeforeRestart: Set<string>;
  /** The cursor of subscription `sub`, when it exists. */
  subscription: number | undefined;
}

const head = (m: Model): number => m.commits.length;
const lastPosition = (m: Model): number => (m.commits.length === 0 ? 0 : m.commits[m.commits.length - 1].lastPosition);
const published = (m: Model): ModelRecord[] => m.commits.flatMap((commit) => commit.records);

function modelRecord(spec: RecordSpec, stream: string, seq: number, now: number): ModelRecord {
  const given = spec.fingerprint === undefined ? undefined : hex(encoder.encode(spec.fingerprint.value));
  return {
    stream,
    seq,
    timestamp: spec.timestamp ?? now,
    ...(given === undefined ? {} : { givenFingerprint: given }),
    fingerprint: given ?? defaultFingerprint(spec.payload),
    payload: spec.payload,
    key: spec.key,
    version: spec.version,
    tombstone: spec.tombstone,
    type: spec.type,
    tags: [...spec.tags],
  };
}

/** Publishes `records` (seq order) as the next commit. */
function publish(
  m: Model,
  stream: string,
  records: readonly ModelRecord[],
  meta: { openedAt: number; sealedAt: number; message: string | null; oneShot: boolean },
): ModelCommit {
  const commit = head(m) + 1;
  const first = lastPosition(m) + 1;
  const entry: ModelCommit = {
    commit,
    stream,
    parent: commit === 1 ? null : commit - 1,
    firstPosition: first,
    lastPosition: first + records.length - 1,
    ...meta,
    records: records.map((record, index) => ({ ...record, commit, position: first + index })),
  };
  m.commits.push(entry);
  m.finished.set(stream, commit);
  return entry;
}

/** Winner order for latest-per-key: the highest version (missing = 0), then the highest position. */
const beats = (a: ModelRecord, b: ModelRecord): boolean =>
  (a.version ?? 0) > (b.version ?? 0) || ((a.version ?? 0) === (b.version ?? 0) && a.position! > b.position!);

/** A filter is one item, or an OR of items; an item is any of its types and all of its tags. */
function matches(filter: RecordFilter | undefined, record: ModelRecord): boolean {
  if (!filter) return true;
  const items: readonly QueryItem[] = 'items' in filter ? filter.items : [filter];
  return items.some(
    (item) =>
      (!item.types || (record.type !== undefined && item.types.includes(record.type))) &&
      (!item.tags || item.tags.every((tag) => record.tags.includes(tag))),
  );
}

interface ReadSpec {
  readonly after: number;
  readonly mode: ReadMode;
  readonly dedupScope?: 'history' | 'window';
  readonly filter?: RecordFilter;
  readonly limit?: number;
}

function expectedRead(m: Model, read: ReadSpec): ModelRecord[] {
  const all = published(m);
  const window = all.filter((record) => record.commit! > read.after);
  let view: ModelRecord[];
  if (read.mode === 'raw') {
    view = window;
  } else if (read.mode === 'dedup') {
    const first = new Map<string, number>();
    for (const record of read.dedupScope === 'window' ? window : all) {
      if (!first.has(record.fingerprint)) first.set(record.fingerprint, record.position!);
    }
    view = window.filter((record) => first.get(record.fingerprint) === record.position);
  } else {
    const winners = new Map<string, ModelRecord>();
    for (const record of window) {
      if (record.key === undefined) continue;
      const best = winners.get(record.key);
      if (!best || beats(record, best)) winners.set(record.key, record);
    }
    view = [...winners.values()].filter((record) => !record.tombstone).sort((a, b) => a.position! - b.position!);
  }
  view = view.filter((record) => matches(read.filter, record));
  return read.limit === undefined ? view : view.slice(0, read.limit);
}

function expectedGet(m: Model, key: string, asOf: number): ModelRecord | undefined {
  let best: ModelRecord | undefined;
  for (const record of published(m)) {
    if (record.commit! > asOf || record.key !== key) continue;
    if (!best || beats(record, best)) best = record;
  }
  return best && !best.tombstone ? best : undefined;
}

// ---- Comparable views of what the engine returns and what the model says --------------------

/** A payload short enough to print, still telling any two payloads apart. */
function payloadView(payload: string): string {
  if (payload.length <= 40) return payload;
  return `${payload.slice(0, 16)}…(${payload.length}:${crypto.createHash('sha1').update(payload).digest('hex').slice(0, 10)})`;
}

function viewOf(record: StoredRecord | StreamRecord) {
  return {
    feed: record.feed,
    commit: record.commit,
    position: record.position,
    stream: record.stream,
    seq: record.seq,
    timestamp: record.timestamp,
    fingerprint: record.fingerprint === undefined ? undefined : hex(record.fingerprint),
    payload: payloadView(text(record.payload)),
    key: record.key,
    version: record.version,
    tombstone: record.tombstone,
    type: record.type,
    tags: [...record.tags],
  };
}

function modelView(record: ModelRecord, form: 'published' | 'open' = 'published') {
  return {
    feed: 'f',
    commit: form === 'published' ? record.commit : undefined,
    position: form === 'published' ? record.position : undefined,
    stream: record.stream,
    seq: record.seq,
    timestamp: record.timestamp,
    fingerprint: form === 'published' ? record.fingerprint : record.givenFingerprint,
    payload: payloadView(record.payload),
    key: record.key,
    version: record.version,
    tombstone: record.tombstone,
    type: record.type,
    tags: [...record.tags],
  };
}

function commitView(commit: Commit) {
  return {
    feed: commit.feed,
    commit: commit.commit,
    stream: commit.stream,
    parent: commit.parent,
    records: commit.records,
    firstPosition: commit.firstPosition,
    lastPosition: commit.lastPosition,
    openedAt: commit.openedAt,
    sealedAt: commit.sealedAt,
    message: commit.message,
    epoch: commit.epoch,
    oneShot: commit.oneShot,
  };
}

function modelCommitView(commit: ModelCommit) {
  return {
    feed: 'f',
    commit: commit.commit,
    stream: commit.stream,
    parent: commit.parent,
    records: commit.records.length,
    firstPosition: commit.firstPosition,
    lastPosition: commit.lastPosition,
    openedAt: commit.openedAt,
    sealedAt: commit.sealedAt,
    message: commit.message,
    epoch: 1,
    oneShot: commit.oneShot,
  };
}

// ---- The system under test --------------------------------------------------------------------

interface Real {
  readonly directory: string;
  readonly clock: ManualClock;
  readonly newId: () => string;
  store: Store;
  feed: Feed;
  readonly token: string;
  /** The handle the writer holds on the open stream. */
  stream: Stream | undefined;
  /** What the store is opened with beyond the clock and ids (object storage, for the tiered runs). */
  readonly options: StoreOptions;
}

async function errorOf(action: () => unknown): Promise<unknown> {
  try {
    await action();
  } catch (error) {
    return error;
  }
  return undefined;
}

async function expectCode(action: () => unknown, code: string): Promise<void> {
  const error = await errorOf(action);
  expect(error, `expected ${code}`).toBeInstanceOf(StreamStackError);
  expect((error as StreamStackError).code).toBe(code);
}

async function drain<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

/** What every write leaves true: the head, the record count and the open stream. */
async function checkHead(m: Model, r: Real): Promise<void> {
  const info = await r.feed.info();
  expect({
    commits: info.commits,
    records: info.records,
    activeStream: info.activeStream,
    head: info.head?.commit ?? null,
  }).toEqual({
    commits: head(m),
    records: lastPosition(m),
    activeStream: m.open?.id ?? null,
    head: head(m) === 0 ? null : head(m),
  });
}

/** Maps a 0..100 fraction onto 0..n. */
const scale = (fraction: number, n: number): number => Math.round((fraction / 100) * n);

type Command = fc.AsyncCommand<Model, Real>;

// ---- Write commands ---------------------------------------------------------------------------

class OpenStream implements Command {
  constructor(readonly message: string | undefined) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    if (m.open) {
      await expectCode(() => r.feed.openStream({ token: r.token, message: this.message }), 'STREAM_OPEN');
      return;
    }
    r.clock.advance(7);
    const stream = await r.feed.openStream({
      token: r.token,
      ...(this.message === undefined ? {} : { message: this.message }),
    });
    expect(await stream.info()).toMatchObject({ id: stream.id, state: 'open', records: 0 });
    r.stream = stream;
    m.open = {
      id: stream.id,
      openedAt: r.clock.now,
      ...(this.message === undefined ? {} : { message: this.message }),
      records: [],
    };
    await checkHead(m, r);
  }
  toString = () => `openStream(${JSON.stringify(this.message)})`;
}

class AppendBatches implements Command {
  constructor(
    readonly batches: RecordSpec[][],
    readonly mode: 'plain' | 'expectedSeq' | 'wrongSeq' | 'concurrent',
    readonly wrongBy: number,
  ) {}
  check = (m: Readonly<Model>) => m.open !== undefined;
  async run(m: Model, r: Real): Promise<void> {
    const open = m.open!;
    const stream = r.stream!;
    expect(stream.id).toBe(open.id);
    if (this.mode === 'concurrent') {
      r.clock.advance(3);
      const now = r.clock.now;
      const pending = this.batches.map((batch) => stream.append(batch.map(toAppend), { token: r.token }));
      // A read of the open stream while the batches are in flight sees acknowledged batches only.
      const during = (await r.feed.stream(open.id)).read();
      const results = await Promise.all(pending);
      // Each batch gets a contiguous range of seqs, and together they tile the next seqs.
      const order = results
        .map((result, index) => ({ result, index }))
        .sort((a, b) => a.result.firstSeq - b.result.firstSeq);
      const boundaries = [open.records.length];
      let next = open.records.length + 1;
      for (const { result, index } of order) {
        expect(result).toEqual({ stream: open.id, firstSeq: next, lastSeq: next + this.batches[index].length - 1 });
        for (const spec of this.batches[index]) open.records.push(modelRecord(spec, open.id, next++, now));
        boundaries.push(open.records.length);
      }
      const seen = (await during).map(viewOf);
      expect(boundaries, 'a read during appends ends at a batch boundary').toContain(seen.length);
      expect(seen).toEqual(open.records.slice(0, seen.length).map((record) => modelView(record, 'open')));
    } else {
      for (const batch of this.batches) {
        r.clock.advance(11);
        const next = open.records.length + 1;
        if (this.mode === 'wrongSeq') {
          const wrong = Math.max(0, next + this.wrongBy);
          if (wrong !== next) {
            const error = await errorOf(() =>
              stream.append(batch.map(toAppend), { token: r.token, expectedSeq: wrong }),
            );
            expect(error).toMatchObject({ code: 'SEQ_MISMATCH', details: { expected: wrong, actual: next } });
            continue;
          }
        }
        const result = await stream.append(batch.map(toAppend), {
          token: r.token,
          ...(this.mode === 'plain' ? {} : { expectedSeq: next }),
        });
        expect(result).toEqual({ stream: open.id, firstSeq: next, lastSeq: next + batch.length - 1 });
        batch.forEach((spec, index) => {
          open.records.push(modelRecord(spec, open.id, next + index, r.clock.now));
        });
      }
    }
    expect(await stream.info()).toMatchObject({ id: open.id, state: 'open', records: open.records.length });
    await checkHead(m, r);
  }
  toString = () =>
    `append[${this.mode}${this.mode === 'wrongSeq' ? ` ${this.wrongBy}` : ''}](${this.batches.map((b) => b.length).join(',')})`;
}

class Seal implements Command {
  constructor(readonly message: string | undefined) {}
  // A stream with no records seals too, into a commit of no records.
  check = (m: Readonly<Model>) => m.open !== undefined;
  async run(m: Model, r: Real): Promise<void> {
    const open = m.open!;
    r.clock.advance(13);
    const commit = await r.stream!.seal({
      token: r.token,
      ...(this.message === undefined ? {} : { message: this.message }),
    });
    const expected = publish(m, open.id, open.records, {
      openedAt: open.openedAt,
      sealedAt: r.clock.now,
      message: this.message ?? open.message ?? null,
      oneShot: false,
    });
    m.open = undefined;
    expect(commitView(commit)).toEqual(modelCommitView(expected));
    expect(await r.stream!.info()).toMatchObject({ id: open.id, state: 'sealed', commit: { commit: expected.commit } });
    r.stream = undefined;
    await checkHead(m, r);
  }
  toString = () => `seal(${JSON.stringify(this.message)})`;
}

class Abort implements Command {
  check = (m: Readonly<Model>) => m.open !== undefined;
  async run(m: Model, r: Real): Promise<void> {
    const open = m.open!;
    r.clock.advance(5);
    await r.stream!.abort({ token: r.token });
    m.aborted.push(open.id);
    m.open = undefined;
    expect(await r.stream!.info()).toMatchObject({ id: open.id, state: 'aborted' });
    r.stream = undefined;
    await checkHead(m, r);
  }
  toString = () => 'abort';
}

class OneShot implements Command {
  constructor(
    readonly batches: RecordSpec[][],
    readonly concurrent: boolean,
    readonly message: string | undefined,
    /** Start a RAW read before the appends and finish it after: it must not see them. */
    readonly readerInFlight: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    let reader: { iterator: AsyncIterator<StoredRecord[]>; got: StoredRecord[]; expected: ModelRecord[] } | undefined;
    if (this.readerInFlight !== undefined) {
      const after = scale(this.readerInFlight, head(m));
      const iterator = r.feed.readBatches({ after })[Symbol.asyncIterator]();
      const first = await iterator.next();
      reader = { iterator, got: first.done ? [] : [...first.value], expected: expectedRead(m, { after, mode: 'raw' }) };
    }
    r.clock.advance(17);
    const now = r.clock.now;
    const options = { token: r.token, ...(this.message === undefined ? {} : { message: this.message }) };
    let commits: Commit[];
    if (this.concurrent) {
      commits = await Promise.all(this.batches.map((batch) => r.feed.append(batch.map(toAppend), options)));
    } else {
      commits = [];
      for (const batch of this.batches) commits.push(await r.feed.append(batch.map(toAppend), options));
    }
    // Each append is a commit of its own; concurrent ones take the next numbers in some order.
    const order = commits.map((commit, index) => ({ commit, index })).sort((a, b) => a.commit.commit - b.commit.commit);
    expect(order.map(({ commit }) => commit.commit)).toEqual(this.batches.map((_, index) => head(m) + 1 + index));
    for (const { commit, index } of order) {
      const records = this.batches[index].map((spec, at) => modelRecord(spec, commit.stream, at + 1, now));
      const expected = publish(m, commit.stream, records, {
        openedAt: now,
        sealedAt: now,
        message: this.message ?? null,
        oneShot: true,
      });
      expect(commitView(commit)).toEqual(modelCommitView(expected));
    }
    if (reader) {
      for (let next = await reader.iterator.next(); !next.done; next = await reader.iterator.next())
        reader.got.push(...next.value);
      expect(reader.got.map(viewOf)).toEqual(reader.expected.map((record) => modelView(record)));
    }
    await checkHead(m, r);
  }
  toString = () =>
    `oneShot[${this.concurrent ? 'concurrent' : 'sequential'}${this.readerInFlight === undefined ? '' : `, reader@${this.readerInFlight}%`}](${this.batches
      .map((b) => b.length)
      .join(',')})`;
}

/** Stream appends and one-shot appends submitted together. */
class MixedConcurrent implements Command {
  constructor(
    readonly streamBatches: RecordSpec[][],
    readonly oneShotBatches: RecordSpec[][],
  ) {}
  check = (m: Readonly<Model>) => m.open !== undefined;
  async run(m: Model, r: Real): Promise<void> {
    const open = m.open!;
    r.clock.advance(19);
    const now = r.clock.now;
    const appends: Promise<{ firstSeq: number; lastSeq: number }>[] = [];
    const oneShots: Promise<Commit>[] = [];
    const rounds = Math.max(this.streamBatches.length, this.oneShotBatches.length);
    for (let index = 0; index < rounds; index++) {
      if (index < this.streamBatches.length)
        appends.push(r.stream!.append(this.streamBatches[index].map(toAppend), { token: r.token }));
      if (index < this.oneShotBatches.length)
        oneShots.push(r.feed.append(this.oneShotBatches[index].map(toAppend), { token: r.token }));
    }
    // Reads racing the writes, started before any of them lands, after the first one-shot
    // has, and a turn of the event loop later.
    const before = head(m);
    const racing: Promise<{ read: RacingRead; got: unknown }>[] = [];
    const race = (read: RacingRead) => racing.push(runRacingRead(r.feed, read).then((got) => ({ read, got })));
    racingReads.forEach((read, index) => {
      if (index % 3 === 0) race(read);
    });
    await Promise.race(oneShots);
    racingReads.forEach((read, index) => {
      if (index % 3 === 1) race(read);
    });
    await new Promise((resolve) => setImmediate(resolve));
    racingReads.forEach((read, index) => {
      if (index % 3 === 2) race(read);
    });
    const [seqs, commits] = await Promise.all([Promise.all(appends), Promise.all(oneShots)]);
    const bySeq = seqs
      .map((result, index) => ({ result, index }))
      .sort((a, b) => a.result.firstSeq - b.result.firstSeq);
    let next = open.records.length + 1;
    for (const { result, index } of bySeq) {
      expect(result).toMatchObject({ firstSeq: next, lastSeq: next + this.streamBatches[index].length - 1 });
      for (const spec of this.streamBatches[index]) open.records.push(modelRecord(spec, open.id, next++, now));
    }
    const byCommit = commits
      .map((commit, index) => ({ commit, index }))
      .sort((a, b) => a.commit.commit - b.commit.commit);
    expect(byCommit.map(({ commit }) => commit.commit)).toEqual(
      this.oneShotBatches.map((_, index) => head(m) + 1 + index),
    );
    for (const { commit, index } of byCommit) {
      const records = this.oneShotBatches[index].map((spec, at) => modelRecord(spec, commit.stream, at + 1, now));
      const expected = publish(m, commit.stream, records, {
        openedAt: now,
        sealedAt: now,
        message: null,
        oneShot: true,
      });
      expect(commitView(commit)).toEqual(modelCommitView(expected));
    }
    // Each racing read saw the feed as of one head between the one before and the one after.
    for (const { read, got } of await Promise.all(racing)) {
      const heads = Array.from({ length: head(m) - before + 1 }, (_, index) => before + index);
      const answers = heads.map((at) => expectedRacingRead({ ...m, commits: m.commits.slice(0, at) }, read));
      if (!answers.some((answer) => isDeepStrictEqual(answer, got))) {
        expect(got, `${JSON.stringify(read)} matches no head from ${before} to ${head(m)}`).toEqual(
          answers[answers.length - 1],
        );
      }
    }
    await checkHead(m, r);
  }
  toString = () =>
    `mixed(stream ${this.streamBatches.map((b) => b.length).join(',')}; oneShot ${this.oneShotBatches.map((b) => b.length).join(',')})`;
}

/** The reads `MixedConcurrent` runs while its writes are in flight. */
type RacingRead =
  | { readonly kind: 'read'; readonly spec: ReadSpec & { plan?: Plan } }
  | { readonly kind: 'get'; readonly key: string };

const racingReads: readonly RacingRead[] = [
  { kind: 'read', spec: { after: 0, mode: 'raw' } },
  { kind: 'read', spec: { after: 0, mode: 'dedup' } },
  { kind: 'read', spec: { after: 0, mode: 'latest' } },
  { kind: 'get', key: 'k1' },
  { kind: 'read', spec: { after: 0, mode: 'raw', filter: { tags: ['red'] }, plan: 'index' } },
  {
    kind: 'read',
    spec: { after: 0, mode: 'raw', filter: { items: [{ types: ['t1'] }, { tags: ['green'] }] }, plan: 'scan' },
  },
  { kind: 'get', key: 'k2' },
  { kind: 'read', spec: { after: 0, mode: 'dedup', dedupScope: 'window' } },
  { kind: 'read', spec: { after: 0, mode: 'raw', filter: { types: ['t2'] } } },
];

async function runRacingRead(feed: Feed, read: RacingRead): Promise<unknown> {
  if (read.kind === 'get') {
    const got = await feed.get(read.key);
    return got === undefined ? undefined : viewOf(got);
  }
  return (await drain(feed.read(read.spec))).map(viewOf);
}

function expectedRacingRead(m: Model, read: RacingRead): unknown {
  if (read.kind === 'get') {
    const expected = expectedGet(m, read.key, head(m));
    return expected === undefined ? undefined : modelView(expected);
  }
  return expectedRead(m, read.spec).map((record) => modelView(record));
}

/** Writes to a stream that is finished (sealed, one-shot or aborted) are refused. */
class WriteFinished implements Command {
  constructor(
    readonly pick: number,
    readonly action: 'append' | 'seal' | 'abort',
  ) {}
  check = (m: Readonly<Model>) => m.finished.size + m.aborted.length > 0;
  async run(m: Model, r: Real): Promise<void> {
    const candidates: [string, string][] = [
      ...[...m.finished.keys()].map((id): [string, string] => [id, 'STREAM_SEALED']),
      ...m.aborted.map((id): [string, string] => [id, 'STREAM_NOT_FOUND']),
    ];
    const [id, code] = candidates[scale(this.pick, candidates.length - 1)];
    // The lookup is part of the write: after a restart the feed may have forgotten an aborted
    // stream, and then the lookup itself fails with STREAM_NOT_FOUND.
    const write = (stream: Stream) =>
      this.action === 'append'
        ? stream.append([{ payload: 'late' }], { token: r.token })
        : this.action === 'seal'
          ? stream.seal({ token: r.token })
          : stream.abort({ token: r.token });
    await expectCode(async () => write(await r.feed.stream(id)), code);
    await checkHead(m, r);
  }
  toString = () => `writeFinished(${this.action} @${this.pick}%)`;
}

class Reopen implements Command {
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    // Tiered, everything sealed goes up first: with no local budget, it is evicted, and every
    // read of it from then on goes to object storage.
    if (r.options.objectStore) await r.feed.tiered();
    await r.store.close();
    await expectCode(() => r.store.feed('f'), 'CLOSED');
    for (const id of m.aborted) m.abortedBeforeRestart.add(id);
    r.store = await openStore(r.directory, { ...r.options, clock: r.clock.read, newId: r.newId });
    r.feed = await r.store.feed('f');
    expect(r.feed.recovery).toEqual([]);
    r.stream = await r.feed.activeStream();
    expect(r.stream?.id).toBe(m.open?.id);
    if (m.open)
      expect(await r.stream!.info()).toMatchObject({ id: m.open.id, state: 'open', records: m.open.records.length });
    expect(await r.feed.info()).toMatchObject({ epoch: 1, lease: { epoch: 1, holder: 'model' } });
    await checkHead(m, r);
    await checkSubscription(m, r);
  }
  toString = () => 'reopen';
}

// ---- Read commands ----------------------------------------------------------------------------

class Read implements Command {
  constructor(
    readonly mode: ReadMode,
    readonly dedupScope: 'history' | 'window' | undefined,
    readonly afterFraction: number,
    readonly filter: RecordFilter | undefined,
    readonly limit: number | undefined,
    readonly form: 'records' | 'batches' | 'columns',
    /** For filtered RAW reads: how the planner finds the records; every plan gives the same answer. */
    readonly plan: Plan | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const after = scale(this.afterFraction, head(m));
    const spec: ReadSpec & { plan?: Plan } = {
      ...(this.mode === 'raw' && this.plan !== undefined ? { plan: this.plan } : {}),
      after,
      mode: this.mode,
      ...(this.dedupScope === undefined ? {} : { dedupScope: this.dedupScope }),
      ...(this.filter === undefined ? {} : { filter: this.filter }),
      ...(this.limit === undefined ? {} : { limit: this.limit }),
    };
    const expected = expectedRead(m, spec).map((record) => modelView(record));
    if (this.form === 'records') {
      const got = await drain(r.feed.read(spec));
      expect(got.map(viewOf)).toEqual(expected);
    } else if (this.form === 'columns') {
      const batches = await drain(r.feed.readColumns(spec));
      for (const batch of batches) {
        expect(batch.length).toBeGreaterThan(0);
        // The columns say what the records made from them say.
        expect(Array.from(batch.positions)).toEqual(batch.records().map((record) => record.position));
        expect(Array.from({ length: batch.length }, (_, row) => text(batch.payload(row)))).toEqual(
          batch.records().map((record) => text(record.payload)),
        );
      }
      // A commit may span batches (at most `columnBatchRowsMax` rows each), in commit order.
      const commitsOfBatches = batches.map((batch) => batch.commit);
      expect(commitsOfBatches).toEqual([...commitsOfBatches].sort((a, b) => a - b));
      expect(batches.flatMap((batch) => [...batch]).map(viewOf)).toEqual(expected);
    } else {
      const batches = await drain(r.feed.readBatches(spec));
      // One commit's worth per batch, never empty, commits strictly increasing.
      for (const batch of batches) {
        expect(batch.length).toBeGreaterThan(0);
        expect(new Set(batch.map((record) => record.commit)).size).toBe(1);
      }
      const commitsOfBatches = batches.map((batch) => batch[0].commit);
      expect(commitsOfBatches).toEqual([...new Set(commitsOfBatches)].sort((a, b) => a - b));
      expect(batches.flat().map(viewOf)).toEqual(expected);
    }
  }
  toString = () =>
    `read(${JSON.stringify({ mode: this.mode, dedupScope: this.dedupScope, after: `${this.afterFraction}%`, filter: this.filter, limit: this.limit, form: this.form, plan: this.plan })})`;
}

class Commits implements Command {
  constructor(
    readonly afterFraction: number,
    readonly limit: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const after = scale(this.afterFraction, head(m));
    const got = await collect(r.feed.commits({ after, ...(this.limit === undefined ? {} : { limit: this.limit }) }));
    const window = m.commits.slice(after);
    expect(got.map(commitView)).toEqual(
      (this.limit === undefined ? window : window.slice(0, this.limit)).map(modelCommitView),
    );
    const feedHead = await r.feed.head();
    expect(feedHead === undefined ? undefined : commitView(feedHead)).toEqual(
      head(m) === 0 ? undefined : modelCommitView(m.commits[head(m) - 1]),
    );
  }
  toString = () => `commits(after ${this.afterFraction}%, limit ${this.limit})`;
}

class ReadCommit implements Command {
  constructor(readonly fraction: number) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    if (head(m) === 0) {
      await expectCode(() => r.feed.readCommit(1), 'CURSOR_OUT_OF_RANGE');
      return;
    }
    const commit = 1 + scale(this.fraction, head(m) - 1);
    const got = await r.feed.readCommit(commit);
    expect(got.map(viewOf)).toEqual(m.commits[commit - 1].records.map((record) => modelView(record)));
  }
  toString = () => `readCommit(${this.fraction}%)`;
}

class ReadStream implements Command {
  constructor(
    readonly target: 'open' | 'finished' | 'aborted' | 'unknown',
    readonly pick: number,
    readonly fromSeq: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const options = this.fromSeq === undefined ? {} : { fromSeq: this.fromSeq };
    const from = this.fromSeq ?? 1;
    if (this.target === 'open' && m.open) {
      const stream = await r.feed.stream(m.open.id);
      const got = await stream.read(options);
      expect(got.map(viewOf)).toEqual(
        m.open.records.filter((record) => record.seq >= from).map((record) => modelView(record, 'open')),
      );
      expect(await stream.info()).toMatchObject({ id: m.open.id, state: 'open', records: m.open.records.length });
    } else if (this.target === 'finished' && m.finished.size > 0) {
      const ids = [...m.finished.keys()];
      const id = ids[scale(this.pick, ids.length - 1)];
      const commit = m.commits[m.finished.get(id)! - 1];
      const stream = await r.feed.stream(id);
      const got = await stream.read(options);
      expect(got.map(viewOf)).toEqual(
        commit.records.filter((record) => record.seq >= from).map((record) => modelView(record)),
      );
      expect(await stream.info()).toMatchObject({ id, state: 'sealed', commit: { commit: commit.commit, stream: id } });
    } else if (this.target === 'aborted' && m.aborted.length > 0) {
      const id = m.aborted[scale(this.pick, m.aborted.length - 1)];
      // Until a restart the feed remembers the abort. After one, it knows of it only while the
      // WAL segment with the abort frame is still there (finished segments are deleted), so the
      // lookup may fail then.
      const found = await r.feed.stream(id).catch((error: unknown) => error);
      if (found instanceof Stream) {
        await expectCode(() => found.read(options), 'STREAM_NOT_FOUND');
        expect(await found.info()).toMatchObject({ id, state: 'aborted' });
      } else {
        expect(m.abortedBeforeRestart.has(id)).toBe(true);
        expect(found).toMatchObject({ code: 'STREAM_NOT_FOUND' });
      }
    } else {
      await expectCode(() => r.feed.stream('no-such-stream'), 'STREAM_NOT_FOUND');
    }
  }
  toString = () => `readStream(${this.target} @${this.pick}%, fromSeq ${this.fromSeq})`;
}

class Get implements Command {
  constructor(
    readonly key: string,
    readonly asOfFraction: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const asOf = this.asOfFraction === undefined ? undefined : scale(this.asOfFraction, head(m));
    const got = await r.feed.get(this.key, asOf === undefined ? {} : { asOf });
    const expected = expectedGet(m, this.key, asOf ?? head(m));
    expect(got === undefined ? undefined : viewOf(got)).toEqual(
      expected === undefined ? undefined : modelView(expected),
    );
  }
  toString = () => `get(${this.key}, asOf ${this.asOfFraction === undefined ? 'head' : `${this.asOfFraction}%`})`;
}

/** Cursors past the head, before the start or not integers are refused everywhere. */
class BadCursor implements Command {
  constructor(readonly cursor: 'pastHead' | 'negative' | 'fraction') {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const cursor = this.cursor === 'pastHead' ? head(m) + 1 : this.cursor === 'negative' ? -1 : 0.5;
    for (const mode of ['raw', 'dedup', 'latest'] as const) {
      await expectCode(() => drain(r.feed.read({ after: cursor, mode })), 'CURSOR_OUT_OF_RANGE');
      await expectCode(() => drain(r.feed.readBatches({ after: cursor, mode })), 'CURSOR_OUT_OF_RANGE');
      await expectCode(() => drain(r.feed.readColumns({ after: cursor, mode })), 'CURSOR_OUT_OF_RANGE');
    }
    await expectCode(() => r.feed.commits({ after: cursor }), 'CURSOR_OUT_OF_RANGE');
    await expectCode(() => r.feed.get('k1', { asOf: cursor }), 'CURSOR_OUT_OF_RANGE');
    await expectCode(() => drain(r.feed.follow({ after: cursor })), 'CURSOR_OUT_OF_RANGE');
    if (this.cursor === 'pastHead') {
      await expectCode(() => r.feed.readCommit(head(m) + 1), 'CURSOR_OUT_OF_RANGE');
      await expectCode(() => r.feed.readCommit(0), 'CURSOR_OUT_OF_RANGE');
    }
  }
  toString = () => `badCursor(${this.cursor})`;
}

/** Catch-up through `follow`: the commits after the cursor, in order, then it waits until aborted. */
class Follow implements Command {
  constructor(readonly afterFraction: number) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const after = scale(this.afterFraction, head(m));
    const controller = new AbortController();
    const got: { commit: ReturnType<typeof commitView>; records: ReturnType<typeof viewOf>[] }[] = [];
    const expectedCount = head(m) - after;
    if (expectedCount === 0) setImmediate(() => controller.abort());
    const error = await errorOf(async () => {
      for await (const { commit, records } of r.feed.follow({ after, signal: controller.signal })) {
        got.push({ commit: commitView(commit), records: records.map(viewOf) });
        if (got.length === expectedCount) break;
      }
    });
    // Either caught up and broken out of, or aborted while waiting for a commit that never came.
    if (expectedCount === 0) expect(error).toBe(controller.signal.reason);
    else expect(error).toBeUndefined();
    expect(got).toEqual(
      m.commits.slice(after).map((commit) => ({
        commit: modelCommitView(commit),
        records: commit.records.map((record) => modelView(record)),
      })),
    );
  }
  toString = () => `follow(after ${this.afterFraction}%)`;
}

function expectedLag(m: Model, cursor: number): { commits: number; records: number } {
  return {
    commits: head(m) - cursor,
    records: lastPosition(m) - (cursor === 0 ? 0 : m.commits[cursor - 1].lastPosition),
  };
}

async function checkSubscription(m: Model, r: Real): Promise<void> {
  if (m.subscription === undefined) {
    expect(await r.feed.subscriptions()).toEqual([]);
    await expectCode(() => r.feed.subscription('sub'), 'SUBSCRIPTION_NOT_FOUND');
    return;
  }
  const infos = await r.feed.subscriptions();
  expect(infos.map((info) => [info.name, info.cursor])).toEqual([['sub', m.subscription]]);
  const lag = expectedLag(m, m.subscription);
  expect(infos[0].lag).toMatchObject(lag);
  // Bytes of the runs behind: none when no records are behind (a commit of no records has no run).
  if (lag.records === 0) expect(infos[0].lag.bytes).toBe(0);
  else expect(infos[0].lag.bytes).toBeGreaterThan(0);
  expect(await cursorOf(r.feed, 'sub')).toBe(m.subscription);
}

/** One durable subscription, `sub`, created, polled, advanced, reset and deleted at random. */
class SubscriptionCommand implements Command {
  constructor(
    readonly action: 'create' | 'poll' | 'advance' | 'reset' | 'delete',
    readonly fraction: number,
    readonly max: number | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const target = scale(this.fraction, head(m));
    if (this.action === 'create') {
      if (m.subscription !== undefined) {
        await expectCode(() => r.feed.createSubscription('sub', { after: target }), 'SUBSCRIPTION_EXISTS');
      } else {
        const subscription = await r.feed.createSubscription('sub', { after: target });
        expect((await subscription.info()).cursor).toBe(target);
        m.subscription = target;
      }
    } else if (m.subscription === undefined) {
      await expectCode(async () => {
        const subscription = await r.feed.subscription('sub');
        await subscription.poll();
      }, 'SUBSCRIPTION_NOT_FOUND');
    } else if (this.action === 'poll') {
      const result = await (await r.feed.subscription('sub')).poll(this.max === undefined ? {} : { max: this.max });
      const max = this.max ?? limits.subscriptionPollRecordsDefault;
      const expected: ModelCommit[] = [];
      let records = 0;
      for (const commit of m.commits.slice(m.subscription)) {
        if (expected.length > 0 && records + commit.records.length > max) break;
        expected.push(commit);
        records += commit.records.length;
      }
      expect({
        cursor: result.cursor,
        commits: result.commits.map(({ commit, records: got }) => ({
          commit: commitView(commit),
          records: got.map(viewOf),
        })),
      }).toEqual({
        cursor: expected.length === 0 ? m.subscription : expected[expected.length - 1].commit,
        commits: expected.map((commit) => ({
          commit: modelCommitView(commit),
          records: commit.records.map((record) => modelView(record)),
        })),
      });
    } else if (this.action === 'advance') {
      const subscription = await r.feed.subscription('sub');
      if (target < m.subscription) {
        await expectCode(() => subscription.advance(target), 'CURSOR_BEHIND');
      } else {
        expect(await subscription.advance(target)).toMatchObject({
          name: 'sub',
          cursor: target,
          lag: expectedLag(m, target),
        });
        m.subscription = target;
      }
      await expectCode(() => subscription.advance(head(m) + 1), 'CURSOR_OUT_OF_RANGE');
    } else if (this.action === 'reset') {
      const subscription = await r.feed.subscription('sub');
      expect(await subscription.reset(target)).toMatchObject({
        name: 'sub',
        cursor: target,
        lag: expectedLag(m, target),
      });
      m.subscription = target;
      await expectCode(() => subscription.reset(-1), 'CURSOR_OUT_OF_RANGE');
    } else {
      await (await r.feed.subscription('sub')).delete();
      m.subscription = undefined;
    }
    await checkSubscription(m, r);
  }
  toString = () =>
    `subscription(${this.action} @${this.fraction}%${this.max === undefined ? '' : `, max ${this.max}`})`;
}

// ---- Generators of commands ---------------------------------------------------------------------

const fraction = fc.integer({ min: 0, max: 100 });
const filterItemArb: fc.Arbitrary<QueryItem> = fc
  .record(
    {
      types: fc.uniqueArray(fc.constantFrom(...types), { minLength: 1, maxLength: 2, size: 'max' }),
      tags: fc.uniqueArray(fc.constantFrom(...tags), { minLength: 1, maxLength: 2, size: 'max' }),
    },
    { requiredKeys: [] },
  )
  .filter((item) => item.types !== undefined || item.tags !== undefined);
const filterArb: fc.Arbitrary<RecordFilter | undefined> = fc.option(
  fc.oneof(
    { weight: 3, arbitrary: filterItemArb },
    {
      weight: 1,
      arbitrary: fc.array(filterItemArb, { minLength: 1, maxLength: 3, size: 'max' }).map((items) => ({ items })),
    },
  ),
  { nil: undefined, freq: 3 },
);

const openStreamArb = fc
  .option(fc.constantFrom('nightly', 'hourly'), { nil: undefined })
  .map((message) => new OpenStream(message));
const appendArb = fc
  .tuple(
    fc.array(batchArb, { minLength: 1, maxLength: 3, size: 'max' }),
    fc.constantFrom('plain' as const, 'expectedSeq' as const, 'wrongSeq' as const, 'concurrent' as const),
    fc.constantFrom(-2, -1, 1, 3),
  )
  .map(([batches, mode, wrongBy]) => new AppendBatches(batches, mode, wrongBy));
const sealArb = fc.option(fc.constantFrom('sealed!'), { nil: undefined }).map((message) => new Seal(message));
const oneShotArb = fc
  .tuple(
    fc.array(batchArb, { minLength: 1, maxLength: 4, size: 'max' }),
    fc.boolean(),
    fc.option(fc.constantFrom('one-shot'), { nil: undefined, freq: 3 }),
    fc.option(fraction, { nil: undefined, freq: 4 }),
  )
  .map(([batches, concurrent, message, reader]) => new OneShot(batches, concurrent, message, reader));

/**
 * Subscription commands, listed twice among the commands and creating often: with one in
 * twenty commands and creation one action in six, runs seldom held a subscription at all, and
 * most subscription commands met none (polls ran about a dozen times in 150 runs).
 */
const subscriptionArb = fc
  .tuple(
    fc.oneof(
      { weight: 3, arbitrary: fc.constant('create' as const) },
      { weight: 3, arbitrary: fc.constant('poll' as const) },
      { weight: 1, arbitrary: fc.constantFrom('advance' as const, 'reset' as const, 'delete' as const) },
      { weight: 1, arbitrary: fc.constantFrom('advance' as const, 'reset' as const, 'delete' as const) },
    ),
    fraction,
    fc.option(fc.nat(12), { nil: undefined }),
  )
  .map(([action, at, max]) => new SubscriptionCommand(action, at, max));

// ---- What the runs reached ----------------------------------------------------------------------

/** The commands the model runs executed, by kind and by the state each met. */
const commandTally = branchTally('model commands', [
  'open a stream',
  'open a stream while one is open (refused)',
  'append: plain',
  'append: expectedSeq',
  'append: wrongSeq (refused)',
  'append: concurrent batches',
  'seal',
  'abort',
  'one-shot appends, sequential',
  'one-shot appends, concurrent',
  'one-shot appends with a read in flight',
  'stream and one-shot appends together',
  'write to a finished stream (refused)',
  'reopen',
  'reopen with a stream open',
  'read: raw',
  'read: dedup',
  'read: latest',
  'read: filtered, by the index',
  'read: filtered, by a scan',
  'read: in batches',
  'read: in columns',
  'read: with a limit',
  'commits',
  'readCommit',
  'readStream: the open stream',
  'readStream: a finished stream',
  'readStream: an aborted stream',
  'readStream: an unknown stream',
  'get at the head',
  'get as of an earlier commit',
  'bad cursor (refused)',
  'follow',
  'subscription: create',
  'subscription: create while one exists (refused)',
  'subscription: poll',
  'subscription: advance',
  'subscription: reset',
  'subscription: delete',
  'subscription: none exists (refused)',
]);

type CommandBranch = keyof typeof commandTally.counts;

/** The branches `command` takes when it runs against model state `m`. */
function branchesOf(command: Command, m: Readonly<Model>): CommandBranch[] {
  if (command instanceof OpenStream) return [m.open ? 'open a stream while one is open (refused)' : 'open a stream'];
  if (command instanceof AppendBatches) {
    return [
      command.mode === 'wrongSeq'
        ? 'append: wrongSeq (refused)'
        : command.mode === 'concurrent'
          ? 'append: concurrent batches'
          : `append: ${command.mode}`,
    ];
  }
  if (command instanceof Seal) return ['seal'];
  if (command instanceof Abort) return ['abort'];
  if (command instanceof OneShot) {
    return [
      command.concurrent ? 'one-shot appends, concurrent' : 'one-shot appends, sequential',
      ...(command.readerInFlight === undefined ? [] : ['one-shot appends with a read in flight' as const]),
    ];
  }
  if (command instanceof MixedConcurrent) return ['stream and one-shot appends together'];
  if (command instanceof WriteFinished) return ['write to a finished stream (refused)'];
  if (command instanceof Reopen) return [m.open ? 'reopen with a stream open' : 'reopen'];
  if (command instanceof Read) {
    const branches: CommandBranch[] = [`read: ${command.mode}`];
    if (command.filter !== undefined && command.plan === 'index') branches.push('read: filtered, by the index');
    if (command.filter !== undefined && command.plan === 'scan') branches.push('read: filtered, by a scan');
    if (command.form === 'batches') branches.push('read: in batches');
    if (command.form === 'columns') branches.push('read: in columns');
    if (command.limit !== undefined) branches.push('read: with a limit');
    return branches;
  }
  if (command instanceof Commits) return ['commits'];
  if (command instanceof ReadCommit) return ['readCommit'];
  if (command instanceof ReadStream) {
    if (command.target === 'open' && m.open) return ['readStream: the open stream'];
    if (command.target === 'finished' && m.finished.size > 0) return ['readStream: a finished stream'];
    if (command.target === 'aborted' && m.aborted.length > 0) return ['readStream: an aborted stream'];
    return ['readStream: an unknown stream'];
  }
  if (command instanceof Get)
    return [
      command.asOfFraction === undefined || scale(command.asOfFraction, head(m)) === head(m)
        ? 'get at the head'
        : 'get as of an earlier commit',
    ];
  if (command instanceof BadCursor) return ['bad cursor (refused)'];
  if (command instanceof Follow) return ['follow'];
  if (command instanceof SubscriptionCommand) {
    if (command.action === 'create')
      return [
        m.subscription === undefined ? 'subscription: create' : 'subscription: create while one exists (refused)',
      ];
    return [m.subscription === undefined ? 'subscription: none exists (refused)' : `subscription: ${command.action}`];
  }
  throw new Error(`a command the tally does not know: ${String(command)}`);
}

/** A command that counts the branches it takes in `commandTally` when it runs. */
class Tallied implements Command {
  constructor(readonly command: Command) {}
  check = (m: Readonly<Model>) => this.command.check(m);
  async run(m: Model, r: Real): Promise<void> {
    for (const branch of branchesOf(this.command, m)) commandTally.hit(branch);
    await this.command.run(m, r);
  }
  toString = () => this.command.toString();
}

// fc.commands picks uniformly among these, so writes are listed more than once to weigh them up.
const commandArbs: fc.Arbitrary<Command>[] = [
  openStreamArb,
  openStreamArb,
  appendArb,
  appendArb,
  appendArb,
  sealArb,
  sealArb,
  fc.constant(new Abort()),
  oneShotArb,
  oneShotArb,
  fc
    .tuple(
      fc.array(batchArb, { minLength: 1, maxLength: 3, size: 'max' }),
      fc.array(batchArb, { minLength: 1, maxLength: 3, size: 'max' }),
    )
    .map(([a, b]) => new MixedConcurrent(a, b)),
  fc
    .tuple(fraction, fc.constantFrom('append' as const, 'seal' as const, 'abort' as const))
    .map(([pick, action]) => new WriteFinished(pick, action)),
  fc.constant(new Reopen()),
  fc
    .tuple(
      fc.constantFrom('raw' as const, 'dedup' as const, 'latest' as const),
      fc.constantFrom(undefined, 'history' as const, 'window' as const),
      fraction,
      filterArb,
      fc.option(fc.nat(25), { nil: undefined, freq: 3 }),
      fc.constantFrom('records' as const, 'batches' as const, 'columns' as const),
      fc.constantFrom(undefined, 'auto' as const, 'index' as const, 'scan' as const),
    )
    .map(([mode, scope, after, filter, limit, form, plan]) => new Read(mode, scope, after, filter, limit, form, plan)),
  fc.tuple(fraction, fc.option(fc.nat(6), { nil: undefined })).map(([after, limit]) => new Commits(after, limit)),
  fraction.map((at) => new ReadCommit(at)),
  fc
    .tuple(
      fc.constantFrom('open' as const, 'finished' as const, 'aborted' as const, 'unknown' as const),
      fraction,
      fc.option(fc.nat(12), { nil: undefined }),
    )
    .map(([target, pick, fromSeq]) => new ReadStream(target, pick, fromSeq)),
  fc
    .tuple(fc.constantFrom(...keys, 'never-written'), fc.option(fraction, { nil: undefined }))
    .map(([key, asOf]) => new Get(key, asOf)),
  fc.constantFrom('pastHead' as const, 'negative' as const, 'fraction' as const).map((cursor) => new BadCursor(cursor)),
  fraction.map((after) => new Follow(after)),
  subscriptionArb,
  subscriptionArb,
];

/** Everything the model says, read back in one go (after the last command of a run). */
async function checkEverything(m: Model, r: Real): Promise<void> {
  await checkHead(m, r);
  await checkSubscription(m, r);
  expect((await drain(r.feed.read())).map(viewOf)).toEqual(published(m).map((record) => modelView(record)));
  for (const mode of ['dedup', 'latest'] as const) {
    expect((await drain(r.feed.read({ mode }))).map(viewOf)).toEqual(
      expectedRead(m, { after: 0, mode }).map((record) => modelView(record)),
    );
  }
  expect((await collect(r.feed.commits())).map(commitView)).toEqual(m.commits.map(modelCommitView));
  for (const key of keys) {
    for (let asOf = 0; asOf <= head(m); asOf++) {
      const got = await r.feed.get(key, { asOf });
      const expected = expectedGet(m, key, asOf);
      expect(got === undefined ? undefined : viewOf(got), `get(${key}, asOf ${asOf})`).toEqual(
        expected === undefined ? undefined : modelView(expected),
      );
    }
  }
  const [verification] = await r.store.verify('f');
  expect(verification!.problems).toEqual([]);
  expect(verification).toMatchObject({ ok: true, commits: head(m), records: lastPosition(m) });
}

/** What the tiered runs saw: reads that went to object storage, and segments evicted at a reopen. */
const tieredReach = { remoteRequests: 0, evictedSegments: 0 };

/**
 * Runs the model property `numRuns` times over stores opened with `options()` (made per run);
 * fails when the time limit cuts it short.
 */
async function runModel(numRuns: number, timeLimitMs: number, options: () => StoreOptions): Promise<void> {
  const started = Date.now();
  const details = await fc.check(
    fc.asyncProperty(
      fc.commands(
        commandArbs.map((arbitrary) => arbitrary.map((command) => new Tallied(command))),
        { maxCommands: 80, size: 'max' },
      ),
      async (commands) => {
        const directory = temporaryDirectory('streamstack-model-');
        const clock = new ManualClock();
        const newId = sequentialIds('s');
        const storeOptions = options();
        const store = await openStore(directory, { ...storeOptions, clock: clock.read, newId });
        const feed = await store.createFeed('f');
        const { token } = await feed.acquireLease({ holder: 'model', ttlMs: limits.leaseTtlMsMax });
        const real: Real = { directory, clock, newId, store, feed, token, stream: undefined, options: storeOptions };
        const model: Model = {
          commits: [],
          open: undefined,
          finished: new Map(),
          aborted: [],
          abortedBeforeRestart: new Set(),
          subscription: undefined,
        };
        try {
          await fc.asyncModelRun(() => ({ model, real }), commands);
          await checkEverything(model, real);
          const tiering = (await real.feed.info()).tiering;
          tieredReach.remoteRequests += tiering?.remoteReads.requests ?? 0;
          tieredReach.evictedSegments += tiering?.evictedSegments ?? 0;
        } finally {
          await real.store.close().catch(() => undefined);
          fs.rmSync(directory, { recursive: true, force: true });
        }
      },
    ),
    {
      numRuns,
      interruptAfterTimeLimit: timeLimitMs,
      // END_ON_FAILURE=1 skips shrinking: quicker when hunting for a failure's cause.
      endOnFailure: process.env.END_ON_FAILURE !== undefined,
    },
  );
  if (details.failed) {
    throw new Error((await fc.asyncDefaultReportMessage(details)) ?? 'the model property failed', {
      cause: details.errorInstance,
    });
  }
  console.log(`model runs: ${details.numRuns} of ${numRuns} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  expect(
    details.interrupted,
    `the ${timeLimitMs / 1000} s time limit cut the property short after ${details.numRuns} of ${numRuns} runs`,
  ).toBe(false);
  expect(details.numRuns).toBe(numRuns);
}

describe('a feed against its model', () => {
  /**
   * Runs of up to 80 commands; on a 2-core machine the 150 runs take about 12 s alone and about
   * twice that beside another test file. The time limit only bounds a failure's shrinking
   * (which can take minutes): a run it cuts short before `numRuns` fails the test, since fewer
   * runs than asked check less than the test claims.
   */
  const timeLimitMs = 100_000;

  it(
    'agrees with the model under random writes, restarts and reads',
    async () => {
      await runModel(150, timeLimitMs, () => ({}));
      commandTally.expectAllReached();
    },
    timeLimitMs + 30_000,
  );
});

const modelObjects = objectStoreSuite('model');

describe.skipIf(modelObjects.missing)(modelObjects.title('a tiered feed against its model'), () => {
  modelObjects.start();
  const timeLimitMs = 150_000;

  /**
   * The same commands over a store that tiers to object storage with no local budget: each
   * reopen first waits for the uploads, so every sealed segment is evicted and read back from
   * object storage from then on. Fewer runs (each reopen uploads and each read of evicted
   * history makes requests); the run checks it did read remotely.
   */
  it(
    'agrees with the model when sealed history is read from object storage',
    async () => {
      await runModel(100, timeLimitMs, () => ({
        objectStore: modelObjects.settings({ localHistoryBytesMax: 0 }),
      }));
      console.log(
        `tiered model runs: ${tieredReach.evictedSegments} segments evicted, ${tieredReach.remoteRequests} remote reads`,
      );
      expect(tieredReach.evictedSegments).toBeGreaterThan(0);
      expect(tieredReach.remoteRequests).toBeGreaterThan(0);
    },
    timeLimitMs + 30_000,
  );
});

/** Resolves when `promise` settles or after `ms`, whichever is first. */
async function settledOrAfter(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise.catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

/** Holds the file reads started during `start` until `release` is called. */
function holdingFileReads<T>(start: () => T): { result: T; release: () => void } {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const read = fs.read;
  const spy = vi.spyOn(fs, 'read').mockImplementation(((...args: Parameters<typeof fs.read>) => {
    void held.then(() => (read as (...all: unknown[]) => void)(...args));
  }) as typeof fs.read);
  try {
    return { result: start(), release };
  } finally {
    spy.mockRestore();
  }
}

describe('handles of a closed store', () => {
  /** Tries `actions` and names each outcome: an error code, or `accepted`. */
  async function outcomesOf(actions: Record<string, () => unknown>): Promise<Record<string, string>> {
    const outcomes: Record<string, string> = {};
    for (const [name, action] of Object.entries(actions)) {
      const error = await errorOf(action);
      outcomes[name] =
        error instanceof StreamStackError ? error.code : error === undefined ? 'accepted' : String(error);
    }
    return outcomes;
  }
  const allClosed = (outcomes: Record<string, string>) =>
    Object.fromEntries(Object.keys(outcomes).map((name) => [name, 'CLOSED']));

  it('refuses writes and reads through feed and stream handles once their store is closed', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 600_000 });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'acknowledged', key: 'k' }], { token });
    await feed.append([{ payload: 'one', key: 'k' }], { token });
    await store.close();
    const before = digestTree(directory);

    const outcomes = await outcomesOf({
      'feed.append': () => feed.append([{ payload: 'after close' }], { token }),
      'stream.append': () => stream.append([{ payload: 'after close' }], { token }),
      'stream.seal': () => stream.seal({ token }),
      'stream.abort': () => stream.abort({ token }),
      'feed.openStream': () => feed.openStream({ token }),
      'feed.acquireLease': () => feed.acquireLease({ holder: 'q' }),
      'feed.releaseLease': () => feed.releaseLease({ token }),
      'feed.read': () => drain(feed.read()),
      'feed.readCommit': () => feed.readCommit(1),
      'feed.get': () => feed.get('k'),
      'stream.read': () => stream.read(),
    });
    expect(outcomes).toEqual(allClosed(outcomes));
    // Nothing reached the disk after the close: the directory is the next opener's alone.
    expect(digestTree(directory)).toBe(before);
    const again = await openStore(directory);
    const reopened = await again.feed('f');
    expect((await collect(reopened.commits())).map((commit) => commit.commit)).toEqual([1]);
    expect((await reopened.activeStream())?.id).toBe(stream.id);
    await again.close();
  });

  it('ends a read in flight when its store closes with the read finished or CLOSED, never CORRUPT', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    for (let index = 0; index < 5; index++)
      await feed.append([{ payload: `r${index}-${'x'.repeat(10_000)}` }, { payload: 'small', key: 'k' }]);
    // Three reads start; their file reads land after the store has closed.
    const { result: reads, release } = holdingFileReads(() =>
      [drain(feed.read()), feed.readCommit(3), drain(feed.read({ mode: 'latest' }))].map((read) =>
        read.then(
          () => 'finished',
          (error: unknown) => (error instanceof StreamStackError ? error.code : String(error)),
        ),
      ),
    );
    // Released once the close is done, or after a while if the close waits for the reads.
    const closing = store.close();
    await settledOrAfter(closing, 200);
    release();
    await closing;
    const outcomes = await Promise.all(reads);
    expect(outcomes.filter((outcome) => outcome !== 'finished' && outcome !== 'CLOSED')).toEqual([]);
  });

  it('cannot touch a store opened on the same directory after it closed', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const stale = await store.createFeed('f');
    const { token } = await stale.acquireLease({ holder: 'p', ttlMs: 600_000 });
    for (let index = 0; index < 3; index++) await stale.append([{ payload: `p${index}` }], { token });
    await store.close();

    const second = await openStore(directory);
    const current = await second.feed('f');
    // Writes through the closed store's handle: refused, and the open store's files untouched
    // (a write through a closed file descriptor lands in whatever file reuses its number).
    const outcomes = await outcomesOf({
      'feed.releaseLease': () => stale.releaseLease({ token }),
      'feed.append': () => stale.append([{ payload: 'stale writer' }], { token }),
    });
    expect(outcomes).toEqual(allClosed(outcomes));
    const commit = await current.append([{ payload: 'current writer' }], { token });
    expect(commit.commit).toBe(4);
    expect((await drain(current.read())).map((record) => text(record.payload))).toEqual([
      'p0',
      'p1',
      'p2',
      'current writer',
    ]);
    expect((await second.verify('f'))[0]).toMatchObject({ ok: true, commits: 4 });
    await second.close();

    const third = await openStore(directory);
    const reopened = await third.feed('f');
    expect(reopened.recovery).toEqual([]);
    expect((await drain(reopened.read())).map((record) => text(record.payload))).toEqual([
      'p0',
      'p1',
      'p2',
      'current writer',
    ]);
    await third.close();
  });
});

describe('reading an open stream while it is written', () => {
  it('returns the acknowledged records when the stream is sealed during the read', async () => {
    const directory = temporaryDirectory();
    const store = await openStore(directory);
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 600_000 });
    const stream = await feed.openStream({ token });
    // Big records, so that the stream spans several WAL segments (64 KiB each).
    const payloads = Array.from({ length: 12 }, (_, index) => `r${index}-${'x'.repeat(10_000)}`);
    for (const payload of payloads) await stream.append([{ payload }], { token });
    expect(fs.readdirSync(path.join(directory, 'feeds', 'f', 'wal')).length).toBeGreaterThan(1);

    // The read starts while the stream is open; its file reads land after the seal.
    const { result: reading, release } = holdingFileReads(() => stream.read().catch((error: unknown) => error));
    const commit = await stream.seal({ token });
    // verify waits for the writer's maintenance (the WAL cleanup after the seal); the reads are
    // released once it is done, or after a while if the cleanup waits for them.
    const verifying = store.verify('f');
    await settledOrAfter(verifying, 200);
    release();
    expect((await verifying)[0].ok).toBe(true);
    const records = await reading;
    expect(records, 'the read failed').toBeInstanceOf(Array);
    expect((records as StreamRecord[]).map((record) => [record.seq, text(record.payload)])).toEqual(
      payloads.map((payload, index) => [index + 1, payload]),
    );
    expect(commit.records).toBe(12);
    await store.close();
  });

  it('gives each record its own seq when a batch is acknowledged during the read', async () => {
    const store = await openStore(temporaryDirectory());
    const feed = await store.createFeed('f');
    const { token } = await feed.acquireLease({ holder: 'p', ttlMs: 600_000 });
    const stream = await feed.openStream({ token });
    await stream.append([{ payload: 'one' }, { payload: 'two' }], { token });

    // Hold the read's file reads until a further batch has been acknowledged.
    const { result: reading, release } = holdingFileReads(() => stream.read());
    try {
      await stream.append([{ payload: 'three' }], { token });
      release();
      const records = await reading;
      // The read may stop before the new batch or include it, but every record keeps its own seq.
      const all = [
        [1, 'one'],
        [2, 'two'],
        [3, 'three'],
      ];
      const got = records.map((record) => [record.seq, text(record.payload)]);
      expect(got).toEqual(all.slice(0, Math.max(2, got.length)));
    } finally {
      release();
    }
    expect((await stream.read()).map((record) => [record.seq, text(record.payload)])).toEqual([
      [1, 'one'],
      [2, 'two'],
      [3, 'three'],
    ]);
    await store.close();
  });
});
