/**
 * Key dictionary files (docs/formats.md, Key dictionaries): one per sealed history segment,
 * beside its index file, derived and rebuildable. For every key written in the segment, the
 * file holds the key's winner over the whole history up to the segment's end — the highest
 * version, then the highest position — so a lookup stops at the newest segment that holds the
 * key. A Bloom filter lets a lookup pass a segment that lacks the key without touching its FST.
 *
 * Layout, little-endian: magic "SSKEYS01" (8) · u32 format version · u64 base position · u64
 * record count · u32 source (the fingerprint of the segment it was built from, `segmentSource`:
 * a file of another segment with the same base and count — another feed's, a copy from before a
 * merge or key compaction rewrote the segment — is told apart by it) · u32 key count, then three
 * section descriptors (`u32` length, `u32` CRC-32)
 * and the three sections in order:
 * 1. the Bloom filter of the keys, `keyFilterBitsPerKey` bits a key (`term-filter.ts` has the
 *    scheme);
 * 2. an FST (the kernel's format) from each key's UTF-8 bytes to its ordinal in section 3;
 * 3. the winners, 28 bytes each: `f64` position, `f64` version, `u32` locator (where the
 *    winner's manifest entry starts in its history segment), `u32` flags (1: tombstone), and a
 *    `u32` CRC-32 of those 24 bytes, so a lookup reads and checks one winner on its own.
 */
import fs from 'node:fs';
import path from 'node:path';
import { assert, StreamStackError } from '../errors.js';
import type { Kernels, PackedBytes } from '../kernels/kernels.js';
import { crc32 } from '../kernels/ts/crc.js';
import { keyFileChecksumSliceWinners, keyFilterBitsPerKey, keyFilterProbes } from '../limits.js';
import { ByteReader, ByteWriter, utf8Concat, utf8Encode } from './codec.js';
import { firstRepeatIn, packedInOrder, utf8OrderOf } from './packed-terms.js';
import { writeFileDurably } from './segment.js';
import {
  type HeldReads,
  isMissingFile,
  LocalSegmentStore,
  type SegmentStore,
  type SyncSegmentReads,
} from './segment-store.js';
import { filterShapeOf, termFilterOf } from './term-filter.js';

const magic = 'SSKEYS01';
/** 2: the head carries the source fingerprint; files of version 1 are rebuilt. */
export const keyFileFormatVersion = 2;
const sectionCount = 3;
/** Bytes before the sections: the fixed fields and the section descriptors. */
export const keyFileHeadBytes = 8 + 4 + 8 + 8 + 4 + 4 + sectionCount * 8;
/** Bytes of one winner in section 3: 24 of fields, then their CRC-32. */
const winnerBytes = 28;

/** A key's winner: the occurrence a `get` returns (unless it is a tombstone). */
export interface KeyWinner {
  readonly position: number;
  readonly version: number;
  readonly tombstone: boolean;
  /** Where the winner's manifest entry starts in its history segment. */
  readonly locator: number;
}

/** Winner order: the highest version, then the highest position. */
export function winsOver(
  a: { version: number; position: number },
  b: { version: number; position: number } | undefined,
): boolean {
  return b === undefined || a.version > b.version || (a.version === b.version && a.position > b.position);
}

/**
 * Which occurrence of a term a dictionary keeps: a key's winner (`latest`: the highest version,
 * then the highest position) or a fingerprint's first occurrence (`first`: the lowest position).
 */
export type TermOrder = 'latest' | 'first';

/** True when occurrence `a` is kept over `b` in `order` (any occurrence over none). */
export function prefers(order: TermOrder, a: KeyWinner, b: KeyWinner | undefined): boolean {
  return order === 'latest' ? winsOver(a, b) : b === undefined || a.position < b.position;
}

export interface KeyFileHead {
  readonly base: number;
  readonly count: number;
  /** The fingerprint of the segment it was built from (`segmentSource`). */
  readonly source: number;
  readonly keys: number;
  /** Each section's offset in the file, length and CRC-32. */
  readonly sections: readonly { readonly offset: number; readonly length: number; readonly crc: number }[];
}

/** Winners as columns, term by term: how a build keeps a segment's winners (no object each). */
export interface WinnerColumns {
  readonly positions: Float64Array;
  readonly versions: Float64Array;
  readonly locators: Uint32Array;
  readonly tombstones: Uint8Array;
}

