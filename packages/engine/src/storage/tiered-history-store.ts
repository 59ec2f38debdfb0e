/**
 * The history's segment store when sealed segments may be evicted: the local folder for every
 * file, except the history segments that tiering evicted to keep the local budget, whose records
 * are read back from object storage, in verified blocks (`RemoteSegmentFile`). An evicted segment
 * keeps its name locally — the file is cut to its header, which is what opening the history
 * checks — and its summary, index and dictionaries stay local, whole: every query needs them.
 *
 * Synchronous reads (a point lookup, an index fetch) of an evicted segment are served from the
 * cache; a range not in it throws `NotAtHand`, and the history's asynchronous readers fetch the
 * range — a small one in pieces of `remotePieceBytes`, whose bytes the readers check by their own
 * CRCs — and read again (`HistoryBytes.whenAtHand`). So a read never blocks the event loop on the
 * network, and the hot paths of a local segment stay synchronous.
 *
 * Eviction is safe against readers: a segment is routed to object storage first, then its local
 * reads already under way are waited for, and only then is its file cut (`evict`).
 *
 * @example
 * const store = new TieredHistoryStore(local);
 * store.attachRemote(remoteFiles); // once the store's object storage is known
 * const bytes = await store.read('0000000000000001.hist', 4096, 200);
 */
import { StreamStackError } from '../errors.js';
import { remotePointReadBytesMax } from '../limits.js';
import type { ObjectSegmentStore } from './object-segment-store.js';
import type { BlockCache, RemoteSegmentFile } from './remote-segment-file.js';
import type { SegmentDescriptor } from './segment-descriptor.js';
import type { HeldReads, LocalSegmentStore, SegmentStore, SyncSegmentReads } from './segment-store.js';

/**
 * A synchronous read of an evicted segment whose bytes are not in the block cache: the caller
 * fetches the range (`TieredHistoryStore.fetch`) and reads again. Never reaches a user: the
 * history's readers catch it.
 */
export class NotAtHand extends Error {
  constructor(
    /** The store's name of the file (`name` is the error's class name). */
    readonly file: string,
    readonly offset: number,
    readonly length: number,
  ) {
    super(`bytes ${offset} to ${offset + length} of ${file} are in object storage, not at hand`);
  }
}

/** Where evicted segments are read from: the files of tiered segments, by ordinal. */
export interface RemoteHistoryFiles {
  /**
   * The remote copy of `name`, the segment tiered as `ordinal` (its descriptor checked, read from
   * its local copy in `copies` when there is a sound one).
   */
  file(name: string, ordinal: number, copies?: SegmentStore): Promise<RemoteSegmentFile>;
  /** Keeps a confirmed descriptor as a local copy in `copies`, beside its segment. */
  keep(descriptor: SegmentDescriptor, copies: SegmentStore): Promise<void>;
  /** The blocks read back, shared by the files (its counters are the cache's hits and misses). */
  readonly cache: BlockCache;
  readonly objects: ObjectSegmentStore;
}

export class TieredHistoryStore implements SegmentStore, SyncSegmentReads {
  /** Evicted history segments, by name, with their ordinals. */
  private readonly evicted = new Map<string, number>();
  /** Remote files opened so far (their descriptors read), by name. */
  private readonly opened = new Map<string, RemoteSegmentFile>();
  /** Local asynchronous reads under way, by name: an eviction waits for them. */
  private readonly reading = new Map<string, Set<Promise<unknown>>>();
  /** When each sealed segment was last read, by name (a counter, not a clock): eviction takes the least recent. */
  private readonly lastRead = new Map<string, number>();
  private reads = 0;
  private remote: RemoteHistoryFiles | undefined;

  constructor(private readonly local: LocalSegmentStore) {}

  /** Gives the store the object storage evicted segments are read from. */
  attachRemote(remote: RemoteHistoryFiles): void {
    this.remote = remote;
  }

  /** The block cache's counters, when object storage is attached. */
  get cache(): BlockCache | undefined {
    return this.remote?.cache;
  }

  /**
   * Keeps the descriptor of a segment just confirmed in object storage beside it, so that once
   * evicted its reads need no request for the descriptor, in this process or the next.
   */
  async keepDescriptor(descriptor: SegmentDescriptor): Promise<void> {
    await this.remote?.keep(descriptor, this.local);
  }

  /** Notes `name` as evicted (tiered as `ordinal`): from now on it is read from object storage. */
  markEvicted(name: string, ordinal: number): void {
    this.evicted.set(name, ordinal);
  }

  isEvicted(name: string): boolean {
    return this.evicted.has(name);
  }

  /** The ordinal `name` was evicted as; undefined when it is local. */
  evictedAs(name: string): number | undefined {
    return this.evicted.get(name);
  }

  /** How many segments are evicted now. */
  get evictedCount(): number {
    return this.evicted.size;
  }

  /**
   * The rank of the last read of `name` (0: never read since the process started): eviction
   * takes the lowest first.
   */
  lastReadOf(name: string): number {
    return this.lastRead.get(name) ?? 0;
  }

  /**
   * Evicts `name`: routes its reads to object storage, waits for the local reads already under
   * way, then runs `cut` (which cuts the local file to its header). The caller has made the
   * eviction durable first (the tiering log), so a crash after the cut finds it noted.
   */
  async evict(name: string, ordinal: number, cut: () => Promise<void>): Promise<void> {
    this.evicted.set(name, ordinal);
    for (;;) {
      const pending = this.reading.get(name);
      if (!pending || pending.size === 0) break;
      await Promise.allSettled([...pending]);
    }
    await cut();
  }

