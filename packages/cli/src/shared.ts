/**
 * What every command shares: the exit codes, option parsers, opening the data directory around
 * an action, and the shapes of output lines.
 */

import { type Commit, type Feed, objectStoreFromAddress, Store, type StoreOptions } from '@streamstack/engine';
import { type Command, CommanderError, InvalidArgumentError } from 'commander';
import { note } from './io.js';

export const exitSuccess = 0;
export const exitTypedError = 1;
export const exitUsage = 2;

export function integer(name: string) {
  return (value: string): number => {
    const parsed = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(parsed)) {
      throw new InvalidArgumentError(`${name} must be a non-negative integer`);
    }
    return parsed;
  };
}

export type Action = (store: Store) => Promise<void>;

/**
 * How a command opens the data directory: `write` takes the directory's lock (one writer at a
 * time); `read` takes no lock and writes nothing, so it runs beside a writer (`verify` is one).
 */
export type Access = 'write' | 'read';

/** The global options every command that opens the data directory reads. */
interface StoreFlags {
  data: string;
  breakLock?: boolean;
  objectStore?: string;
  objectStoreEndpoint?: string;
  objectStoreRegion?: string;
  localHistoryBytesMax?: number;
  follower?: boolean;
  follow?: string;
  etcd?: string;
  etcdPrefix?: string;
  etcdNode?: string;
}

/**
 * The data directory and the options to open it with, from the global options: `--data`,
 * `--break-lock`, and `--object-store` (with its endpoint, region and local budget). A read-only
 * open uploads nothing, but reads history evicted to object storage from there, so it takes the
 * object store too (the AWS SDK is loaded only when one is named). `--follower` opens the
 * directory as a follower's copy of the feeds in object storage, for reads and writes alike (a
 * follower refuses writes itself); `--follow` adds the writer's server for the unsealed tails.
 * `--etcd` (with `--etcd-prefix` and `--etcd-node`) keeps the writer leases of commands that write
 * in etcd.
 */
export function storeSettings(program: Command, access: Access): { data: string; options: StoreOptions } {
  const flags = program.opts<StoreFlags>();
  // An empty STREAMSTACK_DATA would name the current directory: a mistake, never a choice.
  if (flags.data === '')
    throw new CommanderError(
      exitUsage,
      'streamstack.usage',
      '--data (or STREAMSTACK_DATA) is empty: name the data directory',
    );
  if (flags.localHistoryBytesMax !== undefined && !flags.objectStore)
    throw new CommanderError(
      exitUsage,
      'streamstack.usage',
      '--local-history-bytes-max keeps sealed history in object storage: give --object-store too',
    );
  if (flags.follower && !flags.objectStore)
    throw new CommanderError(
      exitUsage,
      'streamstack.usage',
      '--follower reads the feeds another machine tiers to object storage: give --object-store too',
    );
  if (flags.follow !== undefined && !flags.follower)
    throw new CommanderError(
      exitUsage,
      'streamstack.usage',
      "--follow reads a followed feed's unsealed tail from its writer: give --follower too",
    );
  const objectStore = flags.objectStore
    ? {
        ...objectStoreFromAddress(flags.objectStore, {
          endpoint: flags.objectStoreEndpoint,
          region: flags.objectStoreRegion,
        }),
        ...(flags.localHistoryBytesMax === undefined ? {} : { localHistoryBytesMax: flags.localHistoryBytesMax }),
      }
    : undefined;
  if ((flags.etcdPrefix !== undefined || flags.etcdNode !== undefined) && flags.etcd === undefined)
    throw new CommanderError(
      exitUsage,
      'streamstack.usage',
      '--etcd-prefix and --etcd-node name where leases are kept in etcd: give --etcd too',
    );
  // Leases are taken only by commands that write: a read opens the directory read-only and never
  // needs etcd, so a STREAMSTACK_ETCD set for the whole machine does not make reads depend on it.
  // A follower that serves (`serve --follower --etcd`) watches the feeds' head hints there.
  const coordination =
    access === 'write' && flags.etcd !== undefined
      ? {
          etcd: flags.etcd,
          ...(flags.etcdPrefix === undefined ? {} : { prefix: flags.etcdPrefix }),
          ...(flags.etcdNode === undefined ? {} : { node: flags.etcdNode }),
        }
      : undefined;
  // A follower keeps its copy of the feeds in its directory, so it takes the lock to read too.
  if (flags.follower)
    return {
      data: flags.data,
      options: {
        follower: true,
        // The token comes from the environment only: a command line is seen by every user of the machine.
        ...(flags.follow === undefined
          ? {}
          : {
              follow: {
                url: flags.follow,
                ...(process.env.STREAMSTACK_FOLLOW_TOKEN ? { token: process.env.STREAMSTACK_FOLLOW_TOKEN } : {}),
              },
            }),
        ...(flags.breakLock ? { breakLock: true } : {}),
        ...(objectStore ? { objectStore } : {}),
        ...(coordination ? { coordination } : {}),
      },
    };
  return {
    data: flags.data,
    options: {
      readOnly: access !== 'write',
      ...(flags.breakLock ? { breakLock: true } : {}),
      ...(objectStore ? { objectStore } : {}),
      ...(coordination ? { coordination } : {}),
    },
  };
}

