/**
 * Opens, recovers, appends to and reads the history segments of one feed. Segments are based by
 * their first position and also record their first commit.
 */
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { FrameKind } from './frame-kinds.js';
import { scanFrames, type FrameBuilder } from './framing.js';
import {
  readCommitRecord,
  readManifest,
  readManifestEntryAt,
  readPackDirectory,
  type CommitRecord,
} from './history.js';

/** First read window for a single manifest entry: most entries are a few dozen bytes. */
const entryReadBytesInitial = 1024;
/** Largest window tried: the largest entry (64 tags of 256 bytes, a 1 KiB key…) fits. */
const entryReadBytesMax = 64 * 1024;
import { readPublishedRecord, type ManifestEntry, type PayloadLocation, type PublishedRecord } from './records.js';
import { ByteReader } from './codec.js';
import { SegmentKind } from './segment.js';
import { SegmentSet } from './segment-set.js';

export interface HistoryVisitor {
  onCommit(commit: CommitRecord): void;
  onPayload(crc: number, location: PayloadLocation): void;
}

/** The records of one commit read back: their entries and the run's bytes they point into. */
export interface CommitRun {
  readonly commit: CommitRecord;
  readonly entries: ManifestEntry[];
  /** Where each entry starts in its segment (for the index's locator column). */
  readonly entryOffsets: readonly number[];
  /** The run's bytes (packs and manifests), starting at `commit.runStart`. */
  readonly bytes: Uint8Array;
}

export class History {
  private constructor(
    private readonly kernels: Kernels,
    readonly segments: SegmentSet,
  ) {}

  static async open(kernels: Kernels, directory: string, visitor: HistoryVisitor, readOnly = false): Promise<History> {
    let expected = 1;
    let segmentBase = 0;
    const segments = await SegmentSet.open<CommitRecord>(
      kernels,
      directory,
      SegmentKind.History,
      '.hist',
      {
        beginSegment: (header) => {
          expected = Math.max(expected, header.baseCommit);
          segmentBase = header.base;
        },
        isMarker: (frame) => frame.kind === FrameKind.Commit,
        decode: (bytes, frame, runFrames) => {
          let commit: CommitRecord;
          try {
            commit = readCommitRecord(bytes, frame, segmentBase, `commit record at offset ${frame.offset}`);
          } catch {
            return undefined;
          }
          // The run must be exactly the frames the commit record names, in sequence: anything
          // else is stale bytes or a torn run, not this commit.
          const named = new Set([...commit.manifests, ...commit.packs].map((offset) => commit.runStart + offset));
          const runOk =
            commit.commit === expected &&
            runFrames.length === named.size &&
            runFrames.every((runFrame) => named.has(runFrame.offset)) &&
            (runFrames.length === 0 ? commit.runStart === frame.offset : runFrames[0].offset === commit.runStart);
          if (!runOk) return undefined;
          expected++;
          return commit;
        },
      },
      ({ segment, bytes, recovered }) => {
        for (const run of recovered.runs) {
          for (const frame of run.frames) {
            if (frame.kind !== FrameKind.Pack) continue;
            const what = `pack at ${segment.file}:${frame.offset}`;
            for (const { crc, location } of readPackDirectory(bytes, frame, segment.header.base, what)) {
              visitor.onPayload(crc, location);
            }
          }
          visitor.onCommit(run.decoded);
        }
      },
      readOnly,
    );
    return new History(kernels, segments);
  }

  /**
   * Writes the runs in `builder` (one or more, each ended by its commit record) with one
   * fdatasync. `first` names the first run's position and commit, which base a new segment.
   */
  async commit(
    builder: FrameBuilder,
    first: { position: number; commit: number },
    capacityDefault: number,
  ): Promise<{ segment: number; offset: number }> {
    const bytes = builder.finish(this.kernels);
    const segment = await this.segments.ensureRoom(
      bytes.length,
      () => ({ base: first.position, baseCommit: first.commit }),
      capacityDefault,
    );
    const offset = await segment.append(this.kernels, bytes);
    return { segment: segment.header.base, offset };
  }

