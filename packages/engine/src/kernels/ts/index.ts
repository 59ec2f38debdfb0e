/** The pure-TypeScript kernel set: no native code, the reference the native set is held to. */
import type { Kernels } from '../kernels.js';
import { copyRange } from './copy.js';
import { crc32, crc32c, crc32cRanges, payloadChecksums } from './crc.js';
import { writeDirect, writeDurable } from './durable.js';
import { frameChecksumsVerify, frameChecksumsWrite } from './frames.js';
import { fstBuild, fstGet, fstGetMany, fstLength, fstRange, fstVerify } from './fst.js';
import { decodeManifests } from './manifests.js';
import { ndjsonLines } from './ndjson.js';
import { intersect, postingsDecode, postingsEncode, union } from './postings.js';

export const tsKernels: Kernels = Object.freeze({
  name: 'ts' as const,
  crc32: (bytes: Uint8Array, seed?: number) => crc32(bytes, seed),
  crc32c: (bytes: Uint8Array, seed?: number) => crc32c(bytes, seed),
  crc32cRanges,
  payloadChecksums,
  copyRange,
  ndjsonLines,
  decodeManifests,
  frameChecksumsWrite,
  frameChecksumsVerify,
  fstBuild,
  fstVerify,
  fstLength,
  fstGet,
  fstGetMany,
  fstRange,
  postingsEncode,
  postingsDecode,
  intersect,
  union,
  writeDurable,
  directWrites: false,
  writeDirect,
});
