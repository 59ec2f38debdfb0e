// What the key-compaction crash test's child and parent share: the segment size, and the
// records of every commit as a function of its number alone — the child appends one commit at a
// time, so it knows the number of the commit it writes, and the parent can work out the whole
// history (what compaction dropped included) from the head it finds after a kill.
import { xorshift32 } from './ingest.mjs';

export const compactionChildSegmentBytes = 64 * 1024;

/** The keys records are written under: few, so each has many versions and most records lose. */
const keyCount = 24;

/**
 * The records of commit `commit`: mostly keyed (versions that do not follow the order of
 * writing, so winners are decided by version first), some tombstones, some keyless, and
 * payloads that repeat (so whole-history dedup has first occurrences compaction must retire).
 */
export function commitRecords(commit) {
  const random = xorshift32(commit * 2654435761);
  const size = 1 + Math.floor(random() * 6);
  return Array.from({ length: size }, (_, index) => {
    const kind = random();
    const payload =
      random() < 0.35
        ? `repeat-${Math.floor(random() * 30)}`
        : `${commit}:${index}|${'x'.repeat(Math.floor(random() * 1200))}`;
    if (kind < 0.15) return { payload };
    const record = {
      payload,
      key: `k${Math.floor(random() * keyCount)}`,
      version: Math.floor(random() * 40) + Math.floor(commit / 20),
    };
    if (kind > 0.93) return { ...record, payload: '', tombstone: true };
    return record;
  });
}

/** Every record of commits 1..head with its position, as the feed held them before compaction. */
export function historyOf(head) {
  const records = [];
  let position = 0;
  for (let commit = 1; commit <= head; commit++) {
    for (const [index, record] of commitRecords(commit).entries())
      records.push({ ...record, commit, seq: index + 1, position: ++position });
  }
  return records;
}
