/** The write-side commands: feed, lease, stream, commits, verify (append is `commands-append.ts`). */

import { type Durability, StreamStackError } from '@streamstack/engine';
import { type Command, Option } from 'commander';
import { emit } from './io.js';
import { quietOption, withProgress } from './progress.js';
import {
  addConditionOptions,
  type ConditionFlags,
  commitLine,
  conditionFrom,
  feedLine,
  integer,
  openFeed,
  withStore,
} from './shared.js';

export function addWriteCommands(program: Command): void {
  addFeedCommands(program);
  addLeaseCommands(program);
  addStreamCommands(program);
  addCommitsCommand(program);
  addVerifyCommand(program);
}

/** `feed create`, `feed fork`, `feed delete`, `feed list` and `feed info`. */
function addFeedCommands(program: Command): void {
  const feedCommand = program.command('feed').description('create, delete, list and describe feeds').exitOverride();
  feedCommand
    .command('create <name>')
    .description('create a feed')
    .addOption(
      new Option(
        '--durability <mode>',
        'local: acknowledged once on the local disk; replicated (with --object-store): also stored in object storage first, one object per group commit (docs/cluster.md)',
      )
        .choices(['local', 'replicated'])
        .default('local'),
    )
    .action((name: string, flags: { durability: Durability }) =>
      withStore(program, async (store) => {
        await emit(await feedLine(await store.createFeed(name, { durability: flags.durability })));
      })(),
    );
  feedCommand
    .command('fork <source> <name>')
    .description('a new feed holding the source up to a commit, sharing its sealed history (no copy)')
    .option('--at <commit>', 'the last commit the fork holds (default: the head)', integer('--at'))
    .action((source: string, name: string, flags: { at?: number }) =>
      withStore(program, async (store) => {
        await emit(await feedLine(await store.forkFeed(source, name, flags)));
      })(),
    );
  feedCommand
    .command('delete <name>')
    .description('delete a feed and everything it holds (durable; the name can be created again)')
    .action((name: string) =>
      withStore(program, async (store) => {
        await store.deleteFeed(name);
        await emit({ feed: name, deleted: true });
      })(),
    );
  feedCommand
    .command('list')
    .description('one line per feed')
    .action(
      withStore(
        program,
        async (store) => {
          for (const name of await store.feedNames()) {
            let feed;
            try {
              feed = await openFeed(store, name);
            } catch (error) {
              // Deleted by the writer (another process) since the names were listed: not a feed.
              if (error instanceof StreamStackError && error.code === 'FEED_NOT_FOUND') continue;
              throw error;
            }
            await emit(await feedLine(feed));
          }
        },
        'read',
      ),
    );
  feedCommand
    .command('info <name>')
    .description('a feed: head, counts, lease, active stream')
    .action((name: string) =>
      withStore(program, async (store) => emit(await feedLine(await openFeed(store, name))), 'read')(),
    );
}

/** `lease acquire`, `lease renew` and `lease release`: a feed's writer lease. */
function addLeaseCommands(program: Command): void {
  const lease = program.command('lease').description("take, renew and release a feed's writer lease");
  lease
    .command('acquire <feed>')
    .requiredOption('--holder <holder>', 'who takes the lease')
    .option('--ttl-ms <ms>', 'lease duration in milliseconds', integer('--ttl-ms'))
    .action((feedName: string, options: { holder: string; ttlMs?: number }) =>
      withStore(program, async (store) => {
        if (!store.clustered) await openFeed(store, feedName);
        // With --etcd and --object-store, a replicated feed written elsewhere is taken over.
        const grant = await store.acquireLease(feedName, {
          holder: options.holder,
          ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
        });
        await emit({ epoch: grant.epoch, token: grant.token, expiresAt: grant.expiresAt });
      })(),
    );
  lease
    .command('takeover <feed>')
    .description(
      'with --etcd and --object-store: become the writer of a replicated feed whose writer stopped (its lease expired in etcd), laid out from object storage and its slots (docs/cluster.md)',
    )
    .requiredOption('--holder <holder>', 'who takes the lease')
    .option('--ttl-ms <ms>', 'lease duration in milliseconds', integer('--ttl-ms'))
    .action((feedName: string, options: { holder: string; ttlMs?: number }) =>
      withStore(program, async (store) => {
        const taken = await store.takeOver(feedName, {
          holder: options.holder,
          ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
        });
        const { grant, ...restored } = taken;
        await emit({ epoch: grant.epoch, token: grant.token, expiresAt: grant.expiresAt, ...restored });
      })(),
    );
  lease
    .command('renew <feed>')
    .requiredOption('--token <token>', 'the lease token')
    .option('--ttl-ms <ms>', 'new duration from now, in milliseconds', integer('--ttl-ms'))
    .action((feedName: string, options: { token: string; ttlMs?: number }) =>
      withStore(program, async (store) => {
        const grant = await (await openFeed(store, feedName)).renewLease({
          token: options.token,
          ...(options.ttlMs === undefined ? {} : { ttlMs: options.ttlMs }),
        });
        await emit({ epoch: grant.epoch, token: grant.token, expiresAt: grant.expiresAt });
      })(),
    );
  lease
    .command('release <feed>')
    .requiredOption('--token <token>', 'the lease token')
    .action((feedName: string, options: { token: string }) =>
      withStore(program, async (store) => {
        await (await openFeed(store, feedName)).releaseLease({ token: options.token });
        await emit({ feed: feedName, released: true });
      })(),
    );
}

