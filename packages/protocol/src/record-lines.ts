/**
 * The record line format (docs/cli.md) that the command line and the HTTP server read and write,
 * and the HTTP client speaks: one JSON object per line. An input line is a record to append
 * (`{"payload": …, "key"?, …}`); an output line is a stored record, its bytes as UTF-8 text when
 * they are valid, else base64 under `<field>Base64`. Decoding is exact both ways, so a record
 * that crosses a pipe or a socket comes back byte for byte.
 *
 * @example
 * import { parseLine, recordLine, recordFromLine } from '@streamstack/protocol'; // or '@streamstack/engine'
 * const record = parseLine('{"payload":"hi","type":"greeting"}', 1); // an AppendRecord
 * const line = JSON.stringify(recordLine(stored)); // and back: recordFromLine(JSON.parse(line))
 */
import { isUtf8 } from 'node:buffer';
import { StreamStackError } from './errors.js';
import { jsonNestingDepthMax } from './limits.js';
import type { AppendRecord, StoredRecord, StreamRecord } from './records.js';

/**
 * Input lines and output fields are decoded fatally, because a replacement character would
 * silently change the bytes. The output decoder keeps a leading byte-order mark, which belongs
 * to the stored payload; the input decoder drops one before a line's JSON, where it means nothing.
 */
const inputDecoder = new TextDecoder('utf-8', { fatal: true });
const lenientDecoder = new TextDecoder('utf-8', { ignoreBOM: true });
/** What a lenient decode puts where bytes are not UTF-8. */
const replacementCharacter = '\uFFFD';

/** The fields an input record line may have; anything else is most likely a typo (`tag`). */
const recordFields = new Set([
  'payload',
  'payloadBase64',
  'key',
  'version',
  'tombstone',
  'type',
  'tags',
  'fingerprint',
  'fingerprintBase64',
  'timestamp',
]);

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
function canonicalBase64(text: unknown, bad: Refusal, field: string): Uint8Array {
  if (typeof text !== 'string') throw bad(`${field} must be a base64 string`, { field });
  const bytes = Buffer.from(text, 'base64');
  // Node's decoder skips characters outside the alphabet and stray bits, so a round trip is
  // the only way to know nothing was dropped: `Q`, for one, decodes to no bytes at all.
  if (bytes.toString('base64') !== text) {
    throw bad(`${field} must be canonical base64 (standard alphabet, padded to a multiple of 4 characters)`, { field });
  }
  return new Uint8Array(bytes);
}

