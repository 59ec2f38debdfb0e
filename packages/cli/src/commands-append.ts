/**
 * `streamstack append`: records from stdin, read as a stream so that any amount of input costs
 * the same memory (docs/cli.md, Appending any amount of input). An API batch holds at most
 * `limits.batchRecordsMax` records (one group write, held in memory while it is written), so
 * the command cuts the input into batches as they fill:
 *
 * - into `--stream`: each batch is appended as it fills, each acknowledged before the next;
 * - one-shot, input that fits one batch is one one-shot append, as an event store's is; more
 *   goes through an implicit stream sealed at the end, so the whole input is one commit, and a
 *   failure or a kill before the seal leaves no commit at all;
 * - with `--commit-every N`, one one-shot commit per N records.
 */
import fs from 'node:fs';
import {
  type AppendRecord,
  type Feed,
  type LeaseGrant,
  limits,
  recordLines,
  StreamStackError,
} from '@streamstack/engine';
import { type Command, CommanderError } from 'commander';
import { emit, note } from './io.js';
import { appendBatchBytesMax, appendBatchRecordsMax, implicitLeaseTtlMs } from './limits.js';
import { type ProgressBar, progressBar, quietOption } from './progress.js';
import {
  addConditionOptions,
  type ConditionFlags,
  commitLine,
  conditionFrom,
  exitUsage,
  integer,
  openFeed,
  withStore,
} from './shared.js';

interface AppendFlags extends ConditionFlags {
  stream?: string;
  token?: string;
  expectedSeq?: number;
  message?: string;
  commitEvery?: number;
  quiet?: boolean;
}

/**
 * What `recordBatches` has taken from the input up to the batch it last yielded: records, and
 * bytes of their lines with the line ends.
 */
export interface InputCount {
  records: number;
  bytes: number;
}

/** Input records in batches of at most `recordsMax` records and about `bytesMax` bytes of lines. */
export async function* recordBatches(
  input: AsyncIterable<Uint8Array>,
  recordsMax: number,
  bytesMax = appendBatchBytesMax,
  count: InputCount = { records: 0, bytes: 0 },
): AsyncGenerator<AppendRecord[]> {
  let batch: AppendRecord[] = [];
  let bytes = 0;
  for await (const line of recordLines(input)) {
    batch.push(line.record);
    bytes += line.bytes;
    count.bytes += line.bytes + 1;
    if (batch.length >= recordsMax || bytes >= bytesMax) {
      count.records += batch.length;
      yield batch;
      batch = [];
      bytes = 0;
    }
  }
  if (batch.length > 0) {
    count.records += batch.length;
    yield batch;
  }
}

/**
 * How `append` shows its progress on stderr: bytes of stdin of its size when stdin is a regular
 * file (`< records.ndjson`), else records with their rate, as there is no total to show. The bar
 * stops short of the end until the input is committed (the seal of a long input takes a while).
 */
class AppendProgress {
  readonly count: InputCount = { records: 0, bytes: 0 };
  private readonly bar: ProgressBar | undefined;
  private readonly totalBytes: number | undefined;

  constructor(quiet: boolean | undefined) {
    // Records typed on a terminal and a bar on the same terminal would only get in each other's way.
    this.bar = process.stdin.isTTY ? undefined : progressBar('append', quiet);
    let size: number | undefined;
    try {
      const stat = fs.fstatSync(0);
      if (stat.isFile()) size = stat.size;
    } catch {
      // No stdin to look at: progress counts records.
    }
    this.totalBytes = size;
  }

  /** After a batch was appended (or committed). */
  appended(): void {
    if (!this.bar) return;
    if (this.totalBytes === undefined) this.bar.update({ done: this.count.records, unit: 'records' });
    else
      this.bar.update({ done: Math.min(this.count.bytes, this.totalBytes - 1), total: this.totalBytes, unit: 'bytes' });
  }

  /** Once everything is committed: the bar shows the whole input. */
  finished(): void {
    if (!this.bar) return;
    if (this.totalBytes === undefined) this.bar.update({ done: this.count.records, unit: 'records' });
    else this.bar.update({ done: this.totalBytes, total: this.totalBytes, unit: 'bytes' });
  }

