/**
 * The command line's input and output (DESIGN §9): NDJSON on stdout, one object per line;
 * messages on stderr; a typed error as `{"error":{"code","message"}}` on stderr with exit code 1.
 */
import readline from 'node:readline';
import { StreamStackError, type AppendRecord, type StreamRecord } from '@streamstack/engine';

/** Writes one NDJSON line to stdout, waiting when the pipe is full. */
export async function emit(value: unknown): Promise<void> {
  if (!process.stdout.write(`${JSON.stringify(value)}\n`)) {
    await new Promise<void>((resolve) => process.stdout.once('drain', resolve));
  }
}

export function note(message: string): void {
  process.stderr.write(`${message}\n`);
}

export function printError(error: StreamStackError): void {
  process.stderr.write(`${JSON.stringify({ error: error.toJSON() })}\n`);
}

const decoder = new TextDecoder('utf-8', { fatal: true });

/** Turns one input line (already parsed JSON) into a record; `line` is 1-based for messages. */
export function parseRecordLine(value: unknown, line: number): AppendRecord {
  const bad = (reason: string) =>
    new StreamStackError('INVALID_RECORD', `input line ${line}: ${reason}`, { details: { line } });
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad('a record is a JSON object');
  const input = value as Record<string, unknown>;
  let payload: Uint8Array | string;
  if (input.payloadBase64 !== undefined) {
    if (typeof input.payloadBase64 !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(input.payloadBase64)) {
      throw bad('payloadBase64 must be a base64 string');
    }
    payload = new Uint8Array(Buffer.from(input.payloadBase64, 'base64'));
  } else if (input.payload === undefined) {
    throw bad('a record needs a payload (or payloadBase64)');
  } else {
    // A JSON value that is not a string is stored as its JSON text.
    payload = typeof input.payload === 'string' ? input.payload : JSON.stringify(input.payload);
  }
  const record: Record<string, unknown> = { payload };
  for (const field of ['key', 'version', 'tombstone', 'type', 'tags', 'fingerprint', 'timestamp'] as const) {
    if (input[field] !== undefined) record[field] = input[field];
  }
  return record as unknown as AppendRecord;
}

/** Reads NDJSON records from stdin; blank lines are skipped. */
export async function readRecords(): Promise<AppendRecord[]> {
  const records: AppendRecord[] = [];
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let number = 0;
  for await (const line of lines) {
    number++;
    if (line.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new StreamStackError('INVALID_RECORD', `input line ${number} is not valid JSON`, { cause: error, details: { line: number } });
    }
    records.push(parseRecordLine(value, number));
  }
  return records;
}

/** Bytes for output under `name`: UTF-8 text when valid, else base64 under `<name>Base64`. */
export function bytesField(name: string, bytes: Uint8Array): Record<string, string> {
  try {
    return { [name]: decoder.decode(bytes) };
  } catch {
    return { [`${name}Base64`]: Buffer.from(bytes).toString('base64') };
  }
}

/** An output record line (DESIGN §9): the record's fields, the payload as text or base64. */
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
