/**
 * A commit run's manifests decoded into columns: one typed array per field, and byte ranges into
 * the run's bytes for the variable-length ones (fingerprints, keys, types, tags, payloads). No
 * object is made per record and no byte is copied: the scan path of reads works on these, and
 * records are made from them only when a reader asks for objects.
 *
 * The decoding itself is a kernel (`Kernels.decodeManifests`, one call per batch, in Rust with the
 * native kernels): this module drives it, gives it room for tags and types as a batch needs, and
 * makes the batch from what it wrote. Type names are decoded once per run; keys and tags only
 * when read.
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import {
  type ManifestDecodeJob,
  manifestColumnsLayout,
  manifestCursor,
  manifestCursorSlots,
  manifestExternalFields,
  manifestRunFields,
  manifestStop,
} from '../kernels/manifest-columns.js';
import { utf8DecodeRange } from './codec.js';
import { FrameKind } from './frame-kinds.js';
import type { ScannedFrame } from './framing.js';
import type { PayloadLocation } from './records.js';

/**
 * The columns of one run's records, in seq order; or of several runs side by side in one buffer
 * (a stretch of small commits), run after run.
 */
export interface RunColumns {
  readonly count: number;
  /** The decoder's row (seq order, from 0) of these columns' first. */
  readonly firstRow: number;
  /**
   * Set when the decoder has several runs: the run (an index into the decoder's runs) each row
   * belongs to.
   */
  readonly rowRuns: Uint32Array | undefined;
  /** The run's bytes (the runs'): every start/end below is an offset into them. */
  readonly bytes: Uint8Array;
  /** Each record's position in the feed. */
  readonly positions: Float64Array;
  /** Each record's seq in its stream (from 1). */
  readonly seqs: Float64Array;
  /** Milliseconds since the epoch. */
  readonly timestamps: Float64Array;
  /** 0 where the record has no version (its flags say which). */
  readonly versions: Float64Array;
  /** The record's flags byte (`recordFlags`): which optional fields it has, whether it is a tombstone. */
  readonly flags: Uint8Array;
  /** Index into `types`, or -1 for a record without a type. */
  readonly typeIds: Int32Array;
  /** The run's distinct types, in order of first appearance. */
  readonly types: readonly string[];
  /** `bytes[fingerprintStarts[i], fingerprintEnds[i])` is record i's fingerprint. */
  readonly fingerprintStarts: Uint32Array;
  readonly fingerprintEnds: Uint32Array;
  /** The key's UTF-8 bytes; start and end are equal where the record has no key. */
  readonly keyStarts: Uint32Array;
  readonly keyEnds: Uint32Array;
  /** Record i's tags are tags `tagRows[i]` to `tagRows[i + 1]` (exclusive) of the two below: UTF-8 ranges. */
  readonly tagRows: Uint32Array;
  readonly tagStarts: Uint32Array;
  readonly tagEnds: Uint32Array;
  /**
   * Into `bytes`, except for the rows `external` names: their payloads lie in other runs, and
   * once read they are ranges of `externalBytes` (their flags carry `payloadElsewhere`).
   */
  readonly payloadStarts: Uint32Array;
  readonly payloadEnds: Uint32Array;
  readonly external: readonly { readonly row: number; readonly location: PayloadLocation }[];
  readonly externalBytes: Uint8Array | undefined;
  /** Where each record's manifest entry starts in `bytes` (a key dictionary's locator, from the run's start, for a decoder of one run). */
  readonly entryStarts: Uint32Array;
}

/**
 * A flags bit no stored record has: the record's payload is a range of the batch's
 * `externalBytes` (it was stored by an earlier run), not of its `bytes`.
 */
export const payloadElsewhere = 0x80;

/**
 * The tag ranges of a batch without tags: shared, never written (a decode given none writes none).
 * Every array the native kernel is handed is a view of an `ArrayBuffer` made as such: a small
 * typed array made with a length lives on the V8 heap, and crossing into Rust moves it off first,
 * which cost several times the decode of a one-record run.
 */
const noTagStarts = new Uint32Array(new ArrayBuffer(0));
const noTagEnds = new Uint32Array(new ArrayBuffer(0));

/** `length` zeroed u32s off the V8 heap (see `noTagStarts`). */
function offHeapUint32s(length: number): Uint32Array<ArrayBuffer> {
  return new Uint32Array(new ArrayBuffer(4 * length));
}

/** Types a run's table has room for at first; it doubles when a run has more. */
const typeRangesInitial = 16;

/**
 * Where the kernel lists a batch's payloads stored in other runs: shared, since a decode is
 * synchronous and they are copied out before the next one.
 */
let externalScratch = new Float64Array(manifestExternalFields * 64);