  stop(): void {
    this.bar?.stop();
  }
}

/** The usage error of a command line that cannot be run. */
function usage(message: string): CommanderError {
  return new CommanderError(exitUsage, 'streamstack.usage', message);
}

export function addAppendCommand(program: Command): void {
  addConditionOptions(
    program
      .command('append <feed>')
      .description(
        'append NDJSON records from stdin, any amount: batches into --stream, or one commit (--commit-every N: one per N records)',
      )
      .option('--stream <id>', 'append the records to this open stream, a batch at a time')
      .option('--token <token>', 'the lease token (required with --stream, and while a lease is live)')
      .option(
        '--expected-seq <n>',
        'fail with SEQ_MISMATCH unless the records start at this seq',
        integer('--expected-seq'),
      )
      .option('--message <message>', 'commit message (one-shot appends)')
      .option(
        '--commit-every <n>',
        `one commit per this many records (1 to ${limits.batchRecordsMax}), not one for the whole input`,
        integer('--commit-every'),
      )
      .addOption(quietOption()),
  ).action((feedName: string, options: AppendFlags) =>
    withStore(program, async (store) => {
      const condition = conditionFrom(options);
      if (options.stream !== undefined && options.token === undefined) throw usage('append --stream needs --token');
      if (options.stream !== undefined && condition)
        throw usage('conditions apply to one-shot appends and to stream seal, not to stream batches');
      if (options.commitEvery !== undefined) {
        if (options.stream !== undefined)
          throw usage('--commit-every makes one-shot commits; it does not go with --stream');
        if (condition)
          throw usage(
            '--commit-every makes many commits: a condition applies to one (leave out --commit-every, or the condition)',
          );
        if (options.commitEvery < 1 || options.commitEvery > limits.batchRecordsMax)
          throw usage(`--commit-every takes 1 to ${limits.batchRecordsMax}`);
      }
      if (process.stdin.isTTY)
        note(
          'reading NDJSON records from stdin (one JSON object a line; end with Ctrl-D), e.g. echo \'{"payload":"hello"}\' | streamstack append FEED',
        );
      const feed = await openFeed(store, feedName);
      const input = process.stdin as AsyncIterable<Uint8Array>;
      const progress = new AppendProgress(options.quiet);
      try {
        if (options.stream !== undefined) await appendToStream(feed, options.stream, options, input, progress);
        else if (options.commitEvery !== undefined)
          await appendCommits(feed, options, options.commitEvery, input, progress);
        else await appendOneCommit(feed, options, input, progress);
      } finally {
        progress.stop();
      }
    })(),
  );
}

/** Every batch into the open stream `id`, each acknowledged before the next is read. */
async function appendToStream(
  feed: Feed,
  id: string,
  options: AppendFlags,
  input: AsyncIterable<Uint8Array>,
  progress: AppendProgress,
): Promise<void> {
  const stream = await feed.stream(id);
  let first: number | undefined;
  let last: number | undefined;
  for await (const batch of recordBatches(input, appendBatchRecordsMax, appendBatchBytesMax, progress.count)) {
    // Each batch after the first must follow the one before exactly: a retry after a lost
    // acknowledgement cannot write one twice.
    const expectedSeq = last === undefined ? options.expectedSeq : last + 1;
    const appended = await stream.append(batch, {
      token: options.token!,
      ...(expectedSeq === undefined ? {} : { expectedSeq }),
    });
    first ??= appended.firstSeq;
    last = appended.lastSeq;
    progress.appended();
  }
  if (first === undefined || last === undefined)
    throw new StreamStackError('INVALID_ARGUMENT', 'no records on stdin: append reads NDJSON record lines');
  progress.finished();
  await emit({ stream: id, firstSeq: first, lastSeq: last });
}

