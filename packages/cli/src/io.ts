/**
 * The command line's input and output (docs/cli.md): NDJSON on stdout, one object per line;
 * messages on stderr; a typed error as `{"error":{"code","message"}}` on stderr with exit code 1.
 */
import { type AppendRecord, ioError, readRecordLines, type StreamStackError } from '@streamstack/engine';

// The record line format lives in the engine, so that the server and the client share it.
export { byteLines, bytesField, nestsDeeperThan, parseLine, parseRecordLine, recordLine } from '@streamstack/engine';

/**
 * Thrown by `emit` once whoever reads stdout has gone away (`streamstack read f | head -1`): the
 * command stops where it is, and `main` exits 0 without a word, as coreutils do under SIGPIPE.
 */
export class OutputClosed extends Error {
  constructor() {
    super('stdout was closed by its reader');
    this.name = 'OutputClosed';
  }
}

let outputGuarded = false;

/** The first error stdout reported after `guardOutput`. */
let outputFailure: NodeJS.ErrnoException | undefined;

/**
 * Keeps a failed write to stdout or stderr (EPIPE, when the reader is gone) from becoming an
 * uncaught 'error' event with a stack trace. The stdout listener keeps the first error for
 * `emit`; a message that cannot reach stderr has nowhere else to go, so that error is dropped.
 */
export function guardOutput(): void {
  if (outputGuarded) return;
  outputGuarded = true;
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    outputFailure ??= error;
  });
  process.stderr.on('error', () => {});
}

/** Throws `OutputClosed` once stdout's reader is gone, or a typed IO error for any other failure. */
function checkOutput(): void {
  const stdout = process.stdout;
  // A failed write sets `errored` at once; the 'error' event follows a tick later. Node never
  // marks stdout destroyed on EPIPE, so neither `destroyed` nor a 'close' event can be relied on.
  const failure = outputFailure ?? (stdout.errored as NodeJS.ErrnoException | null) ?? undefined;
  if (failure === undefined) {
    if (stdout.destroyed) throw new OutputClosed();
    return;
  }
  if (failure.code === 'EPIPE') throw new OutputClosed();
  throw ioError(failure, 'writing to stdout');
}

/** Resolves when stdout can take more, failed, or closed (which `checkOutput` then reports). */
function drained(): Promise<void> {
  const stdout = process.stdout;
  return new Promise((resolve) => {
    const settle = () => {
      stdout.off('drain', settle);
      stdout.off('error', settle);
      stdout.off('close', settle);
      resolve();
    };
    stdout.on('drain', settle);
    stdout.on('error', settle);
    stdout.on('close', settle);
  });
}

/** Writes one NDJSON line to stdout, waiting when the pipe is full; see `OutputClosed`. */
export function emit(value: unknown): Promise<void> {
  return emitBytes(`${JSON.stringify(value)}\n`);
}

/** Writes lines already made (a read's chunks of record lines) to stdout, as `emit` writes one. */
export async function emitBytes(lines: string | Uint8Array): Promise<void> {
  checkOutput();
  const flowing = process.stdout.write(lines);
  // A write to a pipe whose reader is gone fails at once, so there is no need to wait for it.
  checkOutput();
  if (!flowing) {
    await drained();
    checkOutput();
  }
}

export function note(message: string): void {
  process.stderr.write(`${message}\n`);
}

export function printError(error: StreamStackError): void {
  process.stderr.write(`${JSON.stringify({ error: error.toJSON() })}\n`);
}

/** Reads NDJSON records from `input` (stdin by default); blank lines are skipped. */
export function readRecords(
  input: AsyncIterable<Uint8Array> | Iterable<Uint8Array> = process.stdin,
): Promise<AppendRecord[]> {
  return readRecordLines(input);
}
