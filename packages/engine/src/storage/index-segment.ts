/**
 * Index segment files (docs/formats.md, Index segments): one per sealed history segment, derived from it, loaded into
 * memory whole (never mmap'd) and rebuilt from the history segment when missing or corrupt.
 *
 * Layout, little-endian: magic "SSINDEX1" (8) · u32 format version · u64 base position · u64
 * record count · u32 source (the fingerprint of the segment it was built from, `segmentSource`,
 * so a file of another segment with the same base and count is told apart) · u32 section count,
 * then five sections, each `u32 length · u32 crc32 · bytes`:
 * 1. the head: type names (varint count, then the names; a type's id is its index + 1, 0: no
 *    type), then the Bloom filter of the segment's tags (`term-filter.ts`): varint probes per
 *    tag, then varint length and bytes. Opening a feed reads only this section of every index, and keeps the filters: a
 *    query or condition on a tag passes every segment whose filter lacks it without loading it;
 * 2. type column: u16 per position, the dense type id of each record;
 * 3. locator column: u32 per position, where the record's manifest entry starts in the history
 *    segment (so a record found by the index is fetched without decoding its whole commit);
 * 4. the FST term dictionary over the tags (the kernel's, the fst crate's format): a tag held by
 *    one record maps to `relative position * 2 + 1` (the position inlined), any other to
 *    `offset * 2` of its posting list in section 5;
 * 5. posting lists (the kernel's encoding: delta-varint below 128 entries, blocks above),
 *    each preceded by a varint byte length. Positions in postings are relative to the base.
 */
import { StreamStackError } from '../errors.js';
import { yieldWhenDue } from '../event-loop.js';
import type { Kernels } from '../kernels/kernels.js';
import { tagFilterBitsPerTag, tagFilterBytesMax, tagFilterProbesMax } from '../limits.js';
import { ByteReader, ByteWriter, sortStringsByUtf8, utf8Concat, utf8Encode } from './codec.js';
import { writeFileDurably } from './segment.js';
import { isMissingFile, type SegmentStore } from './segment-store.js';
import { filterShapeOf, termFilterOf } from './term-filter.js';

const magic = 'SSINDEX1';
/**
 * 2: the head carries the source fingerprint. 3: the first section carries the tag filter after
 * the type names. Files of older versions are rebuilt.
 */
export const indexFormatVersion = 3;
const sectionCount = 5;

/** The data an index segment holds, in memory. */
export interface IndexData {
  readonly base: number;
  readonly count: number;
  readonly typeNames: readonly string[];
  readonly typeColumn: Uint16Array;
  readonly locators: Uint32Array;
  /** The FST over tags (sealed segments). */
  readonly fst: Uint8Array;
  readonly postings: Uint8Array;
  /** The Bloom filter of the tags (see `term-filter.ts`), and its probes per tag. */
  readonly tagFilter: Uint8Array;
  readonly tagProbes: number;
}

/** What an index file's head section holds: what a feed keeps of every sealed segment's index. */
export interface IndexHead {
  readonly typeNames: readonly string[];
  readonly tagFilter: Uint8Array;
  readonly tagProbes: number;
}

/** What a segment index is built from: per record, its type, tags and manifest entry offset. */
export interface IndexSource {
  readonly base: number;
  readonly count: number;
  readonly typeNames: readonly string[];
  readonly typeColumn: Uint16Array;
  readonly locators: Uint32Array;
  /** Each tag's relative positions, ascending (one position may be held as a number). */
  readonly tags: ReadonlyMap<string, number | readonly number[]>;
}

/** Builds the index bytes: tags sorted by their UTF-8 bytes, postings through the kernel. */
export function buildIndexData(kernels: Kernels, source: IndexSource): IndexData {
  const tags = [...source.tags.keys()];
  sortStringsByUtf8(tags);
  const { bytes: keyBytes, ends } = utf8Concat(tags);
  const values = new Float64Array(tags.length);
  const postings = new ByteWriter(1024);
  tags.forEach((tag, index) => {
    const positions = source.tags.get(tag)!;
    if (typeof positions === 'number' || positions.length === 1) {
      values[index] = (typeof positions === 'number' ? positions : positions[0]) * 2 + 1;
      return;
    }
    values[index] = postings.length * 2;
    postings.bytes(kernels.postingsEncode(Uint32Array.from(positions)));
  });
  const tagShape = filterShapeOf(tags.length, tagFilterBitsPerTag, tagFilterProbesMax, tagFilterBytesMax);
  return {
    base: source.base,
    count: source.count,
    typeNames: source.typeNames,
    typeColumn: source.typeColumn.slice(0, source.count),
    locators: source.locators.slice(0, source.count),
    fst: kernels.fstBuild({ bytes: keyBytes, ends }, values),
    postings: postings.finish(),
    tagFilter: termFilterOf(kernels, keyBytes, ends, tagShape),
    tagProbes: tagShape.probes,
  };
}

