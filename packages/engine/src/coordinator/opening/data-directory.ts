/**
 * The data directory: its LOCK, and the feeds in it (`feeds/<name>/`, each with a `feed.json`
 * written once at creation). A feed is deleted by renaming its directory to a tombstone
 * (`feeds/.deleted-<name>-<n>`, a name no feed can have) and removing the tombstone; an opener
 * that finds tombstones finishes their removal (docs/faults.md, Deleting a feed).
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { assert, ioError, StreamStackError } from '../../errors.js';
import { feedNameCharactersMax } from '../../limits.js';
import { deletedFeedPrefix, FeedLayout, restoringFeedPrefix, StoreLayout } from '../../storage/feed-layout.js';
import { DirectoryLock, type LockOptions } from '../../storage/lock.js';
import { syncDirectory, writeSmallFileSync } from '../../storage/segment.js';
import { checkDataDirectory, writeStoreMarker } from './store-marker.js';

const feedNamePattern = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** Tombstones start with a '.', which no feed name may: they are never taken for feeds. */

export interface FeedMetadata {
  readonly name: string;
  readonly createdAt: number;
  readonly formatVersion: number;
  /**
   * The tag every segment of the feed carries (1 to 2^32 − 1), so that another feed's segment put
   * in place of one of its own is told apart; absent in feeds made before tags (their segments
   * carry 0 and are not checked).
   */
  readonly tag?: number;
  /**
   * `replicated` when every acknowledged write is also in object storage (slot objects, see
   * `slot-replication.ts`); absent for local durability, the default. Chosen at creation.
   */
  readonly durability?: 'replicated';
}

/** The largest feed tag: it fills the segment header's u32. */
const feedTagMax = 0xffff_ffff;

/** A feed's tag from a fresh unique id (FNV-1a over its characters; never 0, which means none). */
export function feedTagFrom(id: string): number {
  let hash = 0x811c9dc5;
  for (let index = 0; index < id.length; index++) hash = Math.imul(hash ^ id.charCodeAt(index), 0x01000193);
  return hash >>> 0 || 1;
}

/**
 * The tag of the feed whose directory is `feedDirectory`, from its `feed.json`; 0 when it has
 * none (a feed made before tags) or the file cannot be read (opening the feed reports that).
 */
export function feedTagOf(feedDirectory: string): number {
  try {
    const tag = (JSON.parse(fs.readFileSync(new FeedLayout(feedDirectory).config, 'utf8')) as { tag?: unknown }).tag;
    return Number.isSafeInteger(tag) && (tag as number) >= 1 && (tag as number) <= feedTagMax ? (tag as number) : 0;
  } catch {
    return 0;
  }
}

export function validateFeedName(name: unknown): string {
  if (typeof name !== 'string' || name.length > feedNameCharactersMax || !feedNamePattern.test(name)) {
    throw new StreamStackError(
      'INVALID_NAME',
      `a feed name is 1 to ${feedNameCharactersMax} characters of A-Z, a-z, 0-9, '.', '_' and '-', starting with a letter or digit; got ${JSON.stringify(name)}`,
      { details: { name } },
    );
  }
  return name;
}

/**
 * The identity of the `feed.json` in a feed's directory (device and inode), or undefined when
 * there is none: a read-only opener compares it to the one it opened, to tell that the writer
 * (another process) deleted the feed it reads, or deleted it and created another of its name.
 */
export function feedIdentity(feedDirectory: string): string | undefined {
  let stats: fs.Stats | undefined;
  try {
    stats = fs.statSync(new FeedLayout(feedDirectory).config, { throwIfNoEntry: false });
  } catch {
    // ENOTDIR and the like: nothing that is a feed is there.
    return undefined;
  }
  return stats && `${stats.dev}:${stats.ino}`;
}

/** The error every call on a deleted feed's handles fails with, as a lookup of its name would. */
export function deletedFeedError(name: string): StreamStackError {
  return new StreamStackError('FEED_NOT_FOUND', `feed ${name} was deleted`, { details: { feed: name, deleted: true } });
}

export interface DataDirectoryOptions extends LockOptions {
  /** Take no lock and write nothing: for readers that run beside a writer. */
  readonly readOnly?: boolean;
}

export class DataDirectory {
  private constructor(
    readonly root: string,
    private readonly lock: DirectoryLock | undefined,
  ) {}