/** `stream open`, `stream seal` and `stream abort`. */
function addStreamCommands(program: Command): void {
  const stream = program.command('stream').description('open, seal and abort streams');
  stream
    .command('open <feed>')
    .requiredOption('--token <token>', 'the lease token')
    .option('--message <message>', 'a message for the commit this stream becomes')
    .action((feedName: string, options: { token: string; message?: string }) =>
      withStore(program, async (store) => {
        const opened = await (await openFeed(store, feedName)).openStream(options);
        await emit({ stream: opened.id });
      })(),
    );
  addConditionOptions(
    stream
      .command('seal <feed> <id>')
      .requiredOption('--token <token>', 'the lease token')
      .option('--message <message>', 'the commit message'),
  ).action((feedName: string, id: string, options: { token: string; message?: string } & ConditionFlags) =>
    withStore(program, async (store) => {
      const condition = conditionFrom(options);
      const commit = await (await (await openFeed(store, feedName)).stream(id)).seal({
        token: options.token,
        ...(options.message === undefined ? {} : { message: options.message }),
        ...(condition ? { condition } : {}),
      });
      await emit(commitLine(commit));
    })(),
  );
  stream
    .command('abort <feed> <id>')
    .requiredOption('--token <token>', 'the lease token')
    .action((feedName: string, id: string, options: { token: string }) =>
      withStore(program, async (store) => {
        await (await (await openFeed(store, feedName)).stream(id)).abort(options);
        await emit({ stream: id, aborted: true });
      })(),
    );
}

/** `commits`: one commit per line, oldest first. */
function addCommitsCommand(program: Command): void {
  program
    .command('commits <feed>')
    .description('one commit per line, oldest first')
    .option('--after <commit>', 'start after this commit', integer('--after'))
    .option('--limit <n>', 'at most this many', integer('--limit'))
    .action((feedName: string, options: { after?: number; limit?: number }) =>
      withStore(
        program,
        async (store) => {
          for await (const commit of (await openFeed(store, feedName)).commits(options)) await emit(commitLine(commit));
        },
        'read',
      )(),
    );
}

/** `verify`: checks a feed or every feed, and fails with `CORRUPT` when one is unsound. */
function addVerifyCommand(program: Command): void {
  program
    .command('verify [feed]')
    .description('check every CRC, the commit chain, manifests against packs, WAL against history; repairs nothing')
    .addOption(quietOption())
    .action((feedName: string | undefined, options: { quiet?: boolean }) =>
      withStore(
        program,
        async (store) => {
          const results = await withProgress('verify', options.quiet, (onProgress) =>
            store.verify(feedName, onProgress ? { onProgress } : {}),
          );
          for (const result of results) await emit(result);
          const unsound = results.filter((result) => !result.ok);
          if (unsound.length > 0) {
            throw new StreamStackError(
              'CORRUPT',
              `verify found problems in ${unsound.map((result) => result.feed).join(', ')}`,
              {
                details: { feeds: unsound.map((result) => result.feed) },
              },
            );
          }
        },
        'read',
      )(),
    );
}
