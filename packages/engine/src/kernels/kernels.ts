/**
 * The hot core of StreamStack, behind one interface with two implementations:
 * `native` (the napi-rs module in `native/`) and `ts` (pure TypeScript).
 *
 * The native core changes the speed, never the answer or the bytes.
 * Every function here must return the same values, write the same bytes, and fail with the same
 * error `code` in both implementations; `test/differential` holds them to it.
 *
 * Conventions shared by every kernel:
 * - Many byte strings cross the boundary as one concatenated buffer plus a `Uint32Array` of end
 *   offsets (`ends[i]` is the exclusive end of item `i`, its start is `ends[i - 1]` or 0), so a
 *   batch of keys crosses into native code once, not once per key.
 * - Integer values that the format stores as u64 are JS numbers and must be safe integers
 *   (below 2^53); anything else is `INVALID_ARGUMENT`.
 */
import type { ManifestDecodeJob } from './manifest-columns.js';

/** Byte strings packed as one buffer and exclusive end offsets. */
export interface PackedBytes {
  readonly bytes: Uint8Array;
  readonly ends: Uint32Array;
}

/**
 * One batch's columns as an NDJSON export line writer takes them: a column batch's, with the
 * line head the batch's lines share, its type names as JSON strings, and which flag bit says what.
 */
export interface NdjsonColumns {
  /**
   * What every line starts with: `{"feed":…,"commit":…,"stream":…,"seq":`. A batch that spans
   * commits has one head per commit, end to end: `headEnds` says where each ends and `rowHeads`
   * which is each row's (both empty when `head` is every line's).
   */
  readonly head: Uint8Array;
  readonly headEnds: Uint32Array;
  readonly rowHeads: Uint32Array;
  /** The batch's type names as JSON strings, end to end, and where each ends. */
  readonly types: Uint8Array;
  readonly typeEnds: Uint32Array;
  /** The run's bytes, and the bytes of payloads stored elsewhere (empty when none). */
  readonly bytes: Uint8Array;
  readonly external: Uint8Array;
  readonly seqs: Float64Array;
  readonly positions: Float64Array;
  readonly timestamps: Float64Array;
  readonly versions: Float64Array;
  readonly flags: Uint8Array;
  /** Index into the type names, or -1. */
  readonly typeIds: Int32Array;
  readonly keyStarts: Uint32Array;
  readonly keyEnds: Uint32Array;
  readonly tagRows: Uint32Array;
  readonly tagStarts: Uint32Array;
  readonly tagEnds: Uint32Array;
  readonly fingerprintStarts: Uint32Array;
  readonly fingerprintEnds: Uint32Array;
  readonly payloadStarts: Uint32Array;
  readonly payloadEnds: Uint32Array;
  /** The flag bits of a key, a version, a tombstone, and a payload in `external`. */
  readonly keyFlag: number;
  readonly versionFlag: number;
  readonly tombstoneFlag: number;
  readonly elsewhereFlag: number;
  /**
   * Which lines: false for export lines (every field, `null` where absent); true for the record
   * line format `read` writes (`recordLine`: only the fields a record has, the payload and the
   * fingerprint each as text where UTF-8, else base64), which the CLI and the server stream.
   */
  readonly readLines: boolean;
}

/** The result of an FST range or prefix query: matching keys in order and their values. */
export interface FstEntries extends PackedBytes {
  readonly values: Float64Array;
}

/**
 * A key range over an FST. Bounds are byte strings compared lexicographically; a missing bound is
 * open. `prefix` restricts to keys starting with it (and combines with the bounds).
 */
export interface FstRange {
  readonly gte?: Uint8Array;
  readonly gt?: Uint8Array;
  readonly lte?: Uint8Array;
  readonly lt?: Uint8Array;
  readonly prefix?: Uint8Array;
  /** At most this many entries; omitted means all. */
  readonly limit?: number;
}

export interface Kernels {
  /** Which implementation this is. */
  readonly name: 'native' | 'ts';

  /**
   * CRC-32 (IEEE 802.3, the polynomial of zlib and gzip) of `bytes`, continuing from `seed`
   * (the CRC of the bytes before; 0 to start). Equal to `zlib.crc32(bytes, seed)`.
   */
  crc32(bytes: Uint8Array, seed?: number): number;

  /** CRC-32C (Castagnoli), continuing from `seed`. The fst format's checksum is built on it. */
  crc32c(bytes: Uint8Array, seed?: number): number;

  /**
   * CRC-32C of each range `[ranges[2i], ranges[2i + 1])` of `bytes`, in one call: the checksums
   * of a manifest frame's entries. Throws `INVALID_ARGUMENT` for an odd count or a range that is
   * reversed or runs past the buffer. Given `out` (exactly one value per range, else
   * `INVALID_ARGUMENT`), fills and returns it instead of a new array: hot callers keep one buffer,
   * made outside the V8 heap, so a small call allocates nothing.
   */
  crc32cRanges(bytes: Uint8Array, ranges: Uint32Array, out?: Uint32Array): Uint32Array;

  /**
   * CRC-32C and CRC-32 of each range of `bytes` (as `crc32cRanges` takes them), interleaved:
   * `out[2i]` the CRC-32C, `out[2i + 1]` the CRC-32. What a run needs of each payload — its dedup
   * hash and its default fingerprint — in one call for the whole run. `out`, when given, holds
   * exactly two values per range, as for `crc32cRanges`.
   */
  payloadChecksums(bytes: Uint8Array, ranges: Uint32Array, out?: Uint32Array): Uint32Array;

