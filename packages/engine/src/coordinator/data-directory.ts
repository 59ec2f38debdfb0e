/**
 * The data directory: its LOCK, and the feeds in it (`feeds/<name>/`, each with a `feed.json`
 * written once at creation).
 */
import fs from 'node:fs';
import path from 'node:path';
import { ioError, StreamStackError } from '../errors.js';
import { feedNameCharactersMax } from '../limits.js';
import { DirectoryLock, type LockOptions } from '../storage/lock.js';
import { syncDirectory } from '../storage/segment.js';

const feedNamePattern = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export interface FeedMetadata {
  readonly name: string;
  readonly createdAt: number;
  readonly formatVersion: number;
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

export interface DataDirectoryOptions extends LockOptions {
  /** Take no lock and write nothing: for readers that run beside a writer. */
  readonly readOnly?: boolean;
}

export class DataDirectory {
  private constructor(
    readonly root: string,
    private readonly lock: DirectoryLock | undefined,
  ) {}

  static open(root: string, options: DataDirectoryOptions = {}): DataDirectory {
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
      fs.mkdirSync(path.join(lock.directory, 'feeds'), { recursive: true });
    } catch (error) {
      lock.release();
      throw ioError(error, `cannot prepare the data directory ${root}`);
    }
    return new DataDirectory(lock.directory, lock);
  }

  get readOnly(): boolean {
    return this.lock === undefined;
  }

  feedDirectory(name: string): string {
    return path.join(this.root, 'feeds', validateFeedName(name));
  }

  /** True when a feed's directory holds logs (so a missing feed.json is damage, not absence). */
  private holdsFeedData(name: string): boolean {
    const directory = this.feedDirectory(name);
    return ['history', 'wal', 'state'].some((part) => fs.existsSync(path.join(directory, part)));
  }

  feedNames(): string[] {
    const feeds = path.join(this.root, 'feeds');
    if (!fs.existsSync(feeds)) return [];
    return fs
      .readdirSync(feeds, { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && (fs.existsSync(path.join(this.root, 'feeds', entry.name, 'feed.json')) || this.holdsFeedData(entry.name)))
      .map((entry) => entry.name)
      .sort();
  }

  readMetadata(name: string): FeedMetadata {
    const file = path.join(this.feedDirectory(name), 'feed.json');
    if (!fs.existsSync(file)) {
      if (this.holdsFeedData(name)) {
        throw new StreamStackError('CORRUPT', `${file} is missing, but the feed's logs are there`, { details: { file, offset: 0 } });
      }
      throw new StreamStackError('FEED_NOT_FOUND', `no feed named ${name}`, { details: { feed: name } });
    }
    let metadata: Partial<FeedMetadata>;
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
      metadata = JSON.parse(text) as Partial<FeedMetadata>;
    } catch (error) {
      throw new StreamStackError('CORRUPT', `${file} is not valid JSON`, { cause: error, details: { file, offset: 0 } });
    }
    // Written once, in one exact form: any other bytes are damage, even ones that still parse.
    const exact = `${JSON.stringify({ name: metadata?.name, createdAt: metadata?.createdAt, formatVersion: metadata?.formatVersion })}\n`;
    if (metadata?.name !== name || !Number.isSafeInteger(metadata.createdAt) || metadata.formatVersion !== 1 || text !== exact) {
      throw new StreamStackError('CORRUPT', `${file} does not describe feed ${name}`, { details: { file, offset: 0 } });
    }
    return metadata as FeedMetadata;
  }

  /** Creates a feed's directory and its `feed.json`, durably; `FEED_EXISTS` if it is there. */
  async createFeed(name: string, createdAt: number): Promise<FeedMetadata> {
    if (this.readOnly) throw new StreamStackError('READ_ONLY', `${this.root} was opened read-only`);
    const directory = this.feedDirectory(name);
    const file = path.join(directory, 'feed.json');
    if (fs.existsSync(file) || this.holdsFeedData(name)) {
      throw new StreamStackError('FEED_EXISTS', `a feed named ${name} exists already`, { details: { feed: name } });
    }
    fs.mkdirSync(directory, { recursive: true });
    const metadata: FeedMetadata = { name, createdAt, formatVersion: 1 };
    // Written to a temporary name, synced, then renamed: a crash leaves either no feed or a
    // whole one, never a feed.json half written.
    const temporary = `${file}.tmp`;
    const fd = fs.openSync(temporary, 'w');
    try {
      fs.writeSync(fd, `${JSON.stringify(metadata)}\n`);
      fs.fdatasyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(temporary, file);
    await syncDirectory(directory);
    await syncDirectory(path.dirname(directory));
    return metadata;
  }

  close(): void {
    this.lock?.release();
  }
}
