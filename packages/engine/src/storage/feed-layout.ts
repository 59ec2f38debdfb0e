/**
 * The layout of a store's directory and of each feed's: every folder, file name and suffix is
 * spelled here once, and the rest of the engine asks this module for a path instead of joining
 * names itself. A store directory holds its marker, its lock and `feeds/`; a feed's directory
 * holds `feed.json`, `wal/` (WAL segments), `history/` (history segments and their summaries),
 * `index/` (each sealed segment's tag index and dictionaries, named like the segment) and
 * `state/` (the lease, compaction, merge and retention logs, and `subscriptions/`). The formats
 * themselves are in `docs/formats.md`; this module holds only where they live.
 */
import path from 'node:path';

/** The store's marker file: its format version (see `coordinator/opening/store-marker.ts`). */
export const storeMarkerName = 'streamstack.json';
/** The store's lock file: one writer process at a time. */
export const storeLockName = 'LOCK';
/** The store's folder of feed directories. */
export const feedsFolderName = 'feeds';
/** What a feed directory being deleted is renamed to start with, so it is no longer a feed. */
export const deletedFeedPrefix = '.deleted-';
/** What a feed directory being laid out by a failover's restore is named first: not a feed until renamed. */
export const restoringFeedPrefix = '.restoring-';
/** A feed's settings and identity (its tag). */
export const feedConfigName = 'feed.json';

/** Suffixes of segment-named files, each after the segment's 16-digit base. */
export const segmentSuffix = {
  /** A history segment. */
  history: '.hist',
  /** A WAL segment. */
  wal: '.wal',
  /** A finished history segment's summary (its commits, read at open instead of the segment). */
  summary: '.sum',
  /** A sealed segment's tag and type index. */
  tagIndex: '.idx',
  /** A sealed segment's key dictionary (each key's latest record). */
  keyDictionary: '.keys',
  /** A sealed segment's fingerprint dictionary (each fingerprint's first occurrence). */
  fingerprintDictionary: '.fps',
  /** The active segment's tails as the feed last closed with them (see `tail-checkpoint.ts`). */
  tailCheckpoint: '.tail',
  /** The active segment's commits and payloads as the feed last closed with them (see `active-checkpoint.ts`). */
  activeCheckpoint: '.ckpt',
  /**
   * A tiered segment's descriptor, kept beside it as uploaded (with a CRC of its own), so a
   * read of the segment once evicted needs no request for it.
   */
  descriptor: '.desc',
} as const;

/** What a file written under a temporary name ends with; a log's open deletes every one it finds. */
export const temporarySuffix = '.tmp';
/** What a rewrite's (merge or key compaction) temporary files end with. */
export const rewriteTemporarySuffix = `.merge${temporarySuffix}`;

/** The state logs of a feed, each `state/<name>.log`. */
export type StateLogName = 'lease' | 'compaction' | 'merge' | 'retention' | 'tiering';

/** The folders whose presence means a feed directory holds data (so a missing `feed.json` is damage). */
const logFolderNames = ['history', 'wal', 'state'] as const;

/** Digits of a segment file name: enough for any base below 2^53. */
const segmentNameDigits = 16;

/** The name of the file of the segment at `base` with `suffix`: its base in 16 digits, then the suffix. */
export function segmentFileName(base: number, suffix: string): string {
  return `${String(base).padStart(segmentNameDigits, '0')}${suffix}`;
}

/** The file of the segment at `base` with `suffix` in a log's or index's `directory`. */
export function segmentFile(directory: string, base: number, suffix: string): string {
  return path.join(directory, segmentFileName(base, suffix));
}

/**
 * The base a segment-named file (`<16 digits>.<suffix>`, or a temporary one of it such as
 * `.fps.tmp`) names, or undefined for another file.
 */
export function baseOfSegmentName(name: string): number | undefined {
  const match = /^(\d{16})\.[a-z]+(\.[a-z]+)*$/.exec(name);
  return match ? Number(match[1]) : undefined;
}

/** The summary file of the history segment file `segmentFile`: beside it, with the summary suffix. */
export function summaryFileOf(segmentFile: string): string {
  return segmentFile.replace(/\.[a-z]+$/, segmentSuffix.summary);
}

/** What a store's root may hold besides its marker: a store made before markers holds no other. */
export const storeRootEntryNames: ReadonlySet<string> = new Set([
  feedsFolderName,
  storeLockName,
  `${storeMarkerName}${temporarySuffix}`,
]);

/** Where a store's files live under its root directory. */
export class StoreLayout {
  constructor(readonly root: string) {}

  get marker(): string {
    return path.join(this.root, storeMarkerName);
  }

  get lock(): string {
    return path.join(this.root, storeLockName);
  }

  get feeds(): string {
    return path.join(this.root, feedsFolderName);
  }

  /** The directory of the feed named `name` (a name already validated). */
  feed(name: string): string {
    return path.join(this.feeds, name);
  }
}

/** Where one feed's files live under its directory. */
export class FeedLayout {
  constructor(readonly directory: string) {}

  get config(): string {
    return path.join(this.directory, feedConfigName);
  }

  get history(): string {
    return path.join(this.directory, 'history');
  }

  get wal(): string {
    return path.join(this.directory, 'wal');
  }

  get index(): string {
    return path.join(this.directory, 'index');
  }

  get state(): string {
    return path.join(this.directory, 'state');
  }

  get subscriptions(): string {
    return path.join(this.state, 'subscriptions');
  }

  /** Subscription groups' state logs, one per group (its cursor is the subscription of its name). */
  get groups(): string {
    return path.join(this.state, 'groups');
  }

  /** The folders that hold a feed's logs: any of them present means the directory holds data. */
  get logFolders(): readonly string[] {
    return logFolderNames.map((name) => path.join(this.directory, name));
  }

  /** The state log named `name`. */
  stateLog(name: StateLogName): string {
    return path.join(this.state, `${name}.log`);
  }

  /** The log of the subscription named `name` (a name already validated). */
  subscription(name: string): string {
    return path.join(this.subscriptions, `${name}${subscriptionSuffix}`);
  }

  /** The history segment at `base`. */
  historySegment(base: number): string {
    return segmentFile(this.history, base, segmentSuffix.history);
  }

  /** The tag and type index of the sealed segment at `base`. */
  tagIndex(base: number): string {
    return segmentFile(this.index, base, segmentSuffix.tagIndex);
  }
}

/** What a subscription's log file ends with. */
export const subscriptionSuffix = '.log';
/** What a subscription group's state log ends with. */
export const groupSuffix = '.group';
