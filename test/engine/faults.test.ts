/**
 * StreamStack's storage fault model, as an executable invariant.
 *
 * Only the bytes of the last group write of a log's newest segment (what an fsync in flight
 * covered) can be a torn tail, and recovery may cut only that. Everything else that fails a check
 * is corruption: it is never cut, zeroed or skipped; reads that touch it fail with `CORRUPT`
 * naming the file and offset, and reads elsewhere keep working. Derived files (the index) are
 * rebuilt, and reads through them stay exact. Damage confined to what lies after the last write
 * of a newest segment or state log looks like a torn write: it may be cut, and reads stay exact.
 *
 * Every case damages one file of a copy of one fixture (a flip, a zeroed range, a truncation, an
 * extension, a deletion or a swap, at offsets from a seeded generator), then:
 * 1. verifies the copy (read-only when the store supports it) and records the verdict;
 * 2. opens it read-write and checks every acknowledged thing: each is exact, or fails with
 *    `CORRUPT` (file and offset) when it depends on the damaged bytes; then checks that recovery
 *    left every other file's written bytes alone, and the damaged file's outside its last write;
 * 3. puts the damaged file back and checks that everything acknowledged is exactly there again
 *    (so nothing recovery did in step 2 lost an acknowledged byte for good).
 * Each `it` runs the cases of one kind of file and reports every violation of every case at once.
 * `STREAMSTACK_FAULT_SEED` replays another case list; `STREAMSTACK_FAULT_CASE` runs only the cases
 * whose name contains it.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Feed,
  isStreamStackError,
  Store,
  type StoredRecord,
  type StoreOptions,
} from '../../packages/engine/src/index.js';
import {
  applyDamage,
  buildFixture,
  type Damage,
  type DamagedFile,
  describeDamage,
  describeSpans,
  type Fixture,
  type FixtureFile,
  headerBytes,
  listDifference,
  lockNamesLiveProcess,
  lostSpans,
  placeOf,
  prng,
  type Random,
  type RecordView,
  recordDifference,
  restoreFiles,
} from '../support/faults.js';
import { ManualClock, openStore, sequentialIds, smallSegmentBytes, temporaryDirectory } from '../support/store.js';

const seed = Number(process.env.STREAMSTACK_FAULT_SEED ?? 0x0fa1_7001);
const only = process.env.STREAMSTACK_FAULT_CASE;
/** A case that hangs must not stall the whole suite: it is reported and the loop moves on. */
const caseTimeoutMs = 30_000;

type Group = 'history' | 'wal' | 'index' | 'state' | 'metadata';

/** A file to damage, named for reports, with the file a swap exchanges it with. */
interface Target {
  readonly kind: string;
  readonly group: Group;
  readonly file: FixtureFile;
  readonly partner?: string;
}

interface Case {
  readonly name: string;
  readonly target: Target;
  readonly damage: Damage | undefined;
}

interface Outcome {
  readonly name: string;
  readonly kind: string;
  readonly damage: string;
  readonly violations: string[];
  readonly notes: string[];
  readonly verifyOk?: boolean | undefined;
  readonly skipped?: boolean;
}

// ---- The case list -------------------------------------------------------------------------

function targetsOf(fixture: Fixture): Target[] {
  const info = (file: string) => fixture.files.find((entry) => entry.file === file)!;
  const { history, wal, index } = fixture;
  const middle = Math.floor(history.length / 2);
  const targets: Target[] = [
    { kind: 'history segment (first)', group: 'history', file: info(history[0]), partner: history[middle] },
    {
      kind: 'history segment (middle)',
      group: 'history',
      file: info(history[middle]),
      partner: history[history.length - 1],
    },
    {
      kind: 'history segment (newest)',
      group: 'history',
      file: info(history[history.length - 1]),
      partner: history[0],
    },
  ];
  wal.forEach((file, at) => {
    const label = at === wal.length - 1 ? 'newest' : at === 0 ? 'oldest' : 'middle';
    targets.push({
      kind: `WAL segment ${at + 1} of ${wal.length} (${label})`,
      group: 'wal',
      file: info(file),
      ...(at + 1 < wal.length ? { partner: wal[at + 1] } : {}),
    });
  });
  // The index of the middle history segment, swapped with the first segment's.
  const middleIndex =
    index.find((file) => path.basename(file, '.idx') === path.basename(history[middle], '.hist')) ?? index[0];
  const otherIndex = index.find((file) => file !== middleIndex && file.endsWith('.idx'));
  targets.push({
    kind: 'index file',
    group: 'index',
    file: info(middleIndex),
    ...(otherIndex ? { partner: otherIndex } : {}),
  });
  // The middle segment's key and fingerprint dictionaries and summary, swapped with the first segment's.
  for (const [kind, extension] of [
    ['key dictionary', '.keys'],
    ['fingerprint dictionary', '.fps'],
    ['segment summary', '.sum'],
  ] as const) {
    const files = index.filter((file) => file.endsWith(extension));
    const own = files.find((file) => path.basename(file, extension) === path.basename(history[middle], '.hist'));
    const other = files.find((file) => file !== own);
    if (own) targets.push({ kind, group: 'index', file: info(own), ...(other ? { partner: other } : {}) });
  }
  targets.push({ kind: 'lease.log', group: 'state', file: info(fixture.lease) });
  targets.push({
    kind: 'subscription log',
    group: 'state',
    file: info(fixture.subscriptionFiles[0]),
    partner: fixture.subscriptionFiles[1],
  });
  targets.push({ kind: 'feed.json', group: 'metadata', file: info(fixture.feedJson) });
  targets.push({ kind: 'LOCK', group: 'metadata', file: info(fixture.lock) });
  return targets;
}

