/** The history-management commands: retention policy, trim, compact, and tiering to object storage. */

import type { RetentionPolicy } from '@streamstack/engine';
import { type Command, CommanderError } from 'commander';
import { emit } from './io.js';
import { quietOption, withProgress } from './progress.js';
import { exitUsage, integer, openFeed, withStore } from './shared.js';

export function addHistoryCommands(program: Command): void {
  addRetentionCommands(program);
  addCompactCommand(program);
  addTrimCommand(program);
  addTierCommand(program);
}

/**
 * `tier`: uploads what a feed's object storage does not hold yet and waits until it does. Every
 * write command uploads in the background too, but a short-lived one may exit before its
 * uploads finish (the next open goes on with them): this is how a script makes sure.
 */
function addTierCommand(program: Command): void {
  program
    .command('tier <feed>')
    .description(
      'upload every sealed history segment not yet in object storage (--object-store) and wait for them; prints the tiering state',
    )
    .action((feedName: string) =>
      withStore(program, async (store) => {
        const feed = await openFeed(store, feedName);
        await emit({ feed: feedName, ...(await feed.tiered()) });
      })(),
    );
}

/** `retention set` and `retention show`: a feed's retention policy. */
function addRetentionCommands(program: Command): void {
  const retention = program.command('retention').description("set and show a feed's retention policy");
  retention
    .command('set <feed>')
    .description('set the policy (any combination; --keep-all clears it); prints the retention state')
    .option('--max-age-ms <ms>', 'keep commits younger than this', integer('--max-age-ms'))
    .option('--max-records <n>', 'keep the newest n records', integer('--max-records'))
    .option('--max-bytes <n>', 'keep the newest n bytes of history segments', integer('--max-bytes'))
    .option('--keep-all', 'no limits: keep everything')
    .action(
      (feedName: string, options: { maxAgeMs?: number; maxRecords?: number; maxBytes?: number; keepAll?: boolean }) =>
        withStore(program, async (store) => {
          const policy: { -readonly [K in keyof RetentionPolicy]: RetentionPolicy[K] } = {};
          if (options.maxAgeMs !== undefined) policy.maxAgeMs = options.maxAgeMs;
          if (options.maxRecords !== undefined) policy.maxRecords = options.maxRecords;
          if (options.maxBytes !== undefined) policy.maxBytes = options.maxBytes;
          const limits = Object.keys(policy).length;
          if ((limits === 0) === !options.keepAll) {
            throw new CommanderError(
              exitUsage,
              'streamstack.usage',
              'retention set takes --max-age-ms, --max-records or --max-bytes, or --keep-all alone',
            );
          }
          await emit({ feed: feedName, ...(await (await openFeed(store, feedName)).setRetention(policy)) });
        })(),
    );
  retention
    .command('show <feed>')
    .description('the policy, the low mark, and the subscription holding retention back')
    .action((feedName: string) =>
      withStore(
        program,
        async (store) => emit({ feed: feedName, ...(await (await openFeed(store, feedName)).retention()) }),
        'read',
      )(),
    );
}

/** `compact`: merging compaction by default, key compaction up to a horizon with `--keys`. */
function addCompactCommand(program: Command): void {
  program
    .command('compact <feed>')
    .description(
      "merge adjacent sealed history segments (--merge, the default), or keep only each key's winner up to a horizon (--keys --horizon C)",
    )
    .option('--merge', 'merging compaction: every read stays as it was (the default)')
    .option('--keys', "key compaction: below --horizon, only each key's winner as of it is kept")
    .option(
      '--horizon <commit>',
      'with --keys: compact the segments wholly at or before this commit',
      integer('--horizon'),
    )
    .option('--force', 'with --keys: move the horizon past subscriptions that have not reached it')
    .option('--drop-keyless', 'with --keys: drop records without a key too')
    .addOption(quietOption())
    .action(
      (
        feedName: string,
        options: {
          merge?: boolean;
          keys?: boolean;
          horizon?: number;
          force?: boolean;
          dropKeyless?: boolean;
          quiet?: boolean;
        },
      ) =>
        withStore(program, async (store) => {
          const feed = await openFeed(store, feedName);
          if (!options.keys) {
            if (options.horizon !== undefined || options.force || options.dropKeyless) {
              throw new CommanderError(
                exitUsage,
                'streamstack.usage',
                '--horizon, --force and --drop-keyless go with --keys',
              );
            }
            await emit({
              feed: feedName,
              ...(await withProgress('compact', options.quiet, (onProgress) =>
                feed.compact(onProgress ? { onProgress } : {}),
              )),
            });
            return;
          }
          if (options.merge || options.horizon === undefined) {
            throw new CommanderError(
              exitUsage,
              'streamstack.usage',
              'compact --keys takes --horizon <commit> (and not --merge)',
            );
          }
          const request = {
            horizon: options.horizon,
            force: options.force === true,
            keyless: options.dropKeyless ? 'drop' : 'keep',
          } as const;
          const result = await withProgress('compact --keys', options.quiet, (onProgress) =>
            feed.compactKeys({ ...request, ...(onProgress ? { onProgress } : {}) }),
          );
          await emit({ feed: feedName, ...result });
        })(),
    );
}

/** `trim`: removes whole history segments, before a commit or as the policy allows. */
function addTrimCommand(program: Command): void {
  program
    .command('trim <feed>')
    .description('remove whole history segments: those before --before, or what the policy allows now')
    .option('--before <commit>', 'remove the segments whose commits all lie before this commit', integer('--before'))
    .option('--force', 'remove them even if a subscription has not passed them')
    .addOption(quietOption())
    .action((feedName: string, options: { before?: number; force?: boolean; quiet?: boolean }) =>
      withStore(program, async (store) => {
        const feed = await openFeed(store, feedName);
        const request = {
          ...(options.before === undefined ? {} : { before: options.before }),
          force: options.force === true,
        };
        const result = await withProgress('trim', options.quiet, (onProgress) =>
          feed.trim({ ...request, ...(onProgress ? { onProgress } : {}) }),
        );
        await emit({ feed: feedName, ...result });
      })(),
    );
}
