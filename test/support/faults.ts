/**
 * Fault injection for the storage fault model (test/engine/faults.test.ts): a repeatable fixture
 * store with everything a feed can acknowledge, a map of its files and of the regions inside
 * them that the model treats differently, the damage kinds, and record comparisons that say
 * exactly which field of which record differs.
 *
 * The fixture is built through the public API. It looks inside the engine in one place only:
 * which history segments each commit's bytes (its run and the payloads it shares with earlier
 * runs) lie in, so that a read that fails is told apart from one that never touched the damage.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Feed, RecordFilter, StoredRecord, StreamRecord } from '../../packages/engine/src/index.js';
import { ManualClock, openStore, sequentialIds } from './store.js';

// ---- A seeded generator ---------------------------------------------------------------------

/** mulberry32: small, fast, and the same sequence on every machine for the same seed. */
export function prng(seed: number): Random {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  return {
    next,
    int: (low, high) => low + Math.floor(next() * (high - low + 1)),
    pick: (items) => items[Math.floor(next() * items.length)],
    bytes: (length) => {
      const out = Buffer.alloc(length);
      // Every byte is non-zero, so an extension can never be mistaken for preallocated zeros.
      for (let index = 0; index < length; index++) out[index] = 1 + Math.floor(next() * 255);
      return out;
    },
  };
}

export interface Random {
  next(): number;
  /** An integer in [low, high]. */
  int(low: number, high: number): number;
  pick<T>(items: readonly T[]): T;
  /** `length` random non-zero bytes. */
  bytes(length: number): Buffer;
}

// ---- Records as the fixture saw them ---------------------------------------------------------

/** A record as it was acknowledged, with its bytes copied out of whatever buffer held them. */
export interface RecordView {
  readonly commit: number | undefined;
  readonly stream: string;
  readonly seq: number;
  readonly position: number | undefined;
  readonly timestamp: number;
  readonly fingerprint: Buffer | undefined;
  readonly payload: Buffer;
  readonly key: string | undefined;
  readonly version: number | undefined;
  readonly tombstone: boolean;
  readonly type: string | undefined;
  readonly tags: readonly string[];
}

export function viewOf(record: StoredRecord | StreamRecord): RecordView {
  return {
    commit: record.commit,
    stream: record.stream,
    seq: record.seq,
    position: record.position,
    timestamp: record.timestamp,
    fingerprint: record.fingerprint === undefined ? undefined : Buffer.from(record.fingerprint),
    payload: Buffer.from(record.payload),
    key: record.key,
    version: record.version,
    tombstone: record.tombstone,
    type: record.type,
    tags: [...record.tags],
  };
}

function showBytes(bytes: Uint8Array | undefined): string {
  if (bytes === undefined) return 'none';
  const hex = Buffer.from(bytes.subarray(0, 12)).toString('hex');
  return `${bytes.length} bytes ${hex}${bytes.length > 12 ? '…' : ''}`;
}

const show = (value: unknown): string => (value === undefined ? 'undefined' : JSON.stringify(value));

/** The first field in which `actual` differs from `expected`, said plainly; undefined if none. */
export function recordDifference(expected: RecordView, actual: StoredRecord | StreamRecord): string | undefined {
  const scalar = [
    ['commit', expected.commit, actual.commit],
    ['position', expected.position, actual.position],
    ['stream', expected.stream, actual.stream],
    ['seq', expected.seq, actual.seq],
    ['key', expected.key, actual.key],
    ['type', expected.type, actual.type],
    ['version', expected.version, actual.version],
    ['tombstone', expected.tombstone, actual.tombstone],
    ['timestamp', expected.timestamp, actual.timestamp],
  ] as const;
  for (const [field, want, got] of scalar) {
    if (want !== got) return `${field} is ${show(got)}, expected ${show(want)}`;
  }
  if (show(expected.tags) !== show([...actual.tags]))
    return `tags are ${show([...actual.tags])}, expected ${show(expected.tags)}`;
  const payload = Buffer.from(actual.payload);
  if (!payload.equals(expected.payload)) {
    const at = firstDifference(expected.payload, payload, 0) ?? 0;
    const byte = (bytes: Buffer) => (at < bytes.length ? `0x${bytes[at].toString(16).padStart(2, '0')}` : 'its end');
    return `payload differs from byte ${at} on (${byte(payload)}, expected ${byte(expected.payload)}): it is ${showBytes(payload)}, expected ${showBytes(expected.payload)}`;
  }
  // An open stream's records carry a fingerprint only when the producer gave one.
  const fingerprint = actual.fingerprint === undefined ? undefined : Buffer.from(actual.fingerprint);
  if (
    (expected.fingerprint === undefined) !== (fingerprint === undefined) ||
    (fingerprint && !fingerprint.equals(expected.fingerprint!))
  ) {
    return `fingerprint is ${showBytes(fingerprint)}, expected ${showBytes(expected.fingerprint)}`;
  }
  return undefined;
}

