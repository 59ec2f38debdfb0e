/**
 * The commit record: what a commit frame says of its commit (its number, stream, parent,
 * positions, times, message, epoch, and where its run's frames lie), and the record the rest of
 * the engine keeps for each published commit, which adds where the run landed. Written and read
 * here; the run it closes is laid out in `commit-run.ts`.
 */
import { ByteReader, type ByteWriter } from './codec.js';
import type { ScannedFrame } from './framing.js';
import type { Corruption } from './runs.js';

/** The retired frames of every run not compacted: one shared empty list. */
const noOffsets: readonly number[] = Object.freeze([]);

/** A published commit, as its commit record says, plus where its run lies. */
export interface CommitRecord {
  readonly commit: number;
  readonly stream: string;
  /** The commit before this one; 0 for the first. */
  readonly parent: number;
  readonly records: number;
  readonly firstPosition: number;
  readonly lastPosition: number;
  readonly openedAt: number;
  readonly sealedAt: number;
  readonly message?: string;
  readonly epoch: number;
  /** True when the commit came from a one-shot append (an implicit stream). */
  readonly oneShot: boolean;
  /** The history segment (by base) that holds the run, and where the run starts in it. */
  readonly segment: number;
  readonly runStart: number;
  /** Bytes of the run before its commit frame (packs and manifests). */
  readonly runBytes: number;
  /** Offsets of the run's manifest and pack frames, from the run's start. */
  readonly manifests: readonly number[];
  readonly packs: readonly number[];
  /**
   * Manifest entries the run holds: `records` for every commit key compaction has not
   * rewritten. A compacted run holds fewer (its positions are sparse: each entry's position is
   * `firstPosition + seq - 1`), and `records` still counts the positions the commit spans.
   */
  readonly entries: number;
  /**
   * Offsets (from the run's start) of a compacted run's retired-fingerprint frames: the first
   * occurrences among the records compaction dropped, so that whole-history dedup after the
   * horizon is what it was, even when a fingerprint dictionary is rebuilt. Empty otherwise.
   */
  readonly retired: readonly number[];
  /**
   * Set on the stand-in for a commit that corruption made unreadable (docs/faults.md): every
   * read of it fails with `CORRUPT` naming this place. Such commits have no run.
   */
  readonly damage?: Corruption;
}

/** A commit record without where its run lies: what a commit frame holds. */
export type CommitFields = Omit<CommitRecord, 'segment' | 'runStart' | 'damage'>;

/**
 * Makes a commit record. Every one is made here, with every field present and in one order, so
 * that all of them share one hidden class: the code that reads commits (encoding them, listing
 * them, publishing them) then stays monomorphic, where records of mixed shapes — spreads,
 * optional fields present or not — made it several times slower.
 */
export function commitRecord(
  fields: CommitFields,
  segment: number,
  runStart: number,
  damage?: Corruption,
): CommitRecord {
  return {
    commit: fields.commit,
    stream: fields.stream,
    parent: fields.parent,
    records: fields.records,
    firstPosition: fields.firstPosition,
    lastPosition: fields.lastPosition,
    openedAt: fields.openedAt,
    sealedAt: fields.sealedAt,
    message: fields.message,
    epoch: fields.epoch,
    oneShot: fields.oneShot,
    segment,
    runStart,
    runBytes: fields.runBytes,
    manifests: fields.manifests,
    packs: fields.packs,
    entries: fields.entries,
    retired: fields.retired,
    damage,
  };
}

/**
 * Writes a commit's fields as its commit frame holds them (segment summaries hold the same):
 * the run's size doubles as the frame's distance from the run's start, so a reader that finds
 * the commit record also finds the run.
 */
export function writeCommitFields(writer: ByteWriter, commit: CommitFields): void {
  writer
    .varint(commit.commit)
    .string(commit.stream)
    .varint(commit.parent)
    .varint(commit.records)
    .varint(commit.firstPosition)
    .varint(commit.openedAt)
    .varint(commit.sealedAt)
    .u8(
      (commit.message === undefined ? 0 : 1) | (commit.oneShot ? 2 : 0) | (isCompactedRun(commit) ? compactedFlag : 0),
    );
  if (commit.message !== undefined) writer.string(commit.message);
  writer.varint(commit.epoch).varint(commit.runBytes);
  writer.varint(commit.manifests.length);
  for (const offset of commit.manifests) writer.varint(offset);
  writer.varint(commit.packs.length);
  for (const offset of commit.packs) writer.varint(offset);
  if (!isCompactedRun(commit)) return;
  writer.varint(commit.entries);
  writer.varint(commit.retired.length);
  for (const offset of commit.retired) writer.varint(offset);
}

/**
 * The position of a run's `index`-th entry: its index from the commit's first position, or in a
 * compacted run (fewer entries than positions) its seq from there.
 */
export function entryPosition(commit: CommitRecord, index: number, seq: number): number {
  return commit.entries === commit.records ? commit.firstPosition + index : commit.firstPosition + seq - 1;
}

/** The commit flag of a run key compaction rewrote: entries and retired frames follow. */
const compactedFlag = 4;

/** Whether a run holds fewer entries than positions, or retired fingerprints: its seqs place it. */
export function isCompactedRun(commit: Pick<CommitFields, 'entries' | 'records' | 'retired'>): boolean {
  return commit.entries !== commit.records || commit.retired.length > 0;
}

/**
 * Reads what `writeCommitFields` wrote into a whole commit record; `place` says where its run
 * lies (from the run's size). The record is made as one object literal: a feed keeps one per
 * commit for its life, and objects built by spreading others take several times the memory.
 */
export function readCommitFields(
  reader: ByteReader,
  place: (runBytes: number) => { segment: number; runStart: number },
): CommitRecord {
  const commit = reader.varint();
  const stream = reader.string();
  const parent = reader.varint();
  const records = reader.varint();
  const firstPosition = reader.varint();
  const openedAt = reader.varint();
  const sealedAt = reader.varint();
  const flags = reader.u8();
  const message = flags & 1 ? reader.string() : undefined;
  const epoch = reader.varint();
  const runBytes = reader.varint();
  const readOffsets = (): number[] => {
    const count = reader.varint();
    if (count > reader.remaining) throw reader.corrupt(`artifact count ${count} exceeds the frame`);
    const offsets: number[] = [];
    for (let index = 0; index < count; index++) offsets.push(reader.varint());
    return offsets;
  };
  const manifests = readOffsets();
  const packs = readOffsets();
  const compacted = (flags & compactedFlag) !== 0;
  const entries = compacted ? reader.varint() : records;
  if (entries > records)
    throw reader.corrupt(`a compacted run holds ${entries} entries, more than its ${records} positions`);
  const retired = compacted ? readOffsets() : noOffsets;
  const { segment, runStart } = place(runBytes);
  return commitRecord(
    {
      commit,
      stream,
      parent,
      records,
      firstPosition,
      lastPosition: firstPosition + records - 1,
      openedAt,
      sealedAt,
      message,
      epoch,
      oneShot: (flags & 2) !== 0,
      runBytes,
      manifests,
      packs,
      entries,
      retired,
    },
    segment,
    runStart,
  );
}

/** Decodes a commit frame; `frame.offset` is where the frame starts in its segment. */
export function readCommitRecord(bytes: Uint8Array, frame: ScannedFrame, segment: number, what: string): CommitRecord {
  const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, what);
  const record = readCommitFields(reader, (runBytes) => ({ segment, runStart: frame.offset - runBytes }));
  reader.expectEnd();
  if (record.runStart < 0) throw reader.corrupt('the run would start before the segment');
  return record;
}
