/**
 * A typed state log: a state log (`state-log.ts`) of one kind of record, kept decoded. Every such
 * record starts with a version byte, which this class writes and checks, so that a record of a
 * form this build does not know is always `CORRUPT`, whichever log holds it. The kind's codec
 * gives the bytes after the version; a subclass folds the newest record into the state its
 * callers read (a horizon, a merge's switch-over, a retention state).
 *
 * The logs that use it are ones most stores never write (a feed's retention policy, its last
 * merge, its compaction horizon): the two files are made on the first write, not on every open
 * (each is a file created and synced).
 */
import fs from 'node:fs';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { ByteReader, ByteWriter } from './codec.js';
import type { Corruption } from './runs.js';
import { StateLog, stateLogCopySuffix } from './state-log.js';

/** How one kind of record is laid out after its version byte. */
export interface RecordCodec<R> {
  /** Names the kind in messages: `${name} record in ${file}`. */
  readonly name: string;
  /** The version byte every record of the kind starts with. */
  readonly version: number;
  /** Writes the record's fields after the version byte. */
  encode(writer: ByteWriter, record: R): void;
  /** Reads the fields after the version byte; the reader's end is checked afterwards. */
  decode(reader: ByteReader, file: string): R;
}

/** A log's file, its codec and what its files held on open: what a subclass is built from. */
export interface OpenedRecordLog<R> {
  readonly kernels: Kernels;
  readonly file: string;
  readonly codec: RecordCodec<R>;
  /** Undefined until the first write of a log that has no files yet. */
  readonly log: StateLog | undefined;
  readonly newest: R | undefined;
}

/** The bytes of `record`: its kind's version byte, then its fields. */
export function encodeRecord<R>(codec: RecordCodec<R>, record: R): Uint8Array {
  const writer = new ByteWriter().u8(codec.version);
  codec.encode(writer, record);
  return writer.finish();
}

/** Reads a record of `codec`'s kind; `CORRUPT` when its version is unknown or its bytes are bad. */
export function decodeRecord<R>(codec: RecordCodec<R>, bytes: Uint8Array, file: string): R {
  const reader = new ByteReader(bytes, 0, bytes.length, `${codec.name} record in ${file}`);
  const version = reader.u8();
  if (version !== codec.version) {
    throw new StreamStackError('CORRUPT', `${file} holds a ${codec.name} record of an unknown form`, {
      details: { file, offset: 0 },
    });
  }
  const record = codec.decode(reader, file);
  reader.expectEnd();
  return record;
}

export class RecordLog<R> {
  private readonly kernels: Kernels;
  readonly file: string;
  private readonly codec: RecordCodec<R>;
  private log: StateLog | undefined;
  private current: R | undefined;

  protected constructor(opened: OpenedRecordLog<R>) {
    this.kernels = opened.kernels;
    this.file = opened.file;
    this.codec = opened.codec;
    this.log = opened.log;
    this.current = opened.newest;
  }

  /**
   * Opens the log at `file` if either of its files is there, and decodes its newest record; a
   * subclass builds itself from the result. A torn last write is cut unless `readOnly`.
   */
  protected static async openFiles<R>(
    kernels: Kernels,
    file: string,
    readOnly: boolean,
    codec: RecordCodec<R>,
  ): Promise<OpenedRecordLog<R>> {
    if (!fs.existsSync(file) && !fs.existsSync(`${file}${stateLogCopySuffix}`))
      return { kernels, file, codec, log: undefined, newest: undefined };
    const log = await StateLog.open(kernels, file, readOnly);
    try {
      return { kernels, file, codec, log, newest: log.last ? decodeRecord(codec, log.last, file) : undefined };
    } catch (error) {
      log.close();
      throw error;
    }
  }

  /** The newest record, if one was ever written. */
  protected get newest(): R | undefined {
    return this.current;
  }

  /** Damage in the log's files that the newest sound record survived (verify reports it). */
  get corruptions(): readonly Corruption[] {
    return this.log?.corruptions ?? [];
  }

  /** A torn last write found on open (cut unless read-only). */
  get tornTails(): readonly Corruption[] {
    return this.log?.tornTails ?? [];
  }

  /** Writes `record` durably (both files synced) before it becomes the newest record. */
  async write(record: R): Promise<void> {
    this.log ??= await StateLog.open(this.kernels, this.file);
    await this.log.write(encodeRecord(this.codec, record));
    this.current = record;
  }

  close(): void {
    this.log?.close();
  }
}
