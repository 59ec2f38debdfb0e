/**
 * The contract of the manifest decoding kernel (`Kernels.decodeManifests`): a commit run's
 * manifest entries (docs/formats.md) decoded into a batch of fixed-width columns, one call per
 * batch. Both twins — `ts/manifests.ts` and `native/src/manifests.rs` — read the same bytes and
 * write the same columns, laid out in one buffer as `manifestColumnsLayout` says, and keep their
 * place between calls in the same cursor, so a batch may be begun by one twin and finished by the
 * other. `storage/run-columns.ts` drives it and makes the batch (`RunColumns`) from the buffer.
 */

/** The bits of a record's flags byte, as manifest entries and WAL records store it. */
export const recordFlags = {
  hasFingerprint: 1,
  hasKey: 2,
  hasVersion: 4,
  isTombstone: 8,
  hasType: 16,
  hasTags: 32,
} as const;

/**
 * The slots of a decode's cursor (`ManifestDecodeJob.cursor`, a `Uint32Array`). The decoder reads
 * and writes them; the caller starts a decode with every slot 0 and sets `row`, `tags` and
 * `externals` to 0 before each batch.
 */
export const manifestCursor = {
  /** The next manifest frame to open, as an index into `frames` (three numbers a frame). */
  frame: 0,
  /** Where the next entry starts, and where the current frame's data ends. */
  at: 1,
  end: 2,
  /** Entries of the current frame not decoded yet. */
  left: 3,
  /** Rows of the current run decoded so far: the decoder keeps it, across batches too. */
  runRow: 4,
  /** The batch's next row to decode. The batch is done when it equals `rows`. */
  row: 5,
  /** Tag ranges filled in `tagStarts` / `tagEnds`. */
  tags: 6,
  /** Types in `typeRanges`: the run's distinct types so far, in order of first appearance. */
  types: 7,
  /** External payloads listed in `external`. */
  externals: 8,
  /** The offset of the current frame in the run, for error messages. */
  frameOffset: 9,
  /** Why the call returned: `manifestStop`. */
  stop: 10,
  /** With `manifestStop.tagsFull`: the tag ranges the next entry needs in all. */
  tagsNeeded: 11,
  /** The run being decoded, as an index into `runs`. */
  run: 12,
} as const;

/** Slots of a cursor. */
export const manifestCursorSlots = 13;

/**
 * Numbers `ManifestDecodeJob.runs` holds per run: its first manifest frame (an index into
 * `frames`; its frames end where the next run's begin), the records its commit names, and where
 * it starts and ends in `bytes`. Several runs side by side (a stretch of small commits) decode
 * into one batch, each run whole.
 */
export const manifestRunFields = 4;

/** Why `decodeManifests` returned before the batch was done (the cursor's `stop` slot). */
export const manifestStop = {
  /** The batch is done: `row` equals `rows`. */
  done: 0,
  /** The next entry's tags do not fit in the tag ranges: grow them to `tagsNeeded` and call again. */
  tagsFull: 1,
  /** The next entry has a new type and the type table is full: grow it and call again. */
  typesFull: 2,
} as const;

/** Numbers `external` holds per payload stored elsewhere: row, segment, offset, length, CRC-32C. */
export const manifestExternalFields = 5;

/** One batch's decode: what it reads, where it writes, and the cursor that carries on between calls. */
export interface ManifestDecodeJob {
  /** The runs' bytes; every range written is an offset into them. */
  readonly bytes: Uint8Array;
  /** The runs' manifest frames, three numbers each: the frame's offset, its data start and its data end. */
  readonly frames: Uint32Array;
  /**
   * The runs, `manifestRunFields` numbers each; each run's manifests must hold as many entries
   * as its commit names. One run for a batch of a commit; several for a batch of small commits,
   * whose rows then hold whole runs.
   */
  readonly runs: Uint32Array;
  /** Names the runs in error messages (`file:offset` of `bytes`). */
  readonly place: string;
  /** Rows of the batch: the layout of `columns` is `manifestColumnsLayout(rows)`. */
  readonly rows: number;
  /** Read and written (`manifestCursor`). */
  readonly cursor: Uint32Array;
  /** The batch's fixed-width columns, one buffer (`manifestColumnsLayout`), at least 8-byte aligned. */
  readonly columns: Uint8Array;
  /** Each tag's UTF-8 range; their length is the capacity. */
  readonly tagStarts: Uint32Array;
  readonly tagEnds: Uint32Array;
  /** Each distinct type's range (start, end), two numbers a type; capacity is half the length. */
  readonly typeRanges: Uint32Array;
  /** Payloads stored in other runs (`manifestExternalFields` numbers each); room for one per row. */
  readonly external: Float64Array;
}

/**
 * Byte offsets of each column of a batch of `rows` rows in its one buffer: 8-byte columns first
 * (for alignment), then 4-byte ones, then the flags. One buffer is one allocation per batch, and
 * one object for the collector to track, instead of one per column.
 */
export function manifestColumnsLayout(rows: number) {
  const wide = 8 * rows;
  const narrow = 4 * rows;
  const int32At = 4 * wide;
  const tagRowsAt = int32At + 8 * narrow;
  const flagsAt = tagRowsAt + 4 * (rows + 1);
  return {
    seqs: 0,
    timestamps: wide,
    versions: 2 * wide,
    positions: 3 * wide,
    typeIds: int32At,
    fingerprintStarts: int32At + narrow,
    fingerprintEnds: int32At + 2 * narrow,
    keyStarts: int32At + 3 * narrow,
    keyEnds: int32At + 4 * narrow,
    payloadStarts: int32At + 5 * narrow,
    payloadEnds: int32At + 6 * narrow,
    entryStarts: int32At + 7 * narrow,
    /** `rows + 1` entries: row i's tags are `tagRows[i]` to `tagRows[i + 1]`. */
    tagRows: tagRowsAt,
    flags: flagsAt,
    bytes: flagsAt + rows,
  };
}