/** Encodes a key file from `entries` (distinct keys), sorted here by their keys' UTF-8 bytes. */
export function encodeKeyFile(
  kernels: Kernels,
  base: number,
  count: number,
  source: number,
  entries: readonly { readonly key: string; readonly winner: KeyWinner }[],
): Uint8Array {
  assert(new Set(entries.map((entry) => entry.key)).size === entries.length, 'a key dictionary holds each key once');
  return encodeKeyFileColumns(kernels, base, count, source, utf8Concat(entries.map((entry) => entry.key)), {
    positions: Float64Array.from(entries, (entry) => entry.winner.position),
    versions: Float64Array.from(entries, (entry) => entry.winner.version),
    locators: Uint32Array.from(entries, (entry) => entry.winner.locator),
    tombstones: Uint8Array.from(entries, (entry) => (entry.winner.tombstone ? 1 : 0)),
  });
}

/**
 * Encodes a key file from distinct `terms` (UTF-8, in any order: sorted here by their bytes)
 * and each one's winner at the same index of `winners`: what a build of a segment's hundreds of
 * thousands of terms calls, with no string or object per term (`packed-terms.ts` says why).
 */
export function encodeKeyFileColumns(
  kernels: Kernels,
  base: number,
  count: number,
  source: number,
  terms: PackedBytes,
  winners: WinnerColumns,
): Uint8Array {
  const order = utf8OrderOf(terms);
  const { bytes: keyBytes, ends } = packedInOrder(terms, order);
  assert(firstRepeatIn({ bytes: keyBytes, ends }) < 0, 'a key dictionary holds each key once');
  const keys = ends.length;
  const filter = termFilterOf(kernels, keyBytes, ends, {
    bytes: filterShapeOf(ends.length, keyFilterBitsPerKey, keyFilterProbes).bytes,
    // The key files' probes are fixed by their format, whatever their size.
    probes: keyFilterProbes,
  });
  const values = new Float64Array(keys);
  const table = new Uint8Array(keys * winnerBytes);
  const view = new DataView(table.buffer);
  for (let ordinal = 0; ordinal < keys; ordinal++) {
    values[ordinal] = ordinal;
    const term = order[ordinal];
    const offset = ordinal * winnerBytes;
    view.setFloat64(offset, winners.positions[term], true);
    view.setFloat64(offset + 8, winners.versions[term], true);
    view.setUint32(offset + 16, winners.locators[term], true);
    view.setUint32(offset + 20, winners.tombstones[term] === 1 ? 1 : 0, true);
  }
  // Every winner's CRC-32, a slice of winners per kernel call (the CRC-32C it gives beside each
  // is not needed).
  const winnerRanges = new Uint32Array(Math.min(keys, keyFileChecksumSliceWinners) * 2);
  for (let first = 0; first < keys; first += keyFileChecksumSliceWinners) {
    const count = Math.min(keyFileChecksumSliceWinners, keys - first);
    for (let at = 0; at < count; at++) {
      winnerRanges[2 * at] = (first + at) * winnerBytes;
      winnerRanges[2 * at + 1] = (first + at) * winnerBytes + 24;
    }
    const winnerChecksums = kernels.payloadChecksums(table, winnerRanges.subarray(0, 2 * count));
    for (let at = 0; at < count; at++)
      view.setUint32((first + at) * winnerBytes + 24, winnerChecksums[2 * at + 1], true);
  }
  const fst = kernels.fstBuild({ bytes: keyBytes, ends }, values);
  const sections = [filter, fst, table];
  const writer = new ByteWriter(keyFileHeadBytes + filter.length + fst.length + table.length)
    .raw(utf8Encode(magic))
    .u32(keyFileFormatVersion)
    .u64(base)
    .u64(count)
    .u32(source)
    .u32(keys);
  for (const section of sections) writer.u32(section.length).u32(kernels.crc32(section));
  for (const section of sections) writer.raw(section);
  return writer.finish();
}

function corrupt(file: string, reason: string, cause?: unknown): StreamStackError {
  return new StreamStackError('CORRUPT', `key dictionary ${file} cannot be read: ${reason}`, {
    ...(cause ? { cause } : {}),
    details: { file, offset: 0 },
  });
}

/**
 * Where a dictionary is read from: the store that holds it (the feed's index folder) and its
 * name there. Reads of it go through the store, so a dictionary can live where a store keeps it.
 */
export interface KeyFileSource {
  readonly store: SegmentStore & SyncSegmentReads;
  readonly name: string;
}

/**
 * A dictionary known by its path: a build worker's, named by its store's `localPath` (workers
 * open files by path), read through a local store over its folder.
 */
