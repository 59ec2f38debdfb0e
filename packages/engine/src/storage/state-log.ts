/**
 * Small state logs (leases, subscriptions): records appended to a file, the newest wins. State
 * that fences (lease epochs) or remembers (subscription cursors) must never go back, so every
 * record is written twice, to two files — `<name>` first, then its copy `<name>.copy`, each
 * synced before the write is acknowledged — and each record carries a sequence number. Whatever
 * happens to one file (a flipped byte, a cut, a deletion, another file's bytes), the other holds
 * the newest record (docs/faults.md).
 *
 * Only the last write can be torn: damage at the end of a file whose last sound record is at
 * most one write behind the newest is cut on open. Every other damage is corruption: reported
 * (`corruptions`, which verify lists), never cut, while the newest sound record still serves.
 * Past its bound a file is rewritten with only the newest record (a new file renamed over it).
 * Opening for writes gives a file that missed the newest record that record, so the two files
 * never drift more than one write apart.
 */
import fs from 'node:fs';
import path from 'node:path';
import { assert, ioError, type StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { frameHeaderBytes, frameLengthMask, stateLogBytesMax } from '../limits.js';
import { ByteReader } from './codec.js';
import { FrameBuilder } from './framing.js';
import type { Corruption } from './runs.js';
import { syncDirectory } from './segment.js';

/** Frame kind of a state record; its data is a varint sequence, then the caller's bytes. */
const stateRecordKind = 0x22;
/** The suffix of a state log's second file. */
export const stateLogCopySuffix = '.copy';

/**
 * The names of the state logs in `directory` whose files end with `suffix` (subscriptions,
 * groups), without the suffix, sorted: a log lives in two files, and either one is enough to
 * find it. None when the directory is not there.
 */
export function stateLogNames(directory: string, suffix: string): string[] {
  if (!fs.existsSync(directory)) return [];
  const names = new Set(
    fs
      .readdirSync(directory)
      .map((file) => (file.endsWith(stateLogCopySuffix) ? file.slice(0, -stateLogCopySuffix.length) : file))
      .filter((file) => file.endsWith(suffix))
      .map((file) => file.slice(0, -suffix.length)),
  );
  return [...names].sort();
}

interface StateFrame {
  readonly end: number;
  readonly sequence: number;
  readonly record: Uint8Array;
}

/** The state frame at `at`, when it is sound. */
function frameAt(kernels: Kernels, bytes: Uint8Array, at: number): StateFrame | undefined {
  if (at + frameHeaderBytes + 2 > bytes.length) return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const length = view.getUint32(at, true) & frameLengthMask;
  const end = at + frameHeaderBytes + length;
  if (length < 2 || end > bytes.length || bytes[at + frameHeaderBytes] !== stateRecordKind) return undefined;
  if (kernels.crc32(bytes.subarray(at + frameHeaderBytes, end)) !== view.getUint32(at + 4, true)) return undefined;
  try {
    const reader = new ByteReader(bytes, at + frameHeaderBytes + 1, end, 'state record');
    const sequence = reader.varint();
    return { end, sequence, record: bytes.slice(reader.offset, end) };
  } catch {
    return undefined;
  }
}

/** One of the two files: its sound frames, and the spans of bytes between them that are not. */
interface ScannedFile {
  readonly file: string;
  readonly exists: boolean;
  readonly size: number;
  readonly frames: StateFrame[];
  readonly damages: { offset: number; end: number }[];
  /** Sequence of its newest sound record (0 for none). */
  readonly newest: number;
}

function scanFile(kernels: Kernels, file: string, belongs: (record: Uint8Array) => boolean): ScannedFile {
  let bytes: Uint8Array;
  try {
    bytes = fs.readFileSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT')
      return { file, exists: false, size: 0, frames: [], damages: [], newest: 0 };
    throw ioError(error, `cannot read ${file}`);
  }
  const frames: StateFrame[] = [];
  const damages: { offset: number; end: number }[] = [];
  for (let at = 0; at < bytes.length; ) {
    const frame = frameAt(kernels, bytes, at);
    // A sound record of another log (a file put in the wrong place) is damage here.
    if (frame && belongs(frame.record)) {
      frames.push(frame);
      at = frame.end;
      continue;
    }
    const last = damages[damages.length - 1];
    if (last && last.end === at) last.end = at + 1;
    else damages.push({ offset: at, end: at + 1 });
    at++;
  }
  const newest = frames.reduce((best, frame) => Math.max(best, frame.sequence), 0);
  return { file, exists: true, size: bytes.length, frames, damages, newest };
}

/**
 * True when damage at the end of `one` (and nowhere before it) is the torn last write: a record
 * is written to the first file, then to the copy, so the first file's torn write leaves both
 * files at the same newest record, and the copy's leaves it one behind the first.
 */
function tailIsTorn(one: ScannedFile, isCopy: boolean, other: ScannedFile): boolean {
  const soundEnd = one.frames.length === 0 ? 0 : one.frames[one.frames.length - 1].end;
  if (soundEnd >= one.size || one.damages.some((damage) => damage.offset < soundEnd)) return false;
  if (!other.exists) return !isCopy;
  return isCopy ? one.newest === other.newest - 1 : one.newest === other.newest;
}

/** An open file of the pair: where the next record goes. */
interface OpenFile {
  readonly file: string;
  fd: number;
  size: number;
}

export class StateLog {
  /** Damage found on open that was not a torn last write: reported, never cut. */
  readonly corruptions: Corruption[] = [];

  private constructor(
    private readonly kernels: Kernels,
    readonly file: string,
    private readonly files: OpenFile[],
    private sequence: number,
    private lastRecord: Uint8Array | undefined,
  ) {}

  /**
   * Opens (or creates) the log's two files and finds the newest record in either. A torn last
   * write is cut (unless `readOnly`, which changes nothing and needs no files).
   */
  static async open(
    kernels: Kernels,
    file: string,
    readOnly = false,
    /** False for a sound record that is not this log's (its bytes name another). */
    belongs: (record: Uint8Array) => boolean = () => true,
  ): Promise<StateLog> {
    const scanned = [scanFile(kernels, file, belongs), scanFile(kernels, `${file}${stateLogCopySuffix}`, belongs)];
    const newest = Math.max(...scanned.map((one) => one.newest));
    const log = new StateLog(kernels, file, [], newest, undefined);
    for (const one of scanned) {
      const frame = one.frames.find((candidate) => candidate.sequence === newest);
      if (frame) log.lastRecord = frame.record;
    }
    log.noteDamage(scanned[0], false, scanned[1]);
    log.noteDamage(scanned[1], true, scanned[0]);
    if (readOnly) return log;
    try {
      for (const [index, one] of scanned.entries())
        log.files.push(await StateLog.openForWrites(kernels, one, tailIsTorn(one, index === 1, scanned[1 - index])));
      await log.catchUp(scanned);
    } catch (error) {
      log.close();
      throw error;
    }
    return log;
  }

  /** Torn last writes found on open (cut unless read-only; verify reports them). */
  readonly tornTails: Corruption[] = [];

  /** Records what is wrong with one file of the pair. */
  private noteDamage(one: ScannedFile, isCopy: boolean, other: ScannedFile): void {
    const soundEnd = one.frames.length === 0 ? 0 : one.frames[one.frames.length - 1].end;
    const torn = tailIsTorn(one, isCopy, other);
    for (const damage of one.damages) {
      const where = {
        file: one.file,
        offset: damage.offset,
        reason: `${damage.end - damage.offset} damaged bytes in a state log`,
      };
      if (torn && damage.offset >= soundEnd) this.tornTails.push(where);
      else this.corruptions.push(where);
    }
    const behind = isCopy ? other.newest - one.newest > 1 : one.newest < other.newest;
    if ((one.exists || other.exists) && behind) {
      this.corruptions.push({
        file: one.file,
        offset: soundEnd,
        reason: one.exists
          ? `its newest record is ${one.newest}, its other file's ${other.newest}`
          : 'the file is missing',
        harmless: true,
      });
    } else if (isCopy && one.newest < other.newest) {
      // The copy one record behind: its write never completed (the first file is written and
      // synced first). Nothing is lost, and a read-write open gives it the record; verify says so.
      this.tornTails.push({
        file: one.file,
        offset: soundEnd,
        reason: `its newest record, ${other.newest}, is missing: a copy write that never completed`,
      });
    }
  }

  /**
   * Gives a file that lacks the newest record (its copy was torn, or it was lost) that record,
   * under the same sequence. Without this a file that missed one write keeps a gap in its
   * sequences, and its next torn write would leave it two sequences behind, which no single torn
   * write explains: a later open would report sound files as damaged.
   */
  private async catchUp(scanned: readonly ScannedFile[]): Promise<void> {
    if (this.lastRecord === undefined) return;
    const frame = this.frame(this.sequence, this.lastRecord);
    for (const [index, one] of scanned.entries()) {
      if (one.newest >= this.sequence) continue;
      await this.append(this.files[index], frame);
    }
  }

  /** Opens one file of the pair for appending, cutting its torn last write. */
  private static async openForWrites(kernels: Kernels, one: ScannedFile, tornTail: boolean): Promise<OpenFile> {
    let fd: number;
    try {
      if (!one.exists) fs.mkdirSync(path.dirname(one.file), { recursive: true });
      fd = fs.openSync(one.file, one.exists ? 'r+' : 'w+');
    } catch (error) {
      throw ioError(error, `cannot open ${one.file}`);
    }
    const soundEnd = one.frames.length === 0 ? 0 : one.frames[one.frames.length - 1].end;
    let size = one.size;
    if (tornTail) {
      fs.ftruncateSync(fd, soundEnd);
      await kernels.writeDurable(fd, soundEnd, []);
      size = soundEnd;
    }
    if (!one.exists) await syncDirectory(path.dirname(one.file));
    return { file: one.file, fd, size };
  }

  /** The newest durable record, or undefined when none was ever written. */
  get last(): Uint8Array | undefined {
    return this.lastRecord;
  }

  /**
   * Set once a write failed: the files may hold part of it (the first file's copy, say), so
   * nothing more is written — a second record under the same sequence would be ambiguous —
   * until the log is opened again and reads what the disk kept.
   */
  private failure: StreamStackError | undefined;

  /** Appends a record to both files, one after the other, and resolves once both are durable. */
  async write(record: Uint8Array): Promise<void> {
    assert(this.files.length === 2, 'a state log opened read-only is never written');
    if (this.failure) throw this.failure;
    try {
      await this.writeBoth(record);
    } catch (error) {
      this.failure = ioError(
        error,
        `a write to ${this.file} failed; it accepts no more writes until it is opened again`,
      );
      throw this.failure;
    }
  }

  private async writeBoth(record: Uint8Array): Promise<void> {
    const sequence = this.sequence + 1;
    const bytes = this.frame(sequence, record);
    for (const open of this.files) await this.append(open, bytes);
    this.sequence = sequence;
    this.lastRecord = record.slice();
  }

  private frame(sequence: number, record: Uint8Array): Uint8Array {
    const builder = new FrameBuilder(stateLogBytesMax);
    builder.begin(stateRecordKind, false).varint(sequence).raw(record);
    builder.end();
    return builder.finish(this.kernels);
  }

  /** Appends one frame to one file durably, rewriting the file when the frame would pass its bound. */
  private async append(open: OpenFile, bytes: Uint8Array): Promise<void> {
    if (open.size + bytes.length > stateLogBytesMax) await this.rewrite(open, bytes);
    else {
      await this.kernels.writeDurable(open.fd, open.size, [bytes]);
      open.size += bytes.length;
    }
  }

  private async rewrite(open: OpenFile, frame: Uint8Array): Promise<void> {
    const next = `${open.file}.next`;
    fs.rmSync(next, { force: true });
    const fd = fs.openSync(next, 'w+');
    try {
      await this.kernels.writeDurable(fd, 0, [frame]);
    } catch (error) {
      fs.closeSync(fd);
      throw error;
    }
    fs.renameSync(next, open.file);
    await syncDirectory(path.dirname(open.file));
    fs.closeSync(open.fd);
    open.fd = fd;
    open.size = frame.length;
  }

  /** Deletes both files (a subscription's delete). */
  remove(): void {
    this.close();
    fs.rmSync(this.file, { force: true });
    fs.rmSync(`${this.file}${stateLogCopySuffix}`, { force: true });
  }

  close(): void {
    for (const open of this.files.splice(0)) fs.closeSync(open.fd);
  }
}
