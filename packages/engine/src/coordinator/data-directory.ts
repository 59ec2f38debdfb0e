/**
 * The data directory: its LOCK, and the feeds in it (`feeds/<name>/`, each with a `feed.json`
 * written once at creation).
 */
import fs from 'node:fs';
import path from 'node:path';
import { StreamStackError } from '../errors.js';
import { feedNameCharactersMax } from '../limits.js';
import { DirectoryLock } from '../storage/lock.js';
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

export class DataDirectory {
  private constructor(
    readonly root: string,
    private readonly lock: DirectoryLock,
  ) {}

  static open(root: string): DataDirectory {
    const lock = DirectoryLock.acquire(root);
    fs.mkdirSync(path.join(lock.directory, 'feeds'), { recursive: true });
    return new DataDirectory(lock.directory, lock);
  }

  feedDirectory(name: string): string {
    return path.join(this.root, 'feeds', validateFeedName(name));
  }

  feedNames(): string[] {
    return fs
      .readdirSync(path.join(this.root, 'feeds'), { withFileTypes: true })
      .filter((entry) => entry.isDirectory() && fs.existsSync(path.join(this.root, 'feeds', entry.name, 'feed.json')))
      .map((entry) => entry.name)
      .sort();
  }

  readMetadata(name: string): FeedMetadata {
    const file = path.join(this.feedDirectory(name), 'feed.json');
    if (!fs.existsSync(file)) {
      throw new StreamStackError('FEED_NOT_FOUND', `no feed named ${name}`, { details: { feed: name } });
    }
    try {
      return JSON.parse(fs.readFileSync(file, 'utf8')) as FeedMetadata;
    } catch (error) {
      throw new StreamStackError('CORRUPT', `${file} is not valid JSON`, { cause: error, details: { file, offset: 0 } });
    }
  }

  /** Creates a feed's directory and its `feed.json`, durably; `FEED_EXISTS` if it is there. */
  async createFeed(name: string, createdAt: number): Promise<FeedMetadata> {
    const directory = this.feedDirectory(name);
    const file = path.join(directory, 'feed.json');
    if (fs.existsSync(file)) {
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
    this.lock.release();
  }
}
