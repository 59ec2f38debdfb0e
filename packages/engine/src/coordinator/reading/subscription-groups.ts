/**
 * The subscription groups of one feed, each a state log of its own (`state/groups/<name>.group`,
 * last record wins). A change is made on a copy of the group's state, written durably, and only
 * then takes its place. Changes that arrive while a write is under way are applied together and
 * written once (group commit for the group's state): many workers acknowledging at once cost one
 * pair of syncs, not one each.
 */
import fs from 'node:fs';
import path from 'node:path';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { groupSuffix } from '../../storage/feed-layout.js';
import type { Corruption } from '../../storage/runs.js';
import { syncDirectory } from '../../storage/segment.js';
import { StateLog, stateLogCopySuffix, stateLogNames } from '../../storage/state-log.js';
import { decodeGroupState, encodeGroupState, type GroupState } from './group-state.js';

/**
 * Where a replicated feed's writer copies its groups off the machine (etcd, on a node of a
 * cluster), so a node taking the feed over goes on with the same claims and counts. Each state
 * is copied there before it is written here; `FENCED` once another writer owns the feed.
 */
export interface GroupMirror {
  put(state: GroupState): Promise<void>;
  remove(name: string): Promise<void>;
}

/** A group's copy as a takeover lays it out: its name and its state-log record. */
export interface GroupCopy {
  readonly name: string;
  readonly record: Uint8Array;
}

/** Writes the groups `copies` into `directory` (a feed's `state/groups`, being laid out by a takeover). */
export async function restoreGroups(kernels: Kernels, directory: string, copies: readonly GroupCopy[]): Promise<void> {
  if (copies.length === 0) return;
  fs.mkdirSync(directory, { recursive: true });
  for (const copy of copies) {
    const log = await StateLog.open(kernels, path.join(directory, `${copy.name}${groupSuffix}`));
    try {
      await log.write(copy.record);
    } finally {
      log.close();
    }
  }
  await syncDirectory(directory);
}

/** A change to a group's state: the next state, and what the caller is told once it is durable. */
export type GroupChange<T> = (state: GroupState) => { next: GroupState; result: T };

interface PendingChange {
  readonly change: GroupChange<unknown>;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

interface OpenGroup {
  readonly log: StateLog;
  state: GroupState;
  /** Changes waiting for the write under way. */
  pending: PendingChange[];
  writing: boolean;
  deleted: boolean;
}

/** Opens the log of group `name`: records that do not decode, or name another group, are damage. */
export function openGroupLog(kernels: Kernels, file: string, name: string, readOnly: boolean): Promise<StateLog> {
  return StateLog.open(kernels, file, readOnly, (record) => {
    try {
      return decodeGroupState(record, file).name === name;
    } catch {
      return false;
    }
  });
}

export class SubscriptionGroups {
  private readonly open = new Map<string, OpenGroup>();
  /** The copy off the machine, for a replicated feed on a node of a cluster. */
  private mirror: GroupMirror | undefined;
  /** Damage found in the groups' logs (the newest sound record still serves). */
  readonly corruptions: Corruption[] = [];

  private constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
  ) {}

  /** Opens every group in `directory` (a feed's `state/groups`). */
  static async open(kernels: Kernels, directory: string): Promise<SubscriptionGroups> {
    const groups = new SubscriptionGroups(kernels, directory);
    for (const group of stateLogNames(directory, groupSuffix)) {
      const file = path.join(directory, `${group}${groupSuffix}`);
      const log = await openGroupLog(kernels, file, group, false);
      groups.corruptions.push(...log.corruptions);
      if (!log.last) {
        // Created but never durably written: the group does not exist.
        log.remove();
        continue;
      }
      try {
        groups.open.set(group, {
          log,
          state: decodeGroupState(log.last, file),
          pending: [],
          writing: false,
          deleted: false,
        });
      } catch (error) {
        log.close();
        throw error;
      }
    }
    return groups;
  }

  /** Copies every change from now on to `mirror` before writing it here (see `GroupMirror`). */
  mirrorTo(mirror: GroupMirror): void {
    this.mirror = mirror;
  }

  has(name: string): boolean {
    return this.open.has(name);
  }

  list(): GroupState[] {
    return [...this.open.values()].map((group) => group.state).sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): GroupState {
    return this.entry(name).state;
  }

  private entry(name: string): OpenGroup {
    const group = this.open.get(name);
    if (!group || group.deleted)
      throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription group named ${name}`, {
        details: { subscription: name },
      });
    return group;
  }

  /** Writes a new group's first state; the caller checked that the name is free. */
  async create(state: GroupState): Promise<void> {
    fs.mkdirSync(this.directory, { recursive: true });
    const file = path.join(this.directory, `${state.name}${groupSuffix}`);
    fs.rmSync(file, { force: true });
    fs.rmSync(`${file}${stateLogCopySuffix}`, { force: true });
    await this.mirror?.put(state);
    const log = await StateLog.open(this.kernels, file);
    await log.write(encodeGroupState(state));
    this.open.set(state.name, { log, state, pending: [], writing: false, deleted: false });
  }

  /**
   * Applies `change` to the group's state once the changes before it are applied, and resolves
   * with its result once the state it made is durable. A change that throws changes nothing.
   */
  change<T>(name: string, change: GroupChange<T>): Promise<T> {
    const group = this.entry(name);
    return new Promise<T>((resolve, reject) => {
      group.pending.push({ change, resolve: resolve as (value: unknown) => void, reject });
      if (!group.writing) void this.writeQueued(group);
    });
  }

  private async writeQueued(group: OpenGroup): Promise<void> {
    group.writing = true;
    while (group.pending.length > 0 && !group.deleted) {
      const batch = group.pending.splice(0);
      let state = group.state;
      const done: { pending: PendingChange; result: unknown }[] = [];
      for (const pending of batch) {
        try {
          const { next, result } = pending.change(state);
          state = next;
          done.push({ pending, result });
        } catch (error) {
          pending.reject(error);
        }
      }
      if (done.length === 0) continue;
      try {
        if (state !== group.state) {
          await this.mirror?.put(state);
          await group.log.write(encodeGroupState(state));
        }
        group.state = state;
        for (const { pending, result } of done) pending.resolve(result);
      } catch (error) {
        // Nothing of the batch took effect; the log refuses writes after a failure, so every
        // change after this one fails the same way until the feed is opened again.
        for (const { pending } of done) pending.reject(error);
      }
    }
    for (const pending of group.pending.splice(0)) pending.reject(this.goneError(group));
    group.writing = false;
  }

  private goneError(group: OpenGroup): StreamStackError {
    return new StreamStackError('SUBSCRIPTION_NOT_FOUND', `subscription group ${group.state.name} was deleted`, {
      details: { subscription: group.state.name },
    });
  }

  async delete(name: string): Promise<void> {
    const group = this.entry(name);
    await this.mirror?.remove(name);
    group.deleted = true;
    group.log.remove();
    await syncDirectory(this.directory);
    this.open.delete(name);
  }

  close(): void {
    for (const group of this.open.values()) {
      group.deleted = true;
      group.log.close();
    }
    this.open.clear();
  }
}