/** Where a record sits, for messages: its position and commit when it has them, else its seq. */
export function placeOf(record: { position?: number | undefined; commit?: number | undefined; seq: number }): string {
  return record.position === undefined
    ? `seq ${record.seq}`
    : `position ${record.position} (commit ${record.commit}, seq ${record.seq})`;
}

/** How `actual` differs from the list `expected`, as one sentence; undefined when it matches. */
export function listDifference(
  expected: readonly RecordView[],
  actual: readonly (StoredRecord | StreamRecord)[],
): string | undefined {
  const common = Math.min(expected.length, actual.length);
  for (let index = 0; index < common; index++) {
    const difference = recordDifference(expected[index], actual[index]);
    if (difference) {
      // When the list is another commit's (or another length), say so: it explains the rest.
      const span = (records: readonly { position?: number | undefined; commit?: number | undefined; seq: number }[]) =>
        `${records.length} records from ${placeOf(records[0])}`;
      const elsewhere = actual.length !== expected.length || placeOf(actual[0]) !== placeOf(expected[0]);
      return `record ${index + 1} (${placeOf(expected[index])}): ${difference}${elsewhere ? `; got ${span(actual)}, expected ${span(expected)}` : ''}`;
    }
  }
  if (actual.length !== expected.length) {
    return `returned ${actual.length} records, expected ${expected.length}${actual.length > 0 ? ` (the first ${common} match)` : ''}`;
  }
  return undefined;
}

// ---- The fixture ---------------------------------------------------------------------------

/** Where a log's last group write lies in its file: the only bytes that can be a torn tail. */
export interface TornWindow {
  /** The first byte the last group write (or, for a state log, the last record) changed. */
  readonly from: number;
}

/** One file of the pristine data directory, with what the model needs to know about it. */
export interface FixtureFile {
  /** Relative to the data directory, with forward slashes. */
  readonly file: string;
  /** `other` is any file the engine writes that the model does not name: its bytes must stay. */
  readonly role: 'history' | 'wal' | 'index' | 'lease' | 'subscription' | 'feed.json' | 'LOCK' | 'other';
  /** Derived files are rebuilt from the logs; damage to them must never be visible. */
  readonly derived: boolean;
  /** Preallocated segments have a 48-byte header and a zero-filled tail. */
  readonly segment: boolean;
  /** The newest segment of its log, or a state log: its last write may be a torn tail. */
  readonly torn: TornWindow | undefined;
  /** Just past the last byte any write put there: beyond it is zero fill or nothing. */
  readonly writtenEnd: number;
  readonly size: number;
}

export interface SubscriptionExpectation {
  readonly name: string;
  readonly file: string;
  readonly cursor: number;
  /** The cursor before its last advance: what a cut of the log's last record would leave. */
  readonly previousCursor: number;
}