/**
 * Where a decode's cursor and manifest frames (`sharedState`) and its type table
 * (`sharedTypeRanges`) are laid for each kernel call, shared by every decoder for the same
 * reason: a decoder keeps its own copies on the heap, where a buffer of its own off the heap cost
 * an allocation per run, more than the decode of a one-record run.
 */
let sharedState = offHeapUint32s(manifestCursorSlots + 3 * 64);
let sharedTypeRanges = offHeapUint32s(2 * 64);
/** Where the kernel lays a batch's tag ranges; they are copied out into the batch's own buffer. */
let sharedTagStarts = offHeapUint32s(4096);
let sharedTagEnds = offHeapUint32s(4096);

/**
 * One run a decoder reads: where it lies in the decoder's bytes, its frames (verified by their
 * CRCs; offsets in the decoder's bytes too), the records its commit names, and how its rows are
 * placed.
 */
export interface DecoderRun {
  readonly start: number;
  readonly end: number;
  readonly frames: readonly ScannedFrame[];
  readonly count: number;
  /** The position of the run's first record. */
  readonly firstPosition: number;
  /**
   * Set for a compacted run (fewer entries than positions): its last position. Positions are
   * then each entry's seq from the first, checked to ascend within the span.
   */
  readonly sparseLast?: number;
}

/**
 * The runs a decoder reads, as typed arrays (no object per run or frame: a stretch of small
 * commits holds thousands of runs): their manifest frames for the kernel (offset, data start and
 * data end in the decoder's bytes), the runs for the kernel (`manifestRunFields` numbers each),
 * and each run's first position and, for a compacted run, its last (-1 for any other).
 */
export interface DecoderLayout {
  readonly manifests: Uint32Array;
  readonly runFields: Uint32Array;
  readonly firstPositions: Float64Array;
  readonly sparseLasts: Float64Array;
}

/** The layout of `runs` (see `DecoderRun`). */
export function decoderLayout(runs: readonly DecoderRun[]): DecoderLayout {
  let frameCount = 0;
  for (const run of runs) for (const frame of run.frames) if (frame.kind === FrameKind.Manifest) frameCount++;
  const layout = {
    manifests: new Uint32Array(3 * frameCount),
    runFields: new Uint32Array(manifestRunFields * runs.length),
    firstPositions: new Float64Array(runs.length),
    sparseLasts: new Float64Array(runs.length),
  };
  let at = 0;
  runs.forEach((run, index) => {
    layout.runFields.set([at / 3, run.count, run.start, run.end], manifestRunFields * index);
    layout.firstPositions[index] = run.firstPosition;
    layout.sparseLasts[index] = run.sparseLast ?? -1;
    for (const frame of run.frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      layout.manifests[at++] = frame.offset;
      layout.manifests[at++] = frame.dataStart;
      layout.manifests[at++] = frame.dataEnd;
    }
  });
  return layout;
}

/**
 * Decodes the manifests of one run — or of several laid side by side in `bytes`, as a stretch of
 * small commits is read — into columns, a bounded number of rows at a time: a commit of a
 * million records is read as batches that fit in the CPU's caches, not as one set of columns
 * megabytes long, and a thousand one-record commits as one batch, not a thousand. `place` names
 * the bytes for error messages.
 */
export class RunColumnsDecoder {
  /** Rows decoded so far, and all the runs hold. */
  private row = 0;
  private readonly count: number;
  private readonly runCount: number;
  /** The decoder's first row of each run, and one past the last. */
  private readonly runRows: Float64Array;
  /** Where the decode stands between batches (`manifestCursor`). */
  private readonly cursor = new Uint32Array(manifestCursorSlots);
  /** The runs' distinct types' byte ranges as the kernel found them, room for how many, and their names. */
  private typeRanges: number[] = [];
  private typeRoom = typeRangesInitial;
  private readonly types: string[] = [];
  /** The last position placed so far in the current compacted run, and that run. */
  private lastPlaced = -1;
  private placingRun = -1;

  constructor(
    private readonly kernels: Kernels,
    private readonly bytes: Uint8Array,
    private readonly layout: DecoderLayout,
    private readonly place: string,
  ) {
    this.runCount = layout.firstPositions.length;
    this.runRows = new Float64Array(this.runCount + 1);
    let rows = 0;
    for (let run = 0; run < this.runCount; run++) {
      this.runRows[run] = rows;
      rows += layout.runFields[manifestRunFields * run + 1];
    }
    this.runRows[this.runCount] = rows;
    this.count = rows;
  }

  get done(): boolean {
    return this.row === this.count;
  }