  static async open(root: string, options: DataDirectoryOptions = {}): Promise<DataDirectory> {
    // Refused before the lock is taken: a path that is not a store is left as it was.
    const { markerMissing } = checkDataDirectory(root);
    if (options.readOnly) {
      let real: string;
      try {
        real = fs.realpathSync(root);
      } catch (error) {
        throw ioError(error, `cannot open the data directory ${root}`);
      }
      return new DataDirectory(real, undefined);
    }
    const lock = DirectoryLock.acquire(root, options);
    try {
      if (markerMissing) await writeStoreMarker(lock.directory);
      fs.mkdirSync(new StoreLayout(lock.directory).feeds, { recursive: true });
    } catch (error) {
      lock.release();
      throw ioError(error, `cannot prepare the data directory ${root}`);
    }
    const directory = new DataDirectory(lock.directory, lock);
    try {
      await directory.removeTombstones();
    } catch (error) {
      lock.release();
      throw ioError(error, `cannot finish deleting feeds in ${root}`);
    }
    return directory;
  }

  get readOnly(): boolean {
    return this.lock === undefined;
  }

  feedDirectory(name: string): string {
    return new StoreLayout(this.root).feed(validateFeedName(name));
  }

  /** True when a feed's directory holds logs (so a missing feed.json is damage, not absence). */
  private holdsFeedData(name: string): boolean {
    return new FeedLayout(this.feedDirectory(name)).logFolders.some((folder) => fs.existsSync(folder));
  }

  /** True when feed `name` exists: its directory has a `feed.json` or logs. */
  holdsFeed(name: string): boolean {
    return fs.existsSync(new FeedLayout(this.feedDirectory(name)).config) || this.holdsFeedData(name);
  }

  /** The feeds: directories with a feed's name (never a tombstone) that hold one. */
  feedNames(): string[] {
    const feeds = new StoreLayout(this.root).feeds;
    if (!fs.existsSync(feeds)) return [];
    return fs
      .readdirSync(feeds, { withFileTypes: true })
      .filter(
        (entry) =>
          entry.isDirectory() &&
          feedNamePattern.test(entry.name) &&
          entry.name.length <= feedNameCharactersMax &&
          this.holdsFeed(entry.name),
      )
      .map((entry) => entry.name)
      .sort();
  }

  /**
   * Deletes feed `name`, durably; `FEED_NOT_FOUND` if there is none. Its directory is renamed to
   * a fresh tombstone and the rename made durable (from then on the feed is gone, and its name
   * free), then the tombstone is removed. A crash leaves the feed whole or a tombstone, which
   * the next writable open removes; never a feed with part of its files.
   */
  async deleteFeed(name: string): Promise<void> {
    if (this.readOnly) throw new StreamStackError('READ_ONLY', `${this.root} was opened read-only`);
    if (!this.holdsFeed(validateFeedName(name))) {
      throw new StreamStackError('FEED_NOT_FOUND', `no feed named ${name}`, { details: { feed: name } });
    }
    const feeds = new StoreLayout(this.root).feeds;
    let tombstone: string;
    for (let n = 1; ; n++) {
      tombstone = path.join(feeds, `${deletedFeedPrefix}${name}-${n}`);
      if (!fs.existsSync(tombstone)) break;
    }
    try {
      fs.renameSync(this.feedDirectory(name), tombstone);
      await syncDirectory(feeds);
    } catch (error) {
      throw ioError(error, `cannot delete feed ${name}`);
    }
    try {
      await removeTree(tombstone);
      await syncDirectory(feeds);
    } catch (error) {
      // The feed is deleted: its tombstone goes on the next open.
      throw ioError(error, `feed ${name} is deleted, but its files could not all be removed yet`);
    }
  }

  /**
   * An empty place, beside the feeds, where a failover lays feed `name` out before `replaceFeed`
   * puts it in place; what an earlier try left there is removed first.
   */
  async restoringDirectory(name: string): Promise<string> {
    const directory = path.join(new StoreLayout(this.root).feeds, `${restoringFeedPrefix}${validateFeedName(name)}`);
    await removeTree(directory);
    return directory;
  }

  /**
   * Puts the feed laid out in `restored` in place of feed `name`'s directory (renamed to a
   * tombstone first, then removed, when there is one), durably. A crash leaves the old feed, the
   * restored one, or (between the two renames) none here: never a mix. A replicated feed lacks
   * nothing then, and the next takeover lays it out again from object storage.
   */
  async replaceFeed(name: string, restored: string): Promise<void> {
    const feeds = new StoreLayout(this.root).feeds;
    const directory = this.feedDirectory(name);
    let tombstone: string | undefined;
    if (fs.existsSync(directory)) {
      for (let n = 1; tombstone === undefined || fs.existsSync(tombstone); n++)
        tombstone = path.join(feeds, `${deletedFeedPrefix}${name}-${n}`);
      fs.renameSync(directory, tombstone);
    }
    fs.renameSync(restored, directory);
    await syncDirectory(feeds);
    if (tombstone) await removeTree(tombstone);
  }