export interface Fixture {
  /** The pristine data directory (a real path): copied for every case, never opened again. */
  readonly root: string;
  readonly files: readonly FixtureFile[];
  readonly history: readonly string[];
  readonly wal: readonly string[];
  readonly index: readonly string[];
  readonly lease: string;
  readonly subscriptionFiles: readonly string[];
  readonly feedJson: string;
  readonly lock: string;
  /** The clock's reading when the fixture was closed; cases start their clocks here. */
  readonly clockEnd: number;
  readonly leaseTtlMs: number;
  readonly createdAt: number;
  /** `commits[c - 1]`: the records commit c acknowledged. */
  readonly commits: readonly (readonly RecordView[])[];
  /** `commitFiles[c - 1]`: the history segments commit c's bytes lie in. */
  readonly commitFiles: readonly (readonly string[])[];
  readonly keys: readonly string[];
  /** What `get(key)` returned for each key. */
  readonly get: ReadonlyMap<string, RecordView | undefined>;
  /** Filtered reads answered through the tag and type index. */
  readonly filters: readonly {
    readonly name: string;
    readonly filter: RecordFilter;
    readonly matches: (record: RecordView) => boolean;
  }[];
  readonly openStream: { readonly id: string; readonly records: readonly RecordView[]; readonly lastBatch: number };
  readonly subscriptions: readonly SubscriptionExpectation[];
  /** The highest lease epoch ever granted. */
  readonly epoch: number;
  /** The state before the last history group write, which a torn-tail cut may go back to. */
  readonly beforeLastCommit: { readonly head: number; readonly get: ReadonlyMap<string, RecordView | undefined> };
  /** Older copies of history segments (relative file → bytes), as they were while still being written. */
  readonly olderCopies: ReadonlyMap<string, Buffer>;
}

/** Every file under `root`, relative, with forward slashes, sorted. */
export function listFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (at: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const full = path.join(at, entry.name);
      if (entry.isDirectory()) walk(full);
      else out.push(path.relative(root, full).split(path.sep).join('/'));
    }
  };
  if (fs.existsSync(root)) walk(root);
  return out.sort();
}

function readDirectory(directory: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (const name of fs.existsSync(directory) ? fs.readdirSync(directory) : []) {
    const full = path.join(directory, name);
    if (fs.statSync(full).isFile()) files.set(name, fs.readFileSync(full));
  }
  return files;
}

/** The first offset at or after `from` where the two differ (a missing byte reads as zero). */
function firstDifference(before: Uint8Array | undefined, after: Uint8Array, from: number): number | undefined {
  const length = Math.max(before?.length ?? 0, after.length);
  for (let at = from; at < length; at++) if ((before?.[at] ?? 0) !== (after[at] ?? 0)) return at;
  return undefined;
}

/** Segment header bytes (docs/formats.md). */
export const headerBytes = 48;

/**
 * Just past the written part of a preallocated segment: the end of its chain of frames (each a
 * u32 length and a u32 CRC before its data), or past its last non-zero byte if that is further.
 * The chain matters because the last bytes of a frame may legitimately be zeros.
 */
export function segmentWrittenEnd(bytes: Uint8Array): number {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = headerBytes;
  while (at + 8 <= view.length) {
    const length = view.readUInt32LE(at) & 0x7fff_ffff;
    if (length === 0 || at + 8 + length > view.length) break;
    at += 8 + length;
  }
  let nonZero = view.length;
  while (nonZero > headerBytes && view[nonZero - 1] === 0) nonZero--;
  return Math.max(at, nonZero);
}

const segmentFile = (log: 'history' | 'wal', base: number) =>
  `feeds/f/${log}/${String(base).padStart(16, '0')}.${log === 'history' ? 'hist' : 'wal'}`;

/**
 * A LOCK as a crashed process leaves it. A clean close removes the LOCK, but the layout has one
 * and damage to it must be harmless, so the fixture models the directory a killed process left
 * behind. The pid is above Linux's largest possible pid (2^22), so no process can hold it.
 */
export const staleLockText = '4194399\n';

const fixtureSeed = 0x5eed_f17e;
const leaseTtlMs = 60_000;

/**
 * Builds the fixture in `root`: one feed 'f' with ~60 sealed streams of 20 records across
 * several 64 KiB history segments (repeated payloads, keys from a small set, types, tags, a few
 * versions and tombstones), a few one-shot appends, leases of two epochs, an open stream with
 * three acknowledged batches spanning WAL segments, and two subscriptions. Returns what every
 * read of it must give back.
 */
