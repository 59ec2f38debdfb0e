/**
 * What the requests of one group share while the feed writer (`feed-writer.ts`) prepares it:
 * the records its conditions' staged arm looks at (`conditions.ts`), the types and payloads it
 * publishes first, the groups in flight before it, and where a history group's first run lies.
 * The group committer makes one for every group (`group-commit.ts`).
 *
 * @example
 * const committer = new GroupCommitter(builders, write, onFatal, newWriterGroup, inFlightMax);
 * const types = index.newTypes(records.map((record) => record.type), stagedTypes(group, open.types));
 */
import { newStagedGroup, type StagedGroup } from './conditions.js';
import type { EarlierGroup } from './group-commit.js';
import { GroupPayloads } from './payload-dedup.js';

/** What the requests of one group share while it is prepared. */
export type WriterGroup = StagedGroup & {
  /** Types the group's requests publish for the first time. */
  readonly newTypes: Set<string>;
  /** Payloads the group's runs store, for the runs after them. */
  readonly payloads: GroupPayloads;
  /**
   * The groups in flight when this one was begun: written, not yet published. Needed only while
   * this group is prepared, and emptied when it is written (else each group would hold the one
   * before it, and the chain every group ever made).
   */
  earlier: readonly EarlierGroup<WriterGroup>[];
  /** A history group's first run: its position and commit base a new segment if it needs one. */
  first?: { readonly position: number; readonly commit: number };
};

/** A group begun while the groups `earlier` are in flight, with nothing staged yet. */
export function newWriterGroup(earlier: readonly EarlierGroup<WriterGroup>[]): WriterGroup {
  return { ...newStagedGroup(), newTypes: new Set<string>(), payloads: new GroupPayloads(), earlier };
}

/** Types staged by `group` and by the groups in flight before it: not yet in the index. */
export function stagedTypes(group: WriterGroup, also: Iterable<string> = []): Set<string> {
  const types = new Set(also);
  for (const { scratch } of group.earlier) for (const type of scratch.newTypes) types.add(type);
  for (const type of group.newTypes) types.add(type);
  return types;
}
