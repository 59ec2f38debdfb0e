/**
 * A real etcd for a test file: started before its tests and stopped after them (inside a
 * `describe.skipIf(etcdBinary() === undefined)`); the returned function gives it.
 */
import { afterAll, beforeAll } from 'vitest';
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