/** The index file of `data`, built from the segment whose fingerprint is `source`. */
export function encodeIndexFile(kernels: Kernels, data: IndexData, source: number): Uint8Array {
  const head = new ByteWriter().varint(data.typeNames.length);
  for (const name of data.typeNames) head.string(name);
  head.varint(data.tagProbes).bytes(data.tagFilter);
  const sections = [
    head.finish(),
    new Uint8Array(data.typeColumn.buffer, data.typeColumn.byteOffset, data.typeColumn.byteLength),
    new Uint8Array(data.locators.buffer, data.locators.byteOffset, data.locators.byteLength),
    data.fst,
    data.postings,
  ];
  const writer = new ByteWriter(64)
    .raw(utf8Encode(magic))
    .u32(indexFormatVersion)
    .u64(data.base)
    .u64(data.count)
    .u32(source)
    .u32(sectionCount);
  for (const section of sections) writer.u32(section.length).u32(kernels.crc32(section)).raw(section);
  return writer.finish();
}

/** Reads and checks the fields before an index file's sections: magic, version, base, count, source. */
function readIndexHeader(reader: ByteReader): { base: number; count: number; source: number } {
  if (new TextDecoder().decode(reader.raw(magic.length)) !== magic) throw reader.corrupt('bad magic');
  const version = reader.u32();
  if (version !== indexFormatVersion) throw reader.corrupt(`unknown format version ${version}`);
  const base = reader.u64();
  const count = reader.u64();
  const source = reader.u32();
  if (reader.u32() !== sectionCount) throw reader.corrupt('wrong section count');
  return { base, count, source };
}

/** Parses and verifies an index file: every section's CRC, the FST's own checksum, the shape. */
export function decodeIndexFile(
  kernels: Kernels,
  bytes: Uint8Array,
  file: string,
): IndexData & { readonly source: number } {
  const reader = new ByteReader(bytes, 0, bytes.length, `index ${file}`);
  const { base, count, source } = readIndexHeader(reader);
  const sections: Uint8Array[] = [];
  for (let index = 0; index < sectionCount; index++) {
    const length = reader.u32();
    const crc = reader.u32();
    const section = reader.raw(length);
    if (kernels.crc32(section) !== crc) throw reader.corrupt(`section ${index + 1} fails its CRC`);
    sections.push(section.slice());
  }
  reader.expectEnd();
  const { typeNames, tagFilter, tagProbes } = readHeadSection(sections[0], file);
  if (sections[1].length !== count * 2 || sections[2].length !== count * 4)
    throw reader.corrupt('columns disagree with the count');
  kernels.fstVerify(sections[3]);
  return {
    base,
    count,
    source,
    typeNames,
    typeColumn: new Uint16Array(sections[1].buffer, sections[1].byteOffset, count),
    locators: new Uint32Array(sections[2].buffer, sections[2].byteOffset, count),
    fst: sections[3],
    postings: sections[4],
    tagFilter,
    tagProbes,
  };
}

/** Parses an index file's first section: its type names, then its tag filter. */
function readHeadSection(section: Uint8Array, file: string): IndexHead {
  const reader = new ByteReader(section, 0, section.length, `head of ${file}`);
  const count = reader.varint();
  if (count > reader.remaining) throw reader.corrupt(`type count ${count} exceeds the section`);
  const typeNames = Array.from({ length: count }, () => reader.string());
  const tagProbes = reader.varint();
  if (tagProbes < 1 || tagProbes > tagFilterProbesMax) throw reader.corrupt(`${tagProbes} tag filter probes`);
  const tagFilter = reader.bytes().slice();
  if (tagFilter.length === 0) throw reader.corrupt('the tag filter is empty');
  reader.expectEnd();
  return { typeNames, tagFilter, tagProbes };
}

/** Writes an index file durably (see `writeFileDurably`). */
export async function writeIndexFile(kernels: Kernels, file: string, bytes: Uint8Array): Promise<void> {
  await writeFileDurably(kernels, file, bytes);
}

/** What messages call the index file `store` holds as `name`: its path, when it has one. */
function labelOf(store: SegmentStore, name: string): string {
  return store.localPath(name) ?? name;
}

/** A failure to read or decode the index file `file`: `CORRUPT` (its own when it is already). */
function unreadable(file: string, error: unknown): StreamStackError {
  if (error instanceof StreamStackError && error.code === 'CORRUPT') return error;
  return new StreamStackError('CORRUPT', `index ${file} cannot be read: ${(error as Error).message}`, {
    cause: error,
    details: { file, offset: 0 },
  });
}

