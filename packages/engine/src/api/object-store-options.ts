/**
 * How a store is told where its object storage is: the `objectStore` option of `Store.open`, and
 * the `s3://bucket/prefix` address the CLI and the server take (`--object-store`, or
 * `STREAMSTACK_OBJECT_STORE`). Credentials are never part of either: they come from the AWS SDK's
 * standard chain (environment variables, shared config files, an instance or container role),
 * or from `credentials` in code, and are never logged.
 *
 * @example
 * const store = await Store.open('./data', {
 *   objectStore: { endpoint: 'http://127.0.0.1:7070', bucket: 'streams', prefix: 'prod/' },
 * });
 */
import { StreamStackError } from '../errors.js';
import type { ObjectSegmentStoreOptions } from '../storage/object-segment-store.js';

/** Where a store tiers its sealed history. */
export interface ObjectStoreOptions {
  /** The service's URL (`http://127.0.0.1:7070`); omitted for AWS S3, found by `region`. */
  readonly endpoint?: string;
  readonly bucket: string;
  /** Where the store's objects start in the bucket: empty (the default) or a path ending in `/`. */
  readonly prefix?: string;
  /** Default: `AWS_REGION`, then `AWS_DEFAULT_REGION`, then `us-east-1`. */
  readonly region?: string;
  /** The access key; omitted, the SDK's standard chain finds one. */
  readonly credentials?: {
    readonly accessKeyId: string;
    readonly secretAccessKey: string;
    readonly sessionToken?: string;
  };
  /**
   * Address the bucket in the path (`endpoint/bucket/key`): what most S3-compatible servers on a
   * bare address need. Default: true with an `endpoint`, false for AWS S3.
   */
  readonly forcePathStyle?: boolean;
  /**
   * The bytes of sealed history segments kept on the local disk. Past it, segments whose upload
   * is confirmed are cut locally, least recently read first, and read back from object storage
   * in checked blocks when asked for; their summaries, indexes and dictionaries always stay.
   * Default: no limit (every segment stays local as well).
   */
  readonly localHistoryBytesMax?: number;
}

const bucketPattern = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;

/** Checks `options` as a caller gave them, and fills in the defaults. */
export function objectStoreSettings(options: ObjectStoreOptions): ObjectSegmentStoreOptions {
  const bad = (message: string) => new StreamStackError('INVALID_ARGUMENT', `objectStore: ${message}`);
  if (typeof options !== 'object' || options === null) throw bad('give { bucket, endpoint?, prefix?, region? }');
  const known = new Set([
    'endpoint',
    'bucket',
    'prefix',
    'region',
    'credentials',
    'forcePathStyle',
    'localHistoryBytesMax',
  ]);
  for (const field of Object.keys(options)) if (!known.has(field)) throw bad(`unknown field ${field}`);
  if (typeof options.bucket !== 'string' || !bucketPattern.test(options.bucket))
    throw bad(`bucket is 3 to 63 characters of a-z, 0-9, '.' and '-' (${JSON.stringify(options.bucket)})`);
  const prefix = options.prefix ?? '';
  if (typeof prefix !== 'string' || (prefix !== '' && (!prefix.endsWith('/') || prefix.startsWith('/'))))
    throw bad(`prefix is empty or a path ending in "/", not starting with one (${JSON.stringify(prefix)})`);
  if (options.endpoint !== undefined) {
    let url: URL | undefined;
    try {
      url = new URL(options.endpoint);
    } catch {
      url = undefined;
    }
    if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.username || url.password)
      throw bad('endpoint is an http(s) URL without credentials in it');
  }
  localHistoryBudget(options);
  const region = options.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1';
  if (typeof region !== 'string' || region.length === 0) throw bad('region is a non-empty string');
  const credentials = options.credentials;
  if (
    credentials !== undefined &&
    (typeof credentials?.accessKeyId !== 'string' || typeof credentials.secretAccessKey !== 'string')
  )
    throw bad('credentials are { accessKeyId, secretAccessKey, sessionToken? }');
  return {
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
    bucket: options.bucket,
    prefix,
    region,
    ...(credentials === undefined ? {} : { credentials }),
    forcePathStyle: options.forcePathStyle ?? options.endpoint !== undefined,
  };
}

/**
 * Reads an `s3://bucket/prefix/` address (the prefix optional; a trailing `/` is added) with the
 * endpoint and region given beside it, as the CLI and the server take them.
 *
 * @example
 * objectStoreFromAddress('s3://streams/prod', { endpoint: 'http://127.0.0.1:7070' });
 * // { bucket: 'streams', prefix: 'prod/', endpoint: 'http://127.0.0.1:7070' }
 */
export function objectStoreFromAddress(
  address: string,
  beside: { readonly endpoint?: string | undefined; readonly region?: string | undefined } = {},
): ObjectStoreOptions {
  const match = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(address);
  if (!match)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `an object store address is s3://bucket or s3://bucket/prefix, not ${JSON.stringify(address)}`,
    );
  const path = match[2] ?? '';
  const options: ObjectStoreOptions = {
    bucket: match[1],
    prefix: path === '' || path.endsWith('/') ? path : `${path}/`,
    ...(beside.endpoint === undefined ? {} : { endpoint: beside.endpoint }),
    ...(beside.region === undefined ? {} : { region: beside.region }),
  };
  objectStoreSettings(options);
  return options;
}

/**
 * The local budget of sealed history `options` set (`localHistoryBytesMax`), checked; undefined
 * when it sets none.
 */
export function localHistoryBudget(options: ObjectStoreOptions): number | undefined {
  const budget = options.localHistoryBytesMax;
  if (budget === undefined) return undefined;
  if (!Number.isSafeInteger(budget) || budget < 0)
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `objectStore: localHistoryBytesMax is a count of bytes, 0 or more (${JSON.stringify(budget)})`,
    );
  return budget;
}
