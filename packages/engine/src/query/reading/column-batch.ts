/**
 * The columnar form of a read: a batch of records as typed arrays (of one commit, or of several
 * small ones side by side), the primary form
 * every feed scan produces. Variable-length fields (fingerprints, keys, tags, payloads) are
 * ranges of one byte buffer — the bytes read from disk, not copied — and strings are decoded
 * only when asked for. Records (the object form) are made from a batch on demand.
 */

import type { RecordBatch as ArrowRecordBatch } from 'apache-arrow';
import { StreamStackError } from '../../errors.js';
import { utf8DecodeRange, utf8Encode } from '../../storage/codec.js';
import { recordFlags } from '../../storage/records.js';
import { payloadElsewhere, type RunColumns } from '../../storage/run-columns.js';
import type { StoredRecord } from './snapshot.js';

/**
 * The columns of a batch: a run's decoded columns (`RunColumns` says what each holds). What
 * `ColumnBatch` is made of, and what `take` gathers.
 */
type BatchColumns = Pick<
  RunColumns,
  | 'positions'
  | 'seqs'
  | 'timestamps'
  | 'versions'
  | 'flags'
  | 'typeIds'
  | 'fingerprintStarts'
  | 'fingerprintEnds'
  | 'keyStarts'
  | 'keyEnds'
  | 'tagRows'
  | 'tagStarts'
  | 'tagEnds'
  | 'payloadStarts'
  | 'payloadEnds'
>;

const noTags: readonly string[] = Object.freeze([]);

/** A commit some rows of a batch belong to. */
export interface BatchCommit {
  readonly commit: number;
  readonly stream: string;
}

/**
 * The commits of a batch that spans several: each one once, in order, and each row's as an
 * index into them.
 */
export interface RowCommits {
  readonly commits: readonly BatchCommit[];
  readonly rows: Uint32Array;
}

/**
 * Records as columns: of one commit, or — where a read meets many small commits — of several
 * consecutive ones (`spansCommits`; `commitOf(i)` and `streamOf(i)` say whose each row is).
 * Row `i` of every column is the batch's `i`-th record, in position order.
 *
 * @example
 * for await (const batch of feed.readColumns()) {
 *   for (let i = 0; i < batch.length; i++) total += batch.payloadEnds[i] - batch.payloadStarts[i];
 *   const record = batch.record(0); // an object, made only when asked for
 * }
 */
// The class's columns are declared by merging in `BatchColumns`: one list of fields, documented
// where the decoder fills them.
export interface ColumnBatch extends BatchColumns {}

// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the interface names the columns the constructor assigns.
export class ColumnBatch implements Iterable<StoredRecord> {
  readonly length: number;

  constructor(
    readonly feed: string,
    /**
     * The commit of the batch's first record, and its stream: of every record, unless the batch
     * `spansCommits`.
     */
    readonly commit: number,
    readonly stream: string,
    /** The distinct types the batch's `typeIds` index. */
    readonly types: readonly string[],
    /** The buffer the byte ranges index: the run's bytes as read from disk. */
    readonly bytes: Uint8Array,
    columns: BatchColumns,
    /**
     * Payloads other runs stored (deduplicated), gathered: the payload ranges of rows whose
     * flags carry `ColumnBatch.payloadElsewhere` index this buffer instead of `bytes`.
     */
    readonly externalBytes: Uint8Array | undefined = undefined,
    /** Set when the rows belong to several commits: whose each row is. */
    readonly rowCommits: RowCommits | undefined = undefined,
  ) {
    this.length = columns.positions.length;
    // Assigned one by one, always in this order: every batch has one hidden class.
    // biome-ignore lint/complexity/noUselessThisAlias: the alias drops `readonly` for the one assignment of each column.
    const self: { -readonly [Column in keyof BatchColumns]: BatchColumns[Column] } = this;
    self.positions = columns.positions;
    self.seqs = columns.seqs;
    self.timestamps = columns.timestamps;
    self.versions = columns.versions;
    self.flags = columns.flags;
    self.typeIds = columns.typeIds;
    self.fingerprintStarts = columns.fingerprintStarts;
    self.fingerprintEnds = columns.fingerprintEnds;
    self.keyStarts = columns.keyStarts;
    self.keyEnds = columns.keyEnds;
    self.tagRows = columns.tagRows;
    self.tagStarts = columns.tagStarts;
    self.tagEnds = columns.tagEnds;
    self.payloadStarts = columns.payloadStarts;
    self.payloadEnds = columns.payloadEnds;
  }