  /** The remote file of an evicted `name`, its descriptor read on first use. */
  private async remoteFile(name: string): Promise<RemoteSegmentFile> {
    const opened = this.opened.get(name);
    if (opened) return opened;
    const ordinal = this.evicted.get(name)!;
    if (!this.remote)
      throw new StreamStackError(
        'UNAVAILABLE',
        `${name} was evicted to object storage (ordinal ${ordinal}): open the store with its objectStore to read it`,
        { details: { file: name, ordinal } },
      );
    const file = await this.remote.file(name, ordinal, this.local);
    // A merge may have reused the name meanwhile: only a name still evicted as that ordinal keeps it.
    if (this.evicted.get(name) === ordinal) this.opened.set(name, file);
    return file;
  }

  /**
   * Fetches the range into the cache, for a synchronous read to find it: what a `NotAtHand` asks
   * for. A small range comes in pieces (one short ranged GET; every synchronous reader checks
   * what it uses by its own CRCs), a larger one — or any, `inBlocks` — in verified blocks.
   */
  async fetch(name: string, offset: number, length: number, inBlocks = false): Promise<void> {
    if (!this.evicted.has(name)) return;
    const file = await this.remoteFile(name);
    const within = Math.min(length, Math.max(0, file.size - offset));
    if (within <= remotePointReadBytesMax && !inBlocks) await file.fetchPieces(offset, within);
    else await file.read(offset, within);
  }

  private touch(name: string): void {
    this.lastRead.set(name, ++this.reads);
  }

  /** Runs a local asynchronous read of `name`, noted so an eviction of `name` waits for it. */
  /**
   * Runs `read` on the local file of `name` unless it is evicted (then undefined, and `read` is
   * not run): an eviction that starts meanwhile waits for it before cutting the file. For reads
   * that must never go to object storage (a follower asks for a segment's bytes as they lie here).
   */
  whileLocal<T>(name: string, read: () => Promise<T>): Promise<T | undefined> {
    if (this.evicted.has(name)) return Promise.resolve(undefined);
    return this.tracked(name, read());
  }

  private tracked<T>(name: string, read: Promise<T>): Promise<T> {
    let pending = this.reading.get(name);
    if (!pending) this.reading.set(name, (pending = new Set()));
    pending.add(read);
    const done = () => {
      pending.delete(read);
      if (pending.size === 0 && this.reading.get(name) === pending) this.reading.delete(name);
    };
    read.then(done, done);
    return read;
  }

  async read(name: string, offset: number, length: number): Promise<Uint8Array> {
    this.touch(name);
    if (this.evicted.has(name)) return (await this.remoteFile(name)).read(offset, length);
    return this.tracked(name, this.local.read(name, offset, length));
  }

  async readInto(name: string, into: Uint8Array, offset: number): Promise<Uint8Array> {
    this.touch(name);
    if (this.evicted.has(name)) {
      into.set(await (await this.remoteFile(name)).read(offset, into.length));
      return into;
    }
    return this.tracked(name, this.local.readInto(name, into, offset));
  }

  readSync(name: string, offset: number, length: number): Uint8Array {
    this.touch(name);
    if (!this.evicted.has(name)) return this.local.readSync(name, offset, length);
    const bytes = this.opened.get(name)?.readAtHand(offset, length);
    if (!bytes) throw new NotAtHand(name, offset, length);
    return bytes;
  }

  readSyncInto(name: string, into: Uint8Array, offset: number): number {
    this.touch(name);
    if (!this.evicted.has(name)) return this.local.readSyncInto(name, into, offset);
    const file = this.opened.get(name);
    // A read near the end comes back short, as a local one does.
    const length = file ? Math.max(0, Math.min(into.length, file.size - offset)) : into.length;
    const bytes = file?.readAtHand(offset, length);
    if (!bytes) throw new NotAtHand(name, offset, length);
    into.set(bytes);
    return length;
  }

  hold(name: string): HeldReads {
    // Held files are dictionaries, which are never evicted.
    if (this.evicted.has(name))
      throw new StreamStackError('INTERNAL', `${name} is evicted and cannot be held for synchronous reads`);
    return this.local.hold(name);
  }

  put(name: string, bytes: Uint8Array): Promise<void> {
    return this.local.put(name, bytes);
  }

  async putFile(name: string, localFile: string): Promise<void> {
    await this.local.putFile(name, localFile);
    // A rewrite's new segment under a reused name is local and whole.
    this.forget(name);
  }

  readStart(name: string, length: number): Promise<{ bytes: Uint8Array; size: number }> {
    return this.local.readStart(name, length);
  }

  list(): Promise<string[]> {
    return this.local.list();
  }

  async delete(name: string): Promise<void> {
    await this.local.delete(name);
    this.forget(name);
  }

  async deleteAll(names: readonly string[]): Promise<void> {
    await this.local.deleteAll(names);
    for (const name of names) this.forget(name);
  }

  /** Forgets what was known of `name` (deleted, or replaced by a whole local file). */
  forget(name: string): void {
    this.evicted.delete(name);
    this.opened.delete(name);
    this.lastRead.delete(name);
  }

  /** Undefined for an evicted segment: its local file holds only its header. */
  localPath(name: string): string | undefined {
    return this.evicted.has(name) ? undefined : this.local.localPath(name);
  }

  size(name: string): Promise<number | undefined> {
    return this.local.size(name);
  }
}
