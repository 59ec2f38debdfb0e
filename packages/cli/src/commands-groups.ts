/**
 * `group`: subscription groups, one feed shared by competing workers (docs/groups.md). `claim`
 * prints one line per commit handed out, its records inline; `ack` and `nack` settle or give
 * back what a worker (`--worker`) claimed, from the same process or another invocation.
 */
import type { GroupOrder, SubscriptionGroupInfo, SubscriptionGroupOptions } from '@streamstack/engine';
import { type Command, Option } from 'commander';
import { emit, recordLine } from './io.js';
import { integer, openFeed, withStore } from './shared.js';

function groupLine(feed: string, { name, ...info }: SubscriptionGroupInfo) {
  return { feed, group: name, ...info };
}

interface GroupFlags {
  readonly ackTimeout?: number;
  readonly maxDeliveries?: number;
  readonly order?: GroupOrder;
  readonly deadLetter?: string;
  readonly after?: number;
}

function groupOptions(flags: GroupFlags): SubscriptionGroupOptions {
  return {
    ...(flags.ackTimeout === undefined ? {} : { ackTimeoutMs: flags.ackTimeout }),
    ...(flags.maxDeliveries === undefined ? {} : { maxDeliveries: flags.maxDeliveries }),
    ...(flags.order === undefined ? {} : { orderedBy: flags.order }),
    ...(flags.deadLetter === undefined ? {} : { deadLetter: flags.deadLetter }),
    ...(flags.after === undefined ? {} : { after: flags.after }),
  };
}

export function addGroupCommands(program: Command): void {
  const group = program.command('group').description('subscription groups: one feed shared by competing workers');
  group
    .command('create <feed> <name>')
    .description('create a group, or change the options of the one that exists')
    .option('--ack-timeout <ms>', 'how long a worker holds what it claimed (default 30000)', integer('--ack-timeout'))
    .option(
      '--max-deliveries <n>',
      'deliveries of one commit before it is parked (default 5)',
      integer('--max-deliveries'),
    )
    .addOption(
      new Option('--order <order>', 'hand out commits in any order, or each key in order').choices(['commit', 'key']),
    )
    .option('--dead-letter <feed>', 'the feed parked work goes to (default FEED.NAME.parked)')
    .option('--after <commit>', 'a new group starts after this commit (default 0)', integer('--after'))
    .action((feedName: string, name: string, flags: GroupFlags) =>
      withStore(program, async (store) => {
        const created = await (await openFeed(store, feedName)).subscriptionGroup(name, groupOptions(flags));
        await emit(groupLine(feedName, await created.info()));
      })(),
    );
  group
    .command('list <feed>')
    .description('one line per group, with its cursor, counts and lag')
    .action((feedName: string) =>
      withStore(program, async (store) => {
        for (const info of await (await openFeed(store, feedName)).subscriptionGroups())
          await emit(groupLine(feedName, info));
      })(),
    );
  group.command('info <feed> <name>').action((feedName: string, name: string) =>
    withStore(program, async (store) => {
      const existing = await (await openFeed(store, feedName)).existingSubscriptionGroup(name);
      await emit(groupLine(feedName, await existing.info()));
    })(),
  );
  group
    .command('reset')
    .argument('<feed>')
    .argument('<name>')
    .argument('<cursor>', 'a commit number', integer('cursor'))
    .description('forget every claim and count, and start again after the cursor')
    .action((feedName: string, name: string, cursor: number) =>
      withStore(program, async (store) => {
        const existing = await (await openFeed(store, feedName)).existingSubscriptionGroup(name);
        await emit(groupLine(feedName, await existing.reset(cursor)));
      })(),
    );
  group.command('delete <feed> <name>').action((feedName: string, name: string) =>
    withStore(program, async (store) => {
      await (await (await openFeed(store, feedName)).existingSubscriptionGroup(name)).delete();
      await emit({ feed: feedName, group: name, deleted: true });
    })(),
  );
  addWorkerCommands(program, group);
}

/** `group claim`, `ack`, `nack`: what a worker does, each invocation its own process if it likes. */
function addWorkerCommands(program: Command, group: Command): void {
  group
    .command('claim <feed> <name>')
    .description('one line per commit handed to the worker: {"commit","delivery","deadline","reason"?,"records":[…]}')
    .requiredOption('--worker <name>', 'the worker claiming (only it may ack or nack what it gets)')
    .option('--max <n>', 'commits at most (default 1)', integer('--max'))
    .option('--wait <ms>', 'wait this long for work when none is free (default 0)', integer('--wait'))
    .action((feedName: string, name: string, flags: { worker: string; max?: number; wait?: number }) =>
      withStore(program, async (store) => {
        const existing = await (await openFeed(store, feedName)).existingSubscriptionGroup(name);
        const claims = await existing.claim({
          worker: flags.worker,
          ...(flags.max === undefined ? {} : { max: flags.max }),
          ...(flags.wait === undefined ? {} : { waitMs: flags.wait }),
        });
        for (const { commit, records, ...claim } of claims)
          await emit({
            feed: feedName,
            group: name,
            commit: commit.commit,
            ...claim,
            records: records.map(recordLine),
          });
      })(),
    );
  group
    .command('ack')
    .argument('<feed>')
    .argument('<name>')
    .argument('<commit>', 'a commit the worker claimed', integer('commit'))
    .requiredOption('--worker <name>', 'the worker that claimed it')
    .action((feedName: string, name: string, commit: number, flags: { worker: string }) =>
      withStore(program, async (store) => {
        const existing = await (await openFeed(store, feedName)).existingSubscriptionGroup(name);
        await existing.ack(commit, { worker: flags.worker });
        await emit({ feed: feedName, group: name, commit, acked: true });
      })(),
    );
  group
    .command('nack')
    .argument('<feed>')
    .argument('<name>')
    .argument('<commit>', 'a commit the worker claimed', integer('commit'))
    .requiredOption('--worker <name>', 'the worker that claimed it')
    .option('--reason <text>', 'why: kept, and written with the commit if it is parked')
    .action((feedName: string, name: string, commit: number, flags: { worker: string; reason?: string }) =>
      withStore(program, async (store) => {
        const existing = await (await openFeed(store, feedName)).existingSubscriptionGroup(name);
        await emit({ feed: feedName, group: name, ...(await existing.nack(commit, flags)) });
      })(),
    );
}
