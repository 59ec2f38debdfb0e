/** The history-management commands: retention policy, trim, compact. */
import { CommanderError, type Command } from 'commander';
import type { RetentionPolicy } from '@streamstack/engine';
import { emit } from './io.js';
import { exitUsage, integer, openFeed, withStore } from './shared.js';

export function addHistoryCommands(program: Command): void {
  const retention = program.command('retention').description("set and show a feed's retention policy");
  retention
    .command('set <feed>')
    .description('set the policy (any combination; --keep-all clears it); prints the retention state')
    .option('--max-age-ms <ms>', 'keep commits younger than this', integer('--max-age-ms'))
    .option('--max-records <n>', 'keep the newest n records', integer('--max-records'))
    .option('--max-bytes <n>', 'keep the newest n bytes of history segments', integer('--max-bytes'))
    .option('--keep-all', 'no limits: keep everything')
    .action((feedName: string, options: { maxAgeMs?: number; maxRecords?: number; maxBytes?: number; keepAll?: boolean }) =>
      withStore(program, async (store) => {
        const policy: { -readonly [K in keyof RetentionPolicy]: RetentionPolicy[K] } = {};
        if (options.maxAgeMs !== undefined) policy.maxAgeMs = options.maxAgeMs;
        if (options.maxRecords !== undefined) policy.maxRecords = options.maxRecords;
        if (options.maxBytes !== undefined) policy.maxBytes = options.maxBytes;
        const limits = Object.keys(policy).length;
        if ((limits === 0) === !options.keepAll) {
          throw new CommanderError(exitUsage, 'streamstack.usage', 'retention set takes --max-age-ms, --max-records or --max-bytes, or --keep-all alone');
        }
        await emit({ feed: feedName, ...(await (await openFeed(store, feedName)).setRetention(policy)) });
      })(),
    );
  retention
    .command('show <feed>')
    .description('the policy, the low mark, and the subscription holding retention back')
    .action((feedName: string) => withStore(program, async (store) => emit({ feed: feedName, ...(await (await openFeed(store, feedName)).retention()) }), 'read')());

  program
    .command('compact <feed>')
    .description('merge adjacent sealed history segments into larger ones (every read stays as it was)')
    .option('--merge', 'merging compaction (the default, and for now the only kind)')
    .action((feedName: string) =>
      withStore(program, async (store) => {
        const result = await (await openFeed(store, feedName)).compact();
        await emit({ feed: feedName, ...result });
      })(),
    );

  program
    .command('trim <feed>')
    .description('remove whole history segments: those before --before, or what the policy allows now')
    .option('--before <commit>', 'remove the segments whose commits all lie before this commit', integer('--before'))
    .option('--force', 'remove them even if a subscription has not passed them')
    .action((feedName: string, options: { before?: number; force?: boolean }) =>
      withStore(program, async (store) => {
        const feed = await openFeed(store, feedName);
        await emit({ feed: feedName, ...(await feed.trim({ ...(options.before === undefined ? {} : { before: options.before }), force: options.force === true })) });
      })(),
    );
}