  /**
   * Puts the feed laid out in `laidOut` (a restoring directory) in place as feed `name`, by one
   * rename, durably; `FEED_EXISTS` (and the layout removed) when the name is taken.
   */
  async adoptFeed(name: string, laidOut: string): Promise<void> {
    const taken = () =>
      new StreamStackError('FEED_EXISTS', `a feed named ${name} exists already`, { details: { feed: name } });
    if (this.holdsFeed(name)) {
      await removeTree(laidOut);
      throw taken();
    }
    try {
      fs.renameSync(laidOut, this.feedDirectory(name));
    } catch (error) {
      await removeTree(laidOut);
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOTEMPTY' || code === 'EEXIST') throw taken();
      throw ioError(error, `cannot put feed ${name} in place`);
    }
    await syncDirectory(new StoreLayout(this.root).feeds);
  }

  /** Removes the tombstones a deletion left when its process died (or its removal failed), and restores cut short. */
  private async removeTombstones(): Promise<void> {
    const feeds = new StoreLayout(this.root).feeds;
    const tombstones = fs
      .readdirSync(feeds)
      .filter((entry) => entry.startsWith(deletedFeedPrefix) || entry.startsWith(restoringFeedPrefix));
    for (const entry of tombstones) await removeTree(path.join(feeds, entry));
    if (tombstones.length > 0) await syncDirectory(feeds);
  }

  readMetadata(name: string): FeedMetadata {
    const file = new FeedLayout(this.feedDirectory(name)).config;
    if (!fs.existsSync(file)) {
      if (this.holdsFeedData(name)) {
        throw new StreamStackError('CORRUPT', `${file} is missing, but the feed's logs are there`, {
          details: { file, offset: 0 },
        });
      }
      throw new StreamStackError('FEED_NOT_FOUND', `no feed named ${name}`, { details: { feed: name } });
    }
    let metadata: Partial<FeedMetadata>;
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
      metadata = JSON.parse(text) as Partial<FeedMetadata>;
    } catch (error) {
      throw new StreamStackError('CORRUPT', `${file} is not valid JSON`, {
        cause: error,
        details: { file, offset: 0 },
      });
    }
    // Written once, in one exact form: any other bytes are damage, even ones that still parse.
    const tag = metadata?.tag;
    const durability = metadata?.durability;
    const exact = `${JSON.stringify({ name: metadata?.name, createdAt: metadata?.createdAt, formatVersion: metadata?.formatVersion, ...(tag === undefined ? {} : { tag }), ...(durability === undefined ? {} : { durability }) })}\n`;
    const tagSound = tag === undefined || (Number.isSafeInteger(tag) && tag >= 1 && tag <= feedTagMax);
    if (
      metadata?.name !== name ||
      !Number.isSafeInteger(metadata.createdAt) ||
      metadata.formatVersion !== 1 ||
      !tagSound ||
      (durability !== undefined && durability !== 'replicated') ||
      text !== exact
    ) {
      throw new StreamStackError('CORRUPT', `${file} does not describe feed ${name}`, { details: { file, offset: 0 } });
    }
    return metadata as FeedMetadata;
  }

  /** Creates a feed's directory and its `feed.json`, durably; `FEED_EXISTS` if it is there. */
  async createFeed(
    name: string,
    createdAt: number,
    tag: number,
    durability: 'local' | 'replicated' = 'local',
  ): Promise<FeedMetadata> {
    if (this.readOnly) throw new StreamStackError('READ_ONLY', `${this.root} was opened read-only`);
    const directory = this.feedDirectory(name);
    const file = new FeedLayout(directory).config;
    if (fs.existsSync(file) || this.holdsFeedData(name)) {
      throw new StreamStackError('FEED_EXISTS', `a feed named ${name} exists already`, { details: { feed: name } });
    }
    fs.mkdirSync(directory, { recursive: true });
    assert(Number.isSafeInteger(tag) && tag >= 1 && tag <= feedTagMax, 'a feed tag fits a segment header');
    const metadata: FeedMetadata = {
      name,
      createdAt,
      formatVersion: 1,
      tag,
      ...(durability === 'replicated' ? { durability } : {}),
    };
    // Written to a temporary name, synced, then renamed: a crash leaves either no feed or a
    // whole one, never a feed.json half written.
    writeSmallFileSync(file, `${JSON.stringify(metadata)}\n`);
    await syncDirectory(directory);
    await syncDirectory(path.dirname(directory));
    return metadata;
  }

  close(): void {
    this.lock?.release();
  }
}

/**
 * Removes a tombstone and everything in it. Its files go before the directory, so a crash part
 * way leaves a smaller tombstone, still named as one. Off the event loop: a feed's segments may
 * free gigabytes of blocks.
 */
async function removeTree(directory: string): Promise<void> {
  await fsp.rm(directory, { recursive: true, force: true });
}