export async function buildFixture(root: string, other = false): Promise<Fixture> {
  const random = prng(fixtureSeed);
  const clock = new ManualClock();
  // `other`: another feed of the same shape. Every string has the same length as in the fixture,
  // so its segments have the same bases and record counts, but its stream ids, keys, types, tags
  // and payloads differ, and with them every derived file: what a derived file of another feed
  // put in the fixture's place looks like.
  const text = (fixture: string, instead: string) => (other ? instead : fixture);
  const store = await openStore(root, { clock: clock.read, newId: sequentialIds(text('fx', 'fy')) });
  const feed = await store.createFeed('f');
  const createdAt = clock.now;

  const keys = other
    ? ['j0', 'j1', 'j2', 'j3', 'j4', 'j5', 'j6', 'j7']
    : ['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7'];
  const types = other ? ['ORDER', 'REFUND', 'NOTE'] : ['order', 'refund', 'note'];
  const tagPool = other ? ['region:EU', 'region:US', 'VIP', 'LATE'] : ['region:eu', 'region:us', 'vip', 'late'];
  // Repeated payloads, so that runs share stored bytes (deduplicated) instead of storing copies.
  const repeated = Array.from(
    { length: 24 },
    (_, index) => `{"template":${index},"body":"${text('t', 'u').repeat(random.int(120, 320))}"}`,
  );
  let made = 0;
  const record = () => {
    const n = made++;
    const payload =
      random.next() < 0.35
        ? random.pick(repeated)
        : `{"n":${n},"body":"${text('b', 'c').repeat(random.int(60, 360))}"}`;
    const key = random.next() < 0.5 ? random.pick(keys) : undefined;
    const tags = tagPool.filter(() => random.next() < 0.3).slice(0, 2);
    const type = random.next() < 0.9 ? random.pick(types) : undefined;
    const version = key !== undefined && random.next() < 0.1 ? random.int(1, 5) : undefined;
    const tombstone = key !== undefined && random.next() < 0.04;
    return {
      payload,
      ...(key === undefined ? {} : { key }),
      ...(type === undefined ? {} : { type }),
      ...(tags.length === 0 ? {} : { tags }),
      ...(version === undefined ? {} : { version }),
      ...(tombstone ? { tombstone } : {}),
    };
  };
  const records = (count: number) => Array.from({ length: count }, record);

  let lease = await feed.acquireLease({ holder: 'ingest-1', ttlMs: leaseTtlMs });
  const billing = await feed.createSubscription('billing');
  const audit = await feed.createSubscription('audit');
  const head = async () => (await feed.info()).commits;

  // The newest history segment every few commits: older copies of segments, for the cases that
  // put one back in place of the finished segment.
  const snapshots = new Map<string, Buffer[]>();
  const historyDirectoryOf = path.join(root, 'feeds', 'f', 'history');
  for (let index = 1; index <= 60; index++) {
    if (index % 3 === 0) {
      const newest = fs
        .readdirSync(historyDirectoryOf)
        .filter((name) => name.endsWith('.hist'))
        .sort()
        .at(-1);
      if (newest)
        snapshots.set(newest, [
          ...(snapshots.get(newest) ?? []),
          fs.readFileSync(path.join(historyDirectoryOf, newest)),
        ]);
    }
    clock.advance(50);
    if (index === 31) {
      // A second epoch, so the lease log holds more than one grant and a release between them.
      await feed.releaseLease({ token: lease.token });
      lease = await feed.acquireLease({ holder: 'ingest-2', ttlMs: leaseTtlMs });
    }
    if (index === 45) lease = await feed.renewLease({ token: lease.token, ttlMs: leaseTtlMs });
    if (index % 12 === 6)
      await feed.append(records(random.int(2, 4)), { token: lease.token, message: `one-shot ${index}` });
    const stream = await feed.openStream({ token: lease.token, message: `stream ${index}` });
    await stream.append(records(10), { token: lease.token });
    clock.advance(5);
    await stream.append(records(10), { token: lease.token });
    await stream.seal({ token: lease.token });
    if (index === 15) await billing.advance(await head());
    if (index === 30) await audit.advance(await head());
    if (index === 40) await billing.advance(await head());
    if (index === 50) await audit.advance(await head());
  }
  const billingCursor = (await head()) - 7;

  // The state a cut of the last history group would go back to, read before that group exists.
  const historyDirectory = path.join(root, 'feeds', 'f', 'history');
  const beforeLastCommit = { head: await head(), get: await readKeys(feed, keys) };
  const historyBefore = readDirectory(historyDirectory);
  clock.advance(50);
  await feed.append(
    [
      { payload: 'last one-shot: a', key: 'k1', type: 'order', tags: ['vip'] },
      { payload: 'last one-shot: b', key: 'k2', type: 'note' },
      { payload: repeated[0], key: 'k3', tags: ['region:eu'] },
    ],
    { token: lease.token, message: 'the last commit' },
  );

  // The open stream: three batches of ~24 KiB, so its acknowledged records span WAL segments.
  const walDirectory = path.join(root, 'feeds', 'f', 'wal');
  const open = await feed.openStream({ token: lease.token, message: 'still open' });
  const bigRecords = (label: string) =>
    Array.from({ length: 10 }, (_, index) => ({
      payload: `${label}.${index}:${'w'.repeat(random.int(2000, 2600))}`,
      key: random.pick(keys),
      type: random.pick(types),
      tags: [random.pick(tagPool)],
    }));
  clock.advance(50);
  await open.append(bigRecords('batch-1'), { token: lease.token });
  await open.append(bigRecords('batch-2'), { token: lease.token });
  const walBefore = readDirectory(walDirectory);
  clock.advance(50);
  const lastBatch = await open.append(bigRecords('batch-3'), { token: lease.token });

  // Last writes to the state logs, each after a snapshot of the bytes before it.
  const subscriptionDirectory = path.join(root, 'feeds', 'f', 'state', 'subscriptions');
  const subscriptionsBefore = readDirectory(subscriptionDirectory);
  clock.advance(50);
  const billingPrevious = (await billing.info()).cursor;
  const auditPrevious = (await audit.info()).cursor;
  await billing.advance(billingCursor);
  await audit.advance((await head()) - 1);
  const leaseFile = path.join(root, 'feeds', 'f', 'state', 'lease.log');
  const leaseBefore = fs.readFileSync(leaseFile);
  clock.advance(50);
  await feed.renewLease({ token: lease.token, ttlMs: leaseTtlMs });

  // Everything acknowledged, read back through the API while the store is still open.
  const count = await head();
  const commits: RecordView[][] = [];
  const commitFiles: string[][] = [];
  for (let commit = 1; commit <= count; commit++) {
    commits.push((await feed.readCommit(commit)).map(viewOf));
    commitFiles.push(await filesOfCommit(feed, commit));
  }
  const full: RecordView[] = [];
  for await (const stored of feed.read()) full.push(viewOf(stored));
  const flat = commits.flat();
  if (full.length !== flat.length || full.some((view, index) => view.position !== flat[index].position)) {
    throw new Error('fixture: the full read does not match the commits read one by one');
  }
  const filters = [
    { name: 'tag vip', filter: { tags: ['vip'] }, matches: (view: RecordView) => view.tags.includes('vip') },
    { name: 'type refund', filter: { types: ['refund'] }, matches: (view: RecordView) => view.type === 'refund' },
    {
      name: 'type order with tag region:eu',
      filter: { types: ['order'], tags: ['region:eu'] },
      matches: (view: RecordView) => view.type === 'order' && view.tags.includes('region:eu'),
    },
  ];
  for (const { name, filter, matches } of filters) {
    const read: StoredRecord[] = [];
    for await (const stored of feed.read({ filter, plan: 'index' })) read.push(stored);
    const difference = listDifference(flat.filter(matches), read);
    if (difference) throw new Error(`fixture: the filtered read "${name}" disagrees with the full read: ${difference}`);
  }
  const expectation = {
    createdAt,
    commits,
    commitFiles,
    keys,
    get: await readKeys(feed, keys),
    filters,
    openStream: {
      id: open.id,
      records: (await open.read()).map(viewOf),
      lastBatch: lastBatch.lastSeq - lastBatch.firstSeq + 1,
    },
    subscriptions: [
      {
        name: 'billing',
        file: 'feeds/f/state/subscriptions/billing.log',
        cursor: (await billing.info()).cursor,
        previousCursor: billingPrevious,
      },
      {
        name: 'audit',
        file: 'feeds/f/state/subscriptions/audit.log',
        cursor: (await audit.info()).cursor,
        previousCursor: auditPrevious,
      },
    ],
    epoch: (await feed.info()).epoch,
    beforeLastCommit,
  };
  await store.close();
  fs.writeFileSync(path.join(root, 'LOCK'), staleLockText);

  // The map of files, and where each log's last write lies in its newest file.
  const history = [...readDirectory(historyDirectory).keys()].filter((name) => name.endsWith('.hist')).sort();
  const wal = [...readDirectory(walDirectory).keys()].filter((name) => name.endsWith('.wal')).sort();
  const torn = new Map<string, number>();
  const newestHistory = history[history.length - 1];
  const newestWal = wal[wal.length - 1];
  torn.set(
    `feeds/f/history/${newestHistory}`,
    tornFrom(historyBefore.get(newestHistory), path.join(historyDirectory, newestHistory), headerBytes),
  );
  torn.set(
    `feeds/f/wal/${newestWal}`,
    tornFrom(walBefore.get(newestWal), path.join(walDirectory, newestWal), headerBytes),
  );
  torn.set('feeds/f/state/lease.log', tornFrom(leaseBefore, leaseFile, 0));
  for (const name of ['billing.log', 'audit.log']) {
    torn.set(
      `feeds/f/state/subscriptions/${name}`,
      tornFrom(subscriptionsBefore.get(name), path.join(subscriptionDirectory, name), 0),
    );
  }
  const files: FixtureFile[] = listFiles(root).map((file) => {
    const bytes = fs.readFileSync(path.join(root, file));
    const role: FixtureFile['role'] = file.endsWith('.hist')
      ? 'history'
      : file.endsWith('.wal')
        ? 'wal'
        : file.endsWith('.idx') || file.endsWith('.keys') || file.endsWith('.fps') || file.endsWith('.sum')
          ? 'index'
          : file.endsWith('lease.log')
            ? 'lease'
            : file.includes('/subscriptions/')
              ? 'subscription'
              : file.endsWith('feed.json')
                ? 'feed.json'
                : file === 'LOCK'
                  ? 'LOCK'
                  : 'other';
    const segment = role === 'history' || role === 'wal';
    const from = torn.get(file);
    return {
      file,
      role,
      derived: role === 'index',
      segment,
      torn: from === undefined ? undefined : { from },
      writtenEnd: segment ? segmentWrittenEnd(bytes) : bytes.length,
      size: bytes.length,
    };
  });
  if (history.length < 3) throw new Error(`fixture: ${history.length} history segments; the cases need at least 3`);
  const olderCopies = new Map<string, Buffer>();
  for (const name of history) {
    const final = fs.readFileSync(path.join(historyDirectory, name));
    const older = (snapshots.get(name) ?? []).filter((bytes) => !bytes.equals(final));
    // One from the middle of the segment's life: it holds some of its commits, not all.
    if (older.length > 0) olderCopies.set(`feeds/f/history/${name}`, older[Math.floor(older.length / 2)]);
  }
  return {
    olderCopies,
    root,
    files,
    history: history.map((name) => `feeds/f/history/${name}`),
    wal: wal.map((name) => `feeds/f/wal/${name}`),
    index: files.filter((file) => file.role === 'index').map((file) => file.file),
    lease: 'feeds/f/state/lease.log',
    subscriptionFiles: expectation.subscriptions.map((subscription) => subscription.file),
    feedJson: 'feeds/f/feed.json',
    lock: 'LOCK',
    clockEnd: clock.now,
    leaseTtlMs,
    ...expectation,
  };
}

