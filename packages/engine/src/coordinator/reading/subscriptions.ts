/**
 * Named, durable cursors of one feed. Each subscription is a small state log of its own
 * (`state/subscriptions/<name>.log`, last record wins), so advancing one rewrites nothing of the
 * others. Advancing is monotonic; moving a cursor back takes an explicit reset.
 */
import fs from 'node:fs';
import path from 'node:path';
import { StreamStackError } from '../../errors.js';
import type { Kernels } from '../../kernels/kernels.js';
import { ByteReader, ByteWriter } from '../../storage/codec.js';
import { subscriptionSuffix } from '../../storage/feed-layout.js';
import type { Corruption } from '../../storage/runs.js';
import { syncDirectory } from '../../storage/segment.js';
import { StateLog, stateLogCopySuffix, stateLogNames } from '../../storage/state-log.js';
import { validateFeedName } from '../opening/data-directory.js';

export interface SubscriptionState {
  readonly name: string;
  readonly cursor: number;
  readonly createdAt: number;
  readonly updatedAt: number;
}

function encode(state: SubscriptionState): Uint8Array {
  return new ByteWriter()
    .string(state.name)
    .varint(state.cursor)
    .varint(state.createdAt)
    .varint(state.updatedAt)
    .finish();
}

function decode(bytes: Uint8Array, file: string): SubscriptionState {
  const reader = new ByteReader(bytes, 0, bytes.length, `subscription record in ${file}`);
  const state = {
    name: reader.string(),
    cursor: reader.varint(),
    createdAt: reader.varint(),
    updatedAt: reader.varint(),
  };
  reader.expectEnd();
  return state;
}

/** Opens the log of subscription `name`: records naming another subscription are damage. */
export function openSubscriptionLog(
  kernels: Kernels,
  file: string,
  name: string,
  readOnly: boolean,
): Promise<StateLog> {
  return StateLog.open(kernels, file, readOnly, (record) => {
    try {
      return decode(record, file).name === name;
    } catch {
      return false;
    }
  });
}

export function validateSubscriptionName(name: unknown): string {
  try {
    return validateFeedName(name);
  } catch {
    throw new StreamStackError(
      'INVALID_NAME',
      `a subscription name follows the rules of feed names; got ${JSON.stringify(name)}`,
      {
        details: { name },
      },
    );
  }
}

/**
 * Where a replicated feed's writer keeps a copy of its subscriptions off the machine (etcd, on a
 * node of a cluster), so that a node taking the feed over delivers from where consumers left off.
 * Each change is copied there before it is written here: a change acknowledged to a consumer is
 * never lost with the writer. `FENCED` once another writer owns the feed.
 */
export interface SubscriptionMirror {
  put(state: SubscriptionState): Promise<void>;
  remove(name: string): Promise<void>;
}

/**
 * Writes the subscriptions `states` into `directory` (a feed's `state/subscriptions`, being laid
 * out by a takeover), each as its own log, as `create` would.
 */
export async function restoreSubscriptions(
  kernels: Kernels,
  directory: string,
  states: readonly SubscriptionState[],
): Promise<void> {
  if (states.length === 0) return;
  fs.mkdirSync(directory, { recursive: true });
  for (const state of states) {
    validateSubscriptionName(state.name);
    const log = await StateLog.open(kernels, path.join(directory, `${state.name}${subscriptionSuffix}`));
    try {
      await log.write(encode(state));
    } finally {
      log.close();
    }
  }
  await syncDirectory(directory);
}

