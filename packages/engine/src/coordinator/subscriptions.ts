/**
 * Named, durable cursors of one feed. Each subscription is a small state log of its own
 * (`state/subscriptions/<name>.log`, last record wins), so advancing one rewrites nothing of the
 * others. Advancing is monotonic; moving a cursor back takes an explicit reset.
 */
import fs from 'node:fs';
import path from 'node:path';
import { StreamStackError } from '../errors.js';
import type { Kernels } from '../kernels/kernels.js';
import { ByteReader, ByteWriter } from '../storage/codec.js';
import { syncDirectory } from '../storage/segment.js';
import { StateLog } from '../storage/state-log.js';
import { validateFeedName } from './data-directory.js';

export interface SubscriptionState {
  readonly name: string;
  readonly cursor: number;
  readonly createdAt: number;
  readonly updatedAt: number;
}

const extension = '.log';

function encode(state: SubscriptionState): Uint8Array {
  return new ByteWriter().string(state.name).varint(state.cursor).varint(state.createdAt).varint(state.updatedAt).finish();
}

function decode(bytes: Uint8Array, file: string): SubscriptionState {
  const reader = new ByteReader(bytes, 0, bytes.length, `subscription record in ${file}`);
  const state = { name: reader.string(), cursor: reader.varint(), createdAt: reader.varint(), updatedAt: reader.varint() };
  reader.expectEnd();
  return state;
}

export function validateSubscriptionName(name: unknown): string {
  try {
    return validateFeedName(name);
  } catch {
    throw new StreamStackError('INVALID_NAME', `a subscription name follows the rules of feed names; got ${JSON.stringify(name)}`, {
      details: { name },
    });
  }
}

export class Subscriptions {
  private readonly open = new Map<string, { log: StateLog; state: SubscriptionState }>();
  /** Changes run one at a time, in call order. */
  private chain: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly kernels: Kernels,
    private readonly directory: string,
    private readonly clock: () => number,
  ) {}

  static async open(kernels: Kernels, directory: string, clock: () => number): Promise<Subscriptions> {
    const subscriptions = new Subscriptions(kernels, directory, clock);
    if (fs.existsSync(directory)) {
      for (const name of fs.readdirSync(directory).filter((file) => file.endsWith(extension)).sort()) {
        const file = path.join(directory, name);
        const log = await StateLog.open(kernels, file);
        if (!log.last) {
          // Created but never durably written: the subscription does not exist.
          log.close();
          fs.rmSync(file);
          continue;
        }
        const state = decode(log.last, file);
        subscriptions.open.set(state.name, { log, state });
      }
    }
    return subscriptions;
  }

  private serial<T>(change: () => Promise<T>): Promise<T> {
    const result = this.chain.then(change);
    this.chain = result.catch(() => undefined);
    return result;
  }

  list(): SubscriptionState[] {
    return [...this.open.values()].map((entry) => entry.state).sort((a, b) => a.name.localeCompare(b.name));
  }

  get(name: string): SubscriptionState {
    const entry = this.open.get(name);
    if (!entry) throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription named ${name}`, { details: { subscription: name } });
    return entry.state;
  }

  create(name: string, cursor: number): Promise<SubscriptionState> {
    validateSubscriptionName(name);
    return this.serial(async () => {
      if (this.open.has(name)) {
        throw new StreamStackError('SUBSCRIPTION_EXISTS', `a subscription named ${name} exists already`, { details: { subscription: name } });
      }
      fs.mkdirSync(this.directory, { recursive: true });
      const file = path.join(this.directory, `${name}${extension}`);
      fs.rmSync(file, { force: true });
      const log = await StateLog.open(this.kernels, file);
      const now = this.clock();
      const state = { name, cursor, createdAt: now, updatedAt: now };
      await log.write(encode(state));
      this.open.set(name, { log, state });
      return state;
    });
  }

  /** Moves the cursor to `cursor`: forward only, unless `reset`. */
  move(name: string, cursor: number, reset: boolean): Promise<SubscriptionState> {
    return this.serial(async () => {
      const entry = this.open.get(name);
      if (!entry) throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription named ${name}`, { details: { subscription: name } });
      if (!reset && cursor < entry.state.cursor) {
        throw new StreamStackError(
          'CURSOR_BEHIND',
          `subscription ${name} is at ${entry.state.cursor}; advancing to ${cursor} would move it back (use reset)`,
          { details: { subscription: name, cursor: entry.state.cursor, requested: cursor } },
        );
      }
      if (cursor === entry.state.cursor) return entry.state;
      const state = { ...entry.state, cursor, updatedAt: this.clock() };
      await entry.log.write(encode(state));
      entry.state = state;
      return state;
    });
  }

  delete(name: string): Promise<void> {
    return this.serial(async () => {
      const entry = this.open.get(name);
      if (!entry) throw new StreamStackError('SUBSCRIPTION_NOT_FOUND', `no subscription named ${name}`, { details: { subscription: name } });
      entry.log.close();
      fs.rmSync(entry.log.file);
      await syncDirectory(this.directory);
      this.open.delete(name);
    });
  }

  close(): void {
    for (const entry of this.open.values()) entry.log.close();
    this.open.clear();
  }
}