/** Where the last write began in `file`: the first byte from `from` on that differs from `before`. */
function tornFrom(before: Uint8Array | undefined, file: string, from: number): number {
  const after = fs.readFileSync(file);
  const first = firstDifference(before, after, from);
  if (first === undefined) throw new Error(`fixture: the last write left ${file} unchanged`);
  return first;
}

async function readKeys(feed: Feed, keys: readonly string[]): Promise<Map<string, RecordView | undefined>> {
  const out = new Map<string, RecordView | undefined>();
  for (const key of keys) {
    const found = await feed.get(key);
    out.set(key, found === undefined ? undefined : viewOf(found));
  }
  return out;
}

/**
 * The history segments a commit's bytes lie in: its run's, and those of the payloads it
 * references in earlier runs (payloads are stored once and shared). The one internal look.
 */
async function filesOfCommit(feed: Feed, commit: number): Promise<string[]> {
  const record = feed.writer.published.commits.at(commit);
  const run = await feed.writer.readRun(record);
  const bases = new Set<number>([record.segment]);
  for (const entry of run.entries) bases.add(entry.payload.segment === 0 ? record.segment : entry.payload.segment);
  return [...bases].sort((a, b) => a - b).map((base) => segmentFile('history', base));
}

// ---- Damage --------------------------------------------------------------------------------

