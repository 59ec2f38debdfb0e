/**
 * A `SegmentStore` over an S3-compatible object store (AWS S3, MinIO, versitygw, …): the first
 * piece of tiering sealed history off the local disk. Each name is one object, its key the
 * store's prefix and the name; reads are ranged GETs, `list` pages through ListObjectsV2, `size`
 * is a HEAD; a file goes up in one PUT (streamed from disk past `objectPartBytes`) or, past
 * `objectSinglePutBytesMax`, as a multipart upload, a part at a time, never whole in memory.
 *
 * `Store.open` builds one only when given `objectStore`, through a dynamic import, so the SDK is
 * loaded only by a store that tiers.
 *
 * S3's answers become typed errors as the local store's are: a missing object is `IO` with errno
 * `ENOENT`, a range past its end `CORRUPT`, a refused request `IO` with errno `EACCES`, and a
 * failure of the service itself (a network error, a timeout, a 5xx after the SDK's retries)
 * `UNAVAILABLE`, which says that trying again later may work. The SDK's error is the `cause`.
 */
import fsp from 'node:fs/promises';
import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  type GetObjectCommandOutput,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { assert, StreamStackError } from '../errors.js';
import {
  objectDeleteBatchKeys,
  objectListPageKeys,
  objectPartBytes,
  objectPartsInFlightMax,
  objectSinglePutBytesMax,
  objectStreamChunkBytes,
} from '../limits.js';
import { type ObjectSegmentStoreOptions, quietClient } from './object-client.js';
import {
  type Action,
  isMissingKey,
  missing,
  objectError,
  objectShort,
  s3Code,
  s3Status,
} from './object-store-errors.js';
import { type SegmentStore, withReadHandle } from './segment-store.js';

export type { ObjectSegmentStoreOptions };

/** Refuses a prefix that is neither empty nor a relative path ending in `/`. */
function checkPrefix(prefix: string): void {
  if (prefix !== '' && (!prefix.endsWith('/') || prefix.startsWith('/')))
    throw new StreamStackError(
      'INVALID_ARGUMENT',
      `an object store prefix is empty or a path ending in "/", not starting with one (${prefix})`,
    );
}

export class ObjectSegmentStore implements SegmentStore {
  private readonly client: S3Client;
  readonly bucket: string;
  readonly prefix: string;
  /** Whether `close` ends the client: a store made by `within` shares its parent's. */
  private readonly ownsClient: boolean;
  private readonly singlePutBytesMax: number;

  constructor(options: ObjectSegmentStoreOptions, shared?: S3Client) {
    checkPrefix(options.prefix);
    this.bucket = options.bucket;
    this.prefix = options.prefix;
    this.client = shared ?? quietClient(options);
    this.ownsClient = shared === undefined;
    this.singlePutBytesMax = options.singlePutBytesMax ?? objectSinglePutBytesMax;
  }

  /**
   * The store of the objects under `subprefix` (a path ending in `/`) of this one's prefix,
   * sharing its client and so its connections: a feed's descriptors and its segments' files are
   * two stores of one bucket.
   */
  within(subprefix: string): ObjectSegmentStore {
    checkPrefix(subprefix);
    return new ObjectSegmentStore(
      {
        bucket: this.bucket,
        prefix: this.prefix + subprefix,
        region: '',
        forcePathStyle: true,
        singlePutBytesMax: this.singlePutBytesMax,
      },
      this.client,
    );
  }

  /** Closes the client's connections, when this store made the client; the store is not used after. */
  close(): void {
    if (this.ownsClient) this.client.destroy();
  }

  private keyOf(name: string): string {
    // A name is one object directly under the prefix, as it is one file of a local folder: a
    // `/` in it would reach into another store's objects, or hide from `list`.
    assert(
      name.length > 0 && !name.includes('/') && name !== '.' && name !== '..',
      `a segment store name is a file name (${name})`,
    );
    return this.prefix + name;
  }

