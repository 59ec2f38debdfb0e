/**
 * Segment cuts: a fork shares the segment holding its fork point with its source, whole, and
 * reads it only up to the fork point. The cut says where that is: the segment's last commit for
 * this feed, the end of that commit's frame, and the header of the file it applies to. A feed's
 * cuts are written once, when its fork is laid out (`segment-cuts.json` in the feed's
 * directory), and never changed: a cut whose segment was replaced since (a merge or a key
 * compaction of the fork renames its own file over the name, and a rewritten segment never has
 * the capacity of the first segment it replaces) no longer matches the file's header and is
 * passed over. The fork's own summary of a cut segment names only the commits up to the cut; the
 * cut is what keeps a segment read whole (a lost summary, `verify`) to them too.
 *
 * @example
 * const cuts = readSegmentCuts(kernels, feedDirectory); // base → cut, empty for a feed that is no fork
 * const cut = cutFor(cuts, segment.header);             // undefined when it does not apply
 */
import fs from 'node:fs';
import path from 'node:path';
import { ioError, StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import type { SegmentHeader } from './segment.js';
import { writeSmallFileSync } from './segment.js';

/** Where a shared segment ends for a feed that holds it up to a fork point. */
export interface SegmentCut {
  /** The segment's base (its first position). */
  readonly base: number;
  /** The header of the file the cut applies to: a file with another is not that segment. */
  readonly baseCommit: number;
  readonly capacity: number;
  readonly feedTag: number;
  /** The last commit the feed holds of it, and that commit's last position. */
  readonly commit: number;
  readonly lastPosition: number;
  /** Where that commit's frame starts in the segment, and where it ends (nothing after is read). */
  readonly frameOffset: number;
  readonly end: number;
}

/** The name of a feed's cuts file in its directory. */
export const segmentCutsFile = 'segment-cuts.json';

/** The cuts file's format version. */
const cutsFormat = 1;

/** The cuts of the feed in `feedDirectory`, by base; empty for a feed that has none. */
export function readSegmentCuts(kernels: Kernels, feedDirectory: string): ReadonlyMap<number, SegmentCut> {
  const file = path.join(feedDirectory, segmentCutsFile);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
    throw ioError(error, `cannot read ${file}`);
  }
  const corrupt = (reason: string) =>
    new StreamStackError('CORRUPT', `${file} is damaged: ${reason}`, { details: { file, offset: 0 } });
  let parsed: { format?: unknown; cuts?: unknown; crc?: unknown };
  try {
    parsed = JSON.parse(text) as typeof parsed;
  } catch (error) {
    throw corrupt((error as Error).message);
  }
  if (parsed.format !== cutsFormat) throw corrupt(`unknown format ${String(parsed.format)}`);
  if (!Array.isArray(parsed.cuts)) throw corrupt('it lists no cuts');
  // Checked after reading as it was made before writing: the cuts are the bytes their CRC covers.
  if (parsed.crc !== cutsCrc(kernels, parsed.cuts as SegmentCut[])) throw corrupt('CRC mismatch');
  const cuts = new Map<number, SegmentCut>();
  for (const cut of parsed.cuts as SegmentCut[]) {
    if (
      !fieldsOf(cut).every((field) => Number.isSafeInteger(field) && (field as number) >= 0) ||
      cut.end <= cut.frameOffset
    )
      throw corrupt(`a cut of segment ${String(cut.base)} is not sound`);
    cuts.set(cut.base, cut);
  }
  return cuts;
}

/** Writes a new feed's cuts, durably as far as its file goes (the caller syncs the directory). */
export function writeSegmentCuts(kernels: Kernels, feedDirectory: string, cuts: readonly SegmentCut[]): void {
  if (cuts.length === 0) return;
  const sorted = [...cuts].sort((a, b) => a.base - b.base);
  const file = path.join(feedDirectory, segmentCutsFile);
  writeSmallFileSync(file, `${JSON.stringify({ format: cutsFormat, cuts: sorted, crc: cutsCrc(kernels, sorted) })}\n`);
}

/** The cut of `header`'s segment, when there is one and it is still that file's. */
export function cutFor(cuts: ReadonlyMap<number, SegmentCut>, header: SegmentHeader): SegmentCut | undefined {
  const cut = cuts.get(header.base);
  if (
    !cut ||
    cut.baseCommit !== header.baseCommit ||
    cut.capacity !== header.capacity ||
    cut.feedTag !== (header.feedTag ?? 0)
  )
    return undefined;
  return cut;
}

/** The CRC-32 of the cuts as written, field by field (independent of how JSON spaces them). */
function cutsCrc(kernels: Kernels, cuts: readonly SegmentCut[]): number {
  const text = cuts.map((cut) => fieldsOf(cut).join(',')).join(';');
  return kernels.crc32(new TextEncoder().encode(text));
}

/** A cut's fields in the order its CRC takes them (the order `SegmentCut` declares them). */
function fieldsOf(cut: SegmentCut): unknown[] {
  return [cut.base, cut.baseCommit, cut.capacity, cut.feedTag, cut.commit, cut.lastPosition, cut.frameOffset, cut.end];
}
