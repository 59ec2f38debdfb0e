/**
 * The typed face of `versitygw.mjs` for the tests: a real S3-compatible server (versitygw) on
 * 127.0.0.1 and a free port, started and stopped by PID, which the object store's tests run
 * against.
 */
import { afterAll, beforeAll } from 'vitest';
import type { ObjectStoreOptions } from '../../packages/engine/src/index.js';
import { startVersitygw as start, versitygwBinary } from './versitygw.mjs';

export { freePort, versitygwBinary, versitygwMissing } from './versitygw.mjs';

export interface Versitygw {
  readonly endpoint: string;
  readonly region: string;
  readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string };
  /** Makes a bucket (a folder of the posix backend). */
  createBucket(bucket: string): Promise<void>;
  /** Stops the server by its PID and keeps its folder and port: the object store is down. */
  halt(): Promise<void>;
  /** Starts a halted server again on the same port, over the same folder. */
  resume(): Promise<void>;
  /** Stops the server by its PID and removes its folder. */
  stop(): Promise<void>;
}

/**
 * Starts versitygw (`binary`) and waits until it answers. A port taken between `freePort` and the
 * server's listen makes it exit: another port is tried.
 */
export function startVersitygw(binary: string): Promise<Versitygw> {
  return start(binary);
}

/**
 * A server for the test file, started with `bucket` made before its tests and stopped after them
 * (inside a `describe.skipIf(versitygwBinary() === undefined)`); the returned function gives it.
 */
export function versitygwForSuite(bucket: string): () => Versitygw {
  let server: Versitygw | undefined;
  beforeAll(async () => {
    server = await startVersitygw(versitygwBinary()!);
    await server.createBucket(bucket);
  });
  afterAll(async () => {
    await server?.stop();
  });
  return () => {
    if (!server) throw new Error('the versitygw of this suite is not started');
    return server;
  };
}

/**
 * Object storage settings of the server `server`'s bucket `bucket` under a prefix no other test
 * of the process uses, with `extra` settings (a local budget) added.
 */
export function objectStoreSettings(
  server: Versitygw,
  bucket: string,
  extra: Partial<ObjectStoreOptions> = {},
): ObjectStoreOptions {
  return {
    endpoint: server.endpoint,
    bucket,
    prefix: `run-${++prefixesGiven}/`,
    region: server.region,
    credentials: server.credentials,
    ...extra,
  };
}

let prefixesGiven = 0;