export class Subscriptions {
  private readonly open = new Map<string, { log: StateLog; state: SubscriptionState }>();
  /** The copy off the machine, for a replicated feed on a node of a cluster. */
  private mirror: SubscriptionMirror | undefined;
  /** Damage found in the subscriptions' logs (reported by verify; the newest records still serve). */
  readonly corruptions: Corruption[] = [];
  /** Changes run one at a time, in call order. */
  private chain: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly clock: () => number,
    private readonly readOnly: boolean,
  ) {}

  static async open(
    kernels: Kernels,
    directory: string,
    clock: () => number,
    readOnly = false,
  ): Promise<Subscriptions> {
    const subscriptions = new Subscriptions(kernels, directory, clock, readOnly);
    for (const subscription of stateLogNames(directory, subscriptionSuffix)) {
      const file = path.join(directory, `${subscription}${subscriptionSuffix}`);
      const log = await openSubscriptionLog(kernels, file, subscription, readOnly);
      subscriptions.corruptions.push(...log.corruptions);
      if (!log.last) {
        // Created but never durably written: the subscription does not exist.
        if (readOnly) log.close();
        else log.remove();
        continue;
      }
      let state: SubscriptionState;
      try {
        state = decode(log.last, file);
      } catch (error) {
        log.close();
        throw error;
      }
      subscriptions.open.set(state.name, { log, state });
    }
    return subscriptions;
  }

  private serial<T>(change: () => Promise<T>): Promise<T> {
    if (this.readOnly)
      return Promise.reject(new StreamStackError('READ_ONLY', `${this.directory} was opened read-only`));
    const result = this.chain.then(change);
    this.chain = result.catch(() => undefined);
    return result;
  }

  /** Copies every change from now on to `mirror` before writing it here (see `SubscriptionMirror`). */
  mirrorTo(mirror: SubscriptionMirror): void {
    this.mirror = mirror;
  }

  list(): SubscriptionState[] {
    return [...this.open.values()].map((entry) => entry.state).sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): SubscriptionState {
    const entry = this.open.get(name);
    if (!entry)
      throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription named ${name}`, {
        details: { subscription: name },
      });
    return entry.state;
  }

  create(name: string, cursor: number): Promise<SubscriptionState> {
    validateSubscriptionName(name);
    return this.serial(async () => {
      if (this.open.has(name)) {
        throw new StreamStackError('SUBSCRIPTION_EXISTS', `a subscription named ${name} exists already`, {
          details: { subscription: name },
        });
      }
      fs.mkdirSync(this.directory, { recursive: true });
      const file = path.join(this.directory, `${name}${subscriptionSuffix}`);
      fs.rmSync(file, { force: true });
      fs.rmSync(`${file}${stateLogCopySuffix}`, { force: true });
      const now = this.clock();
      const state = { name, cursor, createdAt: now, updatedAt: now };
      await this.mirror?.put(state);
      const log = await StateLog.open(this.kernels, file);
      await log.write(encode(state));
      this.open.set(name, { log, state });
      return state;
    });
  }

  /** Moves the cursor to `cursor`: forward only, unless `reset`. */
  move(name: string, cursor: number, reset: boolean): Promise<SubscriptionState> {
    return this.serial(async () => {
      const entry = this.open.get(name);
      if (!entry)
        throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription named ${name}`, {
          details: { subscription: name },
        });
      if (!reset && cursor < entry.state.cursor) {
        throw new StreamStackError(
          'CURSOR_BEHIND',
          `subscription ${name} is at ${entry.state.cursor}; advancing to ${cursor} would move it back (use reset)`,
          { details: { subscription: name, cursor: entry.state.cursor, requested: cursor } },
        );
      }
      if (cursor === entry.state.cursor) return entry.state;
      const state = { ...entry.state, cursor, updatedAt: this.clock() };
      await this.mirror?.put(state);
      await entry.log.write(encode(state));
      entry.state = state;
      return state;
    });
  }

  delete(name: string): Promise<void> {
    return this.serial(async () => {
      const entry = this.open.get(name);
      if (!entry)
        throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription named ${name}`, {
          details: { subscription: name },
        });
      await this.mirror?.remove(name);
      entry.log.remove();
      await syncDirectory(this.directory);
      this.open.delete(name);
    });
  }

  close(): void {
    for (const entry of this.open.values()) entry.log.close();
    this.open.clear();
  }
}
