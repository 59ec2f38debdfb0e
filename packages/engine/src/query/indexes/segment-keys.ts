/**
 * The keys of one history segment: every occurrence of every key (or, for a fingerprint
 * dictionary, every fingerprint) with its position, version, tombstone flag and locator — the
 * active segment's, kept as records are published, or a sealed segment's read from its runs,
 * which is what its dictionary file is built from (`segmentKeysOf`, `winnerColumnsOf`).
 */
import { StreamStackError } from '../../errors.js';
import { sliceDue, yieldToEventLoop, yieldWhenDue } from '../../event-loop.js';
import type { PackedBytes } from '../../kernels/kernels.js';
import { keyBuildYieldKeys, rebuildBatchRowsMax, segmentKeyShardSlotsInitial, segmentKeyShards } from '../../limits.js';
import { type ByteReader, type ByteWriter, utf8DecodeRange } from '../../storage/codec.js';
import type { CommitRecord } from '../../storage/commit-record.js';
import { fingerprintKey } from '../../storage/commit-run.js';
import type { KeyWinner, TermOrder } from '../../storage/key-file.js';
import { PackedTermsWriter } from '../../storage/packed-terms.js';
import { recordFlags } from '../../storage/records.js';
import type { SegmentRunSource } from '../../storage/run-reads.js';
import { columnBytes, columnOf, grown } from '../../typed-arrays.js';
import type { WinnerColumns } from './key-merge.js';
import { StringKeyTable } from './key-table.js';

/**
 * Every occurrence of every key in one segment, in position order (active or just sealed). The
 * occurrences are columns, not objects: a segment holds hundreds of thousands of them, and an
 * object each would cost the collector more than the lookups cost.
 */
export class SegmentKeys {
  /**
   * Each key's slot, in one of `segmentKeyShards` tables chosen by a hash of the key, and per
   * slot its newest occurrence (a column index); each occurrence links to the key's one before
   * it (`previous`, -1 for none). Strings in a Map held the event loop's thread for tens of
   * milliseconds at every full collection, to mark and move a few hundred thousand of them; the
   * tables keep them in typed arrays.
   */
  private readonly shards = Array.from({ length: segmentKeyShards }, () => ({
    keys: new StringKeyTable(segmentKeyShardSlotsInitial),
    newest: new Int32Array(segmentKeyShardSlotsInitial),
  }));
  private previous = new Int32Array(1024);
  private positions = new Float64Array(1024);
  private locators = new Uint32Array(1024);
  /**
   * Versions and tombstone flags, made when the first nonzero version or the first tombstone
   * is added: until then every one is 0. Most keys carry no version, no tombstone is common,
   * and a fingerprint has neither: the two columns were 9 of an occurrence's 29 bytes.
   */
  private versions: Float64Array | undefined;
  private tombstones: Uint8Array | undefined;
  private count = 0;
  /** The last commit whose records are here. */
  lastCommit: CommitRecord | undefined;

  constructor(
    readonly base: number,
    private readonly order: TermOrder,
  ) {}

  /** Occurrences held (what a sealed segment holds in memory until its dictionary is built). */
  get occurrences(): number {
    return this.count;
  }

  /** Bytes the occurrence columns take, room to grow included (for tests and memory accounting). */
  get columnBytes(): number {
    return (
      this.previous.byteLength +
      this.positions.byteLength +
      this.locators.byteLength +
      (this.versions?.byteLength ?? 0) +
      (this.tombstones?.byteLength ?? 0)
    );
  }

  add(key: string, position: number, version: number, tombstone: boolean, locator: number): void {
    if (this.count === this.positions.length) this.grow(Math.max(1024, this.count * 2));
    const at = this.count++;
    this.positions[at] = position;
    this.locators[at] = locator;
    if (version !== 0) this.versions ??= new Float64Array(this.positions.length);
    if (this.versions) this.versions[at] = version;
    if (tombstone) this.tombstones ??= new Uint8Array(this.positions.length);
    if (this.tombstones) this.tombstones[at] = tombstone ? 1 : 0;
    const shard = this.shards[shardOf(key)];
    const known = shard.keys.size;
    const slot = shard.keys.slotOf(key);
    if (slot === known) {
      if (slot === shard.newest.length) shard.newest = grown(shard.newest, slot * 2);
      this.previous[at] = -1;
    } else {
      this.previous[at] = shard.newest[slot];
    }
    shard.newest[slot] = at;
  }

  private grow(size: number): void {
    this.positions = grown(this.positions, size);
    this.locators = grown(this.locators, size);
    this.previous = grown(this.previous, size);
    if (this.versions) this.versions = grown(this.versions, size);
    if (this.tombstones) this.tombstones = grown(this.tombstones, size);
  }

  /**
   * Lets go of the columns' room to grow: for a segment just sealed, whose occurrences stay in
   * memory until its dictionary is built and get no more. Doubling leaves up to half of each
   * column empty, and a full segment holds a million occurrences.
   */
  seal(): void {
    const count = this.count;
    if (count === this.positions.length) return;
    this.positions = this.positions.slice(0, count);
    this.locators = this.locators.slice(0, count);
    this.previous = this.previous.slice(0, count);
    this.versions = this.versions?.slice(0, count);
    this.tombstones = this.tombstones?.slice(0, count);
  }