  async put(name: string, bytes: Uint8Array): Promise<void> {
    const key = this.keyOf(name);
    // S3 answers a PUT only once the object is stored durably, and replaces one of that key.
    await this.request(key, 'store', () =>
      this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: bytes })),
    );
  }

  /**
   * Stores `bytes` under `name` only if no object has that name yet: true when it was created,
   * false when one was already there (S3 answers 412 to a PUT with `If-None-Match: *`). The
   * check and the write are one step at the service, so of two writers racing for a name exactly
   * one wins: what lets an object be the point at which something becomes visible. AWS S3 has
   * honoured it since 2024, and versitygw (v1.8.0, which the tests run against) honours it too.
   */
  async putIfAbsent(name: string, bytes: Uint8Array): Promise<boolean> {
    const key = this.keyOf(name);
    try {
      await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: bytes, IfNoneMatch: '*' }));
      return true;
    } catch (error) {
      if (s3Status(error) === 412) return false;
      throw objectError(error, this.bucket, key, 'store');
    }
  }

  async putFile(name: string, localFile: string): Promise<void> {
    await this.copyFile(name, localFile);
    // Only a stored copy consumes the file: a failure above left it for the caller to try again.
    try {
      await fsp.rm(localFile, { force: true });
    } catch (error) {
      throw localError(error, `cannot remove ${localFile} after storing it`);
    }
  }

  /**
   * Stores a copy of the local file `localFile` under `name`, leaving the file where it is: what
   * tiering does with a sealed segment, whose local copy stays readable until the copy here is
   * confirmed (and then stays as a cache). Resolves once the object is stored durably.
   */
  async copyFile(name: string, localFile: string): Promise<void> {
    await withReadHandle(
      localFile,
      (error) => localError(error, `cannot open ${localFile}`),
      async (handle) => this.copyFrom(name, handle, localFile, (await handle.stat()).size),
    );
  }

  /**
   * Stores the first `size` bytes of the local file open at `handle` (named `localFile` in
   * errors) under `name`: one PUT (from memory up to `objectPartBytes`, streamed from the file up
   * to the single-PUT bound), a multipart upload past it. For a
   * caller that read the file through the same handle first (to checksum it), so that what is
   * stored is what was checked even if the name is replaced meanwhile.
   */
  async copyFrom(name: string, handle: fsp.FileHandle, localFile: string, size: number): Promise<void> {
    const key = this.keyOf(name);
    if (size <= objectPartBytes) {
      const bytes = await readPart(handle, localFile, 0, size);
      await this.request(key, 'store', () =>
        this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: bytes })),
      );
    } else if (size <= this.singlePutBytesMax) {
      // Streamed from the file in one request; a stream is read once, so a failure is not
      // retried here but by the caller (tiering tries the segment again).
      await this.request(key, 'store', () =>
        this.client.send(
          new PutObjectCommand({
            Bucket: this.bucket,
            Key: key,
            Body: handle.createReadStream({
              start: 0,
              end: size - 1,
              autoClose: false,
              highWaterMark: objectStreamChunkBytes,
            }),
            ContentLength: size,
          }),
        ),
      );
    } else {
      await this.uploadInParts(key, handle, localFile, size);
    }
  }

  /** Requests `copyFrom` makes for a file of `size` bytes: one PUT, or a multipart upload's parts with its start and end. */
  requestsToStore(size: number): number {
    return size <= this.singlePutBytesMax ? 1 : Math.ceil(size / objectPartBytes) + 2;
  }

  /**
   * A multipart upload of the file open at `handle`: parts of `objectPartBytes` read as they
   * are sent, at most `objectPartsInFlightMax` at once, each with a CRC32 the service checks.
   * An upload that fails is aborted, so the service does not keep its parts.
   */
  private async uploadInParts(key: string, handle: fsp.FileHandle, file: string, size: number): Promise<void> {
    const { UploadId: uploadId } = await this.request(key, 'store', () =>
      this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key, ChecksumAlgorithm: 'CRC32' })),
    );
    assert(uploadId !== undefined, `the object store started an upload of ${key} without an id`);
    const partCount = Math.ceil(size / objectPartBytes);
    const parts: CompletedPart[] = new Array(partCount);
    let next = 0;
    let failed = false;
    const sendParts = async (): Promise<void> => {
      while (next < partCount && !failed) {
        const index = next++;
        const offset = index * objectPartBytes;
        const body = await readPart(handle, file, offset, Math.min(objectPartBytes, size - offset));
        const sent = await this.request(key, 'store', () =>
          this.client.send(
            new UploadPartCommand({
              Bucket: this.bucket,
              Key: key,
              UploadId: uploadId,
              PartNumber: index + 1,
              Body: body,
              ChecksumAlgorithm: 'CRC32',
            }),
          ),
        );
        parts[index] = { PartNumber: index + 1, ETag: sent.ETag, ChecksumCRC32: sent.ChecksumCRC32 };
      }
    };
    try {
      // Every sender is waited for, failed or not, before the upload is completed or aborted:
      // none is left reading the file after it is closed, or sending a part after the abort.
      const sent = await Promise.allSettled(
        Array.from({ length: Math.min(objectPartsInFlightMax, partCount) }, () =>
          sendParts().catch((error: unknown) => {
            failed = true;
            throw error;
          }),
        ),
      );
      const failure = sent.find((result) => result.status === 'rejected');
      if (failure) throw failure.reason;
      await this.request(key, 'store', () =>
        this.client.send(
          new CompleteMultipartUploadCommand({
            Bucket: this.bucket,
            Key: key,
            UploadId: uploadId,
            MultipartUpload: { Parts: parts },
          }),
        ),
      );
    } catch (error) {
      // Best effort: an upload left behind costs storage until the bucket's lifecycle rule (or
      // an operator) removes it, never correctness, and the failure to report is the first one.
      await this.client
        .send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId }))
        .catch(() => undefined);
      throw error;
    }
  }

  read(name: string, offset: number, length: number): Promise<Uint8Array> {
    return this.readInto(name, new Uint8Array(length), offset);
  }

  async readInto(name: string, into: Uint8Array, offset: number): Promise<Uint8Array> {
    const key = this.keyOf(name);
    // HTTP has no empty range: an empty read only asks that the object exists, as opening a
    // local file would.
    if (into.length === 0) {
      if ((await this.size(name)) === undefined) throw missing(this.bucket, key);
      return into;
    }
    const last = offset + into.length - 1;
    const answer = await this.request(key, 'read', () =>
      this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key, Range: `bytes=${offset}-${last}` })),
    );
    // A server that ignored the range would send the object from its start: the bytes would be
    // the wrong ones, so that is refused rather than copied.
    if (!answer.ContentRange?.startsWith(`bytes ${offset}-`))
      throw new StreamStackError('IO', `the object store did not answer the range asked of ${key}`, {
        details: { bucket: this.bucket, key, range: `${offset}-${last}`, contentRange: answer.ContentRange },
      });
    const body = answer.Body as AsyncIterable<Uint8Array> | undefined;
    let at = 0;
    try {
      for await (const chunk of body ?? []) {
        if (at + chunk.length > into.length)
          throw objectShort(this.bucket, key, 'sent more than the range asked', offset);
        into.set(chunk, at);
        at += chunk.length;
      }
    } catch (error) {
      throw objectError(error, this.bucket, key, 'read');
    }
    // An object that ends inside the range comes back short (a 206 for the bytes it has).
    if (at < into.length)
      throw objectShort(this.bucket, key, `ends before offset ${offset + into.length}`, offset + at);
    return into;
  }

  async readStart(name: string, length: number): Promise<{ bytes: Uint8Array; size: number }> {
    const key = this.keyOf(name);
    // A finite start is one ranged GET, whose Content-Range ends in the object's size; a whole
    // read (or an empty object, which has no range to answer: a 416) asks for the object as is.
    const whole = async () => {
      const answer = await this.request(key, 'read', () =>
        this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key })),
      );
      const bytes = await this.collect(answer.Body as AsyncIterable<Uint8Array> | undefined, key);
      return { bytes: bytes.subarray(0, Math.min(length, bytes.length)), size: bytes.length };
    };
    if (!Number.isFinite(length)) return whole();
    assert(Number.isSafeInteger(length) && length > 0, `a read of a file's start asks for bytes (${length})`);
    let answer: GetObjectCommandOutput;
    try {
      answer = await this.client.send(
        new GetObjectCommand({ Bucket: this.bucket, Key: key, Range: `bytes=0-${length - 1}` }),
      );
    } catch (error) {
      if (s3Status(error) === 416) return whole();
      throw objectError(error, this.bucket, key, 'read');
    }
    const bytes = await this.collect(answer.Body as AsyncIterable<Uint8Array> | undefined, key);
    const size = Number(answer.ContentRange?.split('/')[1] ?? bytes.length);
    if (!Number.isSafeInteger(size) || bytes.length !== Math.min(length, size))
      throw objectShort(this.bucket, key, `answered ${bytes.length} bytes of its first ${length}`, bytes.length);
    return { bytes, size };
  }

  /** A response body's bytes, in one buffer. */
  private async collect(body: AsyncIterable<Uint8Array> | undefined, key: string): Promise<Uint8Array> {
    const chunks: Uint8Array[] = [];
    try {
      for await (const chunk of body ?? []) chunks.push(chunk);
    } catch (error) {
      throw objectError(error, this.bucket, key, 'read');
    }
    // A plain Uint8Array, as the local store answers: a Buffer would compare unequal to one.
    const joined = Buffer.concat(chunks);
    return new Uint8Array(joined.buffer, joined.byteOffset, joined.length);
  }

  async list(): Promise<string[]> {
    return (await this.listing()).names;
  }

  /**
   * The folders directly under the prefix (each name without its trailing `/`): how a follower
   * finds the feeds a bucket holds. One LIST a page; never on a read's path.
   */
  async folders(): Promise<string[]> {
    return (await this.listing()).folders;
  }

  private async listing(): Promise<{ names: string[]; folders: string[] }> {
    const names: string[] = [];
    const folders: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.request(this.prefix, 'list', () =>
        this.client.send(
          new ListObjectsV2Command({
            Bucket: this.bucket,
            Prefix: this.prefix,
            // Objects further down (another store's, under a longer prefix) come back folded
            // into common prefixes, which are not names of this store.
            Delimiter: '/',
            MaxKeys: objectListPageKeys,
            ContinuationToken: token,
          }),
        ),
      );
      for (const object of page.Contents ?? [])
        if (object.Key !== undefined && object.Key.length > this.prefix.length)
          names.push(object.Key.slice(this.prefix.length));
      for (const folder of page.CommonPrefixes ?? [])
        if (folder.Prefix !== undefined && folder.Prefix.length > this.prefix.length + 1)
          folders.push(folder.Prefix.slice(this.prefix.length, -1));
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
    return { names, folders };
  }

  async delete(name: string): Promise<void> {
    const key = this.keyOf(name);
    try {
      // S3 answers a delete of a missing key with success; a server that says 404 means the same.
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
    } catch (error) {
      if (s3Code(error) === 'NoSuchKey') return;
      throw objectError(error, this.bucket, key, 'delete');
    }
  }

  async deleteAll(names: readonly string[]): Promise<void> {
    // One request per page of keys (S3's DeleteObjects takes up to 1,000), not one per name.
    for (let at = 0; at < names.length; at += objectDeleteBatchKeys) {
      const keys = names.slice(at, at + objectDeleteBatchKeys).map((name) => this.keyOf(name));
      const answer = await this.request(keys[0]!, 'delete', () =>
        this.client.send(
          new DeleteObjectsCommand({
            Bucket: this.bucket,
            Delete: { Objects: keys.map((Key) => ({ Key })), Quiet: true },
          }),
        ),
      );
      // A missing key is no failure, as for `delete`; any other is reported for the first key.
      const failed = (answer.Errors ?? []).find((error) => error.Code !== 'NoSuchKey');
      if (failed)
        throw new StreamStackError('IO', `cannot delete ${failed.Key} of bucket ${this.bucket}: ${failed.Code}`, {
          details: { bucket: this.bucket, key: failed.Key, s3Code: failed.Code },
        });
    }
  }

  /** A remote store keeps no local file: a worker is handed the bytes. */
  localPath(_name: string): undefined {
    return undefined;
  }

  async size(name: string): Promise<number | undefined> {
    const key = this.keyOf(name);
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      return head.ContentLength ?? 0;
    } catch (error) {
      if (isMissingKey(error)) return undefined;
      throw objectError(error, this.bucket, key, 'inspect');
    }
  }

  /** Sends one request, its failure as a typed error about `key`. */
  private async request<T>(key: string, what: Action, send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (error) {
      throw objectError(error, this.bucket, key, what);
    }
  }
}

/** Reads `length` bytes at `offset` of a local file about to be uploaded, all of them. */
async function readPart(handle: fsp.FileHandle, file: string, offset: number, length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  let at = 0;
  try {
    while (at < length) {
      const { bytesRead } = await handle.read(bytes, at, length - at, offset + at);
      if (bytesRead === 0) break;
      at += bytesRead;
    }
  } catch (error) {
    throw localError(error, `cannot read ${file}`);
  }
  // The file shrank while it was uploaded: what was asked to be stored is no longer there.
  if (at < length)
    throw new StreamStackError('IO', `${file} ended at ${offset + at} while it was stored`, { details: { file } });
  return bytes;
}

/** A local file's failure, as the local store reports it (`IO`, with its errno). */
function localError(cause: unknown, what: string): StreamStackError {
  const errno = (cause as NodeJS.ErrnoException)?.code;
  return new StreamStackError('IO', `${what}: ${cause instanceof Error ? cause.message : String(cause)}`, {
    cause,
    details: typeof errno === 'string' ? { errno } : {},
  });
}
