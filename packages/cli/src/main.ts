/**
 * `streamstack [--data DIR] COMMAND …` — the command line of DESIGN §9. Every command opens the
 * data directory, does one thing, prints NDJSON and closes it again. Exit codes: 0 success,
 * 1 a typed error (printed as JSON on stderr), 2 bad usage.
 */
import { Command, CommanderError, Option } from 'commander';
import { StreamStackError } from '@streamstack/engine';
import { addReadCommands } from './commands-read.js';
import { addWriteCommands } from './commands-write.js';
import { note, printError } from './io.js';
import { exitSuccess, exitTypedError, exitUsage } from './shared.js';

export function buildProgram(): Command {
  const program = new Command('streamstack')
    .description('StreamStack: a durable stream store. NDJSON out; errors as JSON on stderr.')
    .addOption(new Option('--data <dir>', 'data directory').env('STREAMSTACK_DATA').default('./data'))
    .showHelpAfterError()
    .exitOverride();
  addWriteCommands(program);
  addReadCommands(program);
  return program;
}

/** Runs the command line; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync([...argv]);
    return exitSuccess;
  } catch (error) {
    if (error instanceof StreamStackError) {
      printError(error);
      return exitTypedError;
    }
    if (error instanceof CommanderError) {
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version' || error.exitCode === 0) return exitSuccess;
      if (error.code === 'streamstack.usage') note(`error: ${error.message}`);
      return exitUsage;
    }
    throw error;
  }
}