  /** Positions of `rows` rows of compacted run `run` from its seqs, checked to ascend within its span. */
  private placeBySeq(positions: Float64Array, seqs: Float64Array, from: number, to: number, run: number): void {
    const firstPosition = this.layout.firstPositions[run];
    const sparseLast = this.layout.sparseLasts[run];
    if (this.placingRun !== run) {
      this.placingRun = run;
      this.lastPlaced = -1;
    }
    let previous = this.lastPlaced < 0 ? firstPosition - 1 : this.lastPlaced;
    for (let row = from; row < to; row++) {
      const position = firstPosition + seqs[row] - 1;
      if (position <= previous || position > sparseLast) {
        throw new StreamStackError(
          'CORRUPT',
          `${this.place}: a compacted run places a record at position ${position}, outside ${previous + 1}..${sparseLast}`,
        );
      }
      positions[row] = position;
      previous = position;
    }
    this.lastPlaced = previous;
  }

  /** Fills `positions` (and `rowRuns`, when set) for the batch of `count` rows from `firstRow`. */
  private placeRows(
    positions: Float64Array,
    seqs: Float64Array,
    rowRuns: Uint32Array | undefined,
    firstRow: number,
    count: number,
  ): void {
    let run = 0;
    while (this.runRows[run + 1] <= firstRow && run < this.runCount - 1) run++;
    for (let from = 0; from < count; run++) {
      const to = Math.min(count, this.runRows[run + 1] - firstRow);
      if (this.layout.sparseLasts[run] < 0) {
        const base = this.layout.firstPositions[run] + firstRow - this.runRows[run];
        for (let row = from; row < to; row++) positions[row] = base + row;
      } else this.placeBySeq(positions, seqs, from, to, run);
      if (rowRuns) rowRuns.fill(run, from, to);
      from = to;
    }
  }

  /**
   * Has the kernel decode rows `firstRow` on (`count` of them) into `columns`, giving it more
   * room for tags or types each time it stops for some. The decode's state goes into the shared
   * buffers for the calls and back after; returns the shared cursor, which holds until the next
   * decode (the batch's tags and payloads stored elsewhere are in the shared scratch until then).
   */
  private decodeInto(columns: Uint8Array, count: number): Uint32Array {
    // The decode's state goes into the shared buffers for the kernel calls, and back after.
    const { manifests, runFields } = this.layout;
    if (sharedState.length < manifestCursorSlots + manifests.length + runFields.length)
      sharedState = offHeapUint32s(manifestCursorSlots + manifests.length + runFields.length);
    const cursor = sharedState.subarray(0, manifestCursorSlots);
    cursor.set(this.cursor);
    const framesEnd = manifestCursorSlots + manifests.length;
    const frames = sharedState.subarray(manifestCursorSlots, framesEnd);
    frames.set(manifests);
    const runs = sharedState.subarray(framesEnd, framesEnd + runFields.length);
    runs.set(runFields);
    if (sharedTypeRanges.length < 2 * this.typeRoom) sharedTypeRanges = offHeapUint32s(2 * this.typeRoom);
    sharedTypeRanges.set(this.typeRanges);
    cursor[manifestCursor.row] = 0;
    cursor[manifestCursor.tags] = 0;
    cursor[manifestCursor.externals] = 0;
    if (externalScratch.length < manifestExternalFields * count)
      externalScratch = new Float64Array(manifestExternalFields * count);
    for (;;) {
      const job: ManifestDecodeJob = {
        bytes: this.bytes,
        frames,
        runs,
        place: this.place,
        rows: count,
        cursor,
        columns,
        tagStarts: sharedTagStarts,
        tagEnds: sharedTagEnds,
        typeRanges: sharedTypeRanges.subarray(0, 2 * this.typeRoom),
        external: externalScratch,
      };
      this.kernels.decodeManifests(job);
      const stop = cursor[manifestCursor.stop];
      if (stop === manifestStop.done) break;
      if (stop === manifestStop.typesFull) {
        this.typeRoom *= 2;
        if (sharedTypeRanges.length < 2 * this.typeRoom) {
          const grown = offHeapUint32s(2 * this.typeRoom);
          grown.set(sharedTypeRanges);
          sharedTypeRanges = grown;
        }
      } else {
        // Room for the rows left at the rate of tags so far: a batch grows it once at most.
        const needed = cursor[manifestCursor.tagsNeeded];
        const done = cursor[manifestCursor.row] + 1;
        const capacity = Math.max(2 * sharedTagStarts.length, needed, Math.ceil((needed * count) / done));
        const starts = offHeapUint32s(capacity);
        starts.set(sharedTagStarts);
        const ends = offHeapUint32s(capacity);
        ends.set(sharedTagEnds);
        sharedTagStarts = starts;
        sharedTagEnds = ends;
      }
    }
    this.cursor.set(cursor);
    for (let at = this.typeRanges.length; at < 2 * cursor[manifestCursor.types]; at++)
      this.typeRanges.push(sharedTypeRanges[at]);
    return cursor;
  }

