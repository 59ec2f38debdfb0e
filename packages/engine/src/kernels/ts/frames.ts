/**
 * Frame checksums over many frames of one buffer, the TypeScript twin of the native kernel.
 * See docs/formats.md: `u32le length (bit 31 = control)`, `u32le crc32(data)`, data.
 */
import { StreamStackError } from '../../errors.js';
import { frameHeaderBytes, frameLengthMask } from '../../limits.js';
import { crc32 } from './crc.js';

function frameDataEnd(buffer: Uint8Array, view: DataView, offset: number): number {
  if (offset + frameHeaderBytes > buffer.length) return -1;
  const end = offset + frameHeaderBytes + (view.getUint32(offset, true) & frameLengthMask);
  return end > buffer.length ? -1 : end;
}

export function frameChecksumsWrite(buffer: Uint8Array, frameOffsets: Uint32Array): void {
  const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  for (let index = 0; index < frameOffsets.length; index++) {
    const offset = frameOffsets[index];
    const end = frameDataEnd(buffer, view, offset);
    if (end < 0) {
      throw new StreamStackError(
        'INVALID_ARGUMENT',
        `frame ${index} at offset ${offset} does not fit in a buffer of ${buffer.length} bytes`,
      );
    }
    view.setUint32(offset + 4, crc32(buffer, 0, offset + frameHeaderBytes, end), true);
  }
}

export function frameChecksumsVerify(buffer: Uint8Array, frameOffsets: Uint32Array): number {
  const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  for (let index = 0; index < frameOffsets.length; index++) {
    const offset = frameOffsets[index];
    const end = frameDataEnd(buffer, view, offset);
    if (end < 0) return index;
    if (view.getUint32(offset + 4, true) !== crc32(buffer, 0, offset + frameHeaderBytes, end)) {
      return index;
    }
  }
  return -1;
}