export type Damage =
  | { readonly kind: 'flip'; readonly offset: number; readonly mask: number }
  | { readonly kind: 'zero'; readonly offset: number; readonly length: number }
  | { readonly kind: 'truncate'; readonly offset: number }
  | { readonly kind: 'extend'; readonly bytes: Buffer }
  | { readonly kind: 'delete' }
  | { readonly kind: 'swap'; readonly with: string }
  /** The file replaced whole by other bytes: an older copy of it, say. */
  | { readonly kind: 'replace'; readonly bytes: Buffer; readonly label: string }
  /** A state log and its copy, both deleted. */
  | { readonly kind: 'delete-both' }
  /** The same file of another feed of the same shape (`buildFixture(…, true)`), in `from`. */
  | { readonly kind: 'foreign'; readonly from: string };

export function describeDamage(damage: Damage): string {
  switch (damage.kind) {
    case 'flip':
      return `flip byte ${damage.offset} (xor 0x${damage.mask.toString(16).padStart(2, '0')})`;
    case 'zero':
      return `zero [${damage.offset}, ${damage.offset + damage.length})`;
    case 'truncate':
      return `truncate at ${damage.offset}`;
    case 'extend':
      return `extend by ${damage.bytes.length} bytes`;
    case 'delete':
      return 'delete';
    case 'swap':
      return `swap contents with ${damage.with}`;
    case 'replace':
      return `replace with ${damage.label}`;
    case 'delete-both':
      return 'delete both copies';
    case 'foreign':
      return "replace with another feed's file of the same segment range";
  }
}

