/**
 * The command line's input and output (docs/cli.md): NDJSON on stdout, one object per line;
 * messages on stderr; a typed error as `{"error":{"code","message"}}` on stderr with exit code 1.
 */
import { limits, StreamStackError, ioError, type AppendRecord, type StreamRecord } from '@streamstack/engine';

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
export async function emit(value: unknown): Promise<void> {
  checkOutput();
  const flowing = process.stdout.write(`${JSON.stringify(value)}\n`);
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

/**
 * Input lines and output fields are decoded fatally, because a replacement character would
 * silently change the bytes. The output decoder keeps a leading byte-order mark, which belongs
 * to the stored payload; the input decoder drops one before a line's JSON, where it means nothing.
 */
const inputDecoder = new TextDecoder('utf-8', { fatal: true });
const outputDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The fields an input record line may have; anything else is most likely a typo (`tag`). */
const recordFields = new Set(['payload', 'payloadBase64', 'key', 'version', 'tombstone', 'type', 'tags', 'fingerprint', 'timestamp']);

/** The fields passed to the engine as they are, which checks them (docs/cli.md). */
const passedFields = ['key', 'version', 'tombstone', 'type', 'tags', 'fingerprint', 'timestamp'] as const;

type Refusal = (reason: string, details?: Record<string, unknown>) => StreamStackError;

function refusal(line: number): Refusal {
  return (reason, details = {}) =>
    new StreamStackError('INVALID_RECORD', `input line ${line}: ${reason}`, { details: { line, ...details } });
}

/**
 * True when arrays and objects in `value` nest deeper than `depthMax`. Walks with an explicit
 * stack rather than recursion, so that the check itself cannot run out of stack.
 */
export function nestsDeeperThan(value: unknown, depthMax: number): boolean {
  const pending: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (pending.length > 0) {
    const { value: next, depth } = pending.pop()!;
    if (typeof next !== 'object' || next === null) continue;
    if (depth + 1 > depthMax) return true;
    for (const child of Object.values(next)) pending.push({ value: child, depth: depth + 1 });
  }
  return false;
}

/** The bytes of canonical base64 text: the text must be exactly what encoding them gives back. */
function canonicalBase64(text: unknown, bad: Refusal): Uint8Array {
  if (typeof text !== 'string') throw bad('payloadBase64 must be a base64 string', { field: 'payloadBase64' });
  const bytes = Buffer.from(text, 'base64');
  // Node's decoder skips characters outside the alphabet and stray bits, so a round trip is
  // the only way to know nothing was dropped: `Q`, for one, decodes to no bytes at all.
  if (bytes.toString('base64') !== text) {
    throw bad('payloadBase64 must be canonical base64 (standard alphabet, padded to a multiple of 4 characters)', {
      field: 'payloadBase64',
    });
  }
  return new Uint8Array(bytes);
}

function payloadOf(input: Record<string, unknown>, bad: Refusal): Uint8Array | string {
  if (input.payloadBase64 !== undefined) {
    if (input.payload !== undefined) throw bad('a record has payload or payloadBase64, not both', { field: 'payloadBase64' });
    return canonicalBase64(input.payloadBase64, bad);
  }
  if (input.payload === undefined) throw bad('a record needs a payload (or payloadBase64)', { field: 'payload' });
  if (typeof input.payload === 'string') return input.payload;
  if (nestsDeeperThan(input.payload, limits.jsonNestingDepthMax)) {
    throw bad(`payload nests arrays and objects more than ${limits.jsonNestingDepthMax} levels deep`, { field: 'payload' });
  }
  // A JSON value that is not a string is stored as its JSON text.
  return JSON.stringify(input.payload);
}

/** Turns one input line (already parsed JSON) into a record; `line` is 1-based for messages. */
export function parseRecordLine(value: unknown, line: number): AppendRecord {
  const bad = refusal(line);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad('a record is a JSON object');
  const input = value as Record<string, unknown>;
  const unknown = Object.keys(input).find((field) => !recordFields.has(field));
  if (unknown !== undefined) {
    throw bad(`unknown field ${JSON.stringify(unknown)} (known: ${[...recordFields].join(', ')})`, { field: unknown });
  }
  const record: Record<string, unknown> = { payload: payloadOf(input, bad) };
  for (const field of passedFields) {
    if (input[field] !== undefined) record[field] = input[field];
  }
  return record as unknown as AppendRecord;
}

const newline = 0x0a;
const carriageReturn = 0x0d;

/** `bytes` without one trailing carriage return, so that CRLF input reads like LF input. */
function withoutCarriageReturn(bytes: Uint8Array): Uint8Array {
  return bytes.at(-1) === carriageReturn ? bytes.subarray(0, -1) : bytes;
}

/**
 * Splits a byte stream into lines at '\n' (a last line without one counts too). Pieces of a
 * line are joined once, when it ends, so a long line spread over many chunks costs no copying
 * per chunk.
 */
export async function* byteLines(input: AsyncIterable<Uint8Array> | Iterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  let pieces: Uint8Array[] = [];
  for await (const chunk of input) {
    let start = 0;
    for (let end = chunk.indexOf(newline); end !== -1; end = chunk.indexOf(newline, start)) {
      pieces.push(chunk.subarray(start, end));
      yield withoutCarriageReturn(Buffer.concat(pieces));
      pieces = [];
      start = end + 1;
    }
    if (start < chunk.length) pieces.push(chunk.subarray(start));
  }
  if (pieces.length > 0) yield withoutCarriageReturn(Buffer.concat(pieces));
}

/** Decodes one input line; bytes that are not UTF-8 belong in payloadBase64. */
function decodeLine(bytes: Uint8Array, line: number): string {
  try {
    return inputDecoder.decode(bytes);
  } catch (error) {
    throw new StreamStackError('INVALID_RECORD', `input line ${line} is not valid UTF-8 (binary payloads go in payloadBase64)`, {
      cause: error,
      details: { line },
    });
  }
}

/** Parses one decoded input line; blank lines give undefined. */
export function parseLine(text: string, line: number): AppendRecord | undefined {
  if (text.trim() === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new StreamStackError('INVALID_RECORD', `input line ${line} is not valid JSON`, { cause: error, details: { line } });
  }
  return parseRecordLine(value, line);
}

/** Reads NDJSON records from `input` (stdin by default); blank lines are skipped. */
export async function readRecords(input: AsyncIterable<Uint8Array> | Iterable<Uint8Array> = process.stdin): Promise<AppendRecord[]> {
  const records: AppendRecord[] = [];
  let number = 0;
  for await (const bytes of byteLines(input)) {
    number++;
    const record = parseLine(decodeLine(bytes, number), number);
    if (record) records.push(record);
  }
  return records;
}

/** Bytes for output under `name`: UTF-8 text when valid, else base64 under `<name>Base64`. */
export function bytesField(name: string, bytes: Uint8Array): Record<string, string> {
  try {
    return { [name]: outputDecoder.decode(bytes) };
  } catch {
    return { [`${name}Base64`]: Buffer.from(bytes).toString('base64') };
  }
}

/** An output record line (docs/cli.md): the record's fields, the payload as text or base64. */
export function recordLine(record: StreamRecord): Record<string, unknown> {
  return {
    feed: record.feed,
    commit: record.commit ?? null,
    stream: record.stream,
    seq: record.seq,
    position: record.position ?? null,
    timestamp: record.timestamp,
    ...bytesField('payload', record.payload),
    ...(record.key === undefined ? {} : { key: record.key }),
    ...(record.version === undefined ? {} : { version: record.version }),
    ...(record.tombstone ? { tombstone: true } : {}),
    ...(record.type === undefined ? {} : { type: record.type }),
    ...(record.tags.length === 0 ? {} : { tags: record.tags }),
    ...(record.fingerprint === undefined ? {} : bytesField('fingerprint', record.fingerprint)),
  };
}
