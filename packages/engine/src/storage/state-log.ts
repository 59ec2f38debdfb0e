/**
 * Small state logs (leases, subscriptions): CRC-framed records appended to one file, the last
 * sound record wins. A torn tail is cut on open. When the file grows past its bound, it is
 * rewritten with only the winning record (a new file renamed over the old one), because nothing
 * but the last record is ever read.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Kernels } from '../kernels/kernels.js';
import { stateLogBytesMax } from '../limits.js';
import { FrameBuilder, scanFrames } from './framing.js';
import { syncDirectory } from './segment.js';

/** Frame kind of a state record; the data after it is the caller's. */
const stateRecordKind = 0x21;

export class StateLog {
  private constructor(
    private readonly kernels: Kernels,
    readonly file: string,
    private fd: number,
    private size: number,
    private lastRecord: Uint8Array | undefined,
  ) {}

  /** Opens (or creates) the log, cuts any torn tail, and remembers the last record. */
  static async open(kernels: Kernels, file: string): Promise<StateLog> {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const existed = fs.existsSync(file);
    const fd = fs.openSync(file, existed ? 'r+' : 'w+');
    const bytes = existed ? fs.readFileSync(file) : new Uint8Array(0);
    const frames = scanFrames(kernels, bytes, 0, bytes.length).filter((frame) => frame.kind === stateRecordKind);
    const last = frames[frames.length - 1];
    const end = last ? last.dataEnd : 0;
    if (end < bytes.length) {
      fs.ftruncateSync(fd, end);
      await kernels.writeDurable(fd, end, []);
    }
    if (!existed) await syncDirectory(path.dirname(file));
    const record = last ? bytes.slice(last.dataStart + 1, last.dataEnd) : undefined;
    return new StateLog(kernels, file, fd, end, record);
  }

  /** The last durable record, or undefined when none was ever written. */
  get last(): Uint8Array | undefined {
    return this.lastRecord;
  }

  /** Appends a record and resolves once it is durable. */
  async write(record: Uint8Array): Promise<void> {
    const builder = new FrameBuilder(stateLogBytesMax);
    builder.begin(stateRecordKind, false).raw(record);
    builder.end();
    const bytes = builder.finish(this.kernels);
    if (this.size + bytes.length > stateLogBytesMax) {
      await this.rewrite(bytes);
    } else {
      await this.kernels.writeDurable(this.fd, this.size, [bytes]);
      this.size += bytes.length;
    }
    this.lastRecord = record.slice();
  }

  private async rewrite(frame: Uint8Array): Promise<void> {
    const next = `${this.file}.next`;
    fs.rmSync(next, { force: true });
    const fd = fs.openSync(next, 'w+');
    try {
      await this.kernels.writeDurable(fd, 0, [frame]);
    } catch (error) {
      fs.closeSync(fd);
      throw error;
    }
    fs.renameSync(next, this.file);
    await syncDirectory(path.dirname(this.file));
    fs.closeSync(this.fd);
    this.fd = fd;
    this.size = frame.length;
  }

  close(): void {
    fs.closeSync(this.fd);
  }
}
