/**
 * The write-ahead log of one feed: open-stream batches and the control records around them.
 * Each group commit is a run of frames ended by a `WalMarker` carrying the group's WAL sequence,
 * written with one fdatasync. Segments are named and based by their first WAL sequence.
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameHeaderBytes } from '../limits.js';
import { ByteReader } from './codec.js';
import { FrameKind } from './frame-kinds.js';
import type { FrameBuilder, ScannedFrame } from './framing.js';
import { readWalRecord, writeWalRecord, type RecordData } from './records.js';
import { SegmentKind, type SegmentFile } from './segment.js';
import { SegmentSet } from './segment-set.js';

/** Where an acknowledged record lies in the WAL. */
export interface WalLocation {
  readonly segment: number;
  readonly dataStart: number;
  readonly dataEnd: number;
}

export type WalEvent =
  | {
      readonly kind: 'open';
      readonly segment: number;
      readonly stream: string;
      readonly epoch: number;
      readonly openedAt: number;
      readonly message?: string;
    }
  | { readonly kind: 'abort'; readonly segment: number; readonly stream: string; readonly epoch: number; readonly at: number }
  | {
      readonly kind: 'batch';
      readonly segment: number;
      readonly stream: string;
      readonly epoch: number;
      readonly firstSeq: number;
      readonly records: WalLocation[];
    };

/** Frames for one group commit: call the writers, then `Wal.commit`. */
export const walFrames = {
  open(builder: FrameBuilder, stream: string, epoch: number, openedAt: number, message?: string): void {
    const writer = builder.begin(FrameKind.StreamOpen, true).string(stream).varint(epoch).varint(openedAt);
    if (message === undefined) writer.u8(0);
    else writer.u8(1).string(message);
    builder.end();
  },

  abort(builder: FrameBuilder, stream: string, epoch: number, at: number): void {
    builder.begin(FrameKind.StreamAbort, true).string(stream).varint(epoch).varint(at);
    builder.end();
  },

  /** A batch header and one frame per record; returns where each record's data lies in the group. */
  batch(
    builder: FrameBuilder,
    stream: string,
    epoch: number,
    firstSeq: number,
    records: readonly (Omit<RecordData, 'timestamp'> & { readonly timestamp?: number })[],
    timestampDefault: number,
  ): { dataStart: number; dataEnd: number }[] {
    builder.begin(FrameKind.BatchHeader, true).string(stream).varint(epoch).varint(firstSeq).varint(records.length);
    builder.end();
    const spans: { dataStart: number; dataEnd: number }[] = [];
    for (const record of records) {
      writeWalRecord(builder.begin(FrameKind.Record, false), record, timestampDefault);
      spans.push({ dataStart: builder.end() + frameHeaderBytes, dataEnd: builder.byteLength });
    }
    return spans;
  },
};

function decodeEvents(bytes: Uint8Array, segment: number, frames: readonly ScannedFrame[], file: string): WalEvent[] {
  const events: WalEvent[] = [];
  let batch: Extract<WalEvent, { kind: 'batch' }> | undefined;
  let expectedRecords = 0;
  for (const frame of frames) {
    const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, `WAL frame at ${file}:${frame.offset}`);
    if (frame.kind === FrameKind.Record) {
      if (!batch || batch.records.length >= expectedRecords) throw reader.corrupt('a record outside a batch');
      batch.records.push({ segment, dataStart: frame.dataStart, dataEnd: frame.dataEnd });
      continue;
    }
    if (batch && batch.records.length !== expectedRecords) throw reader.corrupt('a batch ends early');
    batch = undefined;
    if (frame.kind === FrameKind.StreamOpen) {
      const stream = reader.string();
      const epoch = reader.varint();
      const openedAt = reader.varint();
      const message = reader.u8() === 1 ? reader.string() : undefined;
      events.push({ kind: 'open', segment, stream, epoch, openedAt, ...(message === undefined ? {} : { message }) });
    } else if (frame.kind === FrameKind.StreamAbort) {
      events.push({ kind: 'abort', segment, stream: reader.string(), epoch: reader.varint(), at: reader.varint() });
    } else if (frame.kind === FrameKind.BatchHeader) {
      const stream = reader.string();
      const epoch = reader.varint();
      const firstSeq = reader.varint();
      expectedRecords = reader.varint();
      batch = { kind: 'batch', segment, stream, epoch, firstSeq, records: [] };
      events.push(batch);
    } else {
      throw reader.corrupt(`unknown WAL frame kind ${frame.kind}`);
    }
  }
  if (batch && batch.records.length !== expectedRecords) {
    throw new StreamStackError('CORRUPT', `a batch in ${file} ends early`, { details: { file } });
  }
  return events;
}