  /** Writes the occurrences and their tables as a tail checkpoint holds them (`tail-checkpoint.ts`). */
  writeTo(writer: ByteWriter): void {
    const count = this.count;
    writer.varint(this.shards.length);
    for (const { keys, newest } of this.shards) {
      keys.writeTo(writer);
      writer.bytes(columnBytes(newest, keys.size));
    }
    writer.varint(count);
    writer.bytes(columnBytes(this.previous, count));
    writer.bytes(columnBytes(this.positions, count));
    writer.bytes(columnBytes(this.locators, count));
    writer.u8(this.versions ? 1 : 0);
    if (this.versions) writer.bytes(columnBytes(this.versions, count));
    writer.u8(this.tombstones ? 1 : 0);
    if (this.tombstones) writer.bytes(columnBytes(this.tombstones, count));
  }

  /**
   * The keys `writeTo` wrote, for the segment at `base`; `CORRUPT` (through `reader`) when they
   * do not hold together: every slot's newest occurrence and every occurrence's previous one
   * must be an occurrence before it, so no walk of a key's occurrences can leave the columns.
   */
  static readFrom(reader: ByteReader, base: number, order: TermOrder): SegmentKeys {
    const keys = new SegmentKeys(base, order);
    if (reader.varint() !== segmentKeyShards)
      throw reader.corrupt(`a segment's keys are not in ${segmentKeyShards} shards`);
    const shards = keys.shards.map(() => {
      const table = StringKeyTable.readFrom(reader);
      const newest = columnOf(Int32Array, reader.bytes(), table.size, table.size * 2);
      if (!newest) throw reader.corrupt('a shard holds a newest occurrence per key');
      return { keys: table, newest };
    });
    const count = reader.varint();
    const capacity = Math.max(1024, count * 2);
    const previous = columnOf(Int32Array, reader.bytes(), count, capacity);
    const positions = columnOf(Float64Array, reader.bytes(), count, capacity);
    const locators = columnOf(Uint32Array, reader.bytes(), count, capacity);
    const versions = reader.u8() === 1 ? columnOf(Float64Array, reader.bytes(), count, capacity) : null;
    const tombstones = reader.u8() === 1 ? columnOf(Uint8Array, reader.bytes(), count, capacity) : null;
    if (!previous || !positions || !locators || versions === undefined || tombstones === undefined)
      throw reader.corrupt('an occurrence column does not fit its count');
    for (let at = 0; at < count; at++)
      if (previous[at] < -1 || previous[at] >= at) throw reader.corrupt(`occurrence ${at} links to one after it`);
    for (const { keys: table, newest } of shards)
      for (let slot = 0; slot < table.size; slot++)
        if (newest[slot] < 0 || newest[slot] >= count) throw reader.corrupt(`key ${slot} has no occurrence`);
    keys.shards.splice(0, keys.shards.length, ...shards);
    Object.assign(keys, { previous, positions, locators, count });
    if (versions) keys.versions = versions;
    if (tombstones) keys.tombstones = tombstones;
    return keys;
  }

  /** The version of occurrence `at`. */
  private versionAt(at: number): number {
    return this.versions ? this.versions[at] : 0;
  }

  /**
   * Every key, in no particular order (a dictionary sorts its terms), gathered a shard at a
   * time: a merged segment's million fingerprints took a tenth of a second in one go.
   */
  async keyList(): Promise<string[]> {
    const keys: string[] = [];
    for (const { keys: shard } of this.shards) {
      for (let slot = 0; slot < shard.size; slot++) keys.push(shard.keyAt(slot));
      await yieldToEventLoop();
    }
    return keys;
  }

  /**
   * Every key as UTF-8 bytes (in no particular order: a dictionary sorts its terms) with its
   * winner over all its occurrences, a slice at a time: what a dictionary is built from, with no
   * string or object made per key.
   */
  async winnerColumns(): Promise<{ terms: PackedBytes; own: WinnerColumns }> {
    let count = 0;
    let units = 0;
    for (const { keys } of this.shards) {
      count += keys.size;
      units += keys.units;
    }
    const writer = new PackedTermsWriter(count, units);
    const own: WinnerColumns = {
      positions: new Float64Array(count),
      versions: new Float64Array(count),
      locators: new Uint32Array(count),
      tombstones: new Uint8Array(count),
    };
    let index = 0;
    for (const { keys, newest } of this.shards) {
      for (let slot = 0; slot < keys.size; slot++) {
        keys.packInto(slot, writer);
        const best = this.bestOf(newest[slot], Number.POSITIVE_INFINITY);
        own.positions[index] = this.positions[best];
        own.versions[index] = this.versionAt(best);
        own.locators[index] = this.locators[best];
        own.tombstones[index] = this.tombstones ? this.tombstones[best] : 0;
        if (++index % keyBuildYieldKeys === 0) await yieldToEventLoop();
      }
    }
    return { terms: writer.finish(), own };
  }

