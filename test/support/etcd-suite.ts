/**
 * A real etcd for a test file: started before its tests and stopped after them (inside a
 * `describe.skipIf(etcdBinary() === undefined)`); the returned function gives it.
 */
import { afterAll, beforeAll } from 'vitest';
import type { Store } from '../../packages/engine/src/index.js';
import { etcdBinary, startEtcd } from './etcd.mjs';

export interface SuiteEtcd {
  readonly endpoint: string;
  halt(): Promise<void>;
  resume(): Promise<void>;
  wipe(): Promise<void>;
  stop(): Promise<void>;
}

export function etcdForSuite(): () => SuiteEtcd {
  let etcd: SuiteEtcd | undefined;
  beforeAll(async () => {
    etcd = (await startEtcd(etcdBinary())) as SuiteEtcd;
  }, 30_000);
  afterAll(async () => {
    await etcd?.stop();
  });
  return () => {
    if (!etcd) throw new Error('the etcd of this suite is not started');
    return etcd;
  };
}

/** Waits until `check` holds, up to `timeoutMs`. */
export async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('the condition did not come to hold in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Waits until no node of `store`'s cluster holds feed `feed`'s writer key: a stopped node's TTL ran out. */
export async function untilFree(store: Store, feed: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await store.cluster()).feeds.some((leased) => leased.feed === feed)) {
    if (Date.now() > deadline) throw new Error(`the lease of ${feed} did not expire`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
