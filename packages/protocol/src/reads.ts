/**
 * The vocabulary of reads and conditional appends: queries, filters, read modes and plans. The
 * read modes are a list as well as a type, so that the engine's checks, the server's schemas and
 * the CLI's options all accept the values this list holds and no others.
 */

/** The read modes, in the order messages, schemas and option help list them. */
export const readModes = ['raw', 'dedup', 'latest'] as const;

export type ReadMode = (typeof readModes)[number];

/** True when `value` is one of `readModes`. */
export function isReadMode(value: unknown): value is ReadMode {
  return (readModes as readonly unknown[]).includes(value);
}

/** The read modes as a sentence names them, for messages and descriptions: "raw, dedup or latest". */
export const readModesInWords = `${readModes.slice(0, -1).join(', ')} or ${readModes[readModes.length - 1]}`;

/**
 * Which records a read returns: a query (an OR of items), or a single item — any of its `types`
 * (when given) and all of its `tags` (when given).
 */
export type RecordFilter = QueryItem | Query;

export interface ReadOptions {
  /** A commit cursor: records of later commits are read. 0 (the default) is the start. */
  readonly after?: number;
  /**
   * The last commit read (default: the head of the snapshot), at least `after`: a read of a
   * range `(after, upTo]`, so that an export or a batch job can stop at a commit of its choosing
   * and the next one continue exactly there.
   */
  readonly upTo?: number;
  readonly mode?: ReadMode;
  /** For dedup: compare against the whole history (default) or only the read window. */
  readonly dedupScope?: 'history' | 'window';
  readonly filter?: RecordFilter;
  /** How a filtered RAW read finds its records: the planner's choice, or forced. */
  readonly plan?: Plan;
  /** At most this many records. */
  readonly limit?: number;
  readonly signal?: AbortSignal;
}

export interface QueryItem {
  readonly types?: readonly string[];
  readonly tags?: readonly string[];
}

export interface Query {
  readonly items: readonly QueryItem[];
}

/** Which path evaluates a query: the planner's choice (`auto`), or forced (for tests and tools). */
export type Plan = 'auto' | 'index' | 'scan';

export interface AppendCondition {
  /** The query no record after `after` may match. */
  readonly failIfMatch: unknown;
  /** A position: only records after it count. 0 (the default) means the whole history. */
  readonly after?: number;
}
