/**
 * The typed face of `versitygw.mjs` for the tests: a real S3-compatible server (versitygw) on
 * 127.0.0.1 and a free port, started and stopped by PID, which the object store's tests run
 * against.
 */
import { afterAll, beforeAll } from 'vitest';
import type { ObjectStoreOptions } from '../../packages/engine/src/index.js';
import { startVersitygw as start, versitygwBinary, versitygwMissing } from './versitygw.mjs';

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
export function startVersitygw(binary: string, fixedPort?: number): Promise<Versitygw> {
  return start(binary, fixedPort);
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

/** What an object-store test file needs of its server, made once at the top of the file. */
export interface ObjectStoreSuite {
  /** True when versitygw is not built here: the suite is skipped. */
  readonly missing: boolean;
  /** `name`, saying why the suite is skipped when it is. */
  title(name: string): string;
  /** Starts the server (with the bucket) before the suite's tests: call it inside its `describe`. */
  start(): void;
  /** The started server. */
  server(): Versitygw;
  /** Settings under a prefix of their own (see `objectStoreSettings`). */
  settings(extra?: Partial<ObjectStoreOptions>): ObjectStoreOptions;
  /** The environment a CLI user sets for the bucket under `prefix`: its address, endpoint and AWS credentials. */
  environment(prefix: string): Record<string, string>;
}

/**
 * The suite of a test file whose tests need a real S3-compatible server with bucket `bucket`:
 * `describe.skipIf(suite.missing)(suite.title(name), () => { suite.start(); … })`.
 */
export function objectStoreSuite(bucket: string): ObjectStoreSuite {
  const binary = versitygwBinary();
  let serverOf: (() => Versitygw) | undefined;
  const server = () => {
    if (!serverOf) throw new Error(`the versitygw of the suite over ${bucket} is not started`);
    return serverOf();
  };
  return {
    missing: binary === undefined,
    title: (name) => (binary === undefined ? `${name} (skipped: ${versitygwMissing})` : name),
    start: () => {
      serverOf = versitygwForSuite(bucket);
    },
    server,
    settings: (extra = {}) => objectStoreSettings(server(), bucket, extra),
    environment: (prefix) => ({
      STREAMSTACK_OBJECT_STORE: `s3://${bucket}/${prefix}`,
      STREAMSTACK_OBJECT_STORE_ENDPOINT: server().endpoint,
      AWS_ACCESS_KEY_ID: server().credentials.accessKeyId,
      AWS_SECRET_ACCESS_KEY: server().credentials.secretAccessKey,
      AWS_REGION: server().region,
    }),
  };
}
