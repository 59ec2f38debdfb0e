/**
 * Laying one commit run into a group being prepared, so that every sealed segment stays
 * self-contained: a run references only payloads stored in the segment it lands in. The group
 * lands in the active segment unless it outgrows it. Then, if runs before this one may reference
 * the active segment, the group is cut here (`GroupFull`: this run goes first in the next group);
 * if this is the group's first run, it is laid again referencing nothing outside itself.
 */
import type { Kernels } from '../../kernels/kernels.js';
import { buildCommitRun, type CommitRunInput } from '../../storage/commit-run.js';
import type { GroupBuilder } from '../../storage/groups.js';
import { GroupFull } from './group-commit.js';
import type { GroupPayloads, PayloadDedup } from './payload-dedup.js';

/** A run as `buildCommitRun` laid it out. */
export type LaidRun = Awaited<ReturnType<typeof buildCommitRun>>;

/**
 * Lays `input` at the end of `builder`. `room` is the active history segment's free space (none
 * when there is no active segment); `laid` the payloads of the group's earlier runs, `inFlight`
 * those of the groups written before it and not yet durable (a torn write of theirs cuts this
 * group too, so referencing them is safe), `stored` those already durable. Returns the run and,
 * when it is known now, where the group lands.
 */
export async function layRun(
  kernels: Kernels,
  builder: GroupBuilder,
  input: CommitRunInput,
  frameDataBytesMax: number,
  room: { readonly segment: number; readonly offset: number; readonly bytes: number } | undefined,
  laid: GroupPayloads,
  inFlight: readonly GroupPayloads[],
  stored: PayloadDedup,
): Promise<{ run: LaidRun; landing: { readonly segment: number; readonly offset: number } | undefined }> {
  const firstInGroup = builder.runFrameCount === 0;
  const mark = builder.mark();
  const lookup = (payload: Uint8Array, crc: number, segment: number) => {
    const found = laid.find(payload, crc, segment);
    if (found) return found;
    for (const earlier of inFlight) {
      const location = earlier.find(payload, crc, segment);
      if (location) return location;
    }
    return stored.find(payload, crc, segment);
  };
  let run = await buildCommitRun(
    kernels,
    builder,
    input,
    (payload, crc) => (room ? lookup(payload, crc, room.segment) : undefined),
    frameDataBytesMax,
  );
  if (!room || builder.byteLength <= room.bytes) {
    // Later runs of this group may reference what this one stores.
    if (room) laid.addRun(run.newPayloads, room.segment, room.offset + run.runStart);
    return { run, landing: room };
  }
  builder.rollback(mark);
  if (!firstInGroup) throw new GroupFull();
  run = await buildCommitRun(kernels, builder, input, () => undefined, frameDataBytesMax);
  return { run, landing: undefined };
}