  /**
   * Copies `source[start, end)` into `target` at `targetAt`: `target.set(source.subarray(start,
   * end), targetAt)` at `memcpy`'s speed. V8 copies byte by byte when the two ranges start at
   * different offsets modulo the word size, and always from a `SharedArrayBuffer`, which is how
   * an export's columns gather their payloads. A range outside either buffer is `INVALID_ARGUMENT`
   * and copies nothing. For long ranges: a call costs more than copying a few dozen bytes.
   */
  copyRange(target: Uint8Array, targetAt: number, source: Uint8Array, start: number, end: number): void;

  /**
   * Writes one batch's NDJSON lines into `out` and returns the bytes written, or -1 when they do
   * not fit (the caller gives a larger buffer): export lines (docs/formats.md, Export) or, with
   * `columns.readLines`, the record lines `read` writes (docs/cli.md). Each payload is written as
   * `read` writes it, decided per record: as text under `payload` where it is valid UTF-8, else
   * as base64 under `payloadBase64` (in export lines, the other null). Numbers must be
   * safe integers and ranges within their bytes (`INVALID_ARGUMENT`); a key or tag that is not
   * UTF-8 is `CORRUPT`. One call per batch: writing lines a field at a time in JavaScript cost an
   * NDJSON export most of its time.
   */
  ndjsonLines(columns: NdjsonColumns, out: Uint8Array): number;

  /**
   * Decodes a commit run's manifest entries into one batch of columns, from the job's cursor on,
   * until the batch is done or an entry needs more room for tags or types than the job gives (the
   * cursor's `stop` says which; the caller grows that and calls again). One call per batch: the
   * contract, the column layout and the cursor are in `manifest-columns.ts`. An entry that does
   * not decode, or manifests that do not hold the commit's records, are `CORRUPT`.
   */
  decodeManifests(job: ManifestDecodeJob): void;

  /**
   * Fills in the CRC field of every frame that starts at one of `frameOffsets` in `buffer`.
   * A frame is `u32le length` (top bit: control record; the other 31 bits: data length),
   * `u32le crc32(data)`, then the data. Throws `INVALID_ARGUMENT` when a frame does not fit.
   */
  frameChecksumsWrite(buffer: Uint8Array, frameOffsets: Uint32Array): void;

  /**
   * Checks the frames that start at `frameOffsets`: returns the index of the first frame whose
   * length runs past the buffer or whose CRC does not match its data, or -1 when all are sound.
   */
  frameChecksumsVerify(buffer: Uint8Array, frameOffsets: Uint32Array): number;

  /**
   * Builds an FST map, in the `fst` crate's own byte format (version 3, with its CRC-32C
   * footer), from keys that are strictly ascending byte strings, to safe-integer values.
   * Keys out of order or duplicated: `FST_KEY_ORDER`.
   */
  fstBuild(keys: PackedBytes, values: Float64Array): Uint8Array;

  /** Checks an FST's header, footer and checksum; throws `CORRUPT` when they do not hold. */
  fstVerify(fst: Uint8Array): void;

  /** Number of keys in an FST (from its footer). */
  fstLength(fst: Uint8Array): number;

  /** The value stored for `key`, or undefined. */
  fstGet(fst: Uint8Array, key: Uint8Array): number | undefined;

  /** The values of many keys in one call; -1 marks a key that is absent. */
  fstGetMany(fst: Uint8Array, keys: PackedBytes): Float64Array;

  /** The entries in `range`, in key order. */
  fstRange(fst: Uint8Array, range: FstRange): FstEntries;

  /**
   * Encodes strictly ascending u32 positions as a posting list: plain delta-varint below
   * `postingsBlockThreshold` entries, the block form (a skip directory of blocks) from there up.
   * Not strictly ascending: `POSTINGS_NOT_SORTED`.
   */
  postingsEncode(positions: Uint32Array): Uint8Array;

  /** Decodes either form of posting list. Malformed input: `CORRUPT`. */
  postingsDecode(encoded: Uint8Array): Uint32Array;

  /**
   * The positions present in both strictly ascending lists, ascending. Gallops through the
   * longer list when the sizes differ a lot. Unsorted input: `POSTINGS_NOT_SORTED`.
   */
  intersect(a: Uint32Array, b: Uint32Array): Uint32Array;

  /** The positions present in either strictly ascending list, ascending and unique. */
  union(a: Uint32Array, b: Uint32Array): Uint32Array;

  /**
   * Writes `buffers` one after another at byte `position` of the open file `fd`, then
   * fdatasyncs, off the main thread. Resolves only once the fdatasync has returned success.
   * The buffers are read where they are, off the main thread: the caller leaves them unchanged
   * until the promise settles.
   * Any write or sync failure rejects with `IO` (the errno in `cause`); the caller must then
   * treat the file as failed, because after a failed fsync the kernel may have dropped the dirty
   * pages, and a retry that "succeeds" would report data durable that is not.
   */
  writeDurable(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void>;

  /**
   * Whether `writeDirect` may be given a file opened with `O_DIRECT`: the native set copies the
   * bytes into aligned memory first, as `O_DIRECT` asks; JavaScript cannot align a buffer, so the
   * TypeScript set writes through the page cache.
   */
  readonly directWrites: boolean;

  /**
   * Writes `buffers`, one after another, at byte `position` of the open file `fd`, the last
   * block padded with zeros to a multiple of `directWriteAlignmentBytes` (the caller truncates
   * the file to its length when it is whole), off the main thread; no sync. `position` must be a
   * multiple of that alignment (`INVALID_ARGUMENT` if not, before any I/O). The caller may reuse
   * the buffers once the call returns, before the promise settles. A failed write rejects with
   * `IO` (the errno in `details.errno`).
   *
   * Several buffers let a caller hand over the unaligned end of its last write with the bytes
   * that follow it, copied once into aligned memory, instead of gathering both first.
   */
  writeDirect(fd: number, position: number, buffers: readonly Uint8Array[]): Promise<void>;
}