  /** Reads a commit's run, verifies its frames, and decodes its manifests. */
  async readRun(commit: CommitRecord): Promise<CommitRun> {
    const segment = this.segments.byBase(commit.segment);
    const bytes = await segment.read(commit.runStart, commit.runBytes);
    const frames = scanFrames(this.kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${segment.file} is damaged`, {
        details: { file: segment.file, offset: commit.runStart + frameEnd },
      });
    }
    const entries: ManifestEntry[] = [];
    const entryOffsets: number[] = [];
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      const what = `manifest at ${segment.file}:${commit.runStart + frame.offset}`;
      readManifest(bytes, frame.dataStart, frame.dataEnd, commit.segment, commit.runStart, what, (entry, offset) => {
        entries.push(entry);
        entryOffsets.push(commit.runStart + offset);
      });
    }
    if (entries.length !== commit.records) {
      throw new StreamStackError('CORRUPT', `commit ${commit.commit} names ${commit.records} records but its manifests hold ${entries.length}`, {
        details: { file: segment.file, offset: commit.runStart },
      });
    }
    return { commit, entries, entryOffsets, bytes };
  }

  /**
   * Reads the manifest entry at `offset` of segment `segment` (whose run starts at `runStart`),
   * for fetching single records by position. Entries are small; a read window that turns out
   * too short is doubled and tried again.
   */
  readEntrySync(segment: number, offset: number, runStart: number): ManifestEntry {
    const file = this.segments.byBase(segment);
    let window = entryReadBytesInitial;
    for (;;) {
      // The common window reuses one scratch buffer: an entry's fields are copied out of it.
      const scratch = window === entryReadBytesInitial ? this.entryScratch : new Uint8Array(window);
      const length = file.readSyncInto(scratch.subarray(0, Math.min(window, file.header.capacity - offset)), offset);
      try {
        const entry = readManifestEntryAt(scratch.subarray(0, length), 0, segment, runStart, `manifest entry at ${file.file}:${offset}`);
        // The fingerprint is a view of the scratch buffer, which the next read overwrites.
        return { ...entry, fingerprint: entry.fingerprint.slice() };
      } catch (error) {
        if (length < window || window >= entryReadBytesMax) throw error;
        window *= 4;
      }
    }
  }

  private readonly entryScratch = new Uint8Array(entryReadBytesInitial);

  /**
   * Reads a commit's run straight into published records, payloads included: what a scan
   * reads, with one object per record and payloads as views of the run's bytes.
   */
  async readRunRecords(commit: CommitRecord, feed: string): Promise<PublishedRecord[]> {
    return this.decodeRunRecords(commit, feed, await this.readRunBytes(commit));
  }

  /** A commit's run as bytes (packs and manifests), for `decodeRunRecords`. */
  readRunBytes(commit: CommitRecord): Promise<Uint8Array> {
    return this.segments.byBase(commit.segment).read(commit.runStart, commit.runBytes);
  }

  /** Verifies a run's frames and decodes its records (see `readRunRecords`). */
  async decodeRunRecords(commit: CommitRecord, feed: string, bytes: Uint8Array): Promise<PublishedRecord[]> {
    const segment = this.segments.byBase(commit.segment);
    const frames = scanFrames(this.kernels, bytes, 0, bytes.length);
    const frameEnd = frames.length === 0 ? 0 : frames[frames.length - 1].dataEnd;
    if (frameEnd !== bytes.length) {
      throw new StreamStackError('CORRUPT', `the run of commit ${commit.commit} in ${segment.file} is damaged`, {
        details: { file: segment.file, offset: commit.runStart + frameEnd },
      });
    }
    const records = new Array<PublishedRecord>(commit.records);
    const external: { index: number; location: PayloadLocation }[] = [];
    const run = { feed, commit: commit.commit, stream: commit.stream, segment: commit.segment, runStart: commit.runStart };
    let count = 0;
    for (const frame of frames) {
      if (frame.kind !== FrameKind.Manifest) continue;
      const reader = new ByteReader(bytes, frame.dataStart + 1, frame.dataEnd, `manifest at ${segment.file}:${commit.runStart + frame.offset}`);
      reader.u32();
      const entries = reader.u32();
      if (count + entries > commit.records) break;
      for (let index = 0; index < entries; index++) {
        records[count] = readPublishedRecord(reader, run, commit.firstPosition + count, bytes, (location) =>
          external.push({ index: count, location }),
        );
        count++;
      }
      reader.expectEnd();
    }
    if (count !== commit.records) {
      throw new StreamStackError('CORRUPT', `commit ${commit.commit} names ${commit.records} records but its manifests hold ${count}`, {
        details: { file: segment.file, offset: commit.runStart },
      });
    }
    for (const { index, location } of external) records[index].payload = await this.readPayload(location);
    return records;
  }

  /** A payload's bytes, from the run already read when it lies there, else from its segment. */
  async readPayload(location: PayloadLocation, run?: CommitRun): Promise<Uint8Array> {
    if (run && location.segment === run.commit.segment) {
      const start = location.offset - run.commit.runStart;
      if (start >= 0 && start + location.length <= run.bytes.length) {
        return run.bytes.subarray(start, start + location.length);
      }
    }
    return this.segments.byBase(location.segment).read(location.offset, location.length);
  }

  /** A payload's bytes, synchronously (dedup checks candidates while a group is being laid out). */
  readPayloadSync(location: PayloadLocation): Uint8Array {
    return this.segments.byBase(location.segment).readSync(location.offset, location.length);
  }

  close(): void {
    this.segments.close();
  }
}
