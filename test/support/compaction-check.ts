/**
 * The checks the key-compaction crash and power-loss tests make of a reopened feed, against the
 * history worked out from its head alone (test/support/compaction-records.mjs): RAW and dedup
 * reads after the horizon, the latest value of every key from the start and through `get`,
 * `COMPACTED` below the horizon, and every acknowledged commit present.
 */
import { expect } from 'vitest';
import type { Feed, StoredRecord } from '../../packages/engine/src/index.js';
import { historyOf } from './compaction-records.mjs';
import { collect, text } from './store.js';

const view = (record: {
  commit: number;
  position: number;
  key?: string;
  version?: number;
  tombstone?: boolean;
  payload: string | Uint8Array;
}) => ({
  commit: record.commit,
  position: record.position,
  key: record.key,
  version: record.key === undefined ? undefined : (record.version ?? 0),
  tombstone: record.tombstone === true,
  payload: typeof record.payload === 'string' ? record.payload : text(record.payload),
});
const stored = (records: readonly StoredRecord[]) => records.map(view);

/** Checks the reopened feed against the history worked out from its head. */
export async function checkCompactedFeed(
  feed: Feed,
  acknowledged: number,
  where: string,
): Promise<{ horizon: number }> {
  const info = await feed.info();
  const head = info.commits;
  expect(head, `${where}: every acknowledged commit is there`).toBeGreaterThanOrEqual(acknowledged);
  const history = historyOf(head).map(view);
  const { horizon } = info;
  const after = history.filter((record) => record.commit > horizon);
  expect(stored(await collect(feed.read({ after: horizon }))), `${where}: RAW after the horizon ${horizon}`).toEqual(
    after,
  );
  const seen = new Set<string>();
  const firsts = history.filter((record) => {
    const first = !seen.has(record.payload);
    seen.add(record.payload);
    return first;
  });
  expect(
    stored(await collect(feed.read({ after: horizon, mode: 'dedup' }))),
    `${where}: dedup after the horizon`,
  ).toEqual(firsts.filter((record) => record.commit > horizon));
  const winners = new Map<string, (typeof history)[number]>();
  for (const record of history) {
    if (record.key === undefined) continue;
    const held = winners.get(record.key);
    if (
      !held ||
      record.version! > held.version! ||
      (record.version === held.version && record.position > held.position)
    )
      winners.set(record.key, record);
  }
  const latest = [...winners.values()].filter((record) => !record.tombstone).sort((a, b) => a.position - b.position);
  expect(stored(await collect(feed.read({ mode: 'latest' }))), `${where}: latest from the start`).toEqual(latest);
  for (const [key, winner] of winners) {
    const found = await feed.get(key);
    expect(found ? view(found) : undefined, `${where}: get(${key})`).toEqual(winner.tombstone ? undefined : winner);
  }
  if (horizon >= 2)
    await expect(collect(feed.read({ after: horizon - 1 }))).rejects.toMatchObject({ code: 'COMPACTED' });
  return { horizon };
}
