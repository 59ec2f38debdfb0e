/**
 * The durable record of a feed's key-compaction horizon (`state/compaction.log`, a state log:
 * two files, the newest record wins, made on the first compaction). A compaction writes its
 * horizon here before it rewrites a single segment: from then on cursors below the horizon fail
 * with `COMPACTED`, whether or not every segment below it was rewritten yet, so no read ever sees
 * a history that is partly compacted. Each rewrite's switch-over is recorded in the merge log,
 * which recovery finishes as it finishes a merge's.
 */
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { ByteReader, ByteWriter } from '../../storage/codec.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import type { Corruption } from '../../storage/runs.js';
import { DeferredRecordLog } from '../../storage/state-log.js';

/** The horizon H: segments wholly at or before commit H keep only each key's winner as of H. */
export interface CompactionRecord {
  readonly horizon: number;
}

const recordVersion = 1;

function encode(record: CompactionRecord): Uint8Array {
  return new ByteWriter().u8(recordVersion).varint(record.horizon).finish();
}

function decode(bytes: Uint8Array, file: string): CompactionRecord {
  const reader = new ByteReader(bytes, 0, bytes.length, `compaction record in ${file}`);
  const version = reader.u8();
  if (version !== recordVersion) {
    throw new StreamStackError('CORRUPT', `${file} holds a compaction record of an unknown form`, {
      details: { file, offset: 0 },
    });
  }
  const horizon = reader.varint();
  reader.expectEnd();
  return { horizon };
}

export class CompactionLog {
  private constructor(private readonly log: DeferredRecordLog<CompactionRecord>) {}

  static async open(kernels: Kernels, directory: string, readOnly: boolean): Promise<CompactionLog> {
    return new CompactionLog(
      await DeferredRecordLog.open(kernels, new FeedLayout(directory).stateLog('compaction'), readOnly, {
        encode,
        decode,
      }),
    );
  }

  /** The horizon recorded last: 0 when the feed was never key-compacted. */
  get horizon(): number {
    return this.log.value?.horizon ?? 0;
  }

  /** Damage in the log's files that the newest sound record survived (verify reports it). */
  get corruptions(): readonly Corruption[] {
    return this.log.corruptions;
  }

  /** A torn last write found on open (cut unless read-only). */
  get tornTails(): readonly Corruption[] {
    return this.log.tornTails;
  }

  write(record: CompactionRecord): Promise<void> {
    return this.log.write(record);
  }

  close(): void {
    this.log.close();
  }
}
