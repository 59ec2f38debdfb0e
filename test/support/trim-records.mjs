// What the trim crash and power-loss children and their parents share: the segment size (small,
// so that trims have many whole segments to remove) and the digest a commit's records are
// compared by, computed the same way over the records appended and the records read back.
import crypto from 'node:crypto';

export const trimChildSegmentBytes = 64 * 1024;

/** A digest of records' payloads, keys, versions and tags (appended or read back). */
export function recordsDigest(records) {
  const shape = records.map((record) => {
    const keyed = record.key !== undefined && record.key !== null;
    return [
      typeof record.payload === 'string' ? record.payload : Buffer.from(record.payload).toString(),
      keyed ? record.key : null,
      keyed ? (record.version ?? 0) : null,
      [...(record.tags ?? [])],
    ];
  });
  return crypto.createHash('sha256').update(JSON.stringify(shape)).digest('hex');
}
