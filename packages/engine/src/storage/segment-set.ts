/**
 * A directory of segments of one log (the WAL, or the history): opens and recovers them in
 * order, keeps exactly one active (the last), rolls to a new one when a run does not fit, and
 * deletes whole segments when asked. Segments are named by their base, zero-padded, so that the
 * directory order is the log order.
 */
import fs from 'node:fs';
import path from 'node:path';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { segmentHeaderBytes } from '../limits.js';
import type { ScannedFrame } from './framing.js';
import { findRuns, repairTail, type RecoveredSegment, type TornTail } from './runs.js';
import { SegmentFile, syncDirectory, type SegmentHeader, type SegmentKind } from './segment.js';

/** Digits of a segment file name: enough for any base below 2^53. */
const segmentNameDigits = 16;

export interface MarkerDecoder<M> {
  /** Called before a segment's frames are decoded, with its header. */
  beginSegment(header: SegmentHeader): void;
  isMarker(frame: ScannedFrame): boolean;
  /** Decodes a marker, or returns undefined when it is invalid or out of sequence. */
  decode(bytes: Uint8Array, frame: ScannedFrame, runFrames: readonly ScannedFrame[]): M | undefined;
}

export interface OpenedSegment<M> {
  readonly segment: SegmentFile;
  readonly bytes: Uint8Array;
  readonly recovered: RecoveredSegment<M>;
}

export class SegmentSet {
  readonly segments: SegmentFile[] = [];
  /** What recovery cut when the set was opened. */
  readonly tornTails: TornTail[] = [];

  private constructor(
    private readonly kernels: Kernels,
    readonly directory: string,
    private readonly kind: SegmentKind,
    private readonly extension: string,
  ) {}

  /**
   * Opens every segment in `directory` (creating the directory if needed), recovering each and
   * handing its committed runs to `onSegment` in log order.
   */
  static async open<M>(
    kernels: Kernels,
    directory: string,
    kind: SegmentKind,
    extension: string,
    decoder: MarkerDecoder<M>,
    onSegment: (opened: OpenedSegment<M>) => void,
    /** Inspect only: report torn tails and bad headers, change nothing on disk. */
    readOnly = false,
  ): Promise<SegmentSet> {
    if (!readOnly) fs.mkdirSync(directory, { recursive: true });
    else if (!fs.existsSync(directory)) return new SegmentSet(kernels, directory, kind, extension);
    const set = new SegmentSet(kernels, directory, kind, extension);
    // A spare left by a process that died is not trusted: it may be half zero-filled.
    if (!readOnly) fs.rmSync(set.spareFile, { force: true });
    const names = fs
      .readdirSync(directory)
      .filter((name) => name.endsWith(extension))
      .sort();
    for (const [index, name] of names.entries()) {
      const file = path.join(directory, name);
      const isLast = index === names.length - 1;
      let segment: SegmentFile;
      try {
        segment = SegmentFile.open(kernels, file, readOnly);
      } catch (error) {
        // Only the newest segment can be half-created (its header not yet durable when the
        // process died); it holds no committed run, so it is dropped and reported. Anywhere
        // else a bad header is corruption, and it is refused.
        if (isLast && error instanceof StreamStackError && error.code === 'CORRUPT') {
          const bytes = fs.statSync(file).size;
          if (!readOnly) {
            fs.rmSync(file);
            await syncDirectory(directory);
          }
          set.tornTails.push({ file, offset: 0, bytes });
          continue;
        }
        throw error;
      }
      if (segment.header.kind !== kind) {
        segment.close();
        throw new StreamStackError('CORRUPT', `${file} is not a segment of this log`, {
          details: { file, offset: 0 },
        });
      }
      const bytes = segment.readAll();
      decoder.beginSegment(segment.header);
      const recovered = findRuns(
        kernels,
        bytes,
        file,
        (frame, runFrames) => decoder.decode(bytes, frame, runFrames),
        decoder.isMarker,
      );
      if (readOnly) segment.writeOffset = recovered.end;
      else await repairTail(kernels, segment, bytes.length, recovered);
      if (recovered.tornTail) set.tornTails.push(recovered.tornTail);
      set.segments.push(segment);
      onSegment({ segment, bytes, recovered });
    }
    return set;
  }

