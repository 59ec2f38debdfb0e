/** The read-side commands: read, get, tail, sub. */

import {
  limits,
  type Plan,
  type ReadMode,
  readModes,
  StreamStackError,
  type SubscriptionInfo,
} from '@streamstack/engine';
import { type Command, Option } from 'commander';
import { emit, emitBytes, note, recordLine } from './io.js';
import { collect, integer, openFeed, openStore, withStore } from './shared.js';

const { tailPollMsMin } = limits;

function subscriptionLine(feed: string, { name, ...info }: SubscriptionInfo) {
  return { feed, subscription: name, ...info };
}

export function addReadCommands(program: Command): void {
  addReadCommand(program);
  addGetCommand(program);
  addTailCommand(program);
  addSubCommands(program);
}

/** `read`: records after a cursor, one commit, or one stream. */
function addReadCommand(program: Command): void {
  program
    .command('read <feed>')
    .description('records after a commit cursor (RAW, dedup or latest), or one commit, or one stream')
    .option(
      '--after <commit>',
      'read the commits after this one (default: the start of the history kept)',
      integer('--after'),
    )
    .addOption(new Option('--mode <mode>', 'read mode').choices(readModes).default('raw'))
    .option('--type <type>', 'only records of this type (repeatable: any of them)', collect)
    .option('--tag <tag>', 'only records with this tag (repeatable: all of them)', collect)
    .option('--limit <n>', 'at most this many records', integer('--limit'))
    .addOption(
      new Option('--plan <plan>', 'how a filtered read finds records')
        .choices(['auto', 'index', 'scan'])
        .default('auto'),
    )
    .option('--commit <commit>', 'read one commit', integer('--commit'))
    .option('--stream <id>', 'read one stream, sealed or open')
    .option('--from-seq <n>', 'with --stream: from this seq on', integer('--from-seq'))
    .action(
      (
        feedName: string,
        options: {
          after?: number;
          mode: ReadMode;
          type?: string[];
          tag?: string[];
          limit?: number;
          plan: Plan;
          commit?: number;
          stream?: string;
          fromSeq?: number;
        },
      ) =>
        withStore(
          program,
          async (store) => {
            const feed = await openFeed(store, feedName);
            if (options.commit !== undefined) {
              for (const record of await feed.readCommit(options.commit)) await emit(recordLine(record));
              return;
            }
            if (options.stream !== undefined) {
              const records = await (await feed.stream(options.stream)).read({
                ...(options.fromSeq === undefined ? {} : { fromSeq: options.fromSeq }),
              });
              for (const record of records) await emit(recordLine(record));
              return;
            }
            // Lines made by the engine straight from the columns, in chunks: the fastest way out.
            for await (const chunk of feed.readLines({
              ...(options.after === undefined ? {} : { after: options.after }),
              mode: options.mode,
              filter: { types: options.type ?? [], tags: options.tag ?? [] },
              plan: options.plan,
              ...(options.limit === undefined ? {} : { limit: options.limit }),
            })) {
              await emitBytes(chunk);
            }
          },
          'read',
        )(),
    );
}

/** `get`: a key's current record, through the key index. */
function addGetCommand(program: Command): void {
  program
    .command('get <feed> <key>')
    .description("a key's current record (highest version, then latest), through the key index")
    .option('--as-of <commit>', 'as of this commit', integer('--as-of'))
    .action((feedName: string, key: string, options: { asOf?: number }) =>
      withStore(
        program,
        async (store) => {
          const record = await (await openFeed(store, feedName)).get(key, {
            ...(options.asOf === undefined ? {} : { asOf: options.asOf }),
          });
          if (!record) {
            throw new StreamStackError(
              'KEY_NOT_FOUND',
              `key ${key} has no live record${options.asOf === undefined ? '' : ` as of commit ${options.asOf}`}`,
              {
                details: { key },
              },
            );
          }
          await emit(recordLine(record));
        },
        'read',
      )(),
    );
}

/** `tail`: follows a feed live until interrupted (the loop is `tail` below). */
function addTailCommand(program: Command): void {
  program
    .command('tail <feed>')
    .description('follow the feed live (catch-up, then new commits) until interrupted')
    .option('--after <commit>', 'start after this commit (default: the head)', integer('--after'))
    .action((feedName: string, options: { after?: number }) => tail(program, feedName, options.after));
}