  /** The flags bit of a row whose payload lies in `externalBytes`. */
  static readonly payloadElsewhere = payloadElsewhere;

  /** Decoded rows of a run as a batch. */
  static ofRun(feed: string, commit: BatchCommit, run: RunColumns): ColumnBatch {
    return new ColumnBatch(feed, commit.commit, commit.stream, run.types, run.bytes, run, run.externalBytes);
  }

  /**
   * Decoded rows of several runs side by side as a batch: `commits` are the decoder's runs'
   * commits, in its order, and `run.rowRuns` (when set) says whose each row is.
   */
  static ofRuns(feed: string, commits: readonly BatchCommit[], run: RunColumns): ColumnBatch {
    const { rowRuns } = run;
    const first = rowRuns && run.count > 0 ? rowRuns[0] : 0;
    const last = rowRuns && run.count > 0 ? rowRuns[run.count - 1] : 0;
    const commit = commits[first];
    if (first === last) return ColumnBatch.ofRun(feed, commit, run);
    // The batch's rows are its own: their run indexes become indexes into its commits.
    for (let row = 0; row < run.count; row++) rowRuns![row] -= first;
    return new ColumnBatch(feed, commit.commit, commit.stream, run.types, run.bytes, run, run.externalBytes, {
      commits: commits.slice(first, last + 1),
      rows: rowRuns!,
    });
  }

  /**
   * The batch's commits, each once and in order, and each row's as an index into them (all 0
   * when the batch holds one commit's records).
   */
  commitList(): RowCommits {
    return (
      this.rowCommits ?? {
        commits: [{ commit: this.commit, stream: this.stream }],
        rows: new Uint32Array(this.length),
      }
    );
  }

  /** Whether the batch holds records of more than one commit. */
  get spansCommits(): boolean {
    return this.rowCommits !== undefined;
  }

  /** The commit record `row` belongs to. */
  commitOf(row: number): number {
    return this.rowCommits ? this.rowCommits.commits[this.rowCommits.rows[row]].commit : this.commit;
  }

  /** The stream record `row` was appended to. */
  streamOf(row: number): string {
    return this.rowCommits ? this.rowCommits.commits[this.rowCommits.rows[row]].stream : this.stream;
  }

  /** Each row's commit, as a column (made when first asked for). */
  get commits(): Float64Array {
    if (this.commitColumn) return this.commitColumn;
    const column = new Float64Array(this.length);
    if (!this.rowCommits) column.fill(this.commit);
    else
      for (let row = 0; row < this.length; row++)
        column[row] = this.rowCommits.commits[this.rowCommits.rows[row]].commit;
    this.commitColumn = column;
    return column;
  }

  private commitColumn: Float64Array | undefined = undefined;