  /** The next (at most) `rowsMax` rows. */
  next(rowsMax: number): RunColumns {
    const firstRow = this.row;
    const count = Math.min(rowsMax, this.count - firstRow);
    const layout = manifestColumnsLayout(count);
    const buffer = new ArrayBuffer(layout.bytes);
    const columns = new Uint8Array(buffer);
    const cursor = this.decodeInto(columns, count);
    const typeCount = cursor[manifestCursor.types];
    const { types } = this;
    for (let type = types.length; type < typeCount; type++) {
      // The kernel checked the name's UTF-8 when it first met it.
      types.push(utf8DecodeRange(this.bytes, this.typeRanges[2 * type], this.typeRanges[2 * type + 1])!);
    }
    const external: { row: number; location: PayloadLocation }[] = [];
    for (let index = 0; index < cursor[manifestCursor.externals]; index++) {
      const field = manifestExternalFields * index;
      external.push({
        row: externalScratch[field],
        location: {
          segment: externalScratch[field + 1],
          offset: externalScratch[field + 2],
          length: externalScratch[field + 3],
          crc: externalScratch[field + 4],
        },
      });
    }
    const positions = new Float64Array(buffer, layout.positions, count);
    const seqs = new Float64Array(buffer, layout.seqs, count);
    const rowRuns = this.runCount > 1 ? new Uint32Array(count) : undefined;
    this.placeRows(positions, seqs, rowRuns, firstRow, count);
    const tagCount = cursor[manifestCursor.tags];
    // The batch's tag ranges, starts then ends, in one buffer of its own.
    const tagBuffer = tagCount === 0 ? undefined : new ArrayBuffer(8 * tagCount);
    const tagStarts = tagBuffer ? new Uint32Array(tagBuffer, 0, tagCount) : noTagStarts;
    const tagEnds = tagBuffer ? new Uint32Array(tagBuffer, 4 * tagCount, tagCount) : noTagEnds;
    tagStarts.set(sharedTagStarts.subarray(0, tagCount));
    tagEnds.set(sharedTagEnds.subarray(0, tagCount));
    this.row += count;
    return {
      count,
      firstRow,
      rowRuns,
      bytes: this.bytes,
      positions,
      seqs,
      timestamps: new Float64Array(buffer, layout.timestamps, count),
      versions: new Float64Array(buffer, layout.versions, count),
      flags: new Uint8Array(buffer, layout.flags, count),
      typeIds: new Int32Array(buffer, layout.typeIds, count),
      types: types.slice(),
      fingerprintStarts: new Uint32Array(buffer, layout.fingerprintStarts, count),
      fingerprintEnds: new Uint32Array(buffer, layout.fingerprintEnds, count),
      keyStarts: new Uint32Array(buffer, layout.keyStarts, count),
      keyEnds: new Uint32Array(buffer, layout.keyEnds, count),
      tagRows: new Uint32Array(buffer, layout.tagRows, count + 1),
      tagStarts,
      tagEnds,
      payloadStarts: new Uint32Array(buffer, layout.payloadStarts, count),
      payloadEnds: new Uint32Array(buffer, layout.payloadEnds, count),
      external,
      externalBytes: undefined,
      entryStarts: new Uint32Array(buffer, layout.entryStarts, count),
    };
  }
}

/**
 * The rows of `columns` holding `wanted[from…]` (ascending positions), as far as the batch
 * reaches: each wanted position must be a row of it (the caller found it in the index or the
 * run). Returns the rows and where in `wanted` the batch's rows ended. Dense runs map a
 * position to its row by subtraction; a compacted run's sparse rows are walked in step.
 */
export function rowsOfPositions(
  columns: RunColumns,
  wanted: ArrayLike<number>,
  from: number,
): { rows: Uint32Array; next: number } {
  const { positions, count } = columns;
  let next = from;
  const last = count === 0 ? -1 : positions[count - 1];
  while (next < wanted.length && wanted[next] <= last) next++;
  const rows = new Uint32Array(next - from);
  let row = 0;
  for (let at = from; at < next; at++) {
    const position = wanted[at];
    // Dense rows are a subtraction away; otherwise walk forward (both lists ascend).
    const guess = position - positions[0];
    if (guess < count && positions[guess] === position) row = guess;
    else while (row < count && positions[row] < position) row++;
    if (row >= count || positions[row] !== position) {
      throw new StreamStackError(
        'INTERNAL',
        `position ${position} is not a record of the run at row ${columns.firstRow}`,
      );
    }
    rows[at - from] = row;
  }
  return { rows, next };
}
