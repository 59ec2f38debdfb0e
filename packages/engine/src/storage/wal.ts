/**
 * The write-ahead log of one feed: open-stream batches and the control records around them.
 * Each group commit is a run of frames ended by a `WalMarker` carrying the group's WAL sequence,
 * written with one fdatasync. Segments are named and based by their first WAL sequence.
 */
import { assert, StreamStackError } from '../errors.js';
import { yieldWhenDue } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameHeaderBytes } from '../limits.js';
import { ByteReader } from './codec.js';
import { segmentSuffix } from './feed-layout.js';
import { FrameKind } from './frame-kinds.js';
import type { FrameBuilder, ScannedFrame } from './framing.js';
import { controlGroup, type GroupBuilder, groupAt, groupHeaderBytes, sealGroup } from './groups.js';
import { type RecordData, readWalRecord, writeWalRecord } from './records.js';
import type { Corruption } from './runs.js';
import { type SegmentFile, SegmentKind } from './segment.js';
import { SegmentSet } from './segment-set.js';
import type { WalLocation, WalLocations } from './wal-locations.js';

export type { WalLocation } from './wal-locations.js';

export type WalEvent =
  | {
      readonly kind: 'open';
      readonly segment: number;
      readonly stream: string;
      readonly epoch: number;
      readonly openedAt: number;
      readonly message?: string;
    }
  | {
      readonly kind: 'abort';
      readonly segment: number;
      readonly stream: string;
      readonly epoch: number;
      readonly at: number;
    }
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

/** Frames of a WAL group that carry what users did (a replay copies them; log control it leaves). */
const streamFrameKinds: ReadonlySet<number> = new Set([
  FrameKind.StreamOpen,
  FrameKind.StreamAbort,
  FrameKind.BatchHeader,
  FrameKind.Record,
]);

/**
 * The stream events of one WAL group as another copy holds it (a replicated feed's slot: its
 * header sealed for wherever it was first written), each batch with its records read: what a
 * new writer replays into its own WAL. `CORRUPT` naming `name` when the group does not check.
 */
export function walGroupEvents(
  kernels: Kernels,
  bytes: Uint8Array,
  name: string,
): { event: WalEvent; records: RecordData[] }[] {
  // Sealed again for offset 0 so it reads as a group of its own; its frames' CRCs are unchanged.
  const copy = bytes.slice();
  if (copy.length < groupHeaderBytes)
    throw new StreamStackError('CORRUPT', `${name} holds no WAL group`, { details: { object: name } });
  sealGroup(kernels, copy, 0, 0);
  const group = groupAt(kernels, copy, 0, copy.length);
  if (!group || group.end !== copy.length)
    throw new StreamStackError('CORRUPT', `${name} holds no whole WAL group`, { details: { object: name } });
  const frames = group.frames.filter((frame) => streamFrameKinds.has(frame.kind));
  return decodeEvents(copy, 0, frames, name).map((event) => ({
    event,
    records:
      event.kind === 'batch'
        ? event.records.map((location) =>
            readWalRecord(new ByteReader(copy, location.dataStart + 1, location.dataEnd, `a record in ${name}`)),
          )
        : [],
  }));
}

export class Wal {
  private constructor(
    private readonly kernels: Kernels,
    readonly segments: SegmentSet,
    /** The WAL sequence the next group commit gets. */
    public nextSequence: number,
    /** Every corruption found on open: damage, missing live segments, runs out of order. */
    readonly corruptions: readonly Corruption[],
  ) {}