export function keyFileAt(kernels: Kernels, file: string): KeyFileSource {
  return { store: new LocalSegmentStore(kernels, path.dirname(file)), name: path.basename(file) };
}

/**
 * Why a read of a range ending at `end` failed: a file that ends before it is the store's
 * `CORRUPT`, said as this file's messages always said it.
 */
function unreadReason(error: unknown, end: number): string {
  return error instanceof StreamStackError && error.code === 'CORRUPT'
    ? `the file is shorter than ${end} bytes`
    : (error as Error).message;
}

/** What messages call a dictionary: its path, when its store keeps one, else its name. */
function labelOf({ store, name }: KeyFileSource): string {
  return store.localPath(name) ?? name;
}

/**
 * Reads a key file's head through its store: undefined when the file is missing, `CORRUPT` when
 * it is bad. One read of the head, which also says the file's size (the sections must end there).
 */
export async function loadKeyFileHead(source: KeyFileSource): Promise<KeyFileHead | undefined> {
  const file = labelOf(source);
  let read: { bytes: Uint8Array; size: number };
  try {
    read = await source.store.readStart(source.name, keyFileHeadBytes);
  } catch (error) {
    if (isMissingFile(error)) return undefined;
    throw corrupt(file, (error as Error).message, error);
  }
  return parseKeyFileHead(read.bytes, read.size, file);
}

/**
 * Reads the head of a key file at `file`, synchronously and by path: for a file outside any
 * store (a tool's, a test's). The engine reads the dictionaries it keeps through their store,
 * with `loadKeyFileHead`. Undefined when the file is missing, `CORRUPT` when it is bad.
 */