export class Wal {
  private constructor(
    private readonly kernels: Kernels,
    readonly segments: SegmentSet,
    /** The WAL sequence the next group commit gets. */
    public nextSequence: number,
  ) {}

  /** Opens and recovers the WAL in `directory`, handing every committed event to `onEvent`. */
  static async open(
    kernels: Kernels,
    directory: string,
    onEvent: (event: WalEvent) => void,
    readOnly = false,
  ): Promise<Wal> {
    let expected = 1;
    const segments = await SegmentSet.open(
      kernels,
      directory,
      SegmentKind.Wal,
      '.wal',
      {
        // Deleted segments leave a gap in the sequence; each segment's base says where it starts.
        beginSegment: (header) => {
          expected = Math.max(expected, header.base);
        },
        isMarker: (frame) => frame.kind === FrameKind.WalMarker,
        decode: (bytes, frame, runFrames) => {
          try {
            const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, 'WAL marker');
            const sequence = reader.varint();
            const frameCount = reader.varint();
            reader.expectEnd();
            // A marker out of sequence, or one that does not count the frames before it, is
            // stale bytes rather than the end of this run.
            if (sequence !== expected || frameCount !== runFrames.length) return undefined;
            expected++;
            return sequence;
          } catch {
            return undefined;
          }
        },
      },
      ({ segment, bytes, recovered }) => {
        for (const run of recovered.runs) {
          for (const event of decodeEvents(bytes, segment.header.base, run.frames, segment.file)) onEvent(event);
        }
      },
      readOnly,
    );
    return new Wal(kernels, segments, expected);
  }

  /**
   * Ends the group in `builder` with its commit marker, writes it with one fdatasync, and
   * returns where the group starts (segment base and offset). Rolls to a new segment when the
   * group does not fit.
   */
  async commit(builder: FrameBuilder, capacityDefault: number): Promise<{ segment: number; offset: number }> {
    const sequence = this.nextSequence;
    const frameCount = builder.frameCount;
    builder.begin(FrameKind.WalMarker, true).varint(sequence).varint(frameCount);
    builder.end();
    const bytes = builder.finish(this.kernels);
    const segment = await this.segments.ensureRoom(
      bytes.length,
      () => ({ base: sequence, baseCommit: 0 }),
      capacityDefault,
    );
    this.nextSequence++;
    const offset = await segment.append(this.kernels, bytes);
    return { segment: segment.header.base, offset };
  }

  /**
   * Reads many acknowledged records back, in order, with one read per segment span, checking
   * every frame's CRC again (one kernel call per span).
   */
  async readRecords(locations: readonly WalLocation[]): Promise<RecordData[]> {
    const records: RecordData[] = [];
    for (let start = 0; start < locations.length; ) {
      const segmentBase = locations[start].segment;
      let end = start;
      while (end < locations.length && locations[end].segment === segmentBase) end++;
      const segment = this.segments.byBase(segmentBase);
      const spanStart = locations[start].dataStart - 8;
      const spanEnd = locations[end - 1].dataEnd;
      const bytes = await segment.read(spanStart, spanEnd - spanStart);
      const offsets = new Uint32Array(end - start);
      for (let index = start; index < end; index++) offsets[index - start] = locations[index].dataStart - 8 - spanStart;
      const bad = this.kernels.frameChecksumsVerify(bytes, offsets);
      if (bad !== -1) {
        const offset = spanStart + offsets[bad];
        throw new StreamStackError('CORRUPT', `WAL record at ${segment.file}:${offset} fails its CRC`, {
          details: { file: segment.file, offset },
        });
      }
      for (let index = start; index < end; index++) {
        const location = locations[index];
        const from = location.dataStart - spanStart;
        records.push(
          readWalRecord(new ByteReader(bytes, from + 1, location.dataEnd - spanStart, `WAL record at ${segment.file}:${location.dataStart - 8}`)),
        );
      }
      start = end;
    }
    return records;
  }

  /** Removes the non-active segments that `isFinished` says hold nothing still needed. */
  async removeFinished(isFinished: (segment: SegmentFile) => boolean): Promise<void> {
    const finished = this.segments.segments.filter(
      (segment) => segment !== this.segments.active && isFinished(segment),
    );
    await this.segments.remove(finished);
  }

  close(): void {
    this.segments.close();
  }
}