/** `sub create`, `poll`, `advance`, `reset`, `delete` and `list`: named, durable cursors. */
function addSubCommands(program: Command): void {
  const sub = program.command('sub').description('named, durable cursors');
  sub
    .command('create <feed> <name>')
    .option('--after <commit>', 'start after this commit (default 0)', integer('--after'))
    .action((feedName: string, name: string, options: { after?: number }) =>
      withStore(program, async (store) => {
        const subscription = await (await openFeed(store, feedName)).createSubscription(name, options);
        await emit(subscriptionLine(feedName, await subscription.info()));
      })(),
    );
  sub
    .command('poll <feed> <name>')
    .description('record lines from the saved cursor to the head, then a line with the cursor to advance to')
    .option('--max <n>', 'stop before passing this many records (whole commits)', integer('--max'))
    .action((feedName: string, name: string, options: { max?: number }) =>
      withStore(
        program,
        async (store) => {
          const subscription = await (await openFeed(store, feedName)).subscription(name);
          const polled = await subscription.poll(options);
          let records = 0;
          for (const { records: batch } of polled.commits) {
            for (const record of batch) await emit(recordLine(record));
            records += batch.length;
          }
          note(`polled ${polled.commits.length} commits, ${records} records; advance to ${polled.cursor} when done`);
          await emit({
            feed: feedName,
            subscription: name,
            cursor: polled.cursor,
            commits: polled.commits.length,
            records,
          });
        },
        'read',
      )(),
    );
  sub
    .command('advance')
    .argument('<feed>')
    .argument('<name>')
    .argument('<cursor>', 'a commit number', integer('cursor'))
    .action((feedName: string, name: string, cursor: number) =>
      withStore(program, async (store) => {
        const subscription = await (await openFeed(store, feedName)).subscription(name);
        await emit(subscriptionLine(feedName, await subscription.advance(cursor)));
      })(),
    );
  sub
    .command('reset')
    .argument('<feed>')
    .argument('<name>')
    .argument('<cursor>', 'a commit number', integer('cursor'))
    .description('move the cursor anywhere, backwards included')
    .action((feedName: string, name: string, cursor: number) =>
      withStore(program, async (store) => {
        const subscription = await (await openFeed(store, feedName)).subscription(name);
        await emit(subscriptionLine(feedName, await subscription.reset(cursor)));
      })(),
    );
  sub.command('delete <feed> <name>').action((feedName: string, name: string) =>
    withStore(program, async (store) => {
      await (await (await openFeed(store, feedName)).subscription(name)).delete();
      await emit({ feed: feedName, subscription: name, deleted: true });
    })(),
  );
  sub
    .command('list <feed>')
    .description('one line per subscription, with its cursor and lag')
    .action((feedName: string) =>
      withStore(
        program,
        async (store) => {
          const feed = await openFeed(store, feedName);
          for (const { name, ...info } of await feed.subscriptions())
            await emit({ feed: feedName, subscription: name, ...info });
        },
        'read',
      )(),
    );
}

/**
 * `tail`: follows a feed that another process writes. A tail takes no lock and writes nothing,
 * so it sees new commits by opening the data directory read-only again, reading the commits
 * after its cursor, and waiting; the wait grows with the time an open takes, so a large feed is
 * not reopened back to back. SIGINT, SIGTERM and a closed stdout end it cleanly (exit 0).
 */
async function tail(program: Command, feedName: string, after: number | undefined): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // An interval timer keeps the process alive while it waits (a bare pending promise does not).
  const keepAlive = setInterval(() => undefined, tailPollMsMin);
  try {
    let cursor = after;
    while (!stop.signal.aborted) {
      const started = Date.now();
      const store = await openStore(program, 'read');
      try {
        const feed = await openFeed(store, feedName);
        cursor ??= (await feed.info()).commits;
        for await (const commit of feed.commits({ after: cursor })) {
          for (const record of await feed.readCommit(commit.commit)) await emit(recordLine(record));
          cursor = commit.commit;
          if (stop.signal.aborted) return;
        }
      } finally {
        await store.close();
      }
      await sleep(Math.max(tailPollMsMin, (Date.now() - started) * 4), stop.signal);
    }
  } finally {
    clearInterval(keepAlive);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