/**
 * Reads and verifies an index file, whole, through `store`: undefined when it is missing (not
 * built yet), `CORRUPT` when it is bad.
 */
export async function readIndexFile(
  kernels: Kernels,
  store: SegmentStore,
  name: string,
): Promise<(IndexData & { readonly source: number }) | undefined> {
  const file = labelOf(store, name);
  let bytes: Uint8Array;
  try {
    ({ bytes } = await store.readStart(name, Number.POSITIVE_INFINITY));
  } catch (error) {
    if (isMissingFile(error)) return undefined;
    throw unreadable(file, error);
  }
  try {
    return decodeIndexFile(kernels, bytes, file);
  } catch (error) {
    throw unreadable(file, error);
  }
}

/** Bytes before the first section: magic, version, base, count, source, section count. */
const indexHeadBytes = 8 + 4 + 8 + 8 + 4 + 4;

/**
 * Reads only an index file's header and its head section (type names and tag filter), checked
 * by their CRC, through `store`: what opening a feed needs from every sealed segment's index, in
 * two small reads each. The rest is read and verified when a query first needs it. Undefined
 * when the file is missing.
 */
export async function readIndexHead(
  kernels: Kernels,
  store: SegmentStore,
  name: string,
): Promise<({ base: number; count: number; source: number } & IndexHead) | undefined> {
  const file = labelOf(store, name);
  let head: { bytes: Uint8Array; size: number };
  try {
    head = await store.readStart(name, indexHeadBytes + 8);
  } catch (error) {
    if (isMissingFile(error)) return undefined;
    throw unreadable(file, error);
  }
  try {
    const reader = new ByteReader(head.bytes, 0, head.bytes.length, `index ${file}`);
    const { base, count, source } = readIndexHeader(reader);
    const length = reader.u32();
    const crc = reader.u32();
    // The size the first read reported says whether the head section is all there.
    if (indexHeadBytes + 8 + length > head.size) throw reader.corrupt('the head section is cut short');
    const section = await store.read(name, indexHeadBytes + 8, length);
    if (kernels.crc32(section) !== crc) throw reader.corrupt('section 1 fails its CRC');
    return { base, count, source, ...readHeadSection(section, file) };
  } catch (error) {
    throw unreadable(file, error);
  }
}

/** An `IndexSource` as plain arrays, cheap to send to a worker thread. */
export interface FlatIndexSource {
  readonly base: number;
  readonly count: number;
  readonly typeNames: readonly string[];
  readonly typeColumn: Uint16Array;
  readonly locators: Uint32Array;
  readonly tags: readonly string[];
  /** Where each tag's positions end in `positions`. */
  readonly ends: Uint32Array;
  readonly positions: Uint32Array;
}

/**
 * Flattens a finished segment's index source for the build worker, yielding to the event loop
 * every `eventLoopSliceRecords` tags: a segment holds hundreds of thousands of them, and the
 * conversion in one piece stalled appends for a fifth of a second. The source must not change
 * meanwhile (a finished tail no longer does).
 */
export async function flattenIndexSource(source: IndexSource): Promise<FlatIndexSource> {
  const tags = new Array<string>(source.tags.size);
  const ends = new Uint32Array(tags.length);
  let total = 0;
  let index = 0;
  for (const [tag, held] of source.tags) {
    tags[index] = tag;
    ends[index] = total += typeof held === 'number' ? 1 : held.length;
    const pause = yieldWhenDue(++index);
    if (pause) await pause;
  }
  const positions = new Uint32Array(total);
  for (index = 0; index < tags.length; ) {
    const held = source.tags.get(tags[index])!;
    const at = index === 0 ? 0 : ends[index - 1];
    if (typeof held === 'number') positions[at] = held;
    else positions.set(held, at);
    const pause = yieldWhenDue(++index);
    if (pause) await pause;
  }
  return {
    base: source.base,
    count: source.count,
    typeNames: [...source.typeNames],
    typeColumn: source.typeColumn.slice(0, source.count),
    locators: source.locators.slice(0, source.count),
    tags,
    ends,
    positions,
  };
}

export function unflattenIndexSource(flat: FlatIndexSource): IndexSource {
  const tags = new Map<string, number | readonly number[]>();
  flat.tags.forEach((tag, index) => {
    const from = index === 0 ? 0 : flat.ends[index - 1];
    const to = flat.ends[index];
    tags.set(tag, to - from === 1 ? flat.positions[from] : Array.from(flat.positions.subarray(from, to)));
  });
  return {
    base: flat.base,
    count: flat.count,
    typeNames: flat.typeNames,
    typeColumn: flat.typeColumn,
    locators: flat.locators,
    tags,
  };
}