/** One file as a damage left it: undefined when the damage deleted it. */
export interface DamagedFile {
  readonly file: string;
  readonly bytes: Buffer | undefined;
  /** The first byte that differs from the pristine file (its old length for an extension). */
  readonly firstChanged: number;
}

/**
 * Applies `damage` to `file` in the copy `root` (whose pristine bytes are in `pristine`) and
 * returns the files it changed, or undefined when it would change nothing (such a case is
 * skipped).
 */
export function applyDamage(root: string, pristine: string, file: string, damage: Damage): DamagedFile[] | undefined {
  const original = fs.readFileSync(path.join(pristine, file));
  const target = path.join(root, file);
  switch (damage.kind) {
    case 'flip': {
      const bytes = Buffer.from(original);
      bytes[damage.offset] ^= damage.mask;
      fs.writeFileSync(target, bytes);
      return [{ file, bytes, firstChanged: damage.offset }];
    }
    case 'zero': {
      const end = Math.min(original.length, damage.offset + damage.length);
      const first = original.subarray(damage.offset, end).findIndex((byte) => byte !== 0);
      if (first < 0) return undefined;
      const bytes = Buffer.from(original);
      bytes.fill(0, damage.offset, end);
      fs.writeFileSync(target, bytes);
      return [{ file, bytes, firstChanged: damage.offset + first }];
    }
    case 'truncate': {
      if (damage.offset >= original.length) return undefined;
      fs.truncateSync(target, damage.offset);
      return [{ file, bytes: original.subarray(0, damage.offset), firstChanged: damage.offset }];
    }
    case 'extend': {
      const bytes = Buffer.concat([original, damage.bytes]);
      fs.writeFileSync(target, bytes);
      return [{ file, bytes, firstChanged: original.length }];
    }
    case 'delete':
      fs.rmSync(target);
      return [{ file, bytes: undefined, firstChanged: 0 }];
    case 'replace': {
      if (damage.bytes.equals(original)) return undefined;
      fs.writeFileSync(target, damage.bytes);
      return [{ file, bytes: damage.bytes, firstChanged: firstDifference(original, damage.bytes, 0)! }];
    }
    case 'delete-both': {
      const copy = `${file}.copy`;
      fs.rmSync(target);
      fs.rmSync(path.join(root, copy));
      return [
        { file, bytes: undefined, firstChanged: 0 },
        { file: copy, bytes: undefined, firstChanged: 0 },
      ];
    }
    case 'swap': {
      const other = fs.readFileSync(path.join(pristine, damage.with));
      if (other.equals(original)) return undefined;
      fs.writeFileSync(target, other);
      fs.writeFileSync(path.join(root, damage.with), original);
      return [
        { file, bytes: other, firstChanged: firstDifference(original, other, 0)! },
        { file: damage.with, bytes: original, firstChanged: firstDifference(other, original, 0)! },
      ];
    }
    case 'foreign': {
      const source = path.join(damage.from, file);
      if (!fs.existsSync(source)) return undefined;
      const foreign = fs.readFileSync(source);
      if (foreign.equals(original)) return undefined;
      fs.writeFileSync(target, foreign);
      return [{ file, bytes: foreign, firstChanged: firstDifference(original, foreign, 0)! }];
    }
  }
}