/** `count` offsets in [low, high), one from each of `count` equal strata. */
function stratified(random: Random, low: number, high: number, count: number): number[] {
  const out: number[] = [];
  for (let stratum = 0; stratum < count; stratum++) {
    const from = low + Math.floor((stratum * (high - low)) / count);
    const to = low + Math.floor(((stratum + 1) * (high - low)) / count) - 1;
    if (to >= from) out.push(random.int(from, to));
  }
  return out;
}

/**
 * Offsets spread over the whole file. For a segment: two in its header, four in its written
 * data (for the newest, two before its last write and two inside it), two in its zero-filled
 * tail. For other files: seven strata, plus one inside and one before the last write of a state
 * log when the strata missed them.
 */
function offsetsOf(file: FixtureFile, random: Random): number[] {
  const offsets: number[] = [];
  if (file.segment) {
    offsets.push(random.int(0, 15), random.int(16, headerBytes - 1));
    if (file.torn) {
      offsets.push(
        ...stratified(random, headerBytes, file.torn.from, 2),
        ...stratified(random, file.torn.from, file.writtenEnd, 2),
      );
    } else {
      offsets.push(...stratified(random, headerBytes, file.writtenEnd, 4));
    }
    offsets.push(...stratified(random, file.writtenEnd, file.size, 2));
  } else {
    offsets.push(...stratified(random, 0, file.size, 7));
    if (file.torn && !offsets.some((offset) => offset >= file.torn!.from))
      offsets.push(random.int(file.torn.from, file.size - 1));
    if (file.torn && file.torn.from > 0 && !offsets.some((offset) => offset < file.torn!.from))
      offsets.push(random.int(0, file.torn.from - 1));
  }
  return [...new Set(offsets)].sort((a, b) => a - b);
}

function casesOf(fixture: Fixture, random: Random, foreignRoot?: string): Case[] {
  const cases: Case[] = [];
  for (const target of targetsOf(fixture)) {
    const damages: Damage[] = [];
    for (const offset of offsetsOf(target.file, random)) {
      damages.push(
        { kind: 'flip', offset, mask: random.int(1, 255) },
        { kind: 'zero', offset, length: random.int(16, 4096) },
        { kind: 'truncate', offset },
      );
    }
    damages.push(
      { kind: 'extend', bytes: random.bytes(random.int(1, 64)) },
      { kind: 'extend', bytes: random.bytes(random.int(65, 4096)) },
    );
    damages.push({ kind: 'delete' });
    if (target.partner) damages.push({ kind: 'swap', with: target.partner });
    // A finished segment put back as an older copy of itself (a restore from a stale backup).
    // The newest segment is left out: an older copy of it is a shorter, sound history, which
    // nothing on disk tells from the real one (docs/faults.md, Known limits).
    const older = fixture.olderCopies.get(target.file.file);
    if (target.group === 'history' && older && target.file.file !== fixture.history[fixture.history.length - 1]) {
      damages.push({ kind: 'replace', bytes: older, label: 'an older copy of itself' });
    }
    // Both files of a state log lost at once.
    if (target.group === 'state') damages.push({ kind: 'delete-both' });
    // A file of another feed for the same segment range (same base and count): a derived one
    // must not be trusted for what it says it covers, and a history or WAL segment, whose header
    // and chain match, is told apart by the feed tag in its header.
    if ((target.file.derived || target.group === 'history' || target.group === 'wal') && foreignRoot)
      damages.push({ kind: 'foreign', from: foreignRoot });
    for (const damage of damages)
      cases.push({ name: `${target.kind} ${target.file.file}: ${describeDamage(damage)}`, target, damage });
  }
  return cases;
}

// ---- What the model allows for one case ------------------------------------------------------

/** Where in its file a damage starts, for case names. */
function regionOf(file: FixtureFile, damage: Damage, firstChanged: number): string {
  if (
    damage.kind === 'delete' ||
    damage.kind === 'swap' ||
    damage.kind === 'replace' ||
    damage.kind === 'delete-both' ||
    damage.kind === 'foreign'
  )
    return 'whole file';
  if (file.segment && firstChanged < headerBytes) return 'header';
  if (firstChanged >= file.size) return 'past the end';
  if (firstChanged >= file.writtenEnd) return 'zero-filled tail';
  if (file.torn && firstChanged >= file.torn.from) return 'last write';
  return 'written data';
}

interface Rules {
  /** Prefix of every violation: which step found it. */
  readonly step: string;
  /** The files a CORRUPT may name (the damaged ones). */
  readonly damaged: ReadonlySet<string>;
  /** Damaged non-derived files whose written bytes changed: reads that depend on them may fail. */
  readonly corrupt: ReadonlySet<string>;
  /** `store.feed('f')` may fail with CORRUPT. */
  readonly feedMayRefuse: boolean;
  /** The last history group, the last WAL group, or a subscription's last record may be cut. */
  readonly tornHistory: boolean;
  readonly tornWal: boolean;
  readonly tornSubscriptions: ReadonlySet<string>;
  /** Subscription logs deleted outright: indistinguishable from `sub delete` (a known limit). */
  readonly deletedSubscriptions: ReadonlySet<string>;
  /** Lease damage: a new grant must still go above every epoch ever granted. */
  readonly leaseDamaged: boolean;
  /** A LOCK naming a live process is a lock, and refusing to open is right. */
  readonly lockLive: boolean;
  /** After restoring: nothing may fail, and the epoch may have grown. */
  readonly restored: boolean;
}