  get active(): SegmentFile | undefined {
    return this.segments[this.segments.length - 1];
  }

  fileFor(base: number): string {
    return path.join(this.directory, `${String(base).padStart(segmentNameDigits, '0')}${this.extension}`);
  }

  private closed = false;

  /** The segment with the given base. */
  byBase(base: number): SegmentFile {
    if (this.closed) throw new StreamStackError('CLOSED', `${this.directory} is closed`);
    const segment = this.segments.find((candidate) => candidate.header.base === base);
    if (!segment) {
      throw new StreamStackError('CORRUPT', `no segment with base ${base} in ${this.directory}`, {
        details: { file: this.fileFor(base), offset: 0 },
      });
    }
    return segment;
  }

  /**
   * Returns an active segment with room for `bytes` more, creating a new one (sized to hold
   * them if they exceed the usual capacity) when the current one is too full.
   */
  async ensureRoom(
    bytes: number,
    next: () => Omit<SegmentHeader, 'kind' | 'capacity'>,
    capacityDefault: number,
  ): Promise<SegmentFile> {
    const active = this.active;
    if (active && active.free >= bytes) {
      // Past half full, the next segment is zero-filled in the background.
      if (!this.spare && active.free - bytes < active.header.capacity / 2 && active.header.capacity === capacityDefault) {
        this.startSpare(capacityDefault);
      }
      return active;
    }
    const header = next();
    const capacity = Math.max(capacityDefault, segmentHeaderBytes + bytes);
    const full = { ...header, kind: this.kind, capacity };
    if (active && active.writeOffset === segmentHeaderBytes) {
      // The active segment holds nothing (a process rolled to it and died before its first run
      // landed, or it was sized for a run that never came). It is dropped rather than kept
      // beside its successor: the successor starts at the same base, so it takes the same name.
      this.segments.pop();
      active.close();
      fs.rmSync(active.file);
    }
    let segment: SegmentFile | undefined;
    const spare = this.spare;
    this.spare = undefined;
    if (spare && capacity === capacityDefault && (await spare)) {
      segment = await SegmentFile.fromSpare(this.kernels, this.spareFile, this.fileFor(header.base), full).catch(() => undefined);
    }
    segment ??= await SegmentFile.create(this.kernels, this.fileFor(header.base), full);
    this.segments.push(segment);
    return segment;
  }

  /** A zero-filled file being prepared for the next segment: resolves true once it is ready. */
  private spare: Promise<boolean> | undefined;

  private get spareFile(): string {
    return path.join(this.directory, `spare${this.extension}.tmp`);
  }

  private startSpare(capacity: number): void {
    this.spare = SegmentFile.prepareSpare(this.kernels, this.spareFile, capacity).then(
      () => true,
      () => false,
    );
  }

  /** Waits for a spare being prepared and deletes it (on close: a spare is never reused). */
  async dropSpare(): Promise<void> {
    const spare = this.spare;
    this.spare = undefined;
    if (spare) await spare;
    fs.rmSync(this.spareFile, { force: true });
  }

  /** Deletes whole segments (never the active one), then makes the deletion durable. */
  async remove(segments: readonly SegmentFile[]): Promise<void> {
    if (segments.length === 0) return;
    for (const segment of segments) {
      if (segment === this.active) throw new Error('the active segment cannot be removed');
      segment.close();
      fs.rmSync(segment.file);
      this.segments.splice(this.segments.indexOf(segment), 1);
    }
    await syncDirectory(this.directory);
  }

  close(): void {
    this.closed = true;
    for (const segment of this.segments) segment.close();
    this.segments.length = 0;
  }
}
