/**
 * The FST term dictionary kernels in pure TypeScript, reading and writing the Rust `fst` crate's
 * format (0.4.7) byte for byte. The builder is in fst-build.ts, point lookups and checks in
 * fst-read.ts, range scans in fst-range.ts, and the format constants they share in fst-format.ts.
 */
export { fstBuild } from './fst-build.js';
export { fstRange } from './fst-range.js';
export { fstGet, fstGetMany, fstLength, fstVerify } from './fst-read.js';