  /**
   * Records of one commit (at least one) as a batch, their bytes copied into a buffer of its
   * own: the form of a few records fetched one by one.
   */
  static ofRecords(records: readonly StoredRecord[]): ColumnBatch {
    const count = records.length;
    const strings: Uint8Array[] = [];
    const types: string[] = [];
    const typeIds = new Int32Array(count);
    const flags = new Uint8Array(count);
    let bytes = 0;
    let tags = 0;
    for (const [row, record] of records.entries()) {
      bytes += record.payload.length + record.fingerprint.length;
      if (record.key !== undefined) strings.push(utf8Encode(record.key));
      for (const tag of record.tags) strings.push(utf8Encode(tag));
      tags += record.tags.length;
      let id = -1;
      if (record.type !== undefined) {
        id = types.indexOf(record.type);
        if (id < 0) id = types.push(record.type) - 1;
      }
      typeIds[row] = id;
      flags[row] =
        recordFlags.hasFingerprint |
        (record.key !== undefined ? recordFlags.hasKey : 0) |
        (record.version !== undefined ? recordFlags.hasVersion : 0) |
        (record.tombstone ? recordFlags.isTombstone : 0) |
        (record.type !== undefined ? recordFlags.hasType : 0) |
        (record.tags.length > 0 ? recordFlags.hasTags : 0);
    }
    for (const text of strings) bytes += text.length;
    const buffer = new Uint8Array(bytes);
    let at = 0;
    let string = 0;
    const place = (from: Uint8Array, starts: Uint32Array, ends: Uint32Array, index: number) => {
      buffer.set(from, at);
      starts[index] = at;
      at += from.length;
      ends[index] = at;
    };
    const columns = {
      positions: new Float64Array(count),
      seqs: new Float64Array(count),
      timestamps: new Float64Array(count),
      versions: new Float64Array(count),
      flags,
      typeIds,
      fingerprintStarts: new Uint32Array(count),
      fingerprintEnds: new Uint32Array(count),
      keyStarts: new Uint32Array(count),
      keyEnds: new Uint32Array(count),
      tagRows: new Uint32Array(count + 1),
      tagStarts: new Uint32Array(tags),
      tagEnds: new Uint32Array(tags),
      payloadStarts: new Uint32Array(count),
      payloadEnds: new Uint32Array(count),
    };
    let tag = 0;
    for (const [row, record] of records.entries()) {
      columns.positions[row] = record.position;
      columns.seqs[row] = record.seq;
      columns.timestamps[row] = record.timestamp;
      columns.versions[row] = record.version ?? 0;
      place(record.fingerprint, columns.fingerprintStarts, columns.fingerprintEnds, row);
      if (record.key !== undefined) place(strings[string++], columns.keyStarts, columns.keyEnds, row);
      else columns.keyStarts[row] = columns.keyEnds[row] = at;
      columns.tagRows[row] = tag;
      for (let index = 0; index < record.tags.length; index++)
        place(strings[string++], columns.tagStarts, columns.tagEnds, tag++);
      place(record.payload, columns.payloadStarts, columns.payloadEnds, row);
    }
    columns.tagRows[count] = tag;
    const [first] = records;
    return new ColumnBatch(first.feed, first.commit, first.stream, types, buffer, columns);
  }

  hasKey(row: number): boolean {
    return (this.flags[row] & recordFlags.hasKey) !== 0;
  }

  hasVersion(row: number): boolean {
    return (this.flags[row] & recordFlags.hasVersion) !== 0;
  }

  isTombstone(row: number): boolean {
    return (this.flags[row] & recordFlags.isTombstone) !== 0;
  }

  /** Record `row`'s payload: a view of `bytes` (or `externalBytes`), not a copy. */
  payload(row: number): Uint8Array {
    return viewOf(this.payloadSource(row), this.payloadStarts[row], this.payloadEnds[row]);
  }

  /** The buffer record `row`'s payload range indexes. */
  payloadSource(row: number): Uint8Array {
    return (this.flags[row] & payloadElsewhere) !== 0 ? this.externalBytes! : this.bytes;
  }

  fingerprint(row: number): Uint8Array {
    return viewOf(this.bytes, this.fingerprintStarts[row], this.fingerprintEnds[row]);
  }

  key(row: number): string | undefined {
    return this.hasKey(row) ? this.text(this.keyStarts[row], this.keyEnds[row], 'key') : undefined;
  }

  type(row: number): string | undefined {
    const id = this.typeIds[row];
    return id < 0 ? undefined : this.types[id];
  }

  tags(row: number): readonly string[] {
    const first = this.tagRows[row];
    const last = this.tagRows[row + 1];
    if (first === last) return noTags;
    const tags = new Array<string>(last - first);
    for (let tag = first; tag < last; tag++)
      tags[tag - first] = this.text(this.tagStarts[tag], this.tagEnds[tag], 'tag');
    return tags;
  }

  /** Record `row` as an object: the object form of reads. */
  record(row: number): StoredRecord {
    return {
      feed: this.feed,
      commit: this.commitOf(row),
      stream: this.streamOf(row),
      seq: this.seqs[row],
      position: this.positions[row],
      timestamp: this.timestamps[row],
      fingerprint: this.fingerprint(row),
      payload: this.payload(row),
      key: this.key(row),
      version: this.hasVersion(row) ? this.versions[row] : undefined,
      tombstone: this.isTombstone(row),
      type: this.type(row),
      tags: this.tags(row),
    };
  }

  /** Every record, as objects. */
  records(): StoredRecord[] {
    const out = new Array<StoredRecord>(this.length);
    for (let row = 0; row < this.length; row++) out[row] = this.record(row);
    return out;
  }

