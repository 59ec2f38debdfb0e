/** `token create`: a new bearer token and the token-file entry that grants it (docs/http.md). */
import crypto from 'node:crypto';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { emit } from './io.js';
import { collect } from './shared.js';

const operations = ['read', 'write', 'lease', 'admin'];

/** Collects repeated `--op` values, refusing any that is not an operation. */
function operation(value: string, previous: string[] = []): string[] {
  if (!operations.includes(value)) throw new InvalidArgumentError(`--op is one of ${operations.join(', ')}`);
  return [...previous, value];
}

export function addTokenCommand(program: Command): void {
  program
    .command('token')
    .description('bearer tokens for streamstack serve --tokens')
    .command('create')
    .description(
      'print a new random token and its token-file entry (only the SHA-256 goes in the file; keep the token yourself)',
    )
    .requiredOption('--name <name>', 'names the token in logs and errors')
    .requiredOption('--feed <feed>', 'a feed name, or a prefix ending in * (repeatable; * alone: every feed)', collect)
    .addOption(
      new Option('--op <operation>', 'an operation it allows: read, write, lease, admin (repeatable)')
        .argParser(operation)
        .makeOptionMandatory(),
    )
    .action(async (options: { name: string; feed: string[]; op: string[] }) => {
      const token = crypto.randomBytes(32).toString('base64url');
      const sha256 = crypto.createHash('sha256').update(token, 'utf8').digest('hex');
      await emit({
        token,
        entry: { name: options.name, sha256, feeds: options.feed, operations: [...new Set(options.op)] },
      });
    });
}