  /** The winner of `key` among its occurrences at or before `position`. */
  winnerUpTo(key: string, position: number): KeyWinner | undefined {
    const shard = this.shards[shardOf(key)];
    const slot = shard.keys.find(key);
    if (slot < 0) return undefined;
    const best = this.bestOf(shard.newest[slot], position);
    if (best < 0) return undefined;
    return {
      position: this.positions[best],
      version: this.versionAt(best),
      tombstone: this.tombstones !== undefined && this.tombstones[best] === 1,
      locator: this.locators[best],
    };
  }

  /**
   * The occurrence that wins among a key's at or before `position`, from its newest one
   * (`newest`) back; -1 for none.
   */
  private bestOf(newest: number, position: number): number {
    let best = -1;
    const first = this.order === 'first';
    // Positions in a segment are distinct, so the order the occurrences are met in (newest
    // first) cannot change the winner.
    for (let at = newest; at >= 0; at = this.previous[at]) {
      if (this.positions[at] > position) continue;
      if (best < 0) best = at;
      else if (first) {
        if (this.positions[at] < this.positions[best]) best = at;
      } else if (
        this.versionAt(at) > this.versionAt(best) ||
        (this.versionAt(at) === this.versionAt(best) && this.positions[at] > this.positions[best])
      )
        best = at;
    }
    return best;
  }
}

/**
 * A key's shard: a hash of its length and its last four characters, which differ the most
 * between keys (counters, ids) and are random in fingerprints.
 */
function shardOf(key: string): number {
  const length = key.length;
  let hash = length;
  for (let at = Math.max(0, length - 4); at < length; at++) hash = (hash * 31 + key.charCodeAt(at)) | 0;
  return (hash ^ (hash >>> 7)) & (segmentKeyShards - 1);
}

/**
 * The locator of a retired fingerprint's first occurrence: no entry holds it any more. Nothing
 * reads a fingerprint dictionary's locators (dedup asks positions only).
 */
export const retiredLocator = 0;

/**
 * Every occurrence of every key of the segment at `base` (its runs `commits`, all of it), read
 * from its runs: consecutive runs read as stretches, each decoded into columns a batch of
 * `rebuildBatchRowsMax` rows at a time, with a turn of the event loop when a slice has run its
 * time, so a segment of 100,000-record commits never holds the event loop for a whole commit.
 * Payloads are not read: only keys, versions, flags, fingerprints, places. A fingerprint
 * dictionary's keys include the fingerprints a key compaction retired: they still count for
 * whole-history dedup.
 */
export async function segmentKeysOf(
  runs: SegmentRunSource,
  base: number,
  order: TermOrder,
  commits: readonly CommitRecord[],
): Promise<SegmentKeys> {
  const keys = new SegmentKeys(base, order);
  const first = order === 'first';
  let retiredCount = 0;
  for await (const { commit, bytes: run } of runs.runsInStretches(commits)) {
    for await (const columns of runs.runColumns(commit, run, rebuildBatchRowsMax, false)) {
      const { bytes, flags } = columns;
      for (let row = 0; row < columns.count; row++) {
        const locator = commit.runStart + columns.entryStarts[row];
        if (first) {
          keys.add(
            fingerprintKey(bytes.subarray(columns.fingerprintStarts[row], columns.fingerprintEnds[row])),
            columns.positions[row],
            0,
            false,
            locator,
          );
          continue;
        }
        if ((flags[row] & recordFlags.hasKey) === 0) continue;
        const key = utf8DecodeRange(bytes, columns.keyStarts[row], columns.keyEnds[row]);
        if (key === undefined) {
          throw new StreamStackError('CORRUPT', `a key in commit ${commit.commit} is not UTF-8`, {
            details: { file: runs.fileFor(commit.segment), offset: locator },
          });
        }
        keys.add(
          key,
          columns.positions[row],
          columns.versions[row],
          (flags[row] & recordFlags.isTombstone) !== 0,
          locator,
        );
      }
      if (sliceDue()) await yieldToEventLoop();
    }
    if (first && commit.retired.length > 0) {
      for (const retired of await runs.readRetired(commit, run)) {
        keys.add(fingerprintKey(retired.fingerprint), commit.firstPosition + retired.seq - 1, 0, false, retiredLocator);
        const pause = yieldWhenDue(++retiredCount);
        if (pause) await pause;
      }
    }
  }
  return keys;
}

/**
 * Each of `keys`' terms, as UTF-8 bytes, with its winner in the segment, as columns, a slice at
 * a time: a segment holds hundreds of thousands of terms, and appends and reads go on meanwhile.
 * What a dictionary build merges with the dictionaries before it.
 */
export function winnerColumnsOf(keys: SegmentKeys): Promise<{ terms: PackedBytes; own: WinnerColumns }> {
  return keys.winnerColumns();
}
