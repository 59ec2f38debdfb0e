/**
 * What the trim crash and power-loss tests check after each kill or cut, over the lines the
 * child printed (test/support/trim-child.mjs): the feed opens and verifies; its low mark is
 * where a history segment starts, never went back, and is at least every trim acknowledged; no
 * file named for a segment below it is left in history/ or index/; every acknowledged commit at
 * or above it reads back exactly; dedup and `get` equal an oracle computed from a RAW read of
 * the kept history; the subscription `pin` was never trimmed past unless a forced trim was under
 * way; and a cursor below the low mark − 1 fails with TRIMMED.
 */
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import { RetentionLog } from '../../packages/engine/src/coordinator/maintenance/retention-state.js';
import { type Store, type StoredRecord, StreamStackError } from '../../packages/engine/src/index.js';
import { tsKernels } from '../../packages/engine/src/kernels/index.js';
import { collect, historySegmentBases } from './store.js';
import { recordsDigest } from './trim-records.mjs';

export interface TrimChildLine {
  kind: string;
  batch?: string;
  commit?: number;
  digest?: string;
  id?: string;
  force?: boolean;
  lowMark?: number;
  token?: string;
  epoch?: number;
  cursor?: number;
}

const keyCount = 40;

async function expectTrimmed(attempt: () => Promise<unknown>, lowMark: number, what: string): Promise<void> {
  let caught: unknown;
  try {
    await attempt();
  } catch (error) {
    caught = error;
  }
  expect(caught, what).toBeInstanceOf(StreamStackError);
  expect((caught as StreamStackError).code, what).toBe('TRIMMED');
  expect((caught as StreamStackError).details.lowMark, what).toBe(lowMark);
}

/** What the children acknowledged so far, and the checks of a reopened store against it. */
export class TrimLedger {
  /** Each acknowledged commit's digest. */
  readonly acknowledged = new Map<number, string>();
  /** The highest low mark a trim acknowledged, or a reopened feed showed. */
  lowMark = 1;
  token: string | undefined;
  /** A forced trim was asked for and the subscription not yet put back at the low mark. */
  forceOutstanding = false;
  /** Trims started and not acknowledged when the child stopped (kills or cuts inside a trim). */
  stoppedInTrim = 0;
  trimsAcknowledged = 0;
  segmentsRemoved = 0;
  /**
   * Reopens whose low mark had moved past every acknowledged trim: a trim the feed ran on its
   * own (by the policy), or one cut off after its floor was recorded.
   */
  floorsPastAcknowledged = 0;
  /** Stops that left a trim recorded as pending: its floor durable, its files maybe not all gone. */
  pendingFound = 0;

  /**
   * Looks at the retention state the child left, before anything opens the feed: a pending trim
   * is one the kill or cut came inside of, after its floor was recorded and before it was done.
   */
  async notePending(directory: string): Promise<boolean> {
    const log = await RetentionLog.open(tsKernels, path.join(directory, 'feeds', 'trim'), true);
    const pending = log.state.pending;
    log.close();
    if (pending) this.pendingFound++;
    return pending;
  }

  take(lines: readonly TrimChildLine[]): void {
    const open = new Set<string>();
    for (const line of lines) {
      if (line.kind === 'lease') this.token = line.token;
      if (line.kind === 'oneshot') this.acknowledged.set(line.commit!, line.digest!);
      if (line.kind === 'trim') {
        open.add(line.id!);
        if (line.force) this.forceOutstanding = true;
      }
      if (line.kind === 'trimmed') {
        open.delete(line.id!);
        this.trimsAcknowledged++;
        this.segmentsRemoved += (line as { segmentsRemoved?: number }).segmentsRemoved ?? 0;
        this.lowMark = Math.max(this.lowMark, line.lowMark!);
      }
      if (line.kind === 'force-done') this.forceOutstanding = false;
    }
    if (open.size > 0) this.stoppedInTrim++;
  }

