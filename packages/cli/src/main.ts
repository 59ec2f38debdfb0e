/**
 * `streamstack [--data DIR] COMMAND …` — the command line of docs/cli.md. Every command opens the
 * data directory, does one thing, prints NDJSON and closes it again. Exit codes: 0 success,
 * 1 a typed error (printed as JSON on stderr), 2 bad usage.
 */

import { ioError, StreamStackError } from '@streamstack/engine';
import { Command, CommanderError, Option } from 'commander';
import { addAppendCommand } from './commands-append.js';
import { addExportCommand } from './commands-export.js';
import { addGroupCommands } from './commands-groups.js';
import { addHistoryCommands } from './commands-history.js';
import { addClusterCommand, addInfoCommand, cliVersion } from './commands-info.js';
import { addReadCommands } from './commands-read.js';
import { addServeCommand } from './commands-serve.js';
import { addTokenCommand } from './commands-token.js';
import { addWriteCommands } from './commands-write.js';
import { guardOutput, note, OutputClosed, printError } from './io.js';
import { exitSuccess, exitTypedError, exitUsage, integer } from './shared.js';

export function buildProgram(): Command {
  const program = new Command('streamstack')
    .description('StreamStack: a durable stream store. NDJSON out; errors as JSON on stderr.')
    .version(cliVersion, '-V, --version', 'print the version and exit')
    .addOption(new Option('--data <dir>', 'data directory').env('STREAMSTACK_DATA').default('./data'))
    .addOption(
      new Option(
        '--object-store <address>',
        'tier sealed history to S3-compatible object storage at s3://bucket/prefix (credentials from the AWS environment or config, never here)',
      ).env('STREAMSTACK_OBJECT_STORE'),
    )
    .addOption(
      new Option('--object-store-endpoint <url>', "the object store's URL, for a server other than AWS S3").env(
        'STREAMSTACK_OBJECT_STORE_ENDPOINT',
      ),
    )
    .addOption(
      new Option(
        '--object-store-region <region>',
        "the object store's region (default: AWS_REGION, else us-east-1)",
      ).env('STREAMSTACK_OBJECT_STORE_REGION'),
    )
    .addOption(
      new Option(
        '--local-history-bytes-max <bytes>',
        'with --object-store: keep at most this many bytes of sealed history on the local disk; older segments are read back from object storage',
      )
        .env('STREAMSTACK_LOCAL_HISTORY_BYTES_MAX')
        .argParser(integer('--local-history-bytes-max')),
    )
    .addOption(
      new Option(
        '--follower',
        'with --object-store: follow the feeds another machine writes and tiers there; this data directory keeps their summaries and indexes, records are read from object storage, and writes are refused',
      ).env('STREAMSTACK_FOLLOWER'),
    )
    .addOption(
      new Option(
        '--follow <url>',
        "with --follower: also read each feed's unsealed tail from its writer's server (streamstack serve at this address), so new commits are read within moments of their seal; a token the server asks for comes from STREAMSTACK_FOLLOW_TOKEN",
      ).env('STREAMSTACK_FOLLOW'),
    )
    .addOption(
      new Option(
        '--etcd <urls>',
        'keep writer leases in etcd at these client URLs (comma-separated), so that every node of a cluster sees one lease per feed (docs/cluster.md)',
      ).env('STREAMSTACK_ETCD'),
    )
    .addOption(
      new Option('--etcd-prefix <prefix>', 'with --etcd: what every key starts with (default /streamstack/)').env(
        'STREAMSTACK_ETCD_PREFIX',
      ),
    )
    .addOption(
      new Option(
        '--etcd-node <name>',
        "with --etcd: this node's name beside the leases it holds (default: host name and process id)",
      ).env('STREAMSTACK_ETCD_NODE'),
    )
    .option(
      '--break-lock',
      'only where the native module cannot load: remove a LOCK file left by a process that died (check that none uses the directory first)',
    )
    .showHelpAfterError()
    .exitOverride();
  addWriteCommands(program);
  addAppendCommand(program);
  addReadCommands(program);
  addGroupCommands(program);
  addHistoryCommands(program);
  addExportCommand(program);
  addServeCommand(program);
  addTokenCommand(program);
  addInfoCommand(program);
  addClusterCommand(program);
  return program;
}

/** True for a failure the operating system reported: its `code` is an errno name (`EROFS`). */
export function isSystemError(error: unknown): error is NodeJS.ErrnoException {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  // Node's own errors carry codes too (`ERR_INVALID_ARG_TYPE`), but those are bugs, not the OS.
  return error instanceof Error && typeof code === 'string' && /^E[A-Z0-9]+$/.test(code);
}

/**
 * The typed error to print for a failure that reached `main`. An OS failure becomes an `IO`
 * error with its errno; anything else is a bug in StreamStack, reported as `INTERNAL`.
 */
export function typedErrorOf(error: unknown): StreamStackError {
  if (error instanceof StreamStackError) return error;
  if (isSystemError(error)) {
    const call = [error.syscall, error.path].filter((part) => typeof part === 'string').join(' ');
    return ioError(error, call === '' ? 'a system call failed' : `${call} failed`);
  }
  const message = error instanceof Error ? error.message : String(error);
  return new StreamStackError('INTERNAL', `unexpected error (a bug in streamstack): ${message}`, { cause: error });
}

/** Prints a failure as a typed error line; a bug's stack follows it, for whoever debugs it. */
function reportFailure(error: unknown): number {
  const typed = typedErrorOf(error);
  printError(typed);
  if (typed.code === 'INTERNAL' && error instanceof Error && error.stack) note(error.stack);
  return exitTypedError;
}

/** Runs the command line; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  guardOutput();
  const program = buildProgram();
  try {
    await program.parseAsync([...argv]);
    return exitSuccess;
  } catch (error) {
    // The reader of stdout is gone (`… | head -1`): nobody is left to tell, and that is fine.
    if (error instanceof OutputClosed) return exitSuccess;
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.exitCode === 0)
        return exitSuccess;
      if (error.code === 'streamstack.usage') note(`error: ${error.message}`);
      return exitUsage;
    }
    return reportFailure(error);
  }
}