export function readKeyFileHead(file: string): KeyFileHead | undefined {
  let bytes: Uint8Array;
  let size: number;
  try {
    const fd = fs.openSync(file, 'r');
    try {
      size = fs.fstatSync(fd).size;
      bytes = new Uint8Array(keyFileHeadBytes);
      bytes = bytes.subarray(0, fs.readSync(fd, bytes, 0, keyFileHeadBytes, 0));
    } finally {
      fs.closeSync(fd);
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw corrupt(file, (error as Error).message, error);
  }
  return parseKeyFileHead(bytes, size, file);
}

/** Parses a key file's head from its first bytes; `size` is the whole file's. */
export function parseKeyFileHead(bytes: Uint8Array, size: number, file: string): KeyFileHead {
  const reader = new ByteReader(bytes, 0, bytes.length, `key dictionary ${file}`);
  if (new TextDecoder().decode(reader.raw(magic.length)) !== magic) throw reader.corrupt('bad magic');
  const version = reader.u32();
  if (version !== keyFileFormatVersion) throw reader.corrupt(`unknown format version ${version}`);
  const base = reader.u64();
  const count = reader.u64();
  const source = reader.u32();
  const keys = reader.u32();
  const sections: { offset: number; length: number; crc: number }[] = [];
  let offset = keyFileHeadBytes;
  for (let index = 0; index < sectionCount; index++) {
    const length = reader.u32();
    sections.push({ offset, length, crc: reader.u32() });
    offset += length;
  }
  if (offset !== size) throw reader.corrupt(`the sections end at ${offset}, the file at ${size}`);
  if (sections[2].length !== keys * winnerBytes) throw reader.corrupt('the winners disagree with the key count');
  return { base, count, source, keys, sections };
}

/**
 * Reads one section (0 filter, 1 FST, 2 winners), checked by its CRC (and the FST by its own),
 * through the store synchronously: a dictionary build's merge (`mergeWithEarlier`, on the build
 * worker or in its stead) walks the earlier dictionaries in one synchronous pass, and a winner
 * reader past its bound of single reads takes the whole section in the middle of a lookup. A
 * path (a worker's, see `keyFileAt`) is read through a local store over its folder.
 */
export function readKeySection(
  kernels: Kernels,
  dictionary: KeyFileSource | string,
  head: KeyFileHead,
  section: 0 | 1 | 2,
): Uint8Array {
  const source = typeof dictionary === 'string' ? keyFileAt(kernels, dictionary) : dictionary;
  const file = labelOf(source);
  const { offset, length, crc } = head.sections[section];
  let bytes: Uint8Array;
  try {
    bytes = source.store.readSync(source.name, offset, length);
  } catch (error) {
    throw corrupt(file, unreadReason(error, offset + length), error);
  }
  if (kernels.crc32(bytes) !== crc) throw corrupt(file, `section ${section + 1} fails its CRC`);
  if (section === 1) kernels.fstVerify(bytes);
  return bytes;
}

/**
 * `readKeySection` with the read off the event loop: a section is megabytes (an FST, a winners
 * table), and a lookup that loads one mid-compaction or mid-read would stall every other request
 * for the read. The checks after it are the same.
 */
export async function readKeySectionAsync(
  kernels: Kernels,
  source: KeyFileSource,
  head: KeyFileHead,
  section: 0 | 1 | 2,
): Promise<Uint8Array> {
  const file = labelOf(source);
  const { offset, length, crc } = head.sections[section];
  let bytes: Uint8Array;
  try {
    bytes = await source.store.read(source.name, offset, length);
  } catch (error) {
    // A file that ends before the section (the store's `CORRUPT`) is this dictionary's damage.
    throw corrupt(file, unreadReason(error, offset + length), error);
  }
  if (kernels.crc32(bytes) !== crc) throw corrupt(file, `section ${section + 1} fails its CRC`);
  if (section === 1) kernels.fstVerify(bytes);
  return bytes;
}

/**
 * The winner stored at `ordinal` of a winners section (or of `table`, that one winner's bytes
 * read on their own at ordinal 0), checked by its own CRC: `CORRUPT` when it fails. The CRC of
 * its 24 bytes is the TypeScript one, for the reason `termHashes` gives.
 */
export function winnerAt(table: Uint8Array, ordinal: number, file = 'a key dictionary'): KeyWinner {
  const view = new DataView(table.buffer, table.byteOffset + ordinal * winnerBytes, winnerBytes);
  const start = ordinal * winnerBytes;
  if (crc32(table, 0, start, start + 24) !== view.getUint32(24, true))
    throw corrupt(file, `winner ${ordinal} fails its CRC`);
  return {
    position: view.getFloat64(0, true),
    version: view.getFloat64(8, true),
    locator: view.getUint32(16, true),
    tombstone: (view.getUint32(20, true) & 1) !== 0,
  };
}

/**
 * The winners of one dictionary file, read as a merge or a lookup needs them: one at a time,
 * then, past `readsMax` of them, the whole section at once (checked by its CRC). The single
 * reads are synchronous (a lookup of a dictionary whose filter and FST are in memory answers
 * without awaiting, and a merge's walk is one synchronous pass), through a file the store keeps
 * at hand (`SyncSegmentReads.hold`): the local store holds one descriptor open for the reader's
 * life, so a winner costs one pread, as it did when this reader opened the file itself. `close`
 * lets the file go.
 */
export class WinnerReader {
  private held: HeldReads | undefined;
  private table: Uint8Array | undefined;
  private reads = 0;
  private readonly scratch = new Uint8Array(winnerBytes);
  private readonly source: KeyFileSource;
  private readonly file: string;

  constructor(
    private readonly kernels: Kernels,
    /** The dictionary, in its store; or its path (a worker's, see `keyFileAt`). */
    dictionary: KeyFileSource | string,
    private readonly head: KeyFileHead,
    private readonly readsMax: number,
  ) {
    this.source = typeof dictionary === 'string' ? keyFileAt(kernels, dictionary) : dictionary;
    this.file = labelOf(this.source);
  }

  /** True once the whole winners section is in memory. */
  get wholeSection(): boolean {
    return this.table !== undefined;
  }

  at(ordinal: number): KeyWinner {
    if (ordinal >= this.head.keys) throw corrupt(this.file, `ordinal ${ordinal} is past the ${this.head.keys} keys`);
    if (this.table) return winnerAt(this.table, ordinal, this.file);
    if (++this.reads > this.readsMax) {
      this.close();
      this.table = readKeySection(this.kernels, this.source, this.head, 2);
      return winnerAt(this.table, ordinal, this.file);
    }
    let read: number;
    try {
      this.held ??= this.source.store.hold(this.source.name);
      read = this.held.readSyncInto(this.scratch, this.head.sections[2].offset + ordinal * winnerBytes);
    } catch (error) {
      throw corrupt(this.file, (error as Error).message, error);
    }
    if (read !== winnerBytes) throw corrupt(this.file, `the file ends within winner ${ordinal}`);
    return winnerAt(this.scratch, 0, this.file);
  }

  close(): void {
    this.held?.close();
    this.held = undefined;
  }
}

/** Writes a key file durably (see `writeFileDurably`). */
export async function writeKeyFile(kernels: Kernels, file: string, bytes: Uint8Array): Promise<void> {
  await writeFileDurably(kernels, file, bytes);
}