/** Puts every damaged file back to its pristine bytes (re-creating deleted ones). */
export function restoreFiles(root: string, pristine: string, files: readonly string[]): void {
  for (const file of files) {
    const target = path.join(root, file);
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.writeFileSync(target, fs.readFileSync(path.join(pristine, file)));
  }
}

/**
 * The spans of `expected` that `actual` no longer holds: offsets in [from, to) where `expected`
 * has a non-zero byte and `actual` another byte (or none). What "recovery cut or zeroed
 * acknowledged bytes" looks like on disk.
 */
export function lostSpans(
  expected: Uint8Array,
  actual: Uint8Array | undefined,
  from = 0,
  to = expected.length,
): { start: number; end: number }[] {
  const spans: { start: number; end: number }[] = [];
  for (let at = from; at < Math.min(to, expected.length); at++) {
    if (expected[at] === 0 || (actual !== undefined && at < actual.length && actual[at] === expected[at])) continue;
    const last = spans[spans.length - 1];
    // Spans separated by a few unchanged bytes read better as one.
    if (last && at - last.end <= 16) last.end = at + 1;
    else spans.push({ start: at, end: at + 1 });
  }
  return spans;
}

export function describeSpans(spans: readonly { start: number; end: number }[]): string {
  const shown = spans.slice(0, 3).map((span) => `[${span.start}, ${span.end})`);
  const bytes = spans.reduce((sum, span) => sum + span.end - span.start, 0);
  return `${shown.join(', ')}${spans.length > 3 ? ` and ${spans.length - 3} more spans` : ''} (about ${bytes} bytes)`;
}

/** True when `bytes` (a LOCK's contents) names a live process other than this one. */
export function lockNamesLiveProcess(bytes: Uint8Array | undefined): boolean {
  if (bytes === undefined) return false;
  const pid = Number.parseInt(Buffer.from(bytes).toString('utf8'), 10);
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