/** One one-shot commit per `every` records. */
async function appendCommits(
  feed: Feed,
  options: AppendFlags,
  every: number,
  input: AsyncIterable<Uint8Array>,
  progress: AppendProgress,
): Promise<void> {
  let any = false;
  for await (const batch of recordBatches(input, every, Number.POSITIVE_INFINITY, progress.count)) {
    any = true;
    const commit = await feed.append(batch, {
      ...(options.token === undefined ? {} : { token: options.token }),
      ...(options.message === undefined ? {} : { message: options.message }),
    });
    progress.appended();
    await emit(commitLine(commit));
  }
  if (!any) throw new StreamStackError('INVALID_ARGUMENT', 'no records on stdin: append reads NDJSON record lines');
  progress.finished();
}

/**
 * The whole input as one commit: a one-shot append when it fits one batch, else an implicit
 * stream under the caller's lease (`--token`) or one taken for it, sealed once the input ends.
 */
async function appendOneCommit(
  feed: Feed,
  options: AppendFlags,
  input: AsyncIterable<Uint8Array>,
  progress: AppendProgress,
): Promise<void> {
  const condition = conditionFrom(options);
  const batches = recordBatches(input, appendBatchRecordsMax, appendBatchBytesMax, progress.count);
  const first = await batches.next();
  if (first.done)
    throw new StreamStackError('INVALID_ARGUMENT', 'no records on stdin: append reads NDJSON record lines');
  const second = await batches.next();
  if (second.done) {
    const commit = await feed.append(first.value, {
      ...(options.token === undefined ? {} : { token: options.token }),
      ...(options.message === undefined ? {} : { message: options.message }),
      ...(condition ? { condition } : {}),
    });
    progress.finished();
    await emit(commitLine(commit));
    return;
  }
  const lease =
    options.token === undefined
      ? await feed.acquireLease({ holder: `streamstack append (pid ${process.pid})`, ttlMs: implicitLeaseTtlMs })
      : undefined;
  const token = options.token ?? lease!.token;
  const renewal = lease ? keepRenewed(feed, lease) : undefined;
  let stream: Awaited<ReturnType<Feed['openStream']>> | undefined;
  try {
    try {
      stream = await feed.openStream({ token, ...(options.message === undefined ? {} : { message: options.message }) });
    } catch (error) {
      if (error instanceof StreamStackError && error.code === 'STREAM_OPEN') {
        throw new StreamStackError(
          'STREAM_OPEN',
          `${error.message}: an append of more than ${appendBatchRecordsMax} records commits through a stream of its own. If an earlier append was interrupted, its stream holds records that were never committed: abort it (streamstack stream abort FEED ID --token T)`,
          { cause: error, details: error.details },
        );
      }
      throw error;
    }
    // Two batches were read: the progress counts both once both are appended.
    await stream.append(first.value, { token });
    await stream.append(second.value, { token });
    progress.appended();
    // The generator goes on from where the two batches above left it.
    for await (const batch of batches) {
      renewal?.check();
      await stream.append(batch, { token });
      progress.appended();
    }
    renewal?.check();
    const commit = await stream.seal({
      token,
      ...(options.message === undefined ? {} : { message: options.message }),
      ...(condition ? { condition } : {}),
    });
    stream = undefined;
    progress.finished();
    await emit(commitLine(commit));
  } finally {
    renewal?.stop();
    // A failure before the seal leaves no commit: the records appended so far are aborted.
    if (stream) await stream.abort({ token }).catch(() => undefined);
    if (lease) await feed.releaseLease({ token: lease.token }).catch(() => undefined);
  }
}

/**
 * Keeps a lease the command took alive while it reads input: renewed every third of its time to
 * live, in the background. A renewal that fails is reported at the next `check`.
 */
function keepRenewed(feed: Feed, lease: LeaseGrant): { check(): void; stop(): void } {
  let failure: unknown;
  const timer = setInterval(() => {
    feed.renewLease({ token: lease.token, ttlMs: implicitLeaseTtlMs }).catch((error: unknown) => {
      failure ??= error;
    });
  }, implicitLeaseTtlMs / 3);
  timer.unref();
  return {
    check: () => {
      if (failure !== undefined) throw failure;
    },
    stop: () => clearInterval(timer),
  };
}
