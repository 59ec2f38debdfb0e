/**
 * How the object store reaches S3: the settings of an `ObjectSegmentStore`, and the SDK client
 * built from them, with the SDK's retries and timeouts bounded by our limits and its warning
 * about Node versions kept out of the user's output.
 */
import { S3Client } from '@aws-sdk/client-s3';
import { objectConnectMsMax, objectIdleMsMax, objectRequestAttemptsMax } from '../limits.js';

/** Where an `ObjectSegmentStore` keeps its objects, and how it reaches them. */
export interface ObjectSegmentStoreOptions {
  /** The service's URL (`http://127.0.0.1:7070`); undefined for AWS S3 itself, found by region. */
  readonly endpoint?: string;
  readonly bucket: string;
  /**
   * What every key starts with: empty, or a path ending in `/` (`feeds/orders/history/`), so that
   * the store's names are the objects directly under it and two stores with different prefixes
   * share a bucket without seeing each other.
   */
  readonly prefix: string;
  readonly region: string;
  /**
   * The access key; when omitted, the SDK's standard chain finds one (environment variables,
   * shared config files, an instance or container role). Never logged, never in an error.
   */
  readonly credentials?: {
    readonly accessKeyId: string;
    readonly secretAccessKey: string;
    readonly sessionToken?: string;
  };
  /**
   * Addresses the bucket in the path (`endpoint/bucket/key`) rather than the host name
   * (`bucket.endpoint/key`): what most S3-compatible servers on a bare address need.
   */
  readonly forcePathStyle: boolean;
  /** The largest file stored in one PUT (default `objectSinglePutBytesMax`); tests lower it to reach multipart uploads. */
  readonly singlePutBytesMax?: number;
}

/**
 * The SDK's own switch for its warning that a coming release drops this Node version
 * (`NodeVersionSupportWarning`, emitted once per process when the first client is built). Node 20
 * is a version StreamStack supports, and a user of the store can do nothing about the SDK's
 * plans: the warning would only be noise in their output.
 */
const sdkNodeWarningSwitch = 'AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED';

/**
 * Where the SDK's own log lines go: nowhere. Without a logger it writes some to the console (a
 * streamed upload that fails says so with `console.warn`, although the failure is also thrown),
 * which would land in a user's output; every failure reaches the caller as a typed error instead.
 */
const silentLogger = { debug() {}, info() {}, warn() {}, error() {}, trace() {} };

/**
 * An S3 client built with the SDK's Node-version warning switched off: the switch is set for the
 * constructor (the only place the SDK checks it) and put back as it was after, so the process's
 * environment is left as the user set it.
 */
export function quietClient(options: ObjectSegmentStoreOptions): S3Client {
  const before = process.env[sdkNodeWarningSwitch];
  process.env[sdkNodeWarningSwitch] = 'true';
  try {
    return new S3Client({
      ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
      region: options.region,
      ...(options.credentials === undefined ? {} : { credentials: options.credentials }),
      forcePathStyle: options.forcePathStyle,
      maxAttempts: objectRequestAttemptsMax,
      logger: silentLogger,
      requestHandler: { connectionTimeout: objectConnectMsMax, requestTimeout: objectIdleMsMax },
    });
  } finally {
    if (before === undefined) delete process.env[sdkNodeWarningSwitch];
    else process.env[sdkNodeWarningSwitch] = before;
  }
}