/** Opens the data directory named by the global `--data` option. */
export function openStore(program: Command, access: Access): Promise<Store> {
  const { data, options } = storeSettings(program, access);
  return Store.open(data, options);
}

/** Runs `action` against the data directory named by the global `--data` option. */
export function withStore(program: Command, action: Action, access: Access = 'write'): () => Promise<void> {
  return async () => {
    const store = await openStore(program, access);
    try {
      await action(store);
    } finally {
      await store.close();
    }
  };
}

export async function openFeed(store: Store, name: string): Promise<Feed> {
  const feed = await store.feed(name);
  // Read-only, a torn tail is most likely a write in progress in another process: not news.
  if (!store.readOnly) {
    for (const cut of feed.recovery) {
      note(`recovery: cut ${cut.bytes} bytes of an incomplete write from ${cut.file} at offset ${cut.offset}`);
    }
  }
  return feed;
}

export function commitLine(commit: Commit) {
  return {
    feed: commit.feed,
    commit: commit.commit,
    stream: commit.stream,
    parent: commit.parent,
    records: commit.records,
    firstPosition: commit.firstPosition,
    lastPosition: commit.lastPosition,
    openedAt: commit.openedAt,
    sealedAt: commit.sealedAt,
    message: commit.message,
  };
}

export async function feedLine(feed: Feed) {
  const { name, ...info } = await feed.info();
  return { feed: name, ...info, head: info.head ? commitLine(info.head) : null, disk: await feed.diskUse() };
}

/** Collects a repeatable option's values. */
export const collect = (value: string, previous: string[] = []) => [...previous, value];

/** The condition flags shared by `append` and `stream seal`. */
export function addConditionOptions(command: Command): Command {
  return command
    .option(
      '--if-no-match-type <type>',
      'condition: refuse if a record of this type (repeatable: any of them) lies after --after-position',
      collect,
    )
    .option('--if-no-match-tag <tag>', 'condition: … with this tag (repeatable: all of them)', collect)
    .option(
      '--after-position <position>',
      'condition: only records after this position count (default 0)',
      integer('--after-position'),
    );
}

export interface ConditionFlags {
  ifNoMatchType?: string[];
  ifNoMatchTag?: string[];
  afterPosition?: number;
}

/** The condition the flags describe, or undefined when none was given. */
export function conditionFrom(flags: ConditionFlags) {
  if (!flags.ifNoMatchType && !flags.ifNoMatchTag) return undefined;
  return {
    failIfMatch: {
      items: [
        {
          ...(flags.ifNoMatchType ? { types: flags.ifNoMatchType } : {}),
          ...(flags.ifNoMatchTag ? { tags: flags.ifNoMatchTag } : {}),
        },
      ],
    },
    after: flags.afterPosition ?? 0,
  };
}
