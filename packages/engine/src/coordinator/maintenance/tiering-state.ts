/**
 * A feed's tiering state (`state/tiering.log`, a state log: two files, the newest record wins):
 * which sealed segments were given which ordinal, which of them object storage holds (their
 * descriptor confirmed), and which are being retired there. An ordinal is written here before
 * the first byte of its segment goes up, and `nextOrdinal` only grows, so no ordinal is ever used
 * for two segments, across crashes too: an upload cut by a crash is done again under the same
 * ordinal, and finds its own descriptor if it got that far.
 */
import { assert, StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { FeedLayout } from '../../storage/feed-layout.js';
import { type RecordCodec, RecordLog } from '../../storage/record-log.js';

/**
 * Where a segment stands: its files going up (`uploading`), visible remotely (`remote`), visible
 * remotely with its local history segment cut to its header to keep the local budget
 * (`evicted`: its records are read back from object storage; its summary, index and
 * dictionaries stay local), or gone locally and being retired remotely: `replaced` by a rewrite
 * (its files are deleted, its descriptor stays so the ordinals a follower walks have no holes)
 * or `trimmed` (its files and descriptor are deleted, once the boundary is past it).
 */
export type TierEntryState = 'uploading' | 'remote' | 'replaced' | 'trimmed' | 'evicted';

/** Codes on disk: a new state takes the next code, so older records read as they were written. */
const stateCodes: readonly TierEntryState[] = ['uploading', 'remote', 'replaced', 'trimmed', 'evicted'];

/** True for a segment object storage holds visibly, whether or not its local copy was evicted. */
export function isVisibleRemotely(entry: TierEntry): boolean {
  return entry.state === 'remote' || entry.state === 'evicted';
}

/** One segment given an ordinal. */
export interface TierEntry {
  readonly ordinal: number;
  readonly base: number;
  readonly lastPosition: number;
  /** The segment's fingerprint: a rewrite of the same base is another segment. */
  readonly source: number;
  /** Its files' bytes, all together. */
  readonly bytes: number;
  readonly state: TierEntryState;
}

export interface TieringState {
  /** This feed's writer, as descriptors name it: made once, on the first write. */
  readonly writer: string;
  readonly nextOrdinal: number;
  /** The boundary written last: ordinals below it are trimmed remotely. */
  readonly lowOrdinal: number;
  readonly entries: readonly TierEntry[];
}

const codec: RecordCodec<TieringState> = {
  name: 'tiering',
  version: 1,
  encode(writer, state) {
    writer.string(state.writer).varint(state.nextOrdinal).varint(state.lowOrdinal).varint(state.entries.length);
    for (const entry of state.entries) {
      writer
        .varint(entry.ordinal)
        .varint(entry.base)
        .varint(entry.lastPosition)
        .u32(entry.source)
        .varint(entry.bytes)
        .u8(stateCodes.indexOf(entry.state));
    }
  },
  decode(reader, file) {
    const writer = reader.string();
    const nextOrdinal = reader.varint();
    const lowOrdinal = reader.varint();
    const count = reader.varint();
    const entries: TierEntry[] = [];
    for (let index = 0; index < count; index++) {
      const entry = {
        ordinal: reader.varint(),
        base: reader.varint(),
        lastPosition: reader.varint(),
        source: reader.u32(),
        bytes: reader.varint(),
        state: stateCodes[reader.u8()],
      };
      if (entry.state === undefined || entry.ordinal >= nextOrdinal || entry.lastPosition < entry.base - 1) {
        throw new StreamStackError('CORRUPT', `${file} holds a tiering entry it cannot hold`, {
          details: { file, offset: 0 },
        });
      }
      entries.push(entry as TierEntry);
    }
    return { writer, nextOrdinal, lowOrdinal, entries };
  },
};

/** The tiering log of one feed (made on the first upload, not on every open of every feed). */
export class TieringLog extends RecordLog<TieringState> {
  static async open(kernels: Kernels, directory: string, readOnly: boolean): Promise<TieringLog> {
    return new TieringLog(
      await RecordLog.openFiles(kernels, new FeedLayout(directory).stateLog('tiering'), readOnly, codec),
    );
  }

  /** Whether a state was ever written: the feed was tiered. */
  get written(): boolean {
    return this.newest !== undefined;
  }

  /** The state, or a fresh one for a feed never tiered (`newWriter` names its writer). */
  stateOr(newWriter: () => string): TieringState {
    return this.newest ?? { writer: newWriter(), nextOrdinal: 1, lowOrdinal: 1, entries: [] };
  }

  /** Writes `state` durably; ordinals never go back. */
  override async write(state: TieringState): Promise<void> {
    const before = this.newest;
    assert(
      before === undefined || (state.nextOrdinal >= before.nextOrdinal && state.lowOrdinal >= before.lowOrdinal),
      'tiering ordinals never go back',
    );
    await super.write(state);
  }
}

/** An evicted segment as the tiering log names it: its ordinal, and its fingerprint. */
export interface EvictedSegment {
  readonly ordinal: number;
  readonly source: number;
}

/**
 * The feed's evicted segments (by base), from its tiering log read as it is: what
 * opening its history needs before anything else of tiering is set up. Empty for a feed never
 * tiered.
 */
export async function evictedSegments(kernels: Kernels, directory: string): Promise<Map<number, EvictedSegment>> {
  const log = await TieringLog.open(kernels, directory, true);
  try {
    const evicted = new Map<number, EvictedSegment>();
    for (const entry of log.stateOr(() => '').entries)
      if (entry.state === 'evicted') evicted.set(entry.base, { ordinal: entry.ordinal, source: entry.source });
    return evicted;
  } finally {
    log.close();
  }
}

/**
 * Whether a replaced segment's objects may go: only once what replaces it is visible remotely
 * (a later ordinal covering its positions, whose descriptor lists it in `replaces`), or once it
 * lies below the floor. Deleted before, its descriptor would be live and name missing objects
 * for as long as the rewrite's upload takes, and for good if the entry left the tiering log
 * before that upload listed it as replaced.
 */
export function replacementVisible(
  entry: TierEntry,
  state: TieringState,
  floor: { readonly position: number },
): boolean {
  if (entry.lastPosition < floor.position) return true;
  return state.entries.some(
    (other) =>
      other.ordinal > entry.ordinal &&
      isVisibleRemotely(other) &&
      other.base <= entry.base &&
      other.lastPosition >= entry.lastPosition,
  );
}