function payloadOf(input: Record<string, unknown>, bad: Refusal): Uint8Array | string {
  if (input.payloadBase64 !== undefined) {
    if (input.payload !== undefined)
      throw bad('a record has payload or payloadBase64, not both', { field: 'payloadBase64' });
    return canonicalBase64(input.payloadBase64, bad, 'payloadBase64');
  }
  if (input.payload === undefined) throw bad('a record needs a payload (or payloadBase64)', { field: 'payload' });
  if (typeof input.payload === 'string') return input.payload;
  if (nestsDeeperThan(input.payload, jsonNestingDepthMax)) {
    throw bad(`payload nests arrays and objects more than ${jsonNestingDepthMax} levels deep`, { field: 'payload' });
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
  if (input.fingerprintBase64 !== undefined) {
    if (input.fingerprint !== undefined)
      throw bad('a record has fingerprint or fingerprintBase64, not both', { field: 'fingerprintBase64' });
    record.fingerprint = canonicalBase64(input.fingerprintBase64, bad, 'fingerprintBase64');
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
    throw new StreamStackError(
      'INVALID_RECORD',
      `input line ${line} is not valid UTF-8 (binary payloads go in payloadBase64)`,
      {
        cause: error,
        details: { line },
      },
    );
  }
}

/** Parses one decoded input line; blank lines give undefined. */
export function parseLine(text: string, line: number): AppendRecord | undefined {
  if (text.trim() === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new StreamStackError('INVALID_RECORD', `input line ${line} is not valid JSON`, {
      cause: error,
      details: { line },
    });
  }
  return parseRecordLine(value, line);
}

/**
 * NDJSON records from `input` as they arrive, each with the bytes of its line (blank lines are
 * skipped), so that a reader of any amount of input holds only what it has not handed on yet.
 */
export async function* recordLines(
  input: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
): AsyncGenerator<{ record: AppendRecord; bytes: number }> {
  let number = 0;
  for await (const bytes of byteLines(input)) {
    number++;
    const record = parseLine(decodeLine(bytes, number), number);
    if (record) yield { record, bytes: bytes.length };
  }
}

/** Reads NDJSON records from `input`; blank lines are skipped. */
export async function readRecordLines(
  input: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
): Promise<AppendRecord[]> {
  const records: AppendRecord[] = [];
  for await (const { record } of recordLines(input)) records.push(record);
  return records;
}

/**
 * Bytes for output under `name`: UTF-8 text when valid, else base64 under `<name>Base64`.
 * A lenient decode gives text at once; only text holding U+FFFD, which invalid bytes decode to
 * (and which valid text may hold too), is checked with `isUtf8`. A fatal decode per payload
 * threw and caught an exception for every binary one, most of a read's time.
 */
export function bytesField(name: string, bytes: Uint8Array): Record<string, string> {
  const text = lenientDecoder.decode(bytes);
  if (!text.includes(replacementCharacter) || isUtf8(bytes)) return { [name]: text };
  return { [`${name}Base64`]: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64') };
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

/**
 * An input record line for `record`: the inverse of `parseRecordLine`, so that a record handed
 * to a remote feed arrives as the same bytes. Byte payloads and fingerprints go as base64.
 */
export function appendRecordLine(record: AppendRecord): Record<string, unknown> {
  const { payload, fingerprint, ...rest } = record;
  return {
    ...(typeof payload === 'string' ? { payload } : { payloadBase64: Buffer.from(payload).toString('base64') }),
    ...rest,
    ...(fingerprint === undefined
      ? {}
      : typeof fingerprint === 'string'
        ? { fingerprint }
        : { fingerprintBase64: Buffer.from(fingerprint).toString('base64') }),
  };
}

const encoder = new TextEncoder();

/** The bytes an output line holds under `name` or `<name>Base64`, or undefined when neither. */
function bytesOf(line: Record<string, unknown>, name: string): Uint8Array | undefined {
  const text = line[name];
  if (typeof text === 'string') return encoder.encode(text);
  const base64 = line[`${name}Base64`];
  if (typeof base64 === 'string') return new Uint8Array(Buffer.from(base64, 'base64'));
  return undefined;
}

/**
 * The record an output line describes: the inverse of `recordLine`. A line without a commit
 * (`"commit": null`) is a record of an open stream, which has no position yet either.
 */
export function recordFromLine(line: Record<string, unknown>): StreamRecord {
  if (typeof line !== 'object' || line === null || typeof line.feed !== 'string' || typeof line.seq !== 'number') {
    throw new StreamStackError('INVALID_RECORD', 'a record line is a JSON object with feed, stream and seq');
  }
  const payload = bytesOf(line, 'payload') ?? new Uint8Array(0);
  const tags = Array.isArray(line.tags) ? (line.tags as string[]) : [];
  // One object literal rather than spreads of optional fields: a full read makes one per record.
  const record: Record<string, unknown> = {
    feed: line.feed,
    commit: line.commit,
    position: line.position,
    stream: line.stream,
    seq: line.seq,
    timestamp: line.timestamp,
    payload,
    key: line.key,
    version: line.version,
    tombstone: line.tombstone === true,
    type: line.type,
    tags,
  };
  // A record of an open stream (rare in reads) has neither yet.
  if (typeof line.commit !== 'number') {
    delete record.commit;
    delete record.position;
  }
  const fingerprint = bytesOf(line, 'fingerprint');
  if (fingerprint !== undefined) record.fingerprint = fingerprint;
  return record as unknown as StreamRecord;
}

/** `recordFromLine` for a line known to hold a published record (one with a commit). */
export function storedRecordFromLine(line: Record<string, unknown>): StoredRecord {
  const record = recordFromLine(line);
  if (record.commit === undefined) throw new StreamStackError('INVALID_RECORD', 'a published record line has a commit');
  return record as StoredRecord;
}