  /** Checks the store opened over what the child left (`directory`: the store's directory). */
  async check(store: Store, directory: string, where: string): Promise<void> {
    const feed = await store.feed('trim');
    const [verification] = await store.verify('trim');
    expect(verification.problems, `verify ${where}`).toEqual([]);
    const info = await feed.info();
    const low = info.lowMark;
    const lowPosition = info.lowPosition;
    expect(low, `the low mark never goes back, nor below an acknowledged trim ${where}`).toBeGreaterThanOrEqual(
      this.lowMark,
    );
    if (low > this.lowMark) this.floorsPastAcknowledged++;
    this.lowMark = low;
    expect(verification.lowMark, `verify's low mark ${where}`).toBe(low);

    // The low mark is where a history segment starts, and nothing below it is left on disk.
    const feedDirectory = path.join(directory, 'feeds', 'trim');
    expect(
      historySegmentBases(directory, 'trim')[0],
      `the first history segment starts at the low position ${where}`,
    ).toBe(lowPosition);
    for (const part of ['history', 'index']) {
      // A feed whose indexes have not written a file yet has no index directory.
      const names = fs.existsSync(path.join(feedDirectory, part)) ? fs.readdirSync(path.join(feedDirectory, part)) : [];
      for (const name of names) {
        if (/^\d{16}\./.test(name))
          expect(Number(name.slice(0, 16)), `${part}/${name} ${where}`).toBeGreaterThanOrEqual(lowPosition);
      }
    }

    // Every commit from the low mark to the head is there, contiguous in commits and positions,
    // and each acknowledged one reads back exactly.
    const head = (await feed.head())?.commit ?? 0;
    const raw = await collect(feed.read());
    const byCommit = new Map<number, StoredRecord[]>();
    for (const record of raw) {
      const list = byCommit.get(record.commit) ?? [];
      list.push(record);
      byCommit.set(record.commit, list);
    }
    if (head >= low) {
      expect(raw[0]?.commit, `the first record read is at the low mark ${where}`).toBe(low);
      expect(raw[0]?.position, `the first record read is at the low position ${where}`).toBe(lowPosition);
    }
    expect(
      raw.every((record, index) => record.position === lowPosition + index),
      `positions contiguous from the low position ${where}`,
    ).toBe(true);
    expect([...byCommit.keys()], `commits contiguous from the low mark ${where}`).toEqual(
      Array.from({ length: Math.max(0, head - low + 1) }, (_, index) => low + index),
    );
    for (const [commit, digest] of this.acknowledged) {
      expect(commit, `acknowledged commit ${commit} is published ${where}`).toBeLessThanOrEqual(head);
      if (commit < low) continue;
      expect(
        recordsDigest(byCommit.get(commit) ?? []),
        `acknowledged commit ${commit} reads back exactly ${where}`,
      ).toBe(digest);
    }

    // Dedup and key winners over the history that is kept, against an oracle of the RAW read.
    const seen = new Set<string>();
    const firsts = raw.filter((record) => {
      const fingerprint = Buffer.from(record.fingerprint).toString('hex');
      if (seen.has(fingerprint)) return false;
      seen.add(fingerprint);
      return true;
    });
    const dedup = await collect(feed.read({ mode: 'dedup' }));
    expect(
      dedup.map((record) => record.position),
      `dedup over the kept history ${where}`,
    ).toEqual(firsts.map((record) => record.position));
    const winners = new Map<string, StoredRecord>();
    for (const record of raw) {
      if (record.key === undefined || record.key === null) continue;
      const best = winners.get(record.key);
      if (
        !best ||
        (record.version ?? 0) > (best.version ?? 0) ||
        ((record.version ?? 0) === (best.version ?? 0) && record.position > best.position)
      ) {
        winners.set(record.key, record);
      }
    }
    for (let index = 0; index < keyCount; index++) {
      const key = `k${index}`;
      expect((await feed.get(key))?.position, `get(${key}) over the kept history ${where}`).toBe(
        winners.get(key)?.position,
      );
    }

    // The subscription holds retention back unless a forced trim was under way.
    const pin = await (await feed.subscription('pin')).info();
    if (!this.forceOutstanding)
      expect(pin.cursor, `the subscription was not trimmed past ${where}`).toBeGreaterThanOrEqual(low - 1);

    // The commit before the low mark is a valid cursor; anything below it is trimmed history.
    if (head >= low)
      expect((await collect(feed.read({ after: low - 1, limit: 1 })))[0]?.commit, `read after low − 1 ${where}`).toBe(
        low,
      );
    if (low >= 2) {
      await expectTrimmed(() => collect(feed.read({ after: low - 2 })), low, `read after low − 2 ${where}`);
      await expectTrimmed(() => collect(feed.read({ after: 0, mode: 'dedup' })), low, `dedup read after 0 ${where}`);
      await expectTrimmed(() => feed.get('k0', { asOf: low - 2 }), low, `get asOf low − 2 ${where}`);
    }
  }
}
