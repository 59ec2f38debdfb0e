/**
 * The durable record of a merge's switch-over (`state/merge.log`, a state log: two files, the
 * newest record wins). Before the merged segment is renamed over the first segment it replaces,
 * the merge records which segments it replaces and the merged file's capacity, marked pending;
 * once the replaced segments' files are gone it is marked done. Recovery of a pending record
 * looks at the file under the first segment's name: with the merged capacity, the switch
 * happened and the other replaced segments' files are leftovers to delete; with any other, it
 * did not, and the temporary merged file (deleted like every `.tmp` file) is all there was.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { segmentHeaderBytes } from '../../limits.js';
import { baseOfSegmentName, FeedLayout, segmentFileName, segmentSuffix } from '../../storage/feed-layout.js';
import type { FeedStores } from '../../storage/feed-stores.js';
import { type RecordCodec, RecordLog } from '../../storage/record-log.js';
import { decodeSegmentHeader } from '../../storage/segment.js';

/** A merge's switch-over: the consecutive segments it replaces, and the merged file's capacity. */
export interface MergeRecord {
  readonly replaced: readonly number[];
  readonly capacity: number;
  readonly pending: boolean;
}

const codec: RecordCodec<MergeRecord> = {
  name: 'merge',
  version: 1,
  encode(writer, record) {
    writer
      .u8(record.pending ? 1 : 0)
      .varint(record.capacity)
      .varint(record.replaced.length);
    for (const base of record.replaced) writer.varint(base);
  },
  decode(reader) {
    const pending = reader.u8() === 1;
    const capacity = reader.varint();
    const count = reader.varint();
    const replaced: number[] = [];
    for (let index = 0; index < count; index++) replaced.push(reader.varint());
    return { replaced, capacity, pending };
  },
};

/** The merge log of one feed (made on its first merge, not on every open of every feed). */
export class MergeLog extends RecordLog<MergeRecord> {
  static async open(kernels: Kernels, directory: string, readOnly: boolean): Promise<MergeLog> {
    return new MergeLog(
      await RecordLog.openFiles(kernels, new FeedLayout(directory).stateLog('merge'), readOnly, codec),
    );
  }

  get record(): MergeRecord | undefined {
    return this.newest;
  }
}

/**
 * The bases whose files a switched-over but unfinished merge left (empty when the last merge is
 * done, or never switched): every replaced segment but the first, whose name the merged one took.
 */
export async function leftoverBases(
  kernels: Kernels,
  stores: FeedStores,
  record: MergeRecord | undefined,
): Promise<Set<number>> {
  return record && (await switchedOver(kernels, stores, record)) ? new Set(record.replaced.slice(1)) : new Set();
}

/**
 * Whether a pending switch-over happened: the file under the first replaced segment's name has
 * the rewritten segment's capacity. (A key compaction may replace a single segment: then there
 * are no leftovers, but the first one's derived files are stale all the same.)
 */
export async function switchedOver(kernels: Kernels, stores: FeedStores, record: MergeRecord): Promise<boolean> {
  if (!record.pending) return false;
  const name = segmentFileName(record.replaced[0], segmentSuffix.history);
  let capacity: number | undefined;
  try {
    const bytes = await stores.history.read(name, 0, segmentHeaderBytes);
    capacity = decodeSegmentHeader(kernels, bytes, name).capacity;
  } catch {
    // Unreadable: the history's own recovery reports it; nothing here is deleted.
    return false;
  }
  return capacity === record.capacity;
}

/**
 * Deletes what a merge makes stale: every file of the history and index stores named for a
 * replaced segment but the first — and, with `firstDerived`, the first one's index files and
 * dictionaries too (recovery: they describe the segment that was there before). The first one's
 * segment and summary stay: they are the merged segment's (a summary left from before fails
 * its check against the merged header and is rebuilt).
 */
export async function removeReplacedFiles(
  stores: FeedStores,
  replaced: readonly number[],
  firstDerived: boolean,
  /** False while the key index still holds the dictionaries (it deletes them itself, in order). */
  dictionaries = true,
): Promise<void> {
  const bases = new Set(replaced);
  const first = replaced[0];
  for (const part of ['history', 'index'] as const) {
    const names = (await stores[part].list()).filter((name) => {
      const base = baseOfSegmentName(name);
      if (base === undefined || !bases.has(base)) return false;
      if (base === first && (part === 'history' || !firstDerived)) return false;
      return (
        dictionaries ||
        !(name.endsWith(segmentSuffix.keyDictionary) || name.endsWith(segmentSuffix.fingerprintDictionary))
      );
    });
    await stores[part].deleteAll(names);
  }
}