function rulesFor(target: Target | undefined, damage: Damage | undefined, damaged: readonly DamagedFile[]): Rules {
  const file = target?.file;
  const first = damaged[0]?.firstChanged ?? 0;
  const whole =
    damage?.kind === 'delete' ||
    damage?.kind === 'swap' ||
    damage?.kind === 'replace' ||
    damage?.kind === 'delete-both' ||
    damage?.kind === 'foreign';
  // Past the last write of a newest segment or a state log is where a torn write would land:
  // nothing acknowledged is there, so reads stay exact even if it is cut.
  const pastLastWrite = !!file && !whole && first >= file.writtenEnd && (file.segment || !!file.torn);
  const inLastWrite = !!file?.torn && !whole && !pastLastWrite && first >= file.torn.from;
  const dataDamage = !!file && !file.derived && file.role !== 'LOCK';
  return {
    step: 'after the damage',
    damaged: new Set(damaged.map((entry) => entry.file)),
    corrupt: new Set(dataDamage && !pastLastWrite ? damaged.map((entry) => entry.file) : []),
    feedMayRefuse: dataDamage && !(pastLastWrite && !!file?.torn),
    tornHistory: inLastWrite && file?.role === 'history',
    tornWal: inLastWrite && file?.role === 'wal',
    // A state record is written to two files, so damage to one never loses its newest record:
    // a subscription's cursor must be exact whatever happens to one of its files.
    tornSubscriptions: new Set<string>(),
    // Both files of a subscription log gone: indistinguishable from deleting the subscription.
    deletedSubscriptions: new Set<string>(
      damage?.kind === 'delete-both' && file?.role === 'subscription' ? [file.file] : [],
    ),
    leaseDamaged: file?.role === 'lease',
    lockLive: file?.role === 'LOCK' && lockNamesLiveProcess(damaged[0]?.bytes),
    restored: false,
  };
}

const restoredRules = (): Rules => ({
  ...rulesFor(undefined, undefined, []),
  step: 'after restoring the damaged file(s)',
  restored: true,
});

// ---- Checking one opened copy ----------------------------------------------------------------

class Findings {
  readonly violations: string[] = [];
  readonly notes: string[] = [];
  /** What verify said: ok, not ok (a refusal with CORRUPT counts), or nothing. */
  verifyOk: boolean | undefined;
  /** Violations about consecutive commits that fail the same way, folded into one line. */
  private run: { key: string; first: number; last: number; message: string } | undefined;

  violation(message: string): void {
    this.flush();
    this.violations.push(message);
  }

  note(message: string): void {
    this.notes.push(message);
  }

  /** A per-commit violation: consecutive commits with the same `key` become one line. */
  commitViolation(commit: number, key: string, message: string): void {
    if (this.run && this.run.key === key && this.run.last === commit - 1) {
      this.run.last = commit;
      return;
    }
    this.flush();
    this.run = { key, first: commit, last: commit, message };
  }

  flush(): void {
    const run = this.run;
    if (!run) return;
    this.run = undefined;
    const more = run.last - run.first;
    const others = more === 1 ? `commit ${run.last}` : `commits ${run.first + 1}–${run.last}`;
    this.violations.push(more === 0 ? run.message : `${run.message} [and the same for ${others}]`);
  }
}

function relative(root: string, file: string): string {
  return path.relative(root, path.resolve(root, file)).split(path.sep).join('/');
}