  *[Symbol.iterator](): Iterator<StoredRecord> {
    for (let row = 0; row < this.length; row++) yield this.record(row);
  }

  /**
   * The batch as an Apache Arrow `RecordBatch` (one field per record field; see
   * `query/export/column-arrow.ts`). Asynchronous only because Arrow is loaded on first use.
   *
   * @example
   * const table = new arrow.Table(await Promise.all(batches.map((batch) => batch.toArrow())));
   */
  async toArrow(): Promise<ArrowRecordBatch> {
    const { toArrowBatch } = await import('../export/column-arrow.js');
    return toArrowBatch(this);
  }

  /** The rows `rows` (ascending), as a batch over the same bytes: filters keep what they match. */
  take(rows: Uint32Array): ColumnBatch {
    const count = rows.length;
    if (count === this.length) return this;
    const { rowCommits } = this;
    // The rows taken may all be one commit's, or span fewer commits than the batch did.
    let taken: RowCommits | undefined;
    let commit: BatchCommit = { commit: this.commit, stream: this.stream };
    if (rowCommits && count > 0) {
      const first = rowCommits.rows[rows[0]];
      const last = rowCommits.rows[rows[count - 1]];
      commit = rowCommits.commits[first];
      if (first !== last) {
        const indexes = new Uint32Array(count);
        for (let index = 0; index < count; index++) indexes[index] = rowCommits.rows[rows[index]] - first;
        taken = { commits: rowCommits.commits.slice(first, last + 1), rows: indexes };
      }
    }
    const gather = <T extends Float64Array | Uint32Array | Int32Array | Uint8Array>(
      column: T,
      make: new (length: number) => T,
    ): T => {
      const out = new make(count);
      for (let index = 0; index < count; index++) out[index] = column[rows[index]];
      return out;
    };
    const tagRows = new Uint32Array(count + 1);
    let tags = 0;
    for (let index = 0; index < count; index++) {
      tagRows[index] = tags;
      tags += this.tagRows[rows[index] + 1] - this.tagRows[rows[index]];
    }
    tagRows[count] = tags;
    const tagStarts = new Uint32Array(tags);
    const tagEnds = new Uint32Array(tags);
    for (let index = 0; index < count; index++) {
      const from = this.tagRows[rows[index]];
      const length = this.tagRows[rows[index] + 1] - from;
      tagStarts.set(this.tagStarts.subarray(from, from + length), tagRows[index]);
      tagEnds.set(this.tagEnds.subarray(from, from + length), tagRows[index]);
    }
    return new ColumnBatch(
      this.feed,
      commit.commit,
      commit.stream,
      this.types,
      this.bytes,
      {
        positions: gather(this.positions, Float64Array),
        seqs: gather(this.seqs, Float64Array),
        timestamps: gather(this.timestamps, Float64Array),
        versions: gather(this.versions, Float64Array),
        flags: gather(this.flags, Uint8Array),
        typeIds: gather(this.typeIds, Int32Array),
        fingerprintStarts: gather(this.fingerprintStarts, Uint32Array),
        fingerprintEnds: gather(this.fingerprintEnds, Uint32Array),
        keyStarts: gather(this.keyStarts, Uint32Array),
        keyEnds: gather(this.keyEnds, Uint32Array),
        tagRows,
        tagStarts,
        tagEnds,
        payloadStarts: gather(this.payloadStarts, Uint32Array),
        payloadEnds: gather(this.payloadEnds, Uint32Array),
      },
      this.externalBytes,
      taken,
    );
  }

  /** The first `count` rows. */
  slice(count: number): ColumnBatch {
    return count >= this.length ? this : this.take(Uint32Array.from({ length: count }, (_, row) => row));
  }

  private text(start: number, end: number, what: string): string {
    const text = utf8DecodeRange(this.bytes, start, end);
    if (text === undefined) {
      throw new StreamStackError('CORRUPT', `a record's ${what} in commit ${this.commit} is not valid UTF-8`);
    }
    return text;
  }
}

/**
 * `bytes.subarray(start, end)`, made directly: `subarray` looks up the constructor to use, which
 * cost the object form of reads twice as much per view (two views a record).
 */
function viewOf(bytes: Uint8Array, start: number, end: number): Uint8Array {
  return new Uint8Array(bytes.buffer, bytes.byteOffset + start, end - start);
}
