/**
 * The durable record of a feed's key-compaction horizon (`state/compaction.log`, a state log:
 * two files, the newest record wins, made on the first compaction). A compaction writes its
 * horizon here before it rewrites a single segment: from then on cursors below the horizon fail
 * with `COMPACTED`, whether or not every segment below it was rewritten yet, so no read ever sees
 * a history that is partly compacted. Each rewrite's switch-over is recorded in the merge log,
 * which recovery finishes as it finishes a merge's.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { type RecordCodec, RecordLog } from '../../storage/record-log.js';

/** The horizon H: segments wholly at or before commit H keep only each key's winner as of H. */
export interface CompactionRecord {
  readonly horizon: number;
}

const codec: RecordCodec<CompactionRecord> = {
  name: 'compaction',
  version: 1,
  encode: (writer, record) => writer.varint(record.horizon),
  decode: (reader) => ({ horizon: reader.varint() }),
};

export class CompactionLog extends RecordLog<CompactionRecord> {
  static async open(kernels: Kernels, directory: string, readOnly: boolean): Promise<CompactionLog> {
    return new CompactionLog(
      await RecordLog.openFiles(kernels, new FeedLayout(directory).stateLog('compaction'), readOnly, codec),
    );
  }

  /** The horizon recorded last: 0 when the feed was never key-compacted. */
  get horizon(): number {
    return this.newest?.horizon ?? 0;
  }
}
