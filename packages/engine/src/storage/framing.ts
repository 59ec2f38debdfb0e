/**
 * Frames (docs/formats.md): every log is a run of `u32le length (bit 31: control)`,
 * `u32le crc32(data)`, data. This module lays frames into one buffer, lets the kernels fill in
 * all their CRCs in a single call, and scans frames back, verifying all their CRCs in one call.
 */
import { assert, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameControlBit, frameHeaderBytes, frameLengthMask } from '../limits.js';
import { ByteWriter } from './codec.js';

/** One frame found by a scan: where it starts, and where its data lies. */
export interface ScannedFrame {
  readonly offset: number;
  readonly dataStart: number;
  readonly dataEnd: number;
  readonly control: boolean;
  /** The first data byte: every StreamStack frame starts with its kind. */
  readonly kind: number;
}

/** Builds a batch of frames in one buffer. */
export class FrameBuilder {
  readonly writer = new ByteWriter(4096);
  private offsets = new Uint32Array(64);
  private count = 0;
  private openFrame = -1;
  private openControl = false;

  constructor(private readonly frameDataBytesMax: number) {}

  get frameCount(): number {
    return this.count;
  }

  get byteLength(): number {
    return this.writer.length;
  }

  /** Starts a frame of `kind`; write its data through `writer`, then call `end`. */
  begin(kind: number, control: boolean): ByteWriter {
    assert(this.openFrame < 0, 'a frame is begun only when the one before it is ended');
    this.openFrame = this.writer.length;
    this.openControl = control;
    this.writer.u32(0).u32(0).u8(kind);
    return this.writer;
  }

  /** Ends the open frame, fixing its length; returns the frame's offset in the batch. */
  end(): number {
    const offset = this.openFrame;
    assert(offset >= 0, 'a frame is ended only when one is open');
    const dataLength = this.writer.length - offset - frameHeaderBytes;
    if (dataLength > this.frameDataBytesMax) {
      this.writer.length = offset;
      this.openFrame = -1;
      throw new StreamStackError(
        'RECORD_TOO_LARGE',
        `a record of ${dataLength} bytes exceeds the limit of ${this.frameDataBytesMax} bytes (a quarter of a segment)`,
        { details: { bytes: dataLength, limit: this.frameDataBytesMax } },
      );
    }
    this.writer.patchU32(offset, (dataLength | (this.openControl ? frameControlBit : 0)) >>> 0);
    if (this.count === this.offsets.length) {
      const grown = new Uint32Array(this.offsets.length * 2);
      grown.set(this.offsets);
      this.offsets = grown;
    }
    this.offsets[this.count++] = offset;
    this.openFrame = -1;
    return offset;
  }

  /** Abandons the open frame, if any (after an input error), leaving earlier frames intact. */
  cancel(): void {
    if (this.openFrame >= 0) this.writer.length = this.openFrame;
    this.openFrame = -1;
  }

  /** Marks where the batch stands, so a failed request can be rolled back with `rollback`. */
  mark(): { bytes: number; frames: number } {
    return { bytes: this.writer.length, frames: this.count };
  }

  rollback(mark: { bytes: number; frames: number }): void {
    this.writer.length = mark.bytes;
    this.count = mark.frames;
    this.openFrame = -1;
  }

  /** Fills in every CRC (one kernel call) and returns the finished bytes. */
  finish(kernels: Kernels): Uint8Array {
    assert(this.openFrame < 0, 'a batch is finished only when its last frame is ended');
    const bytes = this.writer.finish();
    kernels.frameChecksumsWrite(bytes, this.offsets.subarray(0, this.count));
    return bytes;
  }

  /**
   * As `finish`, without the copy: a view of the builder's own buffer, valid until the next
   * write or `clear`. For a writer that writes the group before it builds the next (a merge's
   * groups are tens of megabytes, and copying each held the event loop).
   */
  finishInPlace(kernels: Kernels): Uint8Array {
    assert(this.openFrame < 0, 'a batch is finished only when its last frame is ended');
    const bytes = this.writer.peek();
    kernels.frameChecksumsWrite(bytes, this.offsets.subarray(0, this.count));
    return bytes;
  }

  clear(): void {
    this.writer.clear();
    this.count = 0;
    this.openFrame = -1;
  }
}

/**
 * Walks the frames in `bytes[start, end)`, verifying every CRC with one kernel call, and returns
 * the sound frames in order. It stops at the first frame that is empty (zeroed space is not a
 * frame: every frame carries at least its kind byte), runs past `end`, or fails its CRC.
 */
/**
 * The frame offsets `scanFrames` hands the checksum kernel, in one buffer made outside the V8
 * heap and used again: a small typed array made fresh lives on the heap, and the native kernel
 * would have it moved off before it could read it, which cost more than checking the frames of a
 * one-record run.
 */
let offsetsScratch = new Uint32Array(new ArrayBuffer(4 * 256));

export function scanFrames(kernels: Kernels, bytes: Uint8Array, start: number, end: number): ScannedFrame[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const offsets: number[] = [];
  let at = start;
  while (at + frameHeaderBytes < end) {
    const length = view.getUint32(at, true) & frameLengthMask;
    if (length === 0 || at + frameHeaderBytes + length > end) break;
    offsets.push(at);
    at += frameHeaderBytes + length;
  }
  const window = bytes.subarray(0, end);
  if (offsetsScratch.length < offsets.length) offsetsScratch = new Uint32Array(new ArrayBuffer(8 * offsets.length));
  const frameOffsets = offsetsScratch.subarray(0, offsets.length);
  frameOffsets.set(offsets);
  const firstBad = kernels.frameChecksumsVerify(window, frameOffsets);
  const soundCount = firstBad < 0 ? offsets.length : firstBad;
  const frames: ScannedFrame[] = [];
  for (let index = 0; index < soundCount; index++) {
    const offset = offsets[index];
    const word = view.getUint32(offset, true);
    const dataStart = offset + frameHeaderBytes;
    frames.push({
      offset,
      dataStart,
      dataEnd: dataStart + (word & frameLengthMask),
      control: (word & frameControlBit) !== 0,
      kind: bytes[dataStart],
    });
  }
  return frames;
}