  /**
   * Opens and recovers the WAL in `directory`, handing every committed event of the live
   * segments to `onEvent`, in order. The live segments are those the last `LiveSegments` list
   * names and every segment after it; an older segment it does not name was being deleted when
   * a process stopped, and is deleted now (left alone when read-only).
   */
  static async open(
    kernels: Kernels,
    directory: string,
    onEvent: (event: WalEvent) => void,
    readOnly = false,
    /** The feed's tag (`feedTagOf`): a segment written for another feed is corruption. */
    feedTag = 0,
  ): Promise<Wal> {
    let expected = 1;
    let afterDamage = true;
    const corruptions: Corruption[] = [];
    const bySegment = new Map<number, WalEvent[]>();
    let live: { listedIn: number; bases: readonly number[] } | undefined;
    const segments = await SegmentSet.open(
      kernels,
      directory,
      SegmentKind.Wal,
      segmentSuffix.wal,
      {
        isMarker: (frame) => frame.kind === FrameKind.WalMarker,
        decode: (bytes, frame, runFrames) => {
          try {
            const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, 'WAL marker');
            const sequence = reader.varint();
            const frameCount = reader.varint();
            reader.expectEnd();
            return frameCount === runFrames.length ? sequence : undefined;
          } catch {
            return undefined;
          }
        },
      },
      (event) => {
        if (event.kind === 'corruption') {
          afterDamage = true;
          return;
        }
        assert(event.kind === 'segment', 'WAL segments have no summaries');
        const { segment, bytes, scanned } = event.opened;
        // Finished segments are deleted from the middle on purpose, so a segment may start past
        // the sequence the one before it ended at; never before it.
        if (segment.header.base >= expected) afterDamage = true;
        const events: WalEvent[] = [];
        for (const entry of scanned.entries) {
          if (entry.kind === 'damage') {
            afterDamage = true;
            continue;
          }
          const sequence = entry.run.decoded;
          const where = { file: segment.file, offset: entry.run.marker.offset };
          if (sequence < expected || (sequence > expected && !afterDamage)) {
            corruptions.push({ ...where, reason: `WAL group ${sequence} is out of sequence (expected ${expected})` });
            continue;
          }
          try {
            events.push(...decodeEvents(bytes, segment.header.base, entry.run.frames, segment.file));
          } catch (error) {
            corruptions.push({ ...where, reason: (error as Error).message });
          }
          expected = sequence + 1;
          afterDamage = false;
        }
        bySegment.set(segment.header.base, events);
        if (scanned.liveSegments) live = { listedIn: segment.header.base, bases: scanned.liveSegments };
      },
      readOnly,
      undefined,
      0,
      new Set(),
      feedTag,
    );
    const present = new Set(segments.segments.map((segment) => segment.header.base));
    const isLive = (base: number) => !live || base >= live.listedIn || live.bases.includes(base);
    for (const base of live?.bases ?? []) {
      if (
        !present.has(base) &&
        !segments.corruptions.some((corruption) => corruption.file === segments.fileFor(base))
      ) {
        corruptions.push({ file: segments.fileFor(base), offset: 0, reason: 'a live WAL segment is missing' });
      }
    }
    const leftovers = segments.segments.filter((segment) => !isLive(segment.header.base));
    if (!readOnly) await segments.remove(leftovers);
    for (const segment of segments.segments) {
      if (!isLive(segment.header.base)) continue;
      for (const event of bySegment.get(segment.header.base) ?? []) onEvent(event);
    }
    return new Wal(kernels, segments, expected, [...segments.corruptions, ...corruptions]);
  }

  /**
   * Ends the group in `builder` with its commit marker, writes it with one fdatasync, and
   * returns where the group starts (segment base and offset). Rolls to a new segment when the
   * group does not fit (segments grow up to `capacityMax`, see `SegmentSet.grownCapacity`); a new
   * segment's first group lists the live segments.
   */
  commit(
    builder: GroupBuilder,
    capacityMax: number,
  ): {
    placed: boolean;
    durable: Promise<{ segment: number; offset: number }>;
    bytes: Uint8Array;
    /** Where a placed group lands, known before it is durable (its bytes are final then too). */
    at?: { segment: number; offset: number };
  } {
    const sequence = this.nextSequence++;
    builder.begin(FrameKind.WalMarker, true).varint(sequence).varint(builder.runFrameCount);
    builder.end();
    const bytes = builder.finish(this.kernels);
    const append = async (segment: SegmentFile) => ({
      segment: segment.header.base,
      offset: await this.segments.appendGroup(segment, bytes),
    });
    const active = this.segments.activeWithRoom(bytes.length, capacityMax);
    if (active) {
      const at = { segment: active.header.base, offset: active.writeOffset };
      return { placed: true, durable: append(active), bytes, at };
    }
    const durable = this.segments
      .roll(
        bytes.length,
        () => ({ base: sequence, baseCommit: 0 }),
        capacityMax,
        (base) => this.liveListGroup(base),
      )
      .then(append);
    return { placed: false, durable, bytes };
  }

  /** The bases of the segments live now. */
  liveBases(except: ReadonlySet<number> = new Set()): number[] {
    return this.segments.segments.map((segment) => segment.header.base).filter((base) => !except.has(base));
  }

  /** A new segment's first group: the live segments, itself included. */
  private liveListGroup(base: number): Uint8Array {
    const bases = [...this.liveBases().filter((live) => live !== base), base];
    const builder = controlGroup(FrameKind.LiveSegments, (writer) => {
      writer.varint(bases.length);
      for (const live of bases) writer.varint(live);
    });
    return builder.finish(this.kernels);
  }

  /**
   * Reads many acknowledged records back, in order, with one read per segment span, checking
   * every frame's CRC again (one kernel call per span).
   */
  async readRecords(locations: WalLocations): Promise<RecordData[]> {
    const records: RecordData[] = [];
    for (const { segment: segmentBase, from: start, to: end } of locations.spans()) {
      const segment = this.segments.byBase(segmentBase);
      const spanStart = locations.dataStartAt(start) - 8;
      const spanEnd = locations.dataEndAt(end - 1);
      const bytes = await segment.read(spanStart, spanEnd - spanStart);
      const offsets = new Uint32Array(end - start);
      for (let index = start; index < end; index++)
        offsets[index - start] = locations.dataStartAt(index) - 8 - spanStart;
      const bad = this.kernels.frameChecksumsVerify(bytes, offsets);
      if (bad !== -1) {
        const offset = spanStart + offsets[bad];
        throw new StreamStackError('CORRUPT', `WAL record at ${segment.file}:${offset} fails its CRC`, {
          details: { file: segment.file, offset },
        });
      }
      for (let index = start; index < end; index++) {
        const pause = yieldWhenDue(index);
        if (pause) await pause;
        const dataStart = locations.dataStartAt(index);
        records.push(
          readWalRecord(
            new ByteReader(
              bytes,
              dataStart - spanStart + 1,
              locations.dataEndAt(index) - spanStart,
              `WAL record at ${segment.file}:${dataStart - 8}`,
            ),
          ),
        );
      }
    }
    return records;
  }

  /**
   * The non-active segments that `isFinished` says hold nothing still needed. Delete them with
   * `remove` only after a group with `writeLiveSegments` (naming the others) is durable, so that
   * recovery can tell a deleted segment from a lost one.
   */
  finishedSegments(isFinished: (segment: SegmentFile) => boolean): SegmentFile[] {
    return this.segments.segments.filter((segment) => segment !== this.segments.active && isFinished(segment));
  }

  close(): void {
    this.segments.close();
  }
}