/** An error in one line, with paths inside the data directory `root` shown relative to it. */
function describeError(error: unknown, root?: string): string {
  const short = (text: string) => (root ? text.split(`${root}${path.sep}`).join('') : text);
  if (isStreamStackError(error)) {
    const { file, offset } = error.details as { file?: unknown; offset?: unknown };
    const where = typeof file === 'string' ? ` at ${short(file)}${typeof offset === 'number' ? `:${offset}` : ''}` : '';
    return `${error.code}${where} (${short(error.message)})`;
  }
  return short(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
}

/**
 * Judges an error from `what`. It is fine only when CORRUPT is `allowed` there, it carries a
 * file and an offset, and the file is one the damage touched. Returns a key (for folding runs of
 * commits) and the message of the violation, or undefined when the error is fine.
 */
function judgeError(
  root: string,
  rules: Rules,
  what: string,
  error: unknown,
  allowed: boolean,
): { key: string; message: string } | undefined {
  if (!isStreamStackError(error, 'CORRUPT')) {
    const code = isStreamStackError(error) ? error.code : 'non-StreamStackError';
    return {
      key: `error:${code}`,
      message: `${what} threw ${describeError(error, root)}; ${allowed ? 'only CORRUPT with a file and an offset may fail it here' : 'nothing it reads was damaged, so it must not fail'}`,
    };
  }
  const { file, offset } = error.details as { file?: unknown; offset?: unknown };
  if (typeof file !== 'string' || typeof offset !== 'number') {
    return {
      key: 'corrupt:no-details',
      message: `${what} threw CORRUPT without file and offset details (${error.message})`,
    };
  }
  const named = relative(root, file);
  if (!allowed) {
    return {
      key: `corrupt:unrelated:${named}`,
      message: `${what} threw CORRUPT at ${named}:${offset}, but nothing it reads was damaged`,
    };
  }
  if (!rules.damaged.has(named)) {
    return {
      key: `corrupt:blames:${named}`,
      message: `${what} threw CORRUPT blaming ${named}:${offset}, but the damage is in ${[...rules.damaged].join(' and ')}`,
    };
  }
  return undefined;
}

/** Reads `records` to the end, checking them against `expected`: exact, or an exact prefix then CORRUPT. */
async function checkSequence(
  root: string,
  rules: Rules,
  findings: Findings,
  what: string,
  expected: readonly RecordView[],
  records: AsyncIterable<StoredRecord>,
  corruptAllowed: boolean,
): Promise<void> {
  let index = 0;
  try {
    for await (const record of records) {
      if (index >= expected.length) {
        findings.violation(
          `${rules.step}: ${what} yielded more than the ${expected.length} acknowledged records (extra: ${placeOf(record)})`,
        );
        return;
      }
      const difference = recordDifference(expected[index], record);
      if (difference) {
        findings.violation(`${rules.step}: ${what}: record ${index + 1} (${placeOf(expected[index])}): ${difference}`);
        return;
      }
      index++;
    }
  } catch (error) {
    const verdict = judgeError(root, rules, `${what} (after ${index} exact records)`, error, corruptAllowed);
    if (verdict) findings.violation(`${rules.step}: ${verdict.message}`);
    else findings.note(`${what}: ${index} exact records, then ${describeError(error, root)}`);
    return;
  }
  if (index < expected.length) {
    findings.violation(
      `${rules.step}: ${what} ended after ${index} of ${expected.length} records without an error (next expected: ${placeOf(expected[index])})`,
    );
  }
}

/** Every acknowledged thing of the feed, checked against the fixture under `rules`. */
async function checkFeed(root: string, fixture: Fixture, feed: Feed, rules: Rules, findings: Findings): Promise<void> {
  const step = rules.step;
  const dependsOn = (files: Iterable<string>) => [...files].some((file) => rules.corrupt.has(file));
  const historyDamaged = dependsOn(fixture.history);
  const walDamaged = dependsOn(fixture.wal);
  const acknowledged = fixture.commits.length;

  // The head and the feed's summary, each of which may fail only with what it depends on.
  let head: number | undefined;
  try {
    head = (await feed.head())?.commit ?? 0;
  } catch (error) {
    const verdict = judgeError(root, rules, 'feed.head()', error, historyDamaged);
    if (verdict) findings.violation(`${step}: ${verdict.message}`);
  }
  try {
    const info = await feed.info();
    if (info.createdAt !== fixture.createdAt)
      findings.violation(`${step}: feed.info().createdAt is ${info.createdAt}, feed.json said ${fixture.createdAt}`);
    if (rules.restored && info.epoch < fixture.epoch)
      findings.violation(`${step}: the lease epoch is ${info.epoch}, below the ${fixture.epoch} ever granted`);
    if (!rules.restored && !rules.leaseDamaged && info.epoch !== fixture.epoch)
      findings.violation(`${step}: the lease epoch is ${info.epoch}, expected ${fixture.epoch}`);
  } catch (error) {
    const verdict = judgeError(
      root,
      rules,
      'feed.info()',
      error,
      historyDamaged || walDamaged || rules.corrupt.has(fixture.lease),
    );
    if (verdict) findings.violation(`${step}: ${verdict.message}`);
  }
  // A cut of the torn last history group leaves the head one commit back, consistently.
  const cut = rules.tornHistory && head === acknowledged - 1;
  if (cut) findings.note(`the last history group (commit ${acknowledged}) was cut as a torn tail`);
  else if (head !== undefined && head !== acknowledged)
    findings.note(`head is commit ${head}; ${acknowledged} were acknowledged`);

  for (let commit = 1; commit <= acknowledged; commit++) {
    const what = `readCommit(${commit})`;
    try {
      const records = await feed.readCommit(commit);
      if (cut && commit === acknowledged) {
        findings.commitViolation(
          commit,
          'present-after-cut',
          `${step}: ${what} returned records although the head is commit ${head}`,
        );
        continue;
      }
      const difference = listDifference(fixture.commits[commit - 1], records);
      if (difference) findings.commitViolation(commit, 'mismatch', `${step}: ${what} ${difference}`);
    } catch (error) {
      if (cut && commit === acknowledged && isStreamStackError(error, 'CURSOR_OUT_OF_RANGE')) continue;
      const verdict = judgeError(root, rules, what, error, dependsOn(fixture.commitFiles[commit - 1]));
      if (verdict) findings.commitViolation(commit, verdict.key, `${step}: ${verdict.message}`);
    }
  }
  findings.flush();

  const flat = (cut ? fixture.commits.slice(0, -1) : fixture.commits).flat();
  await checkSequence(root, rules, findings, 'the full read', flat, feed.read(), historyDamaged);
  for (const { name, filter, matches } of fixture.filters) {
    await checkSequence(
      root,
      rules,
      findings,
      `the read filtered by ${name} (through the index)`,
      flat.filter(matches),
      feed.read({ filter, plan: 'index' }),
      historyDamaged,
    );
  }

  await checkCursorReads(root, fixture, feed, rules, findings, flat, historyDamaged);

  // Keys that fail the same way are reported on one line.
  const winners = cut ? fixture.beforeLastCommit.get : fixture.get;
  const failedKeys = new Map<string, { keys: string[]; message: string }>();
  const failKey = (key: string, kind: string, message: string) => {
    const entry = failedKeys.get(kind) ?? { keys: [], message };
    entry.keys.push(key);
    failedKeys.set(kind, entry);
  };
  for (const key of fixture.keys) {
    const expected = winners.get(key);
    try {
      const found = await feed.get(key);
      if (expected === undefined && found !== undefined)
        failKey(key, `extra:${key}`, `get(${key}) returned ${placeOf(found)}; the key has no live record`);
      else if (expected !== undefined && found === undefined)
        failKey(key, `missing:${key}`, `get(${key}) returned nothing; expected ${placeOf(expected)}`);
      else if (expected !== undefined && found !== undefined) {
        const difference = recordDifference(expected, found);
        if (difference) failKey(key, `differs:${key}`, `get(${key}): ${difference}`);
      }
    } catch (error) {
      const verdict = judgeError(root, rules, `get(${key})`, error, historyDamaged);
      if (verdict) failKey(key, verdict.key, verdict.message);
    }
  }
  for (const { keys, message } of failedKeys.values()) {
    findings.violation(
      `${step}: ${message}${keys.length > 1 ? ` [and the same for get(${keys.slice(1).join('), get(')})]` : ''}`,
    );
  }

  const open = fixture.openStream;
  const shorter = open.records.slice(0, open.records.length - open.lastBatch);
  try {
    const stream = await feed.stream(open.id);
    const records = await stream.read();
    const difference = listDifference(open.records, records);
    if (difference && rules.tornWal && !listDifference(shorter, records)) {
      findings.note(`the last WAL group (the open stream's last ${open.lastBatch} records) was cut as a torn tail`);
    } else if (difference) {
      findings.violation(`${step}: the open stream ${open.id}: read ${difference}`);
    }
    const state = await stream.info();
    if (state.state !== 'open' || state.records !== records.length) {
      findings.violation(
        `${step}: the open stream ${open.id}: info() says ${JSON.stringify({ state: state.state, records: state.records })}, but its read returned ${records.length} records`,
      );
    }
  } catch (error) {
    const verdict = judgeError(root, rules, `the open stream ${open.id}`, error, walDamaged);
    if (verdict) findings.violation(`${step}: ${verdict.message}`);
  }

  for (const subscription of fixture.subscriptions) {
    const what = `subscription ${subscription.name}`;
    try {
      const cursor = (await (await feed.subscription(subscription.name)).info()).cursor;
      if (cursor === subscription.cursor) continue;
      if (rules.tornSubscriptions.has(subscription.file) && cursor === subscription.previousCursor) {
        findings.note(`${what}: its last advance was cut as a torn tail (cursor ${cursor})`);
        continue;
      }
      findings.violation(
        `${step}: ${what}: cursor is ${cursor}, expected ${subscription.cursor}${cursor < subscription.cursor ? ' (it went back)' : ''}`,
      );
    } catch (error) {
      if (rules.deletedSubscriptions.has(subscription.file) && isStreamStackError(error, 'SUBSCRIPTION_NOT_FOUND')) {
        findings.note(`known limit: ${what} is gone with its log (indistinguishable from a deleted subscription)`);
        continue;
      }
      // info() also measures the lag from the history, so history damage may fail it too.
      const verdict = judgeError(root, rules, what, error, rules.corrupt.has(subscription.file) || historyDamaged);
      if (verdict) findings.violation(`${step}: ${verdict.message}`);
    }
  }
}

/**
 * Reads from cursors inside the history, as users make them: filtered through the index and
 * by a scan, and in dedup and latest mode. Each is exact, or an exact prefix and then `CORRUPT`
 * where it depends on damaged bytes; a read that skips records it cannot read and succeeds is a
 * violation (the records it returns differ from what was acknowledged).
 */
async function checkCursorReads(
  root: string,
  fixture: Fixture,
  feed: Feed,
  rules: Rules,
  findings: Findings,
  flat: readonly RecordView[],
  historyDamaged: boolean,
): Promise<void> {
  const last = flat.at(-1)?.commit ?? 0;
  const cursors = [Math.floor(last / 4), Math.floor(last / 2), Math.floor((last * 3) / 4)];
  // Dedup compares against the whole history: a record is kept where its fingerprint first occurs.
  const firstAt = new Map<string, number>();
  for (const record of flat) {
    const fingerprint = record.fingerprint!.toString('hex');
    if (!firstAt.has(fingerprint)) firstAt.set(fingerprint, record.position!);
  }
  for (const cursor of cursors) {
    const after = flat.filter((record) => record.commit! > cursor);
    for (const { name, filter, matches } of fixture.filters) {
      for (const plan of ['index', 'scan'] as const) {
        await checkSequence(
          root,
          rules,
          findings,
          `the read after ${cursor} filtered by ${name} (${plan})`,
          after.filter(matches),
          feed.read({ after: cursor, filter, plan }),
          historyDamaged,
        );
      }
    }
    const deduplicated = after.filter((record) => firstAt.get(record.fingerprint!.toString('hex')) === record.position);
    await checkSequence(
      root,
      rules,
      findings,
      `the dedup read after ${cursor}`,
      deduplicated,
      feed.read({ after: cursor, mode: 'dedup' }),
      historyDamaged,
    );
    // Latest: each key's winner among the records after the cursor (highest version, then the
    // highest position), tombstones hidden, in position order.
    const winners = new Map<string, RecordView>();
    for (const record of after) {
      if (record.key === undefined) continue;
      const held = winners.get(record.key);
      if (
        !held ||
        (record.version ?? 0) > (held.version ?? 0) ||
        ((record.version ?? 0) === (held.version ?? 0) && record.position! > held.position!)
      )
        winners.set(record.key, record);
    }
    const latest = [...winners.values()]
      .filter((record) => !record.tombstone)
      .sort((a, b) => a.position! - b.position!);
    await checkSequence(
      root,
      rules,
      findings,
      `the latest read after ${cursor}`,
      latest,
      feed.read({ after: cursor, mode: 'latest' }),
      historyDamaged,
    );
  }
}

/**
 * After lease damage (and in the control case): once the old lease has expired anyone may take
 * the feed, and the grant must fence off every token ever handed out, so its epoch must be above
 * every epoch granted before. This writes, so it runs after the bytes recovery left are taken.
 */
async function checkLease(
  root: string,
  fixture: Fixture,
  feed: Feed,
  clock: ManualClock,
  rules: Rules,
  findings: Findings,
): Promise<void> {
  clock.advance(2 * fixture.leaseTtlMs);
  try {
    const grant = await feed.acquireLease({ holder: 'fault-check', ttlMs: fixture.leaseTtlMs });
    if (grant.epoch <= fixture.epoch) {
      findings.violation(
        `${rules.step}: acquireLease granted epoch ${grant.epoch}, not above the ${fixture.epoch} granted before: old tokens are not fenced off`,
      );
    }
  } catch (error) {
    const verdict = judgeError(root, rules, 'acquireLease', error, rules.corrupt.has(fixture.lease));
    if (verdict) findings.violation(`${rules.step}: ${verdict.message}`);
  }
}

/** Every file under `root` and its bytes. */
function snapshotFiles(root: string, files: readonly FixtureFile[]): Map<string, Buffer | undefined> {
  const out = new Map<string, Buffer | undefined>();
  for (const { file } of files) {
    const full = path.join(root, file);
    out.set(file, fs.existsSync(full) ? fs.readFileSync(full) : undefined);
  }
  return out;
}

/** Opens the copy read-write and checks it under `rules`; closes it whatever happens. */
async function inspect(
  root: string,
  fixture: Fixture,
  rules: Rules,
  findings: Findings,
): Promise<{ opened: boolean; files: Map<string, Buffer | undefined> }> {
  // The bytes are only compared after the damage; after restoring, reading them would be waste.
  const snapshot = () => (rules.restored ? new Map<string, Buffer | undefined>() : snapshotFiles(root, fixture.files));
  const clock = new ManualClock(fixture.clockEnd);
  let store: Store;
  try {
    store = await openStore(root, { clock: clock.read, newId: sequentialIds('check') });
  } catch (error) {
    if (rules.lockLive && isStreamStackError(error, 'LOCKED')) {
      findings.note('the damaged LOCK names a live process: refusing to open is right');
      return { opened: false, files: snapshot() };
    }
    const verdict = judgeError(root, rules, 'Store.open', error, rules.feedMayRefuse);
    if (verdict) findings.violation(`${rules.step}: ${verdict.message}`);
    else findings.note(`Store.open refused: ${describeError(error, root)}`);
    return { opened: false, files: snapshot() };
  }
  let opened = false;
  let files: Map<string, Buffer | undefined> | undefined;
  try {
    let feed: Feed;
    try {
      feed = await store.feed('f');
      opened = true;
    } catch (error) {
      const verdict = judgeError(root, rules, "store.feed('f')", error, rules.feedMayRefuse);
      if (verdict) findings.violation(`${rules.step}: ${verdict.message}`);
      else findings.note(`the feed refused to open: ${describeError(error, root)}`);
      return { opened, files: snapshot() };
    }
    if ((feed.recovery ?? []).length > 0) {
      findings.note(
        `recovery cut ${feed.recovery.map((tail) => `${tail.bytes} bytes at ${relative(root, tail.file)}:${tail.offset}`).join(', ')}`,
      );
    }
    await checkFeed(root, fixture, feed, rules, findings);
    // What recovery left on disk, taken before the lease check below writes anything.
    files = snapshot();
    if (!rules.restored && (rules.leaseDamaged || rules.damaged.size === 0))
      await checkLease(root, fixture, feed, clock, rules, findings);
  } catch (error) {
    findings.violation(`${rules.step}: the checks stopped on ${describeError(error, root)}`);
  } finally {
    try {
      await store.close();
    } catch (error) {
      findings.violation(`${rules.step}: store.close() threw ${describeError(error, root)}`);
    }
  }
  return { opened, files: files ?? snapshot() };
}

/**
 * After recovery ran on the damaged copy: every written byte of every file that was not damaged
 * is still there, and so is every written byte of a damaged file outside what may be cut (its
 * last write, when the damage lies in or after it). The LOCK is taken over and removed by any
 * opener; index files are derived, and are checked through the reads and the rebuild instead.
 */
function checkBytes(
  fixture: Fixture,
  damage: Damage | undefined,
  damaged: readonly DamagedFile[],
  left: { opened: boolean; files: ReadonlyMap<string, Buffer | undefined> },
  findings: Findings,
): void {
  const step = 'after the damage';
  const feedOpened = left.opened;
  const read = (file: string) => left.files.get(file);
  for (const file of fixture.files) {
    const mine = damaged.find((entry) => entry.file === file.file);
    if (file.derived) {
      if (mine && feedOpened) {
        const after = read(file.file);
        const pristine = fs.readFileSync(path.join(fixture.root, file.file));
        // A derived file is checked whole when it is first used: damage in a part no read
        // needed may stay until then, as long as verify reports it.
        const untouched =
          after !== undefined && mine.bytes !== undefined && after.equals(mine.bytes) && findings.verifyOk === false;
        if (!untouched && !after?.equals(pristine)) {
          findings.violation(
            `${step}: the damaged index ${file.file} was not rebuilt to the bytes its segment gives (${after ? `${after.length} bytes, differing` : 'missing'})`,
          );
        }
      }
      continue;
    }
    if (file.role === 'LOCK') continue;
    const after = read(file.file);
    if (!mine) {
      const pristine = fs.readFileSync(path.join(fixture.root, file.file));
      if (!after) findings.violation(`${step}: recovery deleted ${file.file}, which was not damaged`);
      else {
        const spans = lostSpans(pristine, after);
        if (spans.length > 0)
          findings.violation(
            `${step}: recovery changed ${file.file}, which was not damaged, at ${describeSpans(spans)}`,
          );
      }
      continue;
    }
    if (!mine.bytes) continue;
    const whole = damage?.kind === 'swap' || damage?.kind === 'replace';
    const pastLastWrite = mine.firstChanged >= file.writtenEnd;
    const cuttableFrom =
      file.torn && !whole && mine.firstChanged >= file.torn.from
        ? pastLastWrite
          ? file.writtenEnd
          : file.torn.from
        : mine.bytes.length;
    if (!after) {
      if (lostSpans(mine.bytes, undefined, 0, cuttableFrom).length > 0) {
        findings.violation(`${step}: recovery deleted the damaged ${file.file}, and with it acknowledged bytes`);
      }
      continue;
    }
    const spans = lostSpans(mine.bytes, after, 0, cuttableFrom);
    if (spans.length > 0) {
      const allowance =
        cuttableFrom < mine.bytes.length
          ? `only bytes from ${cuttableFrom} on may be cut (${pastLastWrite ? 'what lies after its last write' : 'its last write'})`
          : 'none of it may be cut: it is not a torn tail';
      findings.violation(
        `${step}: recovery cut or zeroed the damaged ${file.file} at ${describeSpans(spans)}; ${allowance}`,
      );
    }
  }
}

// ---- Verify ----------------------------------------------------------------------------------

type Verdict = { readonly ok: boolean; readonly problem?: string } | { readonly error: unknown };

/** `verify`, through a read-only store when the store has that option, else a normal one. */
async function verdictOf(root: string): Promise<Verdict> {
  let store: Store;
  try {
    store = await Store.open(root, { segmentBytes: smallSegmentBytes, readOnly: true } as StoreOptions);
  } catch (error) {
    if (!isStreamStackError(error, 'INVALID_ARGUMENT')) return { error };
    try {
      store = await openStore(root);
    } catch (again) {
      return { error: again };
    }
  }
  try {
    const [verification] = await store.verify('f');
    const problem = verification.problems[0];
    return {
      ok: verification.ok,
      ...(problem
        ? { problem: `${problem.code} at ${problem.file ?? '?'}:${problem.offset ?? '?'}: ${problem.message}` }
        : {}),
    };
  } catch (error) {
    return { error };
  } finally {
    await store.close().catch(() => undefined);
  }
}

/** What verify must say: damaged logs and metadata are not ok; the LOCK does not matter. */
function expectedVerdict(target: Target | undefined, damage: Damage | undefined): 'ok' | 'not ok' | 'either' {
  if (!target || target.file.role === 'LOCK') return 'ok';
  // Another feed's derived file is sound in itself: only its head's source tells, and verify
  // must see it (an undamaged-looking file is otherwise trusted, and answers for another feed).
  if (target.file.derived) return damage?.kind === 'foreign' ? 'not ok' : 'either';
  if ((damage?.kind === 'delete' || damage?.kind === 'delete-both') && target.file.role === 'subscription')
    return 'either';
  return 'not ok';
}

function judgeVerdict(
  root: string,
  verdict: Verdict,
  expected: 'ok' | 'not ok' | 'either',
  lockLive: boolean,
  findings: Findings,
): void {
  if ('error' in verdict) {
    if (lockLive && isStreamStackError(verdict.error, 'LOCKED')) return;
    // A verify that refuses with CORRUPT has found the damage: that is a "not ok".
    if (expected !== 'ok' && isStreamStackError(verdict.error, 'CORRUPT')) {
      findings.verifyOk = false;
      findings.note(`verify: refused with ${describeError(verdict.error, root)}`);
      return;
    }
    findings.violation(`verify threw ${describeError(verdict.error, root)} instead of reporting`);
    return;
  }
  findings.verifyOk = verdict.ok;
  if (expected === 'ok' && !verdict.ok)
    findings.violation(
      `verify reported a problem where nothing that matters was damaged: ${verdict.problem?.split(`${root}${path.sep}`).join('')}`,
    );
  if (expected === 'not ok' && verdict.ok) findings.violation('verify reported ok=true for a damaged file');
}

// ---- One case --------------------------------------------------------------------------------

async function runCase(fixture: Fixture, work: string, number: number, testCase: Case): Promise<Outcome> {
  const { target, damage } = testCase;
  const root = path.join(work, `case-${number}`);
  const findings = new Findings();
  fs.cpSync(fixture.root, root, { recursive: true });
  const real = fs.realpathSync(root);
  try {
    const damaged = damage ? applyDamage(real, fixture.root, target.file.file, damage) : [];
    if (!damaged)
      return {
        name: testCase.name,
        kind: target.kind,
        damage: damage?.kind ?? 'none',
        violations: [],
        notes: [],
        skipped: true,
      };
    const rules = rulesFor(damage ? target : undefined, damage, damaged);
    const region = damage ? regionOf(target.file, damage, damaged[0].firstChanged) : 'none';
    const name = `${testCase.name} [${region}]`;

    // 1. Verify a copy of the damaged copy, so that whatever verify does cannot change step 2.
    const verifyRoot = `${real}-verify`;
    fs.cpSync(real, verifyRoot, { recursive: true });
    try {
      judgeVerdict(
        verifyRoot,
        await verdictOf(verifyRoot),
        expectedVerdict(damage ? target : undefined, damage),
        rules.lockLive,
        findings,
      );
    } finally {
      fs.rmSync(verifyRoot, { recursive: true, force: true });
    }

    // 2. Open read-write, recover, check every acknowledged thing, then what recovery wrote.
    const left = await inspect(real, fixture, rules, findings);
    checkBytes(fixture, damage, damaged, left, findings);

    // 3. Put the damaged files back: everything acknowledged must be exactly there again.
    if (damage && !rules.lockLive) {
      restoreFiles(
        real,
        fixture.root,
        damaged.map((entry) => entry.file),
      );
      await inspect(real, fixture, restoredRules(), findings);
    }
    return {
      name,
      kind: target.kind,
      damage: damage?.kind ?? 'none',
      violations: findings.violations,
      notes: findings.notes,
      verifyOk: findings.verifyOk,
    };
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
}

async function withTimeout<T>(promise: Promise<T>, ms: number, fallback: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(fallback()), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// ---- Reports ---------------------------------------------------------------------------------

/** A table of cases and failing cases per file kind and damage kind, then every violation. */
function report(title: string, outcomes: readonly Outcome[]): { text: string; failing: number } {
  const ran = outcomes.filter((outcome) => !outcome.skipped);
  const failing = ran.filter((outcome) => outcome.violations.length > 0);
  const lines = [
    `${title}: ${failing.length} of ${ran.length} cases violate the fault model (seed ${seed}; ${outcomes.length - ran.length} skipped: no byte changed)`,
  ];
  const kinds = [...new Set(ran.map((outcome) => outcome.kind))];
  const damages = [
    'none',
    'flip',
    'zero',
    'truncate',
    'extend',
    'delete',
    'swap',
    'replace',
    'delete-both',
    'foreign',
  ].filter((kind) => ran.some((outcome) => outcome.damage === kind));
  const cell = (kind: string, damage: string) => {
    const these = ran.filter((outcome) => outcome.kind === kind && outcome.damage === damage);
    return these.length === 0
      ? '-'
      : `${these.filter((outcome) => outcome.violations.length > 0).length}/${these.length}`;
  };
  const width = Math.max(...kinds.map((kind) => kind.length), 10);
  lines.push(`  ${'failing/cases'.padEnd(width)}  ${damages.map((damage) => damage.padStart(8)).join('')}`);
  for (const kind of kinds)
    lines.push(`  ${kind.padEnd(width)}  ${damages.map((damage) => cell(kind, damage).padStart(8)).join('')}`);
  // What verify said, per kind: for index damage and deleted subscription logs either verdict
  // is allowed, and this is where the one it gave is recorded.
  const verdicts = kinds.map((kind) => {
    const these = ran.filter((outcome) => outcome.kind === kind && outcome.verifyOk !== undefined);
    return `${kind} ${these.filter((outcome) => outcome.verifyOk).length}/${these.length}`;
  });
  lines.push(`  verify said ok: ${verdicts.join(', ')}`);
  const limits = ran.flatMap((outcome) =>
    outcome.notes.filter((note) => note.startsWith('known limit')).map((note) => `${outcome.name}: ${note}`),
  );
  for (const limit of limits) lines.push(`  ${limit}`);
  for (const outcome of failing) {
    lines.push(`- ${outcome.name}`);
    for (const violation of outcome.violations) lines.push(`    ✗ ${violation}`);
    const notes = outcome.notes;
    if (notes.length > 0)
      lines.push(
        `    (${notes.slice(0, 4).join('; ')}${notes.length > 4 ? `; and ${notes.length - 4} more notes` : ''})`,
      );
  }
  return { text: lines.join('\n'), failing: failing.length };
}

// ---- The suite -------------------------------------------------------------------------------

let fixture: Fixture;
let cases: Case[];
let pristineParent: string;

beforeAll(async () => {
  // The pristine fixture outlives single tests, so it is not one of the per-test directories.
  pristineParent = fs.mkdtempSync(path.join(os.tmpdir(), 'streamstack-faults-'));
  const root = path.join(pristineParent, 'data');
  fs.mkdirSync(root);
  fixture = await buildFixture(fs.realpathSync(root));
  const foreign = path.join(pristineParent, 'foreign');
  fs.mkdirSync(foreign);
  await buildFixture(fs.realpathSync(foreign), true);
  cases = casesOf(fixture, prng(seed), fs.realpathSync(foreign));
  console.log(
    `fault-injection seed ${seed} (replay with STREAMSTACK_FAULT_SEED=${seed}): ${cases.length} cases over ` +
      `${fixture.history.length} history segments, ${fixture.wal.length} WAL segments, ${fixture.index.length} index files, ` +
      `${fixture.commits.length} commits`,
  );
}, 120_000);

afterAll(() => {
  if (pristineParent) fs.rmSync(pristineParent, { recursive: true, force: true });
});

async function runGroup(title: string, group: Group): Promise<void> {
  const work = temporaryDirectory('streamstack-fault-case-');
  const selected = cases.filter(
    (testCase) => testCase.target.group === group && (!only || testCase.name.includes(only)),
  );
  const outcomes: Outcome[] = [];
  for (const [number, testCase] of selected.entries()) {
    outcomes.push(
      await withTimeout(runCase(fixture, work, number, testCase), caseTimeoutMs, () => ({
        name: testCase.name,
        kind: testCase.target.kind,
        damage: testCase.damage?.kind ?? 'none',
        violations: [`the case did not finish within ${caseTimeoutMs / 1000} s (a hang)`],
        notes: [],
      })),
    );
  }
  const { text, failing } = report(title, outcomes);
  console.log(text);
  expect(failing, text).toBe(0);
}

describe('storage fault model', () => {
  it('holds for the undamaged fixture (the control case)', async () => {
    const work = temporaryDirectory('streamstack-fault-case-');
    const target: Target = { kind: 'no damage', group: 'metadata', file: fixture.files[0] };
    const outcome = await runCase(fixture, work, 0, { name: 'no damage', target, damage: undefined });
    const { text, failing } = report('control', [outcome]);
    if (failing > 0) console.log(text);
    expect(failing, text).toBe(0);
  }, 60_000);

  it(
    'holds for damaged history segments (first, middle, newest)',
    () => runGroup('history segments', 'history'),
    180_000,
  );
  it('holds for damaged WAL segments', () => runGroup('WAL segments', 'wal'), 180_000);
  it(
    'holds for a damaged index file, key dictionary or summary (derived: rebuilt, reads exact)',
    () => runGroup('index files', 'index'),
    240_000,
  );
  it('holds for damaged state logs (lease.log, a subscription log)', () => runGroup('state logs', 'state'), 180_000);
  it('holds for a damaged feed.json and LOCK', () => runGroup('feed.json and LOCK', 'metadata'), 180_000);
});
